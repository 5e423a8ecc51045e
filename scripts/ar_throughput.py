"""`ar`'s tokens/s through the engine, whole runs: what a change to a step's Python costs or saves.

Why not `specviz bench`: an A/B of two builds wants many short processes alternating on one quiet machine
(`PYTHONPATH` at a worktree of the other build), each printing one line. Used for the run's trust of its
weights (docs/verify-cost.md):

    for r in 1 2 3; do
      PYTHONPATH=/tmp/wt-old .venv/bin/python scripts/ar_throughput.py before
      .venv/bin/python scripts/ar_throughput.py after
    done
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from engines import Engine  # noqa: E402

PROMPT = "Explain in detail how a refrigerator keeps food cold, step by step."


def main(label: str, runs: int = 5, new_tokens: int = 128) -> None:
    engine = Engine.load(dtype="bfloat16")
    engine.run(PROMPT, "ar", max_new_tokens=32, stop_at_eos=False)  # warm-up: build, pack, first caches
    rates = []
    for _ in range(runs):
        started = time.perf_counter()
        result = engine.run(PROMPT, "ar", max_new_tokens=new_tokens, stop_at_eos=False, instrument=False)
        rates.append(len(result.token_ids) / (time.perf_counter() - started))
    print(f"{label} ar tok/s max {max(rates):.1f} median {statistics.median(rates):.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ar")
