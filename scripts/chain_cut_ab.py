"""The merged tree's suffix chain cut by its evidence, against the chain grafted whole, in one process.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/chain_cut_ab.py [--per-category 6] [--tokens 128]

Runs ``ar`` and ``eagle(merge_suffix=true)`` twice per prompt's first turn (greedy, bf16): once as the engine runs
it (:class:`engines.drafters.suffix.ChainCut` keeps the chain's prefix that pays) and once with the cut replaced by
one that keeps the whole chain (and still learns, as before the cut existed), the two in alternating order per
prompt so that a slow window of the machine hits both alike. Prints tokens per second and the speedup over ``ar``,
τ (tokens per round), nodes sent per round and ms a round for each, and whether every output equals ``ar``'s.
"""

from __future__ import annotations

import argparse

from engines import Engine
from engines.drafters import suffix
from specviz.prompts import load_prompts
from specviz.views.draft_trees import mean_tree_size

CUT = suffix.ChainCut.cut


def whole(self, drafter, chain, tree, sent_ids, expected, seconds):
    """The chain as it was grafted before the cut: every token, learned from all the same."""
    self.tokens, self.kinds = [n.token for n in chain.nodes], [suffix.evidence(m) for _, m in drafter.last]
    return chain


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-category", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    engine = Engine.load(dtype="bfloat16")
    by_category: dict[str, list] = {}
    for prompt in load_prompts():
        by_category.setdefault(prompt.category, []).append(prompt)
    turns = [p.turns[0] for prompts in by_category.values() for p in prompts[: args.per_category]]
    engine.run(turns[0], "eagle", max_new_tokens=16, merge_suffix=True)  # warm the step, the head, the index
    totals = {name: [0.0, 0, 0, 0.0] for name in ("ar", "cut", "whole")}  # seconds, tokens, rounds, sent × rounds
    equal = {"cut": 0, "whole": 0}
    for k, turn in enumerate(turns):
        ar = engine.run(turn, "ar", max_new_tokens=args.tokens)
        results = {"ar": ar}
        for name in ("cut", "whole") if k % 2 == 0 else ("whole", "cut"):
            suffix.ChainCut.cut = CUT if name == "cut" else whole
            results[name] = engine.run(turn, "eagle", max_new_tokens=args.tokens, merge_suffix=True)
            equal[name] += results[name].token_ids == ar.token_ids
        suffix.ChainCut.cut = CUT
        for name, result in results.items():
            stats, total = result.stats, totals[name]
            total[0] += stats.new_tokens / stats.tokens_per_s
            total[1] += stats.new_tokens
            total[2] += stats.rounds
            total[3] += mean_tree_size(result.events) * stats.rounds
    ar_speed = totals["ar"][1] / totals["ar"][0]
    print(f"{len(turns)} first turns, {args.tokens} tokens each, {engine.dtype}; `ar` {ar_speed:.1f} tokens/s")
    print("| merged tree's chain | tokens/s | speedup | τ | nodes sent a round | ms a round | output = ar |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for name in ("cut", "whole"):
        seconds, tokens, rounds, sent = totals[name]
        print(f"| {name} | {tokens / seconds:.1f} | {tokens / seconds / ar_speed:.2f}× | {tokens / rounds:.2f} "
              f"| {sent / rounds:.2f} | {seconds / rounds * 1e3:.2f} | {equal[name]}/{len(turns)} |")


if __name__ == "__main__":
    main()
