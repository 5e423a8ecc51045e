"""The tree sizer with and without the round's overhead in its price, in one process, alternating per prompt.

``total_tokens=auto`` prices a round as its drafting plus the verify-cost curve's forward, and since 2026-11-28
also the round's own overhead, learned from the run (:meth:`engines.drafters.tree_growth.TreeSizer.round_took`).
This runs every prompt of ``data/prompts.jsonl`` (first turn, greedy) under each method twice, once with the
overhead learned and once with it left out (``round_took`` made a no-op), the two in alternating order, and
prints tokens per second, τ and the mean nodes sent per round for each: one window of a noisy machine for both.

Usage: ``HF_HUB_OFFLINE=1 python scripts/sizer_overhead_ab.py [--methods "eagle;eagle(merge_suffix=true)"]``
"""

from __future__ import annotations

import argparse
import json
import time

from engines import Engine
from engines.drafters.tree_growth import TreeSizer
from specviz.bench.method_specs import parse_method
from specviz.prompts import load_prompts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--methods", default="eagle;eagle(merge_suffix=true)", help="';'-separated method specs")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    engine = Engine.load(dtype=args.dtype)
    turns = [prompt.turns[0] for prompt in load_prompts()]
    learned = TreeSizer.round_took
    totals = {}
    for spec in args.methods.split(";"):
        parsed = parse_method(spec)
        name, options = parsed.name, parsed.options
        engine.run(turns[0], name, max_new_tokens=16, **options)  # warm: the drafter loaded, the step packed
        for variant in ("with", "without"):
            totals[(spec, variant)] = {"seconds": 0.0, "tokens": 0, "rounds": 0, "sent": 0}
        for index, turn in enumerate(turns):
            order = ("with", "without") if index % 2 == 0 else ("without", "with")
            for variant in order:
                TreeSizer.round_took = learned if variant == "with" else (lambda self, seconds: None)
                started = time.perf_counter()
                stats = engine.run(turn, name, max_new_tokens=args.max_new_tokens, **options).stats
                total = totals[(spec, variant)]
                total["seconds"] += time.perf_counter() - started
                total["tokens"] += stats.new_tokens
                total["rounds"] += stats.rounds
                total["sent"] += stats.drafted
        TreeSizer.round_took = learned
    for (spec, variant), total in totals.items():
        print(json.dumps({"method": spec, "overhead": variant,
                          "tokens_per_s": round(total["tokens"] / total["seconds"], 1),
                          "tau": round(total["tokens"] / total["rounds"], 3),
                          "nodes_sent_per_round": round(total["sent"] / total["rounds"], 2)}))


if __name__ == "__main__":
    main()
