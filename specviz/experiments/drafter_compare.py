"""The shipped drafters side by side on one prompt, and the figures that explain the τ they reach.

A drafter's speedup is τ ÷ (1 + γ·c): how many tokens a round commits over what the round costs.
:func:`compare_drafters` measures both from real runs; :func:`specviz.views.drafter_compare.tau_vs_acceptance_figure` puts the
measured τ on the curve τ = (1 − a^{γ+1}) ÷ (1 − a) that a drafter accepted with the same probability a
at every position would follow, which is how the notebook shows what acceptance τ = 2.5 would need.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from engines import Engine
from engines.drafters.trained import available, read_card

from ..prompts import DEFAULT_PROMPTS, load_prompts
from ..views.chain import draft_seconds
from .drafter_cards import drafter_run_options


def card_rows(names: Sequence[str] | None = None) -> list[dict]:
    """What each shipped model card says: its kind, size, training and teacher-forced agreement."""
    rows = []
    for name in names or available():
        card = read_card(name)
        training = card.get("training", {})
        rows.append({"drafter": name, "kind": card["kind"], "trained parameters": card["trained_parameters"],
                     "draft vocabulary": card["draft_vocab_size"],
                     "target tokens it covers": card.get("draft_vocab_coverage"),
                     "training steps": training.get("steps"),
                     "held-out agreement": card.get("heldout_top1_agreement")})
    return rows


LAYER_MODULES = ("LlamaDecoderLayer", "AttentionBlock")  # a decoder layer, or CATS's attention-only layer


def drafter_layers(engine: Engine, name: str) -> dict:
    """What one drafted token costs ``name`` in layers, read from the loaded drafter: the target's layers it
    runs first (an early exit at ℓ runs ℓ of them) and the layers of its own (counted as modules, so a card
    that disagrees with the weights cannot mislead the reader)."""
    drafter = engine.trained_drafter(name)
    own = sum(type(m).__name__ in LAYER_MODULES for m in drafter.modules())
    card = read_card(name)
    target = int(card.get("exit_layer", 0))
    return {"drafter": name, "kind": card["kind"], "target layers it runs first": target, "layers of its own": own,
            "layers per drafted token": target + own}


def compare_drafters(engine: Engine, prompt, names: Sequence[str], max_new_tokens: int = 64,
                     temperature: float = 0.0, seed: int | None = 0,
                     progress: Callable[[int, int], None] | None = None) -> dict:
    """``ar`` once, then every drafter at γ = 5 on the same prompt and settings.

    Returns ``rows`` (τ; α, accepted ÷ drafted; the first-guess acceptance, accepted ÷ rounds at draft
    position 1; the per-position acceptance, accepted ÷ draft positions the target judged; draft cost c;
    speedup) and ``runs`` (each run's events, ``ar`` first) for the trace figures.
    """
    if not names:
        raise ValueError("names must list at least one shipped drafter")
    sampling = {"max_new_tokens": max_new_tokens, "temperature": temperature, "seed": seed}
    for name in names:  # every drafter's limits, before the first run
        method, options = drafter_run_options(name)
        engine.check(prompt, method, **sampling, **options)
    ar = engine.run(prompt, "ar", **sampling)
    ar_step = ar.stats.decode_seconds / max(ar.stats.new_tokens, 1)
    rows, runs = [], {"ar": ar.events}
    for i, name in enumerate(names):
        method, options = drafter_run_options(name)
        run = engine.run(prompt, method, **sampling, **options)
        s = run.stats
        rows.append({"drafter": name, "τ": s.mean_accepted_length, "α": s.acceptance_rate,
                     "first-guess acceptance": s.acceptance_by_position[0] if s.acceptance_by_position else 0.0,
                     "per-position acceptance": s.per_token_acceptance,
                     "draft cost c": (draft_seconds(run.events) / s.drafted) / ar_step if s.drafted else None,
                     "speedup": s.tokens_per_s / ar.stats.tokens_per_s,
                     "same text as ar": run.token_ids == ar.token_ids})
        runs[name] = run.events
        if progress:
            progress(i + 1, len(names))
    return {"rows": rows, "runs": runs, "ar_tokens_per_s": ar.stats.tokens_per_s}


def answer_records(engine: Engine, max_new_tokens: int = 128, prompts_path=DEFAULT_PROMPTS,
                   progress: Callable[..., object] | None = None) -> list[dict]:
    """The target's greedy answers to the first turn of each evaluation prompt, as corpus records, so the
    trainer's teacher-forced measures can be taken on the prompts the benchmark decodes."""
    records = []
    for prompt in load_prompts(prompts_path):
        ids = engine.encode(prompt.turns[0])
        answer = engine.run(ids, "ar", max_new_tokens=max_new_tokens).token_ids
        records.append({"id": prompt.question_id, "prompt_ids": ids, "answer_ids": answer, "mode": "greedy",
                        "category": prompt.category})
        if progress:
            progress(1)
    return records


def head_escape_rates(model: torch.nn.Module, token_ids: Sequence[int]) -> dict[str, float]:
    """How often a ``tiny`` drafter's best full-vocabulary token lies outside its draft vocabulary, read
    through the target's tied embedding (``tied``) and through its own head (``own``), over ``token_ids``.

    Trained on its draft vocabulary only, the drafter never learned to rank the other 41k tokens low;
    through the tied head they win, which is why ``tiny`` ships with a head that is zero outside it.
    """
    vocab = model.draft_vocab
    with torch.inference_mode():
        hidden = model.model(input_ids=torch.tensor([list(token_ids)], device=vocab.device)).last_hidden_state[0]
        tied = hidden @ model.get_input_embeddings().weight.T
        own = model.lm_head(hidden)
    inside = torch.zeros(tied.shape[-1], dtype=torch.bool, device=vocab.device)
    inside[vocab] = True
    return {"tied": (~inside[tied.argmax(-1)]).float().mean().item(),
            "own": (~inside[own.argmax(-1)]).float().mean().item()}
