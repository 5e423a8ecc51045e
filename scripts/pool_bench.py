"""Pool the speed of several `specviz bench` runs, category by category, into one overall speedup.

Used when part of a long run was measured while other work shared the CPU: re-run the affected
categories (`specviz bench --prompts FILE` with only their prompts) and pool tokens and seconds from
the clean parts. Speed pools exactly (Σ new tokens ÷ Σ decode seconds, each method against `ar` over
the same turns); τ and α do not depend on timing and are read from the runs themselves.

    python scripts/pool_bench.py data/bench/bf16/drafters-greedy36/results.json:-multi_turn \\
        data/bench/bf16/drafters-greedy36-multi-turn/results.json:multi_turn
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.bench.report import pooled_speedups  # noqa: E402


def parse(spec: str) -> tuple[dict, set[str] | None, set[str]]:
    """``path.json`` (all categories), ``path.json:a,b`` (only those), ``path.json:-a,b`` (all but those)."""
    path, _, which = spec.partition(":")
    results = json.loads(open(path).read())
    names = {c for c in which.lstrip("-").split(",") if c}
    if which.startswith("-"):
        return results, None, names
    return results, names or None, set()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    pooled = pooled_speedups([parse(spec) for spec in sys.argv[1:]])
    print("| method | tokens/s | speedup | mean draft cost c |\n|---|---|---|---|")
    for method, row in pooled.items():
        cost = "—" if row["mean_draft_cost"] is None else f"{row['mean_draft_cost']:.2f}"
        print(f"| {method} | {row['tokens_per_s']:.1f} | {row['speedup']:.2f}× | {cost} |")
