"""Lanes under fault: a worker killed, stopped or cut off from the driver at a random moment of a run.

Each fault must end the run with a :class:`~engines.lanes.LaneError` that says what happened, within
seconds (the runtime's monitor and transport are what is tested, not a mock of them), leave no worker
process and no lane file behind, and leave the engine able to run again — the next run's tokens equal a
healthy run's. The three faults are the ways a demo machine loses a worker: the OS kills it (out of
memory), a debugger or a laptop lid stops it, a network hop drops its connection.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import time
from dataclasses import asdict, dataclass

import psutil

from engines import Engine
from engines.core.trace import Commit
from engines.lanes import LaneError
from engines.lanes.runtime import LOG_PREFIX

from .resources import live_children, temporary_entries

FAULTS = ("kill", "stop", "socket")
LANE_METHODS = ("ssd", "ppsd", "mirror")
PROMPT = "Write a short story about a lighthouse keeper."


def unavailable_reason() -> str | None:
    """Faults are injected with POSIX signals and the driver's own socket descriptors."""
    if not hasattr(signal, "SIGSTOP") or os.name == "nt":
        return "lane faults are injected with POSIX signals (SIGKILL, SIGSTOP): not on Windows"
    return None


@dataclass
class FaultResult:
    fault: str
    method: str
    at_s: float | None  # when the fault struck, from the run's start (None: it never did)
    outcome: str  # "error", "finished" (the run ended before the fault struck: not counted), "missed" (struck after
    # the run's last message), "hung", "other"
    seconds_to_error: float | None
    message: str
    orphans: int  # lane worker processes still alive after the error
    leftover: int  # lane files and folders left in the temporary directory
    next_run_ok: bool

    def as_dict(self) -> dict:
        return asdict(self)


def lane_workers() -> list[psutil.Process]:
    return [c for c in live_children(psutil.Process()) if "engines.lanes.worker" in " ".join(_cmdline(c))]


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def lane_files() -> list:
    """This process's lane files left in the temporary directory (worker logs, ``specviz-laneN-<pid>-*.log``);
    the engine's saved drafts (``specviz-lanes-*``) live until the engine closes, by design."""
    return [p for p in temporary_entries() if p.name.startswith(LOG_PREFIX) and f"-{os.getpid()}-" in p.name]


def driver_sockets_to(workers: list[psutil.Process]) -> list[int]:
    """This process's TCP descriptors whose other end belongs to one of ``workers`` (the gloo pairs)."""
    ends = set()
    for worker in workers:
        try:
            ends |= {(c.laddr, c.raddr) for c in worker.net_connections("tcp") if c.raddr}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [c.fd for c in psutil.Process().net_connections("tcp") if c.raddr and (c.raddr, c.laddr) in ends]


def strike(fault: str) -> int:
    """Inject ``fault`` into the running lanes; returns how many processes or sockets it hit."""
    workers = lane_workers()
    if fault == "kill":
        for worker in workers:
            worker.send_signal(signal.SIGKILL)
        return len(workers)
    if fault == "stop":
        for worker in workers:
            worker.send_signal(signal.SIGSTOP)
        return len(workers)
    descriptors = driver_sockets_to(workers)
    for fd in descriptors:  # shut down under gloo's feet: the connection, not just our handle, is gone
        connection = socket.socket(fileno=os.dup(fd))
        try:
            connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            connection.close()
    return len(descriptors)


def inject_during_run(engine: Engine, method: str, fault: str, at_token: int, max_new_tokens: int,
                      limit_s: float = 60.0) -> tuple[str, float | None, float | None, str]:
    """Run ``method`` and strike ``fault`` as soon as ``at_token`` tokens are committed; what happened, when it
    struck (seconds from the start) and how long the error took. Struck by token, not by a timer: a run that
    went faster than the healthy one timed for it once ended before a timer fired (seen in `make test`)."""
    struck_at = None
    outcome, message, seconds = "finished", "", None
    start = time.perf_counter()
    made = 0
    try:
        for event in engine.generate(PROMPT, method, max_new_tokens=max_new_tokens, stop_at_eos=False):
            if isinstance(event, Commit):
                made += len(event.tokens)
            if struck_at is None and at_token <= made < max_new_tokens:  # past the last commit, no fault is mid-run
                strike(fault)
                struck_at = time.perf_counter()
            if time.perf_counter() - start > limit_s:
                outcome, message = "hung", f"still running {limit_s:.0f} s after it started"
                break
    except LaneError as error:
        outcome, message = "error", str(error).splitlines()[0]
        seconds = time.perf_counter() - (struck_at if struck_at is not None else start)
    except Exception as error:  # noqa: BLE001 - counted and reported: anything but LaneError is a defect
        outcome, message = "other", f"{type(error).__name__}: {error}".splitlines()[0]
    if outcome == "finished" and struck_at is not None:
        outcome = "missed"  # struck after the last message: the next run must still find out
    return outcome, None if struck_at is None else struck_at - start, seconds, message


def soak_faults(engine: Engine, count: int, max_new_tokens: int = 96, seed: int = 0, progress=None) -> list[FaultResult]:
    """``count`` faults, cycling through :data:`FAULTS` × :data:`LANE_METHODS`, each at a random moment of
    the run: once a share of its tokens, uniform over the middle 80%, is committed."""
    rng = random.Random(seed)
    healthy: dict[str, list[int]] = {}
    for method in LANE_METHODS:
        engine.run(PROMPT, method, max_new_tokens=8)  # lanes started, drafters loaded
        healthy[method] = list(engine.run(PROMPT, method, max_new_tokens=max_new_tokens, stop_at_eos=False).token_ids)
    results = []
    for index in range(count):
        fault, method = FAULTS[index % len(FAULTS)], LANE_METHODS[(index // len(FAULTS)) % len(LANE_METHODS)]
        reference = healthy[method]
        at_token = max(1, round(rng.uniform(0.1, 0.9) * max_new_tokens))
        outcome, at_s, seconds, message = inject_during_run(engine, method, fault, at_token, max_new_tokens)
        while outcome == "finished" and at_token > 1:  # its last round committed past at_token: strike earlier
            at_token //= 2
            outcome, at_s, seconds, message = inject_during_run(engine, method, fault, at_token, max_new_tokens)
        time.sleep(0.3)  # a killed group's processes are reaped by now, or never
        orphans, leftover = len(lane_workers()), len(lane_files())
        try:
            again = engine.run(PROMPT, method, max_new_tokens=max_new_tokens, stop_at_eos=False)
            next_ok = list(again.token_ids) == reference
        except Exception:  # noqa: BLE001 - the next run failing is what this row reports
            next_ok = False
        if orphans:  # a worker that outlived the error would skew every later row: end it, having counted it
            for worker in lane_workers():
                worker.kill()
        results.append(FaultResult(fault, method, round(at_s, 2) if at_s is not None else None, outcome,
                                   round(seconds, 2) if seconds is not None else None, message, orphans,
                                   leftover, next_ok))
        if progress is not None:
            progress(index + 1, count)
    engine.close()
    return results
