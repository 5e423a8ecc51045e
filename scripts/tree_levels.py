"""How deep and how large a method's trees grow, and what a round costs, for several variants in one process.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/tree_levels.py [--category rag] [--prompts 6] [--tokens 128] \
        [--variants "eagle(merge_suffix=true);eagle(merge_suffix=true,depth=1)"]

Runs every variant on each prompt's first turn in turn (greedy, the default dtype unless ``--dtype``), so a slow
window of the machine hits them alike, and prints per variant: tokens per second, tokens per round (τ, the first
token counted), ms a round, the drafter's levels per round (``specviz.views.draft_trees.mean_levels``) and the
nodes sent per round. Variants are separated by ``;`` (their options hold commas).
"""

from __future__ import annotations

import argparse

from engines import Engine
from specviz.bench.method_specs import parse_method
from specviz.prompts import load_prompts
from specviz.views.draft_trees import mean_levels, mean_tree_size

DEFAULT_VARIANTS = "eagle;eagle(depth=1);eagle(depth=2)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--category", default="rag")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--variants", default=DEFAULT_VARIANTS)
    parser.add_argument("--dtype", default=None)
    args = parser.parse_args()
    specs = [parse_method(text) for text in args.variants.split(";") if text.strip()]
    engine = Engine.load(dtype=args.dtype)
    turns = [p.turns[0] for p in load_prompts() if p.category == args.category][: args.prompts]
    if not turns:
        raise ValueError(f"category must name prompts in data/prompts.jsonl, got {args.category!r}")
    engine.run(turns[0], specs[0].name, max_new_tokens=16, **specs[0].options)  # warm the step and the drafter
    totals = [[0.0, 0, 0, 0.0, 0.0] for _ in specs]  # seconds, tokens, rounds, levels × rounds, sent × rounds
    for turn in turns:
        for total, spec in zip(totals, specs):
            result = engine.run(turn, spec.name, max_new_tokens=args.tokens, **spec.options)
            stats = result.stats
            total[0] += stats.new_tokens / stats.tokens_per_s
            total[1] += stats.new_tokens
            total[2] += stats.rounds
            total[3] += mean_levels(result.events) * stats.rounds
            total[4] += mean_tree_size(result.events) * stats.rounds
    print(f"{args.category}: {len(turns)} first turns, {args.tokens} tokens each, {engine.dtype}")
    print("| variant | tokens/s | τ | ms a round | levels a round | nodes sent a round |")
    print("|---|--:|--:|--:|--:|--:|")
    for (seconds, tokens, rounds, levels, sent), spec in zip(totals, specs):
        print(f"| `{spec.label}` | {tokens / seconds:.1f} | {tokens / rounds:.2f} | {seconds / rounds * 1e3:.2f} "
              f"| {levels / rounds:.2f} | {sent / rounds:.2f} |")


if __name__ == "__main__":
    main()
