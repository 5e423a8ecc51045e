"""Lanes as processes: one worker per lane, pinned to a core with one thread (or on a CUDA device),
talking to the driver (rank 0, this process) over ``torch.distributed`` — gloo on CPU, NCCL on GPU.

Portable: where the OS has no CPU affinity (macOS, Windows) a lane is one unpinned torch thread and the
machine's lanes are ``os.cpu_count()``; a worker is ended by :func:`kill_process_tree` (its process group on
POSIX, the process itself on Windows); a PyTorch without ``torch.distributed`` refuses lanes mode with a
:class:`LaneError` saying so (:func:`lanes_unavailable`), while serial and virtual modes run as anywhere.

The same code spans hosts: the driver hosts a ``TCPStore`` at an address and port, and workers join it,
spawned here (``spawn=True``) or started by hand on any machine (``python -m engines.lanes.worker``,
``specviz lane-worker``). Workers start once and serve request after request; each loads only the
layers its program names. Faults never hang the caller: a monitor thread watches every spawned worker's
process and heartbeat; a worker that exits fails the driver's pending message at once, and one that
stops answering is killed after ``hang_seconds`` (3 s by default), which fails it too — either way the
caller gets :class:`LaneError` naming the lane. (A worker started by hand on another host cannot be
killed from here: a hung one is caught by the transport's own timeout, ``10 × hang_seconds``.) Any failure, exception, Ctrl-C or abandoned run
closes the whole group — no process outlives it — and the next run starts a fresh one.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
import torch.distributed as dist

from engines.core.trace import Trace, event_from_dict
from engines.lanes.channel import Channel
from engines.lanes.messages import (
    Emit,
    LaneError,
    LanesUnavailable,
    Message,
    Recv,
    Send,
)
from engines.lanes.serial import MessageCost

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class LaneSpec:
    """Rank ``i`` runs on ``lanes[i]`` (``"cpuK"``: the K-th core this process may use; ``"cuda:K"``);
    rank 0 is the driver itself. ``spawn=False`` waits for workers started by hand, on any host, that
    join ``address:port``."""

    lanes: tuple[str, ...] = ("cpu0", "cpu1")
    address: str = "127.0.0.1"
    port: int = 0
    spawn: bool = True
    hang_seconds: float = 3.0
    start_seconds: float = 120.0


def usable_cores() -> list[int]:
    """The cores this process may run on: its affinity mask where the OS has one (Linux), else every core
    (macOS and Windows have no ``os.sched_getaffinity``; ``os.cpu_count()`` is the best they tell)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        return sorted(getaffinity(0))
    return list(range(os.cpu_count() or 1))


def can_pin() -> bool:
    """Whether a thread can be held to one core here (Linux); elsewhere "one lane" is one torch thread that
    the OS may move between cores."""
    return hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")


def lanes_unavailable() -> str | None:
    """Why lanes mode (worker processes over ``torch.distributed``) cannot run in this PyTorch, or ``None``
    where it can. Some macOS and Windows builds ship without ``torch.distributed``; serial and virtual modes
    need none of it."""
    if not dist.is_available():
        return ("this PyTorch build has no torch.distributed (torch.distributed.is_available() is False), "
                "which lanes mode needs for its worker processes")
    return None


def require_lanes() -> None:
    """Raise :class:`LanesUnavailable` (a ``LaneError`` and a ``ValueError``) saying what is missing, before
    anything starts, where lanes cannot run."""
    why = lanes_unavailable()
    if why is not None:
        raise LanesUnavailable(f"mode='lanes' cannot run here: {why}; use mode='serial' (or 'virtual' for ppsd)")


def process_group_options(windows: bool = os.name == "nt") -> dict:
    """``Popen`` options that give a worker a process group of its own, so that Ctrl-C in the driver's
    terminal reaches only the driver (which closes the workers itself) and the worker's group can be ended
    as one: a new session on POSIX, a new process group on Windows."""
    if windows:
        return {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200)}
    return {"start_new_session": True}


def kill_process_tree(process: subprocess.Popen) -> None:
    """End a worker and whatever it started, at once (a hung worker ignores polite requests).

    POSIX: ``SIGKILL`` to its process group (it leads one: :func:`process_group_options`), which also ends a
    compiler it may be running (``engines.model.small_m_kernel``). Elsewhere (Windows): ``Popen.kill()``
    (TerminateProcess) on the worker alone. That is its whole tree: a worker starts no process of its own
    there (the compiled kernel is built only on Linux), so ``taskkill /F /T`` would add a second process and
    nothing else. A process already gone is left alone."""
    if process.poll() is not None:
        return
    killpg, sigkill = getattr(os, "killpg", None), getattr(signal, "SIGKILL", None)
    if killpg is not None and sigkill is not None:
        try:
            killpg(process.pid, sigkill)
            return
        except OSError:  # not a group leader (started elsewhere) or just gone: kill the process itself
            pass
    try:
        process.kill()
    except OSError:
        pass


