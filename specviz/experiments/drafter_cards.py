"""Write the acceptance a trained drafter reaches into its model card, measured by real decoding.

The trainer records teacher-forced agreement on held-out answers; this adds what speculative decoding
actually sees: α (accepted ÷ drafted) and τ at γ = 5 on the first evaluation prompt of each category,
greedy and T = 1.
"""

from __future__ import annotations

from engines import Engine
from engines.drafters.trained import drafts_dir, read_card
from engines.storage import write_json_atomic

from ..prompts import load_prompts

GAMMA = 5
EESD_HEADS = {"exit_norm": "norm", "exit_layer": "layer", "cats_adapter": "cats"}  # card kind → eesd's head


def drafter_run_options(name: str) -> tuple[str, dict]:
    """The method and options that draft with a shipped drafter."""
    card = read_card(name)
    if card["kind"] in EESD_HEADS:
        return "eesd", {"exit_layer": card["exit_layer"], "head": EESD_HEADS[card["kind"]], "gamma": GAMMA}
    if card["kind"] == "moa":  # a chain, as every other drafter's card measures
        return "moa", {"drafter": name, "tree": False, "gamma": GAMMA}
    return "sps", {"draft": name, "gamma": GAMMA}


def measure_acceptance(engine: Engine, name: str, max_new_tokens: int = 48, temperatures=(0.0, 1.0)) -> dict:
    method, options = drafter_run_options(name)
    firsts = {}
    for prompt in load_prompts():
        firsts.setdefault(prompt.category, prompt.turns[0])
    measured = {}
    for temperature in temperatures:
        accepted = drafted = rounds = round_tokens = 0
        for turn in firsts.values():
            stats = engine.run(turn, method, max_new_tokens=max_new_tokens, temperature=temperature, **options).stats
            accepted, drafted = accepted + stats.accepted, drafted + stats.drafted
            rounds, round_tokens = rounds + stats.rounds, round_tokens + max(stats.new_tokens - 1, 0)
        measured["greedy" if temperature == 0 else f"temperature_{temperature:g}"] = {
            "alpha": round(accepted / drafted, 4) if drafted else None,
            "tau": round(round_tokens / rounds, 4) if rounds else None}
    return {"gamma": GAMMA, "prompts": "first prompt of each category in data/prompts.jsonl",
            "max_new_tokens": max_new_tokens, "dtype": engine.dtype, "device": engine.device.split(":")[0], **measured}


def record_acceptance(engine: Engine, name: str, **kwargs) -> dict:
    card = read_card(name)
    card["acceptance"] = measure_acceptance(engine, name, **kwargs)
    write_json_atomic(drafts_dir() / name / "card.json", card, indent=2)
    return card["acceptance"]
