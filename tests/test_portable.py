"""macOS and Windows, simulated on Linux: no CPU affinity, no process groups, no ``/proc``, and (on some
builds) no ``torch.distributed``. Lanes fall back to ``os.cpu_count()`` cores and unpinned one-thread runs,
a worker ends with ``Popen.kill()``, ``ppsd(mode="virtual")`` still runs, a lanes mode says what is missing,
and the pages that use lanes load and say so instead of failing.

Only Linux runs this suite here, so every Linux-only call is removed from the process (``monkeypatch``) and
the code must take its portable path. The project reads ``/proc`` through :class:`pathlib.Path` only, so
"``/proc`` cannot be read" is those ``Path`` methods failing for paths under it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from engines import Engine
from engines.lanes import LaneError, lane_capacity, pinned, runtime
from engines.model import verify_cost
from engines.model.machine import cpu_flags
from engines.model.verify_cost import machine_key
from tests.conftest import tiny_llama
from tests.lane_processes import lane_workers

PROMPT = [1, 5, 9, 3, 7]
APP = Path(__file__).resolve().parents[1] / "app"
PAGES = {"ppsd:": "ppsd.py", "mirror:": "mirror_sd.py", "ssd:": "ssd.py"}


def _unreadable_proc(method):
    """``method`` of :class:`Path`, failing as on a system without ``/proc`` for any path under it."""

    def guarded(self, *args, **kwargs):
        if str(self) == "/proc" or str(self).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory (simulated: no /proc)", str(self))
        return method(self, *args, **kwargs)

    return guarded


@pytest.fixture
def no_linux(monkeypatch):
    """This process as macOS or Windows sees it: no sched_{get,set}affinity, no killpg, no /proc."""
    for name in ("sched_getaffinity", "sched_setaffinity", "killpg"):
        monkeypatch.delattr(os, name, raising=False)
    for name in ("read_text", "read_bytes", "iterdir", "open", "exists"):
        monkeypatch.setattr(Path, name, _unreadable_proc(getattr(Path, name)))


@pytest.fixture
def no_distributed(monkeypatch):
    """A PyTorch build without ``torch.distributed`` (some macOS and Windows wheels)."""
    monkeypatch.setattr(dist, "is_available", lambda: False)


@pytest.fixture
def sleeper():
    """A child process that would sleep for a minute, named like a lane worker (``lane_workers`` lists it)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "engines.lanes.worker"],
                               stdin=subprocess.DEVNULL, **runtime.process_group_options())
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


# --- capacity, pinning, CPU facts ------------------------------------------------------------------
def test_lane_capacity_is_the_cpu_count_without_affinity(no_linux):
    assert lane_capacity() == lane_capacity("cpu") == (os.cpu_count() or 1)
    assert runtime.usable_cores() == list(range(os.cpu_count() or 1))


def test_pinned_without_affinity_is_one_torch_thread_unpinned(no_linux):
    threads = torch.get_num_threads()
    with pinned("cpu0"):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == threads
    with pytest.raises(ValueError, match="a lane is 'cpuK' or 'cuda:K'"), pinned("core0"):
        pass


def test_cpu_facts_degrade_when_proc_cannot_be_read(no_linux):
    assert cpu_flags() == frozenset()
    key = machine_key(torch.nn.Linear(4, 4), "tiny", torch.float32, torch.device("cpu"), 1)
    assert key.startswith("tiny-float32-cpu-t1-")