def lane_capacity(device: str = "cpu") -> int:
    """How many lanes this machine has: usable cores on CPU, devices on CUDA."""
    return torch.cuda.device_count() if device.startswith("cuda") else len(usable_cores())


def default_lanes(n: int, device: str = "cpu") -> tuple[str, ...]:
    """``n`` lanes on this machine, or ``ValueError`` saying how many there are and pointing to virtual mode."""
    have = lane_capacity(device)
    if n > have:
        kind = "CUDA devices" if device.startswith("cuda") else "CPU cores"
        raise ValueError(f"mode='lanes' needs {n} lanes but this machine has {have} {kind}; "
                         f"use mode='virtual' to replay the {n}-lane schedule on a virtual clock")
    return tuple(f"cuda:{i}" for i in range(n)) if device.startswith("cuda") else tuple(f"cpu{i}" for i in range(n))


def lane_core(lane: str) -> int | None:
    """The core a ``cpuK`` lane runs on (the K-th usable one, wrapping around); ``None`` for ``cuda:K``."""
    if lane.startswith("cuda:") and lane[5:].isdigit():
        return None
    if not (lane.startswith("cpu") and lane[3:].isdigit()):
        raise ValueError(f"a lane is 'cpuK' or 'cuda:K', got {lane!r}")
    cores = usable_cores()
    return cores[int(lane[3:]) % len(cores)]


@contextmanager
def pinned(lane: str):
    """This thread on the lane's core with one torch thread, for the length of a run; where the OS cannot
    pin (macOS, Windows: :func:`can_pin`), one torch thread only, so a lane is still one thread's work."""
    core = lane_core(lane)
    if core is None:
        yield
        return
    threads = torch.get_num_threads()
    before = os.sched_getaffinity(0) if can_pin() else None
    if before is not None:
        os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    try:
        yield
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
        torch.set_num_threads(threads)


def heartbeat(address: str, port: int, rank: int, stop: threading.Event, period: float = 0.2,
              parent: int | None = None) -> threading.Thread:
    """A worker's thread that counts up ``hb/<rank>`` in the driver's store while the worker runs (a stopped
    or hung process stops counting). When the store is gone, or the ``parent`` process, so is the driver,
    and the worker exits."""

    def beat():
        try:
            client = dist.TCPStore(address, port, is_master=False, timeout=datetime.timedelta(seconds=10))
            while not stop.is_set():
                if parent is not None and os.getppid() != parent:
                    os._exit(4)
                client.add(f"hb/{rank}", 1)
                stop.wait(period)
        except Exception:
            os._exit(3)

    thread = threading.Thread(target=beat, name=f"lane-heartbeat-{rank}", daemon=True)
    thread.start()
    return thread


def make_group(store, rank: int, world: int, device: str, timeout: float):
    prefixed = dist.PrefixStore("lanes", store)
    if device.startswith("cuda"):
        return dist.ProcessGroupNCCL(prefixed, rank, world)
    return dist.ProcessGroupGloo(prefixed, rank, world, datetime.timedelta(seconds=timeout))


