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


@pytest.mark.skipif(shutil.which("cc") is None or sys.platform != "linux", reason="needs a C compiler (cc) on Linux")
def test_the_harness_builds_against_this_step_and_its_checks_hold_here(tmp_path):
    """The ARM check's harness calls step.c's entry points itself: built for this machine, it must still compile
    against them and pass. Without this, a changed signature broke the harness unseen where the cross tools are
    missing (most machines), until the ARM check next ran."""
    host = tmp_path / "host"  # -O1 (the last -O wins): 8 s to build where -O3 takes 18; -O0 cannot (asm constants)
    arm_check.build(["cc"], ["-march=native", "-fopenmp", "-O1"], host)
    ok, report, values = arm_check.run_harness([str(host)], tmp_path / "host.out")
    assert ok, report
    assert report.endswith("every check held") and len(values) > 0, report


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
