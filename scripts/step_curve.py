"""The target's step cost at chosen row counts, its share of the bandwidth ceiling and a 292-token prefill: one line.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/step_curve.py --dtype bfloat16 [--ns 1,2,4,8,16,32,64] [--label after]

Why beside `specviz verify-cost`: that command measures n = 1…16 for the methods' curve and caches it; this one
takes any row counts (32 and 64 too), prints the share of the ceiling and the arithmetic rate at 16 rows, and
imports only what every checkout has had since the native step came in (`LayerStack`, `time_forwards`,
`measure_bandwidth`), so the same file times an older checkout: run it with ``PYTHONPATH`` at that checkout, in
the same window (docs/verify-cost.md, "Packed panels"). The build is this machine's (``SPECVIZ_NATIVE_ISA=avx2``
forces the AVX2 one where the checkout has the switch). t(n) is the median of interleaved repeats
(:func:`~engines.model.verify_cost.time_forwards`); the prefill the best of four after a warm-up, on the
native step and on PyTorch's path.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from engines.model.layers import LayerStack
from engines.model.loading import load_model
from engines.model.verify_cost import measure_bandwidth, time_forwards, weight_bytes


def prefill_ms(stack: LayerStack, native: bool, tokens: int = 292) -> float:
    """Best of four prefills of ``tokens`` tokens after one warm-up, on the native step or PyTorch's path."""
    stack.use_native(native)
    ids = [(7 * i + 3) % stack.config.vocab_size for i in range(tokens)]
    times = []
    with torch.inference_mode():
        for _ in range(5):
            cache = stack.new_cache(tokens + 8)
            start = time.perf_counter()
            stack.forward(ids, cache)
            times.append(time.perf_counter() - start)
    stack.use_native(True)
    return min(times[1:]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument("--ns", default="1,2,4,8,16,32,64", help="row counts, comma-separated; the first is the unit")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--label", default="")
    parser.add_argument("--no-prefill", action="store_true")
    args = parser.parse_args()
    ns = [int(n) for n in args.ns.split(",")]
    if not ns or min(ns) < 1:
        raise ValueError(f"--ns must list row counts >= 1, got {args.ns!r}")
    loaded = load_model(dtype=args.dtype)
    stack = LayerStack(loaded.model)
    stack.prepare_inference()
    if stack.native is None:
        raise SystemExit("the native step does not run here")
    read = max(measure_bandwidth(torch.device("cpu")), 1e-9)
    seconds = time_forwards(stack, 256, ns, args.repeats)
    read = max(read, measure_bandwidth(torch.device("cpu")))
    weights = weight_bytes(stack.model)
    floor = weights / (read * 1e9)
    unit = seconds[ns[0]]
    params = sum({p.data_ptr(): p.numel() for p in stack.model.parameters()}.values())  # a tied head once
    line = [args.label or os.environ.get("SPECVIZ_NATIVE_ISA", "native"), args.dtype,
            f"read {read:.1f} GB/s", f"{weights / 1e6:.0f} MB a step", f"floor {floor * 1e3:.1f} ms",
            f"share {floor / seconds[ns[0]]:.0%}" if ns[0] == 1 else "",
            " ".join(f"t({n})={seconds[n] * 1e3:.1f}({seconds[n] / unit:.2f})" for n in ns)]
    if 16 in seconds:
        line.append(f"{2 * 16 * params / seconds[16] / 1e9:.0f} GFLOP/s at 16 rows")
    if not args.no_prefill:
        line.append(f"prefill 292: native {prefill_ms(stack, True):.0f} ms, PyTorch's path {prefill_ms(stack, False):.0f} ms")
    print(" · ".join(part for part in line if part), flush=True)


if __name__ == "__main__":
    main()
