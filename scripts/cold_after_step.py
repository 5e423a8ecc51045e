"""What a torch call costs right after the target's forward: the host's Python runs on caches the step has flushed.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/cold_after_step.py [--repeats 200]

Times one small call the engine makes every round (embedding three tokens) in four states, median of
``--repeats``: warm (called just before), right after a one-token forward of the default model (bf16, 300 tokens
cached), right after reading 10 MB of memory with NumPy (it fits this machine's last-level cache), and right
after reading 100 MB (it does not). Where the 100 MB read and the forward cost the call alike and the 10 MB read
does not, the call's slowness is the last-level cache's: the ~97 MB a step streams through it leaves nothing of
Python's, torch's or the tokenizer's working set there.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from engines import Engine


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    engine = Engine.load(dtype="bfloat16")
    target = engine.target
    small, large = np.ones(10 << 18, dtype=np.float32), np.ones(100 << 18, dtype=np.float32)
    cache = target.new_cache(512)
    states = {"warm": lambda: target.embed([1, 2, 3]),
              "after a forward": lambda: (target.forward([5], cache), cache.crop(300)),
              "after reading 10 MB": lambda: small.sum(),
              "after reading 100 MB": lambda: large.sum()}
    times = {name: [] for name in states}
    with torch.inference_mode():
        target.forward(list(range(100, 400)), cache)
        for _ in range(args.repeats):
            for name, before in states.items():
                before()
                started = time.perf_counter()
                target.embed([1, 2, 3])
                times[name].append(time.perf_counter() - started)
    for name, seconds in times.items():
        print(f"embedding 3 tokens {name}: {statistics.median(seconds) * 1e6:.0f} µs (median of {len(seconds)})")


if __name__ == "__main__":
    main()