class LaneGroup:
    """The driver's side: start the workers, run a request's lane programs, close everything."""

    def __init__(self, spec: LaneSpec, hidden_size: int, dtype: torch.dtype):
        self.spec, self.hidden_size, self.dtype = spec, hidden_size, dtype
        self.processes: dict[int, subprocess.Popen] = {}
        self.logs: dict[int, Path] = {}
        self.offsets: dict[int, float] = {}
        self.message_cost: MessageCost | None = None
        self.store = self.group = self.channel = None
        self._stop = threading.Event()
        self._fault: str | None = None

    @property
    def world(self) -> int:
        return len(self.spec.lanes)

    @property
    def started(self) -> bool:
        return self.channel is not None

    def name(self, rank: int) -> str:
        return f"lane {self.spec.lanes[rank]} (rank {rank})"

    # --- starting --------------------------------------------------------------------------------
    def start(self) -> "LaneGroup":
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        require_lanes()
        spec = self.spec
        self._stop.clear()
        self._fault = None
        self.store = dist.TCPStore(spec.address if not spec.spawn else "127.0.0.1", spec.port, self.world, True,
                                   timeout=datetime.timedelta(seconds=spec.start_seconds), wait_for_workers=False)
        port = self.store.port
        self.store.set("setup", json.dumps({"hidden_size": self.hidden_size, "dtype": str(self.dtype).removeprefix("torch."),
                                            "lanes": list(spec.lanes), "hang_seconds": spec.hang_seconds}))
        if spec.spawn:
            for rank in range(1, self.world):
                self._spawn(rank, port)
        deadline = time.monotonic() + spec.start_seconds
        for rank in range(1, self.world):
            while not self._has(f"ready/{rank}"):
                self._check_processes(starting=True)
                if time.monotonic() > deadline:
                    raise LaneError(f"{self.name(rank)} did not join {spec.address}:{port} within {spec.start_seconds:.0f} s"
                                    + ("" if spec.spawn else " (start it with `specviz lane-worker`)"))
                time.sleep(0.02)
        self.group = make_group(self.store, 0, self.world, spec.lanes[0], spec.hang_seconds * 10)
        device = torch.device(spec.lanes[0] if spec.lanes[0].startswith("cuda") else "cpu")
        self.channel = Channel(self.group, self.hidden_size, self.dtype, device, self._failed, list(range(1, self.world)))
        threading.Thread(target=self._monitor, args=(port,), name="lane-monitor", daemon=True).start()
        self._handshake()

    def _spawn(self, rank: int, port: int) -> None:
        handle, name = tempfile.mkstemp(prefix=f"specviz-lane{rank}-", suffix=".log")
        os.close(handle)  # an open handle would stop close() from deleting the log on Windows
        log = Path(name)
        self.logs[rank] = log
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])}
        command = [sys.executable, "-m", "engines.lanes.worker", "--address", "127.0.0.1", "--port", str(port),
                   "--rank", str(rank), "--world-size", str(self.world), "--lane", self.spec.lanes[rank],
                   "--die-with-parent"]
        with open(log, "w") as out:
            self.processes[rank] = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                                    stdin=subprocess.DEVNULL, **process_group_options())

    def _has(self, key: str) -> bool:
        return self.store.check([key])

    def _handshake(self) -> None:
        """Ping each worker: its clock's offset from ours (zero on this host: one monotonic clock) and what a
        message costs (kept for virtual mode)."""
        host = socket.gethostname()
        for rank in range(1, self.world):
            rtts, offsets = [], []
            for _ in range(20):
                sent = time.perf_counter()
                self.channel.send(rank, Message("ping"))
                reply = self.channel.recv(rank)
                back = time.perf_counter()
                rtts.append(back - sent)
                offsets.append(reply.blob["t"] - (sent + back) / 2 if reply.blob["host"] != host else 0.0)
            best = min(range(len(rtts)), key=rtts.__getitem__)
            self.offsets[rank] = offsets[best]
            payload = torch.zeros(1, 256, self.hidden_size, dtype=self.dtype)
            sent = time.perf_counter()
            for _ in range(5):
                self.channel.send(rank, Message("ping", hidden=payload))
                self.channel.recv(rank)
            bulk = (time.perf_counter() - sent) / 5
            latency = min(rtts) / 2
            nbytes = payload.numel() * payload.element_size()
            self.message_cost = MessageCost(latency, nbytes / max(bulk / 2 - latency, 1e-6))

    # --- health ----------------------------------------------------------------------------------
    def _monitor(self, port: int) -> None:
        """Watch the workers until the group closes: note why one failed, and kill a hung one so that the
        driver's blocked wait on it fails instead of hanging."""
        client = dist.TCPStore("127.0.0.1" if self.spec.spawn else self.spec.address, port, is_master=False,
                               timeout=datetime.timedelta(seconds=10))
        beats: dict[int, tuple[int, float]] = {}
        while not self._stop.wait(0.05):
            now = time.monotonic()
            for rank in range(1, self.world):
                process = self.processes.get(rank)
                if process is not None and process.poll() is not None:
                    self._fault = self._fault or self._exit_reason(rank)
                    continue
                try:
                    count = client.add(f"hb/{rank}", 0)
                except Exception:
                    return
                seen, since = beats.get(rank, (-1, now))
                if count != seen:
                    beats[rank] = (count, now)
                elif now - since > self.spec.hang_seconds and process is not None:
                    self._fault = self._fault or f"{self.name(rank)} stopped responding (no heartbeat for {now - since:.1f} s)"
                    kill_process_tree(process)

    def _exit_reason(self, rank: int, starting: bool = False) -> str:
        code = self.processes[rank].poll()
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        tail = self._log_tail(rank)
        return (f"{self.name(rank)} {how}" + (" while starting" if starting else "")
                + (f"; its last output:\n{tail}" if tail else ""))

    def _failed(self, error: Exception):
        """A message failed: say which lane, and why if the monitor knows."""
        deadline = time.monotonic() + 2.0
        while self._fault is None and time.monotonic() < deadline:  # let the monitor see the exit
            for rank, process in self.processes.items():
                if process.poll() is not None:
                    self._fault = self._exit_reason(rank)
            time.sleep(0.01)
        raise LaneError(self._fault or f"a lane's connection failed: {error}") from error

    def _check_processes(self, starting: bool = False) -> None:
        for rank, process in self.processes.items():
            if process.poll() is not None:
                raise LaneError(self._exit_reason(rank, starting))

    def _log_tail(self, rank: int, lines: int = 15) -> str:
        log = self.logs.get(rank)
        if log is None or not log.exists():
            return ""
        return "\n".join(log.read_text(errors="replace").strip().splitlines()[-lines:])

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes.values() if p.poll() is None]

    # --- running ---------------------------------------------------------------------------------
    def run(self, program, trace: Trace, configure: dict[int, dict]) -> Iterator[object]:
        """Configure each worker with its program (``{"program": "module:function", "args": {...}}``), drive
        rank 0's program here, and yield what it emits plus the events the workers send back."""
        if not self.started:
            self.start()
        try:
            for rank, setup in configure.items():
                self.channel.send(rank, Message("configure", blob=setup))
            value = None
            while True:
                try:
                    op = program.send(value)
                except StopIteration:
                    break
                value = None
                if isinstance(op, Recv):
                    value = self.channel.recv(op.src)
                    yield from self._worker_events(value, trace)
                elif isinstance(op, Send):
                    self.channel.send(op.dst, op.message)
                elif isinstance(op, Emit):
                    yield op.event
                else:
                    raise TypeError(f"a lane program yielded {op!r}")
            self.channel.flush()
        except BaseException:  # a fault, an exception, Ctrl-C, a stopped stream: nothing is left mid-protocol
            self.close()
            raise

    def _worker_events(self, message: Message, trace: Trace) -> Iterator[object]:
        for record in message.blob.pop("events", []):
            offset = self.offsets.get(record.pop("_rank", 0), 0.0)
            for key in ("t", "start", "end"):
                if isinstance(record.get(key), float):
                    record[key] = trace.from_clock(record[key] - offset)
            yield event_from_dict(record)

    # --- closing ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Ask the workers to exit, then make sure: nothing outlives this call."""
        if self.channel is not None and all(p.poll() is None for p in self.processes.values()):
            try:
                for rank in range(1, self.world):
                    self.channel.send(rank, Message("shutdown"))
                self.channel.flush()
            except Exception:
                pass
        self._stop.set()
        if self.channel is not None:
            self.channel.close()
        for process in self.processes.values():
            try:
                process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                kill_process_tree(process)
                process.wait()
        for log in self.logs.values():
            try:
                log.unlink(missing_ok=True)
            except OSError:  # Windows: still held by a process that is only now going away
                pass
        self.processes, self.logs = {}, {}
        self.channel = self.group = self.store = None

    def __del__(self):
        try:
            for process in self.processes.values():
                kill_process_tree(process)
        except Exception:
            pass


