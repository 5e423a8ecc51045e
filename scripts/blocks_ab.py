"""The step reading the GGUF's blocks against the same step reading bf16 panels, in one process, round by round.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/blocks_ab.py [--ns 1,2,4,8,12,16,32] [--rounds 8] [--dtype bfloat16]
        [--variants blocks,plain]

Variants: ``blocks`` (exact products on the GGUF's blocks), ``plain`` (``SPECVIZ_QUANTIZED_PANELS=0``), ``int8``
(``SPECVIZ_PRODUCTS=int8``: the blocks against int8 inputs); the first is the one the ratios divide.

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


VARIANTS = {"blocks": {native_step.QUANTIZED_VARIABLE: "1", native_step.PRODUCTS_VARIABLE: "exact"},
            "plain": {native_step.QUANTIZED_VARIABLE: "0", native_step.PRODUCTS_VARIABLE: "exact"},
            "int8": {native_step.QUANTIZED_VARIABLE: "1", native_step.PRODUCTS_VARIABLE: "int8"}}


def stack_reading(variant: str, dtype: str) -> LayerStack:
    """The default model in ``dtype`` whose native step reads as ``variant`` says (``VARIANTS``)."""
    previous = {name: os.environ.get(name) for name in VARIANTS[variant]}
    os.environ.update(VARIANTS[variant])
    try:
        stack = LayerStack(load_model(dtype=dtype).model)
        stack.prepare_inference()
        if stack.native is None:
            raise SystemExit("the native step does not run here")
        time_forwards(stack, 256, [1], 1)  # packs the weights (and checks the blocks) before any timing
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value
    return stack


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns", default="1,2,4,8,12,16,32")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="forwards per row count per round")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--variants", default="blocks,plain", help=f"two or more of {', '.join(VARIANTS)}")
    args = parser.parse_args()
    variants = args.variants.split(",")
    if len(variants) < 2 or len(set(variants)) < len(variants) or not set(variants) <= set(VARIANTS):
        raise ValueError(f"--variants must name two or more of {sorted(VARIANTS)}, each once; got {args.variants!r}")
    ns = [int(n) for n in args.ns.split(",")]
    if not ns or min(ns) < 1 or args.rounds < 1 or args.repeats < 1:
        raise ValueError("--ns must list row counts >= 1; --rounds and --repeats must be >= 1")
    stacks = {name: stack_reading(name, args.dtype) for name in variants}
    if not all(stacks[name].native._quantized for name in variants if name != "plain"):
        raise SystemExit(f"this build reads no GGUF blocks for {args.dtype}: nothing to compare")
    times: dict[str, dict[int, list[float]]] = {name: {n: [] for n in ns} for name in stacks}
    for round_ in range(args.rounds):
        order = list(stacks) if round_ % 2 == 0 else list(reversed(stacks))
        for name in order:
            for n, seconds in time_forwards(stacks[name], 256, ns, args.repeats).items():
                times[name][n].append(seconds)
    for name, stack in stacks.items():
        print(f"{name}: {weight_bytes(stack.model) / 1e6:.0f} MB a step")
    first = variants[0]
    for n in ns:
        ms = {name: statistics.median(times[name][n]) * 1e3 for name in variants}
        print(f"n={n}: " + ", ".join(f"{name} {ms[name]:.2f} ms" for name in variants) + ", "
              + ", ".join(f"{name}/{first} {ms[name] / ms[first]:.2f}" for name in variants[1:]))


if __name__ == "__main__":
    main()
