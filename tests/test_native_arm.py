"""The native step's NEON branch (scripts/arm_check.py): built for AArch64 with GCC and clang, its products keep
their accumulators in registers inside their loops, and under QEMU every row-invariance check holds bit for bit
and its outputs agree with this machine's build. Runs only where the cross tools are installed
(``apt-get install gcc-aarch64-linux-gnu qemu-user clang``); the counter's own test runs everywhere."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "arm_check.py"
sys.path.insert(0, str(SCRIPT.parent))
import arm_check  # noqa: E402


@pytest.mark.skipif(any(shutil.which(tool) is None for tool in arm_check.TOOLS),
                    reason="needs the AArch64 cross compiler, clang and qemu-aarch64")
def test_the_arm_build_keeps_its_products_in_registers_and_passes_its_checks_under_qemu():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("0 vector spills in the products' loops") == 2, done.stdout


def test_the_count_sees_a_spill_in_a_loop_that_multiplies_and_not_a_store_after_it():
    disassembly = ("0000000000001000 <product_panel>:\n"
                   "    1000:\tldr\tq10, [sp, #176]\n"
                   "    1004:\tfmla\tv11.4s, v4.4s, v1.s[0]\n"
                   "    1008:\tb.ne\t1000 <product_panel>\n"
                   "    100c:\tstr\tq21, [sp, #160]\n"  # after the loop: a tile's result on its way out
                   "    1010:\tret\n"
                   "0000000000002000 <other>:\n"
                   "    2000:\tldr\tq1, [sp, #16]\n"
                   "    2004:\tfmla\tv1.4s, v2.4s, v3.s[0]\n")
    assert arm_check.hot_loop_spills(disassembly) == {"product_panel": {"spills": 1, "multiplies": 1}}
