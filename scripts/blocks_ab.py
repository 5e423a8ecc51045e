"""The step reading the GGUF's blocks against the same step reading bf16 panels, in one process, round by round.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/blocks_ab.py [--ns 1,2,4,8,12,16,32] [--rounds 8] [--dtype bfloat16]

Why in one process: this VM's read rate moves by ±20% from one minute to the next, so two processes timed one
after the other (`scripts/step_curve.py` with ``SPECVIZ_QUANTIZED_PANELS=0`` and without) compare two windows,
not two kernels. Here the default model is loaded twice (bf16 unless told), one copy's native step reading its
GGUF blocks (``engines/model/gguf_blocks.py``) and the other's plain panels, and each round times both (order
alternating) with :func:`~engines.model.verify_cost.time_forwards`, n rows after 256 cached tokens. Prints the
median ms per row count for each, their ratio, and each copy's bytes a step. ``SPECVIZ_NATIVE_ISA=avx2`` times
the AVX2 build (which reads blocks in fp32 too).
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

from engines.model.layers import LayerStack
from engines.model.loading import load_model
from engines.model.native import step as native_step
from engines.model.verify_cost import time_forwards, weight_bytes


def stack_reading(blocks: bool, dtype: str) -> LayerStack:
    """The default model in ``dtype`` whose native step reads its GGUF blocks (``blocks``) or plain panels."""
    previous = os.environ.get(native_step.QUANTIZED_VARIABLE)
    os.environ[native_step.QUANTIZED_VARIABLE] = "1" if blocks else "0"
    try:
        stack = LayerStack(load_model(dtype=dtype).model)
        stack.prepare_inference()
        if stack.native is None:
            raise SystemExit("the native step does not run here")
        time_forwards(stack, 256, [1], 1)  # packs the weights (and checks the blocks) before any timing
    finally:
        if previous is None:
            os.environ.pop(native_step.QUANTIZED_VARIABLE)
        else:
            os.environ[native_step.QUANTIZED_VARIABLE] = previous
    return stack


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns", default="1,2,4,8,12,16,32")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="forwards per row count per round")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    args = parser.parse_args()
    ns = [int(n) for n in args.ns.split(",")]
    if not ns or min(ns) < 1 or args.rounds < 1 or args.repeats < 1:
        raise ValueError("--ns must list row counts >= 1; --rounds and --repeats must be >= 1")
    stacks = {"blocks": stack_reading(True, args.dtype), "plain": stack_reading(False, args.dtype)}
    if not stacks["blocks"].native._quantized:
        raise SystemExit(f"this build reads no GGUF blocks for {args.dtype}: nothing to compare")
    times: dict[str, dict[int, list[float]]] = {name: {n: [] for n in ns} for name in stacks}
    for round_ in range(args.rounds):
        order = list(stacks) if round_ % 2 == 0 else list(reversed(stacks))
        for name in order:
            for n, seconds in time_forwards(stacks[name], 256, ns, args.repeats).items():
                times[name][n].append(seconds)
    for name, stack in stacks.items():
        print(f"{name}: {weight_bytes(stack.model) / 1e6:.0f} MB a step")
    for n in ns:
        blocks, plain = (statistics.median(times[name][n]) * 1e3 for name in ("blocks", "plain"))
        print(f"n={n}: blocks {blocks:.2f} ms, plain {plain:.2f} ms, blocks/plain {blocks / plain:.2f}")


if __name__ == "__main__":
    main()