def _message_cost_path() -> Path:
    from engines.model.machine import cache_dir

    return cache_dir() / "lanes" / f"message-cost-{socket.gethostname()}.json"


def save_message_cost(cost: MessageCost | None) -> None:
    if cost is None:
        return
    from engines.model.machine import write_cache_file

    write_cache_file(_message_cost_path(), json.dumps({"latency_s": cost.latency_s, "bytes_per_s": cost.bytes_per_s,
                                                       "measured": time.strftime("%Y-%m-%d %H:%M")}))


# What a message costs where lanes cannot run to measure it (no torch.distributed): a loopback hop of
# ~0.1 ms and ~1 GB/s, the order of what gloo measures between two processes on one host.
ASSUMED_MESSAGE_COST = MessageCost(latency_s=1e-4, bytes_per_s=1e9)


def load_message_cost() -> MessageCost | None:
    """The message cost measured when lanes last started on this host; ``None`` where none was measured
    yet (the caller starts lanes to measure it), or :data:`ASSUMED_MESSAGE_COST` where lanes cannot run
    here, so that virtual mode still runs."""
    path = _message_cost_path()
    if not path.exists():
        return ASSUMED_MESSAGE_COST if lanes_unavailable() else None
    record = json.loads(path.read_text())
    return MessageCost(record["latency_s"], record["bytes_per_s"])
