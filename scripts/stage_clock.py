"""Where a forward's time goes, stage by stage, on the native step: one table per row count.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/stage_clock.py [--dtype bfloat16] [--ns 1,8,16] [--repeats 20]

It builds the step with ``-DSPECVIZ_STAGE_CLOCK`` (its own cached build: ``SPECVIZ_NATIVE_CFLAGS``), runs forwards
of n rows after 256 cached tokens, and prints per stage the wall time per forward (summed over the 30 layers)
and how much of it thread 0 spent waiting at the stage's closing barrier (the other thread's longer share, or
its time off the core). Stages: A norm + q‖k‖v + RoPE + cache write, B attention, C output projection,
D norm + gate‖up + SiLU, E down projection, and the LM head. The clock itself costs ~1 µs a stage. With
``PYTHONPATH`` at another checkout it clocks that checkout's ``step.c``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from pathlib import Path

# appended, not put first: a checkout on PYTHONPATH comes before this one, so the same script clocks another build
# (inserted first, it silently clocked this checkout whatever PYTHONPATH named)
sys.path.append(str(Path(__file__).resolve().parent.parent))
os.environ["SPECVIZ_NATIVE_CFLAGS"] = (os.environ.get("SPECVIZ_NATIVE_CFLAGS", "") + " -DSPECVIZ_STAGE_CLOCK").strip()

import torch  # noqa: E402

from engines.model.layers import LayerStack  # noqa: E402
from engines.model.loading import load_model  # noqa: E402

STAGES = ("A qkv", "B attention", "C o-proj", "D gate-up", "E down", "LM head")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument("--ns", default="1,8,16")
    parser.add_argument("--prefix", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    ns = [int(n) for n in args.ns.split(",")]
    stack = LayerStack(load_model(dtype=args.dtype).model)
    stack.prepare_inference()
    if stack.native is None:
        raise SystemExit("the native step does not run here")
    clock = stack.native.lib.specviz_stage_clock
    clock.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.c_int]
    readings = (ctypes.c_double * 16)()
    if not clock(readings, 1):
        raise SystemExit("this build has no stage clock")
    vocab = stack.config.vocab_size
    ids = [(7 * i + 3) % vocab for i in range(args.prefix + max(ns))]
    cache = stack.new_cache(args.prefix + max(ns))
    totals = {n: [0.0] * 16 for n in ns}
    walls = {n: 0.0 for n in ns}
    with torch.inference_mode():
        stack.forward(ids[:args.prefix], cache)
        for n in ns:
            stack.forward(ids[args.prefix:args.prefix + n], cache)
            cache.crop(args.prefix)
        clock(readings, 1)
        for _ in range(args.repeats):
            for n in ns:  # interleaved, so drift on a shared machine spreads over every n
                start = time.perf_counter()
                stack.forward(ids[args.prefix:args.prefix + n], cache)
                walls[n] += time.perf_counter() - start
                cache.crop(args.prefix)
                clock(readings, 1)
                totals[n] = [t + r for t, r in zip(totals[n], readings)]
    for n in ns:
        per = [1e3 * t / args.repeats for t in totals[n]]
        wall = 1e3 * walls[n] / args.repeats
        print(f"\nn = {n}: {wall:.2f} ms a forward (mean of {args.repeats})")
        print("| stage | ms | waiting at its end |")
        print("|---|--:|--:|")
        for i, name in enumerate(STAGES):
            print(f"| {name} | {per[i]:.2f} | {per[8 + i]:.2f} |" if i < 5 else f"| {name} | {per[i]:.2f} | |")
        print(f"| outside the stages (Python, set-up) | {wall - sum(per[:6]):.2f} | |")


if __name__ == "__main__":
    main()
