"""Time the default model's matrix products alone, per kernel and row count, beside a plain read of the weights.

All 121 products of one forward (four per layer through the fused layers, then the LM head) run in turn, so
each weight comes from memory as in decoding; the same tensors summed give the bandwidth a read reaches.
What the kernels reach against that read decides a decoding step's floor (docs/verify-cost.md).

    .venv/bin/python scripts/product_bandwidth.py [--rows 1,2,4,8,16] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from engines import Engine
from engines.model import small_m_kernel


def kernels(projection) -> dict:
    """Each way the engine can compute ``x @ Wᵀ`` for this projection here."""
    found = {"F.linear (MKL)": lambda x: F.linear(x, projection.weight)}
    if projection.packed is not None:
        found["oneDNN, packed"] = lambda x: torch.ops.mkldnn._linear_pointwise(x, projection.packed, None, "none",
                                                                                [], "")
    if small_m_kernel.applies(projection.weight):
        found["small-M kernel"] = lambda x: small_m_kernel.product(x, projection.weight)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,2,4,8,16")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    engine = Engine.load(dtype="float32")
    stack = engine.target
    projections = [p for layer in stack.layers for p in (layer.specviz_fused.qkv, layer.specviz_fused.o,
                                                          layer.specviz_fused.gate_up, layer.specviz_fused.down)]
    projections.append(stack.packed_head)
    megabytes = sum(p.weight.numel() * p.weight.element_size() for p in projections) / 1e6
    names = list(kernels(projections[0]))

    def timed(work) -> float:
        work()  # warm-up
        samples = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            work()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    with torch.inference_mode():
        read = timed(lambda: [p.weight.sum() for p in projections])
        print(f"{len(projections)} products, {megabytes:.0f} MB of fp32 weights, {torch.get_num_threads()} threads")
        print(f"a plain read (sum of each weight): {read * 1e3:.1f} ms, {megabytes / 1e3 / read:.1f} GB/s\n")
        print("| rows | " + " | ".join(f"{name}: ms (GB/s)" for name in names) + " |")
        print("|---|" + "---|" * len(names))
        for rows in (int(r) for r in args.rows.split(",")):
            inputs = {p.weight.shape[1]: torch.randn(1, rows, p.weight.shape[1]) for p in projections}
            cells = []
            for name in names:
                calls = [(kernels(p)[name], inputs[p.weight.shape[1]]) for p in projections]
                seconds = timed(lambda: [call(x) for call, x in calls])
                cells.append(f"{seconds * 1e3:.1f} ({megabytes / 1e3 / seconds:.1f})")
            print(f"| {rows} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
