"""The native step's products keep their accumulators in registers (scripts/check_native_asm.py): no vector
register moved to or from the stack, in this CPU's build and in the AVX2 build any x86 machine can make."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_native_asm.py"

pytestmark = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64") or shutil.which("objdump") is None
    or (shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")) is None,
    reason="the check disassembles an x86-64 build with objdump")


@pytest.mark.parametrize("isa", ["native", "avx2"])
def test_the_products_spill_no_vector_register(isa):
    done = subprocess.run([sys.executable, str(SCRIPT), "--isa", isa], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{isa} build: 0 vector register spills" in done.stdout


def test_the_check_counts_spills_where_there_are_some():
    """The old step's shape of accumulators (16-lane generic vectors, 4 × 4 of them) on AVX2 spills: the count
    must see that, or a zero above proves nothing."""
    sys.path.insert(0, str(SCRIPT.parent))
    import check_native_asm

    spilling = ("0000000000001000 <product_dpbf16>:\n"
                "    1000:\tvmovaps %ymm3,-0x4030(%rbp)\n"
                "    1008:\tvfmadd231ps %ymm1,%ymm2,%ymm3\n"
                "    1010:\tvmovups 0x40(%rsp),%ymm4\n"
                "0000000000002000 <other>:\n"
                "    2000:\tvmovaps %ymm3,-0x40(%rbp)\n")
    found = check_native_asm.count(spilling)
    assert found == {"product_dpbf16": {"spills": 2, "multiplies": 1}}
