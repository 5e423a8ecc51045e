"""The merged tree's suffix chain cut by its evidence, with and without rounds that skip the model's tree, against
the chain grafted whole, in one process.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/chain_cut_ab.py [--per-category 6] [--tokens 128]

Runs ``ar`` and ``eagle(merge_suffix=true)`` three times per prompt's first turn (greedy, bf16): as the engine runs
it (:class:`engines.drafters.suffix.ChainCut` keeps the chain's prefix that pays, and skips the model's tree where
the chain alone is expected to pay better), with the cut but the model's tree drafted every round (``ChainCut.alone``
always false), and with the whole chain grafted (the cut replaced by one that keeps every token and still learns,
as before the cut existed); the variants rotate their order per prompt so that a slow window of the machine hits
them alike. Prints tokens per second and the speedup over ``ar``, τ (tokens per round), nodes sent per round and ms
a round for each, and whether every output equals ``ar``'s.
"""

from __future__ import annotations

import argparse

from engines import Engine
from engines.drafters import suffix
from specviz.prompts import load_prompts
from specviz.views.draft_trees import mean_tree_size

CUT, ALONE = suffix.ChainCut.cut, suffix.ChainCut.alone
VARIANTS = ("cut", "cut, model every round", "whole")


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
    totals = {name: [0.0, 0, 0, 0.0] for name in ("ar",) + VARIANTS}  # seconds, tokens, rounds, sent × rounds
    equal = dict.fromkeys(VARIANTS, 0)
    for k, turn in enumerate(turns):
        ar = engine.run(turn, "ar", max_new_tokens=args.tokens)
        results = {"ar": ar}
        for name in VARIANTS[k % 3:] + VARIANTS[:k % 3]:
            suffix.ChainCut.cut = whole if name == "whole" else CUT
            suffix.ChainCut.alone = ALONE if name == "cut" else (lambda self, drafter: False)
            results[name] = engine.run(turn, "eagle", max_new_tokens=args.tokens, merge_suffix=True)
            equal[name] += results[name].token_ids == ar.token_ids
        suffix.ChainCut.cut, suffix.ChainCut.alone = CUT, ALONE
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
    for name in VARIANTS:
        seconds, tokens, rounds, sent = totals[name]
        print(f"| {name} | {tokens / seconds:.1f} | {tokens / seconds / ar_speed:.2f}× | {tokens / rounds:.2f} "
              f"| {sent / rounds:.2f} | {seconds / rounds * 1e3:.2f} | {equal[name]}/{len(turns)} |")


if __name__ == "__main__":
    main()
