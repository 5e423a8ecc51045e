"""Where a speculative round's time goes: the native step's calls, by kind and row count, and the host's rest.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/round_costs.py [--method eagle] [--prompts 12] [--tokens 128]

Times every call into the native step (:class:`engines.model.native.step.NativeStep`'s ``layers``, ``head`` and
``linear``) during greedy runs of one method on the first turns of ``data/prompts.jsonl``, after one warm run, and
prints per kind (``layers`` with how many layers: 30 is the target, 1 a drafter's; ``head`` the target's LM head
with its vocabulary; ``linear`` a drafter's own map with its output width) and row count (1, 2–16, more: a
prefill) the calls, seconds and ms a call, then the runs' wall time per round and what no native call covers: the
host's Python per round (the tree's growth and walk, masks, the cache, sampling, the trace).
"""

from __future__ import annotations

import argparse
import collections
import time

from engines import Engine
from engines.model.native.step import NativeStep
from specviz.bench.method_specs import parse_method
from specviz.prompts import load_prompts

TIMED = ("layers", "head", "linear")


def timed(stats: dict, name: str):
    original = getattr(NativeStep, name)

    def call(self, *args, **kwargs):
        started = time.perf_counter()
        result = original(self, *args, **kwargs)
        seconds = time.perf_counter() - started
        if name == "layers":
            what, rows = len(args[0]), args[1]
        elif name == "head":
            what, rows = args[2].shape[0], args[0]
        else:
            what, rows = args[1].shape[0], args[0]
        n = rows.reshape(-1, rows.shape[-1]).shape[0]
        key = (name, what, "1" if n == 1 else "2-16" if n <= 16 else ">16")
        stats[key][0] += 1
        stats[key][1] += seconds
        return result

    setattr(NativeStep, name, call)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--method", default="eagle")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    stats: dict = collections.defaultdict(lambda: [0, 0.0])
    for name in TIMED:
        timed(stats, name)
    engine = Engine.load(dtype=args.dtype)
    spec = parse_method(args.method)
    turns = [prompt.turns[0] for prompt in load_prompts()][: args.prompts]
    engine.run(turns[0], spec.name, max_new_tokens=32, **spec.options)
    stats.clear()
    rounds = tokens = 0
    started = time.perf_counter()
    for turn in turns:
        result = engine.run(turn, spec.name, max_new_tokens=args.tokens, **spec.options)
        rounds, tokens = rounds + result.stats.rounds, tokens + result.stats.new_tokens
    wall = time.perf_counter() - started
    covered = sum(seconds for _, seconds in stats.values())
    print(f"{args.method}: {len(turns)} turns, {tokens} tokens, {rounds} rounds, {wall / rounds * 1e3:.2f} ms a round")
    print("| call | width | rows | calls | seconds | ms a call | ms a round |")
    print("|---|---|---|---|---|---|---|")
    for (name, what, rows), (calls, seconds) in sorted(stats.items(), key=lambda item: -item[1][1]):
        print(f"| {name} | {what} | {rows} | {calls} | {seconds:.3f} | {seconds / calls * 1e3:.3f} "
              f"| {seconds / rounds * 1e3:.3f} |")
    print(f"| the host's rest | | | | {wall - covered:.3f} | | {(wall - covered) / rounds * 1e3:.3f} |")


if __name__ == "__main__":
    main()
