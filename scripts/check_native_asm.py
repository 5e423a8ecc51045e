"""Check the native step's build for register spills in its products: vector registers moved to or from the stack.

Why: a product's accumulators must live in registers. On a 2-core Zen 3 the old step's 16-lane accumulators took
two ymm registers each, a block wanted 32 of the 16 there are, and `objdump -d` counted 7,983 vector moves to or
from the stack against 571 FMAs: the step ran at half the bandwidth ceiling. The tiles in step.c are sized per
instruction set so that this count is zero; this script builds step.c as the engine does (this CPU's build, or
the AVX2 build any x86 machine can make) and counts, in every function whose name holds "product" or "tile":

- spills: moves of whole ymm/zmm registers, or of xmm registers where the vector is 128 bits (NEON-class builds
  are not disassembled here), to or from the stack (``(%rsp)``/``(%rbp)``);
- multiplies: FMAs, bf16 dot products and int8 dot products (`vpdpbusd`).

It reads the library the engine itself built and cached (building it where it is missing).

    python scripts/check_native_asm.py [--isa native|avx2] [--json]

Exit status 1 where a product spills a vector register, 2 where it cannot check (no objdump, no compiler, not
x86). tests/test_native_asm.py runs it for both builds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engines.model.native import library  # noqa: E402
from engines.model.native.step import SOURCE  # noqa: E402

FUNCTION = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)>:$")
STACK = r"\((%rsp|%rbp)\)"
VECTOR_MOVE = re.compile(r"\bv?mov(aps|ups|apd|upd|dqa|dqu|dqa32|dqa64|dqu8|dqu16|dqu32|dqu64)\b")
WIDE = re.compile(r"%[yz]mm\d+")
MULTIPLY = re.compile(r"\b(vfn?madd\w*|vdpbf16ps|tdpbf16ps|vpdpbusd)\b")


def disassemble(isa: str) -> str:
    """The product code of step.c as the engine builds it for ``isa`` (the cached library, built if missing)."""
    os.environ[library.ISA_VARIABLE] = isa
    loaded = library.load(SOURCE)
    if loaded.path is None:
        raise RuntimeError(loaded.why_not or "the native step did not build")
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(loaded.path)], check=True, capture_output=True,
                          text=True).stdout


def product_functions(disassembly: str) -> dict[str, list[str]]:
    """The instructions of each function whose name holds "product" or "tile" (``objdump -d`` output, any
    architecture)."""
    functions: dict[str, list[str]] = {}
    current = None
    for line in disassembly.splitlines():
        found = FUNCTION.match(line.strip())
        if found:
            name = found["name"]
            current = functions.setdefault(name, []) if "product" in name or "tile" in name else None
        elif current is not None:
            current.append(line)
    return functions


def count(disassembly: str) -> dict:
    """Per product function: vector spills and multiplies."""
    return {name: {"spills": sum(1 for line in lines if re.search(STACK, line) and VECTOR_MOVE.search(line)
                                 and WIDE.search(line)),
                   "multiplies": sum(1 for line in lines if MULTIPLY.search(line))}
            for name, lines in product_functions(disassembly).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", choices=library.ISAS, default="native")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if platform.machine().lower() not in ("x86_64", "amd64") or shutil.which("objdump") is None:
        print("check_native_asm: needs an x86-64 machine with objdump", file=sys.stderr)
        return 2
    try:
        functions = count(disassemble(args.isa))
    except (RuntimeError, subprocess.CalledProcessError, OSError) as error:
        print(f"check_native_asm: could not build step.c ({library.build_error(error)})", file=sys.stderr)
        return 2
    spills = sum(f["spills"] for f in functions.values())
    multiplies = sum(f["multiplies"] for f in functions.values())
    if args.json:
        print(json.dumps({"isa": args.isa, "functions": functions, "spills": spills, "multiplies": multiplies}))
    else:
        for name, found in sorted(functions.items()):
            print(f"{name}: {found['spills']} vector spills, {found['multiplies']} multiplies")
        print(f"{args.isa} build: {spills} vector register spills to the stack in the products, {multiplies} "
              "FMA / dot-product instructions")
    return 1 if spills or not multiplies else 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
