"""The lanes' health checks: a worker that dies while the group forms, a monitor that cannot read the
heartbeats, and a worker busy in a call that holds the GIL (alive, not hung) — each reported or tolerated
within seconds, nothing left running; and no folder an engine saved for its workers left behind. The
runtime is driven directly with the tiny programs of ``tests/lane_processes.py``; ``tests/test_lanes.py``
covers faults in real runs."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import torch
import torch.distributed as dist

from engines import Engine
from engines.core.trace import Trace
from engines.lanes import LaneError, LaneGroup, LaneSpec, runtime
from tests import lane_processes
from tests.conftest import tiny_llama
from tests.lane_processes import lane_workers

ANSWER = "tests.lane_processes:answer"


def lane_group(**spec) -> LaneGroup:
    return LaneGroup(LaneSpec(lanes=("cpu0", "cpu1"), **spec), hidden_size=32, dtype=torch.float32)


def ask(group: LaneGroup, rounds: int, **answer) -> list[int]:
    """Run ``rounds`` questions and answers between the driver and the worker; the ticks answered."""
    return list(group.run(lane_processes.ask(rounds), Trace(detailed=False),
                          {1: {"program": ANSWER, "args": {"rounds": rounds, **answer}}}))


def test_a_worker_that_dies_while_the_group_forms_is_reported_within_seconds(monkeypatch):
    """The worker is killed just as the driver starts forming the gloo group: its exit is reported at once,
    naming the lane, instead of after gloo's rendezvous timeout (10 × hang_seconds = 30 s)."""
    before = set(lane_workers())
    group = lane_group()
    form, killed = runtime.make_group, []

    def killing_the_worker_first(*args, **kwargs):
        killed.append(time.monotonic())  # timed from here: a worker's own start-up (importing torch) is slow
        for process in group.processes.values():
            runtime.kill_process_tree(process)
            process.wait(timeout=10)
        return form(*args, **kwargs)

    monkeypatch.setattr(runtime, "make_group", killing_the_worker_first)
    with pytest.raises(LaneError, match=r"lane cpu1 \(rank 1\) .*while starting"):
        group.start()
    assert time.monotonic() - killed[0] < 10.0
    assert set(lane_workers()) == before


def test_a_monitor_that_cannot_read_the_heartbeats_fails_the_group_saying_so(monkeypatch):
    """Without heartbeats a hang would go unseen: the monitor must say so and fail the run in flight, not
    stop watching in silence."""
    real, broken = dist.TCPStore, threading.Event()

    class Client:  # the monitor's connection to the store (the driver's only non-master TCPStore)
        def __init__(self, *args, **kwargs):
            self.store = real(*args, **kwargs)

        def add(self, key, value):
            if broken.is_set():
                raise RuntimeError("simulated: the store cannot be read")
            return self.store.add(key, value)

    def store(*args, **kwargs):
        master = kwargs.get("is_master", len(args) > 3 and args[3])
        return real(*args, **kwargs) if master else Client(*args, **kwargs)

    monkeypatch.setattr(dist, "TCPStore", store)
    before = set(lane_workers())
    group = lane_group()
    try:
        assert ask(group, 2) == [0, 1]
        broken.set()
        started = time.monotonic()
        with pytest.raises(LaneError, match="could not read the workers' heartbeats .*simulated"):
            ask(group, 40, pause_s=0.1)  # 4 s of answers: the failure comes while the run is in flight
        assert time.monotonic() - started < 10.0
    finally:
        group.close()
    assert set(lane_workers()) == before


def test_a_worker_holding_the_gil_longer_than_hang_seconds_is_busy_not_hung():
    """A call that keeps the GIL for 5 s starves the worker's heartbeat thread past hang_seconds (3 s), but
    the worker is running (sleeping, to the OS), not stopped: the run completes, served by the same worker."""
    group = lane_group()
    try:
        assert ask(group, 1) == [0]
        (worker,) = group.pids()
        assert ask(group, 1, hold_gil_s=5.0) == [0]
        assert group.pids() == [worker]
    finally:
        group.close()


def test_a_worker_that_holds_the_gil_forever_is_still_reported():
    """Busy is not forever: silent past the transport's timeout (10 × hang_seconds, here 4 s), the worker is
    killed and the run fails naming it."""
    before = set(lane_workers())
    group = lane_group(hang_seconds=0.4)
    try:
        assert ask(group, 1) == [0]
        started = time.monotonic()
        with pytest.raises(LaneError, match=r"lane cpu1 \(rank 1\) stopped responding"):
            ask(group, 1, hold_gil_s=60.0)
        assert time.monotonic() - started < 10.0
    finally:
        group.close()
    assert set(lane_workers()) == before


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="stopping a process is POSIX")
@pytest.mark.parametrize("waitid", [True, False], ids=["waitid", "ps"])
def test_a_stopped_process_is_told_from_a_running_one(waitid, monkeypatch):
    """What tells a hung worker from a busy one: ``waitid`` on Linux, ``ps`` where Python has none (macOS
    before 3.13)."""
    if not waitid:
        monkeypatch.delattr(os, "waitid", raising=False)
    elif not hasattr(os, "waitid"):
        pytest.skip("no os.waitid here")
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not runtime.process_stopped(process)
        os.kill(process.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not runtime.process_stopped(process):
            assert time.monotonic() < deadline, "a stopped process was never seen as stopped"
            time.sleep(0.05)
        assert process.poll() is None  # looking leaves the process for Popen to reap
        os.kill(process.pid, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while runtime.process_stopped(process):
            assert time.monotonic() < deadline, "a continued process still looks stopped"
            time.sleep(0.05)
    finally:
        process.kill()
        process.wait(timeout=10)
    assert not runtime.process_stopped(process)  # reaped: gone, not stopped


# --- the engine's temporary folders ------------------------------------------------------------------
def test_the_folders_an_engine_saves_for_its_lanes_are_removed(monkeypatch, tmp_path):
    """A model or draft built in memory is saved to a temporary folder for the workers to load: removed when
    the engine is closed (and saved again if it is used after), when it is let go, and at once if saving
    fails — nothing is left in the temporary directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp puts them, for this test
    engine = Engine(tiny_llama(vocab=64, layers=2, seed=3))
    engine.add_draft("other", tiny_llama(vocab=64, layers=1, seed=4))
    folders = [engine.lanes_source(), engine.draft_source("other")]
    assert all(folder.is_dir() and folder.parent == tmp_path for folder in folders)
    engine.close()
    assert list(tmp_path.iterdir()) == []
    folders = [engine.lanes_source(), engine.draft_source("other")]
    assert all(folder.is_dir() for folder in folders)  # used after closing: saved again
    del engine
    gc.collect()
    assert list(tmp_path.iterdir()) == []

    engine = Engine(tiny_llama(vocab=64, layers=2, seed=3))
    monkeypatch.setattr(engine.model, "save_pretrained", lambda *args, **kwargs: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        engine.lanes_source()
    assert list(tmp_path.iterdir()) == []
