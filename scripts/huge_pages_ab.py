"""The target's forward with its packed weights on 2 MiB pages against 4 KiB pages, in one process.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/huge_pages_ab.py [--rows 1,2,4,8,16,32] [--blocks 20] [--dtype bfloat16]

Loads the default model twice, once with ``SPECVIZ_HUGE_PAGES=0`` and once with huge pages (where this machine
gives them: :mod:`engines.model.native.huge_pages`), prefills 300 tokens into each, then times forwards of n rows
after them, the two engines alternating in blocks of 8 forwards (the order flipping every block), so that a VM's
drifting speed falls on both alike. Prints the median ms a forward for each, their ratio, and how much of the
process's memory sits in huge pages.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from engines import Engine


def anon_huge_mb() -> int:
    """The process's anonymous memory on huge pages, from /proc (0 where there is none to read)."""
    try:
        with open(f"/proc/{os.getpid()}/smaps_rollup") as rollup:
            return next((int(line.split()[1]) >> 10 for line in rollup if line.startswith("AnonHugePages")), 0)
    except OSError:
        return 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1,2,4,8,16,32")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    rows = [int(n) for n in args.rows.split(",")]
    engines = {}
    for name, switch in (("4 KiB", "0"), ("2 MiB", "1")):
        os.environ["SPECVIZ_HUGE_PAGES"] = switch
        engine = Engine.load(dtype=args.dtype)
        cache = engine.target.new_cache(512)
        with torch.inference_mode():
            engine.target.forward(list(range(100, 400)), cache)
            for n in rows:  # every panel kind packed before timing
                engine.target.forward([5] * n, cache)
                cache.crop(300)
        engines[name] = (engine, cache)
        print(f"{name} pages: the process holds {anon_huge_mb()} MB on huge pages after loading and packing")
    print(f"| rows | 4 KiB pages, ms | 2 MiB pages, ms | ratio |")
    print("|--:|--:|--:|--:|")
    with torch.inference_mode():
        for n in rows:
            times = {name: [] for name in engines}
            for block in range(args.blocks):
                for name in (list(engines) if block % 2 else list(engines)[::-1]):
                    engine, cache = engines[name]
                    for _ in range(8):
                        started = time.perf_counter()
                        engine.target.forward([5] * n, cache)
                        times[name].append(time.perf_counter() - started)
                        cache.crop(300)
            small, huge = (statistics.median(times[name]) * 1e3 for name in engines)
            print(f"| {n} | {small:.2f} | {huge:.2f} | {huge / small:.3f} |", flush=True)


if __name__ == "__main__":
    main()
