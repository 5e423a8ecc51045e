"""The vector units' measured peak here: what a product at many rows can reach once the weights are no limit.

    .venv/bin/python scripts/dot_peak.py [--threads 2] [--iterations 50000000]
    SPECVIZ_NATIVE_ISA=avx2 .venv/bin/python scripts/dot_peak.py   # the forced AVX2 build's peak

Why: a verification of many rows reads the weights once, as a one-token step does, and does 2·rows·weights
multiply-adds. Above a few rows the products stop being bound by the read and become bound by the dot-product
units, so ``t(16) / t(1)`` has a floor that only this CPU's arithmetic sets. ``docs/verify-cost.md`` divides a
forward's product flops by the stage clock's product time against the peak this prints. It compiles
``dot_peak.c`` with the compiler and flags the engine builds the step with, runs twelve independent register
accumulators per thread (the instruction the products use: ``vdpbf16ps`` where the CPU has AVX-512 BF16,
``vfmadd231ps`` otherwise), best of three rounds, and prints GFLOP/s on one thread and on ``--threads``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.model.native import library  # noqa: E402
from engines.model.step_choice import machine_name  # noqa: E402

SOURCE = Path(__file__).with_name("dot_peak.c")


def build(target: Path) -> str:
    """The executable, built as the step is built (less ``-shared``); returns the compiler used."""
    cc = library.compiler()
    if cc is None:
        raise SystemExit("no C compiler found (set CC, or install gcc or clang)")
    flags = [flag for flag in library.flags() if flag not in ("-shared", "-fPIC", "-undefined", "dynamic_lookup")]
    for openmp in (["-fopenmp"], []):
        done = subprocess.run([cc, *flags, *openmp, str(SOURCE), "-o", str(target)], capture_output=True,
                              text=True, check=False)
        if done.returncode == 0:
            return f"{Path(cc).name} {' '.join(flags + openmp)}"
    raise SystemExit(f"{SOURCE.name} did not build: {done.stderr.strip()[:300]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=50_000_000)
    args = parser.parse_args()
    if args.threads < 1:
        raise ValueError(f"--threads must be at least 1; got {args.threads}")
    if args.iterations < 1:
        raise ValueError(f"--iterations must be at least 1; got {args.iterations}")
    with tempfile.TemporaryDirectory() as folder:
        program = Path(folder) / ("dot_peak.exe" if os.name == "nt" else "dot_peak")
        built_with = build(program)
        done = subprocess.run([str(program), str(args.iterations), str(args.threads)], capture_output=True,
                              text=True, check=False)
    print(f"{machine_name()}, {os.cpu_count()} CPUs; build: {library.isa()} ({built_with})")
    if done.returncode:
        raise SystemExit(done.stdout.strip() or done.stderr.strip())
    print(f"| instruction | 1 thread, GFLOP/s | {args.threads} threads, GFLOP/s |")
    print("|---|--:|--:|")
    for line in done.stdout.splitlines():
        name, one, many = line.split("\t")
        print(f"| {name} | {one} | {many} |")


if __name__ == "__main__":
    main()
