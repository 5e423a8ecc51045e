"""Two or more builds of the native step timed in one process, forward by forward: the A/B that sees 0.5 ms.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/step_ab.py OLD/step.c [MORE/step.c …] [--ns 1,8,16] [--dtype bfloat16]

Why in one process: this VM's read rate moves by ±20% from one minute to the next, so whole-process A/B rounds
(`scripts/step_curve.py` with a checkout on ``PYTHONPATH``) cannot resolve a change of a few per cent. Here one
model, one cache and one set of packed weights serve every build: each named ``step.c`` is built as the engine
builds it (``engines.model.native.library.load``), and the builds' libraries are swapped into the stack's
native step before each forward, alternating their order round by round. The builds must share the packed
panel layout (the same tile width P) and the entry points' arguments (a ``step.c`` from before the GGUF blocks
came in, 2026-11-28, lacks ``Layer.formats`` and the head's format: time it with ``step_curve.py`` instead): the
weights are packed once, by this checkout's build. The blocks against plain panels: ``scripts/blocks_ab.py``. Prints the
median ms per forward of n rows after 256 cached tokens, per build ("current" is this checkout's); with ``--tree``,
the n rows as a draft tree under its mask (node i's parent (i - 1) // 2).
To A/B a compile-time switch, copy ``step.c`` with the ``#define`` as its first line (``-DSPECVIZ_NO_AHEAD``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from engines.model.layers import LayerStack
from engines.model.loading import load_model
from engines.model.native import library

ENTRY_POINTS = ("specviz_layers", "specviz_head", "specviz_work_floats", "specviz_linear")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", help="other step.c files (each built as the engine builds it)")
    parser.add_argument("--ns", default="1,4,8,12,16")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--tree", action="store_true",
                        help="the n rows as a draft tree (node i's parent (i - 1) // 2) under its mask, as trees verify")
    args = parser.parse_args()
    ns = [int(n) for n in args.ns.split(",")]
    if max(ns) > 64 or min(ns) < 1:
        raise SystemExit("--ns: row counts in 1..64")
    stack = LayerStack(load_model(dtype=args.dtype).model)
    stack.prepare_inference()
    if stack.native is None:
        raise SystemExit("the native step does not run here")
    libs = {}
    for source in args.sources:
        loaded = library.load(Path(source).resolve())
        if loaded.library is None:
            raise SystemExit(f"{source}: {loaded.why_not}")
        libs[f"{Path(source).parent.name}/{Path(source).name}"] = loaded.library
    libs["current"] = stack.native.lib
    for lib in libs.values():  # the argument types the engine declared on its own library
        for name in ENTRY_POINTS:
            mine, theirs = getattr(stack.native.lib, name), getattr(lib, name)
            theirs.argtypes, theirs.restype = mine.argtypes, mine.restype
    vocab = stack.config.vocab_size
    ids = [(7 * i + 3) % vocab for i in range(256 + max(ns))]
    cache = stack.new_cache(256 + max(ns))
    names = list(libs)
    times = {(name, n): [] for name in names for n in ns}
    parents = {n: [(i - 1) // 2 for i in range(n)] if args.tree else None for n in ns}  # built outside the clock
    with torch.inference_mode():
        stack.forward(ids[:256], cache)
        for round_ in range(args.rounds):
            for n in ns:
                for name in names if round_ % 2 else names[::-1]:
                    stack.native.lib = libs[name]
                    start = time.perf_counter()
                    stack.forward(ids[256:256 + n], cache, parents[n])
                    times[(name, n)].append(time.perf_counter() - start)
                    cache.crop(256)
    stack.native.lib = libs["current"]
    for n in ns:
        print(f"n={n}: " + ", ".join(f"{name} {1e3 * statistics.median(times[(name, n)]):.2f} ms" for name in names))


if __name__ == "__main__":
    main()
