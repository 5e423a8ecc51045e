"""Which lane worker processes are alive: the tests' way to prove that nothing is left behind."""

from __future__ import annotations

import os
from pathlib import Path


def lane_workers() -> list[int]:
    """Pids of every running ``engines.lanes.worker`` process started from this test session's process."""
    me, found = os.getpid(), []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        state = stat.rsplit(")", 1)[1].split()[0]
        if "engines.lanes.worker" in cmdline and ppid == me and state != "Z":
            found.append(int(proc.name))
    return found