def test_the_cpu_is_named_by_the_os_without_proc(no_linux, monkeypatch):
    """The verify-cost curves and the native build are keyed by CPU model: on macOS, ``sysctl``'s brand string
    names it."""
    def sysctl(command, **kwargs):
        assert command == ["sysctl", "-n", "machdep.cpu.brand_string"]
        return subprocess.CompletedProcess(command, 0, "Apple M2\n", "")

    from engines.model import machine

    monkeypatch.setattr(machine.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(machine.subprocess, "run", sysctl)
    assert verify_cost._cpu_name().startswith("Apple M2|")
    assert machine.cpu_identity() == "Apple M2"  # the native build's key names the same CPU


# --- processes -------------------------------------------------------------------------------------
def test_new_worker_processes_get_their_platforms_own_group():
    assert runtime.process_group_options(windows=False) == {"start_new_session": True}
    assert runtime.process_group_options(windows=True) == {"creationflags": 0x200}  # CREATE_NEW_PROCESS_GROUP


def test_killing_a_worker_without_killpg_falls_back_to_popen_kill(no_linux, sleeper, monkeypatch):
    calls = []
    kill = subprocess.Popen.kill
    monkeypatch.setattr(subprocess.Popen, "kill", lambda self: (calls.append(self.pid), kill(self)))
    # found without /proc (psutil). A child just started can show an empty command line for a moment (its
    # arguments are laid out after the parent's vfork returns): once under make test's load, so it is waited for
    deadline = time.monotonic() + 10
    while sleeper.pid not in lane_workers():
        assert time.monotonic() < deadline, "the worker was never listed"
        time.sleep(0.05)
    runtime.kill_process_tree(sleeper)
    assert sleeper.wait(timeout=10) != 0
    assert calls == [sleeper.pid]
    assert sleeper.pid not in lane_workers()
    runtime.kill_process_tree(sleeper)  # a process already gone: nothing to do, no error


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")
def test_killing_a_worker_with_killpg_ends_its_whole_group(tmp_path):
    """On POSIX the worker leads its own session: what it started dies with it."""
    pid_file = tmp_path / "grandchild"
    script = ("import subprocess, sys, time; "
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(60)")
    process = subprocess.Popen([sys.executable, "-c", script], **runtime.process_group_options())
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline, "the child never started its own child"
            time.sleep(0.05)
        grandchild = int(pid_file.read_text())
        runtime.kill_process_tree(process)
        assert process.wait(timeout=10) != 0
        deadline = time.monotonic() + 10
        while _alive(grandchild):
            assert time.monotonic() < deadline, "the worker's own child outlived it"
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- methods ---------------------------------------------------------------------------------------
def test_ppsd_virtual_runs_without_linux_calls_or_torch_distributed(no_linux, no_distributed, monkeypatch, tmp_path):
    """Virtual mode needs no worker: with no measured message cost (an empty cache) and no torch.distributed
    it uses an assumed one; lanes mode is refused, naming what is missing, and starts nothing."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    engine = Engine(tiny_llama(vocab=64, layers=4, seed=3))
    before = set(lane_workers())
    reference = engine.run(PROMPT, "ar", max_new_tokens=12).token_ids
    result = engine.run(PROMPT, "ppsd", max_new_tokens=12, exit_layer=2, head="none", mode="virtual")
    assert result.token_ids == reference and result.stats.clock == "virtual"
    for method, options in (("ppsd", {"exit_layer": 2, "head": "none"}), ("mirror", {"exit_layer": 2})):
        if method == "mirror":
            engine.add_draft("other", tiny_llama(vocab=64, layers=1, seed=4))
            options["draft"] = "other"
        with pytest.raises(LaneError, match="torch.distributed") as refused:
            engine.run(PROMPT, method, max_new_tokens=4, mode="lanes", **options)
        assert isinstance(refused.value, ValueError)  # what every page shows as a message, not a traceback
    assert set(lane_workers()) == before
    engine.close()


# --- the dashboard pages ---------------------------------------------------------------------------
@pytest.mark.parametrize("prefix", list(PAGES))
def test_lane_pages_load_and_say_lanes_cannot_run(prefix, no_linux, no_distributed):
    """One load per page (the real model, cached between them): no exception, and a warning that names
    torch.distributed instead of offering a lanes run that would fail."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP / "views" / PAGES[prefix]), default_timeout=300).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key=f"{prefix}mode").value == "lanes"
    warnings = " ".join(w.value for w in at.warning)
    assert "torch.distributed" in warnings, warnings
    assert any("cannot pin a thread" in c.value for c in at.caption), "what 'one core per lane' means here"
    assert not at.error, [e.value for e in at.error]


def test_the_pages_fall_back_from_lanes_and_say_why():
    """Enough cores but no worker processes: PPSD falls back to virtual mode, Mirror SD and SSD to serial."""
    from app import ppsd_page as ph
    from app import verdict_page as vh
    from app.lanes_page import one_core_note

    why = "this PyTorch build has no torch.distributed"
    mode, said = ph.effective_mode("lanes", 2, 8, why)
    assert mode == "virtual" and why in said
    mode, said = vh.effective_mode("lanes", 8, why)
    assert mode == "serial" and why in said
    assert ph.effective_mode("serial", 2, 8, why) == ("serial", None)
    assert vh.effective_mode("lanes", 8, None) == ("lanes", None)
    assert one_core_note(True) is None and "one torch thread" in one_core_note(False)
