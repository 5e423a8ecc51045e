"""Which lane worker processes are alive: the tests' way to prove that nothing is left behind; and two
tiny lane programs (a driver that asks, a worker that answers) for the tests that exercise the runtime
itself. A worker imports this module by name (``tests.lane_processes:answer``)."""

from __future__ import annotations

import ctypes
import os
import time

from engines.lanes import Emit, Message, Recv, Send


def lane_workers() -> list[int]:
    """Pids of every running ``engines.lanes.worker`` process started from this test session's process (or
    by its children): the soak's count (psutil, so macOS and Windows too; a zombie counts as gone)."""
    from specviz.soak.lane_faults import lane_workers as live_lane_workers

    return sorted(worker.pid for worker in live_lane_workers())


def hold_the_gil(seconds: float) -> None:
    """Sleep in one C call that keeps Python's GIL (``ctypes.PyDLL`` does not release it), as a long weight
    load or a compiled call can: every other Python thread of the process, its heartbeat included, waits."""
    if os.name == "nt":
        ctypes.PyDLL("kernel32").Sleep(int(seconds * 1000))
    else:
        ctypes.PyDLL(None).sleep(max(1, round(seconds)))  # sleep(3): whole seconds, in libc everywhere


def ask(rounds: int):
    """The driver's program: send ``rounds`` messages to rank 1 and emit the tick of each answer."""
    for tick in range(rounds):
        yield Send(1, Message("act", tick=tick))
        reply = yield Recv(1)
        yield Emit(reply.tick)


def answer(lane, rounds: int, pause_s: float = 0.0, hold_gil_s: float = 0.0):
    """A worker's program: answer each of ``rounds`` messages after ``pause_s`` of sleep (the GIL free)
    and ``hold_gil_s`` in a call that keeps the GIL (:func:`hold_the_gil`)."""
    for _ in range(rounds):
        message = yield Recv(0)
        time.sleep(pause_s)
        if hold_gil_s:
            hold_the_gil(hold_gil_s)
        yield Send(0, Message("reply", tick=message.tick))
