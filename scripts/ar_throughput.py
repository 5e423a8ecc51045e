"""A method's tokens/s through the engine, whole runs: what a change to a step's Python costs or saves.

Why not `specviz bench`: an A/B of two builds wants many short processes alternating on one quiet machine
(`PYTHONPATH` at a worktree of the other build), each printing one line. Used for the run's trust of its
weights and the prepared call (docs/verify-cost.md):

    for r in 1 2 3; do
      PYTHONPATH=/tmp/wt-old .venv/bin/python scripts/ar_throughput.py before
      .venv/bin/python scripts/ar_throughput.py after
    done

``--method eagle --options '{"merge_suffix": true}'`` times another method the same way (default ``ar``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from engines import Engine  # noqa: E402

PROMPT = "Explain in detail how a refrigerator keeps food cold, step by step."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("label", nargs="?", default="run", help="printed first: which build this is")
    parser.add_argument("--method", default="ar")
    parser.add_argument("--options", default="{}", help="the method's options as a JSON object")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    options = json.loads(args.options)
    if not isinstance(options, dict):
        raise ValueError(f"options must be a JSON object, got {args.options!r}")
    engine = Engine.load(dtype="bfloat16")
    engine.run(PROMPT, args.method, max_new_tokens=32, stop_at_eos=False, **options)  # warm-up: build, pack, caches
    rates = []
    for _ in range(args.runs):
        started = time.perf_counter()
        result = engine.run(PROMPT, args.method, max_new_tokens=args.new_tokens, stop_at_eos=False,
                            instrument=False, **options)
        rates.append(len(result.token_ids) / (time.perf_counter() - started))
    print(f"{args.label} {args.method} tok/s max {max(rates):.1f} median {statistics.median(rates):.1f}", flush=True)


if __name__ == "__main__":
    main()
