"""Build the native step for ARM (NEON) on an x86 machine, check its products for spills, and run its checks.

Why: Macs with Apple silicon and ARM servers take step.c's NEON branch, and no machine this project runs on is
ARM. Cross-compilers and QEMU's user-mode emulator come from Debian's registry, so the branch can at least be
built with both compilers a Mac or an ARM Linux box would use, read, and run (correctness only: emulated time
says nothing about speed):

1. ``scripts/arm_check.c`` (which includes step.c itself) is built for AArch64 with GCC (OpenMP) and clang (no
   OpenMP, as Apple's clang builds it), and for this machine with its own compiler;
2. in each AArch64 build's product functions it counts vector registers moved to or from the stack inside a
   loop's block that multiplies (``fmla``): spills in the hot loop, which the tile size must avoid (the moves of
   a tile's results after its loop are no cost);
3. it runs each AArch64 harness under ``qemu-aarch64``: every row-invariance check (a row alone and among
   others, one thread and two, through the cache) must hold bit for bit, and the outputs must agree with this
   machine's build within 1e-4 relative (their sums run in another order: lanes of 4 against 16).

    python scripts/arm_check.py [--json]

Needs: ``apt-get install gcc-aarch64-linux-gnu qemu-user clang`` (Debian/Ubuntu). Exit status 0 when every check
holds, 1 when one fails, 2 when a tool is missing.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from check_native_asm import product_functions  # noqa: E402

STEP = ROOT / "engines" / "model" / "native" / "step.c"
HARNESS = ROOT / "scripts" / "arm_check.c"
COMMON = ["-O3", "-ffp-contract=fast", f'-DSTEP_C="{STEP}"']
ARM = ["-march=armv8.2-a"]
BUILDS = {  # name → (compiler command, flags): the two compilers an ARM user's machine would build with
    "gcc": (["aarch64-linux-gnu-gcc"], ARM + ["-fopenmp"]),
    "clang": (["clang", "--target=aarch64-linux-gnu"], ARM),
}
TOOLS = ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-objdump", "qemu-aarch64", "clang", "cc")
BRANCH = re.compile(r"\s(b|b\.\w+|cbn?z|tbn?z|ret|br)\s")
STACK_VECTOR = re.compile(r"\s(str|ldr|stp|ldp|stur|ldur)\s+q\d+.*\[sp")


def hot_loop_spills(disassembly: str) -> dict:
    """Per product function: q registers moved to or from the stack in blocks that also multiply, and fmlas."""
    functions = {}
    for name, lines in product_functions(disassembly).items():
        spills, block = 0, []
        for line in lines + [" ret "]:  # a function's last block ends with it
            block.append(line)
            if BRANCH.search(line):
                if any("fmla" in instruction for instruction in block):
                    spills += sum(1 for instruction in block if STACK_VECTOR.search(instruction))
                block = []
        functions[name] = {"spills": spills, "multiplies": sum(1 for line in lines if "fmla" in line)}
    return functions


def build(compiler: list[str], flags: list[str], out: Path) -> None:
    """The harness with step.c inside, linked statically (QEMU then needs no AArch64 libraries)."""
    subprocess.run([*compiler, *COMMON, *flags, str(HARNESS), "-static", "-o", str(out), "-lm"], check=True,
                   capture_output=True, text=True)


def run_harness(command: list[str], out: Path) -> tuple[bool, str, array]:
    done = subprocess.run([*command, str(out)], capture_output=True, text=True, timeout=300)
    values = array("f")
    if out.exists():
        values.frombytes(out.read_bytes())
    return done.returncode == 0, done.stdout.strip(), values


def largest_difference(a: array, b: array) -> float:
    return max((abs(x - y) / max(abs(x), abs(y), 1e-3) for x, y in zip(a, b)), default=0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        print(f"arm_check: needs {', '.join(missing)} (apt-get install gcc-aarch64-linux-gnu qemu-user clang)",
              file=sys.stderr)
        return 2
    report: dict = {"builds": {}}
    ok = True
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        host = folder / "host"
        build(["cc"], ["-march=native", "-fopenmp"], host)
        host_ok, host_said, host_values = run_harness([str(host)], folder / "host.bin")
        report["host"] = {"passed": host_ok, "said": host_said}
        ok &= host_ok
        for name, (compiler, flags) in BUILDS.items():
            harness = folder / name
            try:
                build(compiler, flags, harness)
            except subprocess.CalledProcessError as error:
                report["builds"][name] = {"built": False, "error": error.stderr[-2000:]}
                ok = False
                continue
            disassembly = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(harness)],
                                         check=True, capture_output=True, text=True).stdout
            functions = hot_loop_spills(disassembly)
            spills = sum(f["spills"] for f in functions.values())
            multiplies = sum(f["multiplies"] for f in functions.values())
            passed, said, values = run_harness(["qemu-aarch64", str(harness)], folder / f"{name}.bin")
            difference = largest_difference(values, host_values) if len(values) == len(host_values) else None
            agrees = difference is not None and difference < 1e-4
            report["builds"][name] = {"built": True, "hot_loop_spills": spills, "fmla": multiplies,
                                      "checks_passed": passed, "said": said, "largest_difference_to_host": difference}
            ok &= passed and agrees and spills == 0 and multiplies > 0
    report["passed"] = bool(ok)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"host build: {report['host']['said'].splitlines()[0] if report['host']['said'] else ''}; "
              f"{'every check held' if report['host']['passed'] else 'FAILED: ' + report['host']['said']}")
        for name, found in report["builds"].items():
            if not found["built"]:
                print(f"AArch64 {name}: did not build\n{found['error']}")
                continue
            first = found["said"].splitlines()[0] if found["said"] else ""
            print(f"AArch64 {name} ({first}): {found['hot_loop_spills']} vector spills in the products' loops, "
                  f"{found['fmla']} fmla; under QEMU {'every check held' if found['checks_passed'] else 'FAILED'}; "
                  f"largest difference to the host build {found['largest_difference_to_host']:.2g}")
            if not found["checks_passed"]:
                print(found["said"])
        print("passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
