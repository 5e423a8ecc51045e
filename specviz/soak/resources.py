"""What a process holds, sampled the same way at every point of a soak run: resident memory, threads, open
files, child processes and the project's temporary folders. Through psutil, so it reads the same on Linux,
macOS and Windows; the point is to compare a sample after warm-up with one at the end."""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

TEMPORARY_PREFIX = "specviz-"  # every temporary file or folder the engine makes starts so (engines/, lanes)


@dataclass(frozen=True)
class Holdings:
    """One sample. ``rss_mb`` is this process's own; ``children_rss_mb`` its live children's together (lane
    workers), so a leak in a worker shows too. ``open_files`` counts descriptors (POSIX) or handles (Windows):
    sockets and pipes included, which is what runs out."""

    rss_mb: float
    children_rss_mb: float
    threads: int
    open_files: int
    children: int
    temporary: int

    def as_dict(self) -> dict:
        return asdict(self)


def live_children(process: psutil.Process) -> list[psutil.Process]:
    """The process's descendants that still run (a zombie, exited but not yet reaped, is gone)."""
    alive = []
    for child in process.children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return alive


def temporary_entries(folder: Path | None = None) -> list[Path]:
    """The project's files and folders left in the temporary directory (``specviz-*``)."""
    folder = Path(folder or tempfile.gettempdir())
    return sorted(folder.glob(TEMPORARY_PREFIX + "*"))


def open_descriptors(process: psutil.Process) -> int:
    if hasattr(process, "num_fds"):
        return process.num_fds()
    return process.num_handles()  # Windows


def sample(pid: int | None = None) -> Holdings:
    process = psutil.Process(pid or os.getpid())
    children = live_children(process)
    children_rss = 0
    for child in children:
        try:
            children_rss += child.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return Holdings(rss_mb=process.memory_info().rss / 1e6, children_rss_mb=children_rss / 1e6,
                    threads=process.num_threads(), open_files=open_descriptors(process), children=len(children),
                    temporary=len(temporary_entries()))
