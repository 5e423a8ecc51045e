"""Which lane worker processes are alive: the tests' way to prove that nothing is left behind."""

from __future__ import annotations

import psutil


def lane_workers() -> list[int]:
    """Pids of every running ``engines.lanes.worker`` process started from this test session's process (or
    by its children). Through psutil, not ``/proc``, so it works on macOS and Windows too; a zombie (exited,
    not yet reaped) counts as gone."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "engines.lanes.worker" in " ".join(child.cmdline()):
                found.append(child.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return sorted(found)
