"""MoA's disconnection experiment: how long does a client that loses its server keep writing what the
connected run would have written?

For each budget B the server answers until B new tokens are written (lossless so far; it leaves at the
first cycle boundary at or after B, so a few more may come from its last verdict) and then vanishes;
the client continues with its drafter alone (``disconnect_after=B``, a lossy run, labelled so). Against
the connected run of the same prompt we count how many of the client's own tokens stay equal before the
first difference, and the share of all positions that are equal. B = ∞ is the connected run itself.
"""

from __future__ import annotations

from pathlib import Path

from engines import Engine
from engines.storage import write_json_atomic, write_text_atomic

from ..bench.method_specs import parse_method
from ..bench.runner import select_prompts
from ..prompts import DEFAULT_PROMPTS, load_prompts

BUDGETS = (1, 10, 25, 50)


def agreement(connected: list[int], disconnected: list[int], switch: int) -> dict:
    """The client's own tokens (from ``switch`` on) equal to the connected run until the first difference,
    and the share of positions equal over the whole answer (positions one run lacks count as different)."""
    kept = 0
    for a, b in zip(connected[switch:], disconnected[switch:]):
        if a != b:
            break
        kept += 1
    length = max(len(connected), len(disconnected), 1)
    equal = sum(a == b for a, b in zip(connected, disconnected))
    return {"kept_after_b": kept, "equal_share": equal / length, "switch": switch}


def measure_disconnection(engine: Engine, method_specs: list[str], budgets=BUDGETS, prompts_path=None,
                          per_category: int = 1, max_new_tokens: int = 128, progress: bool = True) -> dict:
    """Greedy, first turn of the first ``per_category`` prompts of each category; every method spec must
    take ``network`` (``moa(network=local)``, ``eagle(network=local, draft=tiny)``)."""
    from tqdm.auto import tqdm

    for budget in budgets:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"every budget B must be an integer >= 1, got {budget!r}")
    prompts = select_prompts(load_prompts(prompts_path or DEFAULT_PROMPTS), per_category=per_category)
    specs = [parse_method(m) for m in method_specs]
    results: dict = {}
    bar = tqdm(total=len(specs) * len(prompts) * (len(budgets) + 1), desc="disconnection", disable=not progress)
    for spec in specs:
        if spec.options.get("network", "none") == "none":
            raise ValueError(f"method {spec.label!r} needs a network option (client–server mode) to be disconnected")
        rows = {b: [] for b in budgets}
        for prompt in prompts:
            messages = [{"role": "user", "content": prompt.turns[0]}]
            connected = engine.run(messages, spec.name, max_new_tokens=max_new_tokens, instrument=False,
                                   **spec.options).token_ids
            bar.update(1)
            for budget in budgets:
                alone = engine.run(messages, spec.name, max_new_tokens=max_new_tokens, instrument=False,
                                   disconnect_after=budget, **spec.options)
                fates = [f for e in alone.events if e.kind == "commit" for f in e.fates]
                switch = fates.index("client") if "client" in fates else len(fates)
                rows[budget].append({"prompt": prompt.question_id,
                                     **agreement(connected, alone.token_ids, switch)})
                bar.update(1)
        results[spec.label] = {str(b): {"kept_after_b": sum(r["kept_after_b"] for r in rows[b]) / len(rows[b]),
                                        "equal_share": sum(r["equal_share"] for r in rows[b]) / len(rows[b]),
                                        "prompts": rows[b]} for b in budgets}
        results[spec.label]["inf"] = {"kept_after_b": None, "equal_share": 1.0, "prompts": []}
    bar.close()
    return {"setup": {"model": engine.name, "dtype": engine.dtype, "device": engine.device,
                      "max_new_tokens": max_new_tokens, "prompts": len(prompts), "budgets": list(budgets)},
            "methods": results}


def write_disconnection(results: dict, out_dir) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = write_json_atomic(out / "disconnection.json", results, indent=1)
    lines = ["| method | " + " | ".join(f"B={b}" for b in results["setup"]["budgets"]) + " | B=∞ |",
             "|---" * (len(results["setup"]["budgets"]) + 2) + "|"]
    for label, by_budget in results["methods"].items():
        cells = [f"{by_budget[str(b)]['kept_after_b']:.1f} ({by_budget[str(b)]['equal_share']:.0%})"
                 for b in results["setup"]["budgets"]]
        lines.append(f"| {label} | " + " | ".join(cells) + " | connected |")
    write_text_atomic(
        out / "disconnection.md", "# Disconnection (lossy): tokens kept equal to the connected run after the server left "
        "(share of all positions equal)\n\n" + "\n".join(lines) + "\n")
    return path
