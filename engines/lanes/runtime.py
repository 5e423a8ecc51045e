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
process and heartbeat; a worker that exits fails the driver's pending message at once (while the group
forms, too), and one that stops answering is killed, which fails it too — after ``hang_seconds`` (3 s by
default) if its process is stopped, after the transport's timeout (``10 × hang_seconds``) if it is running
but silent (busy in a call that holds the GIL, which starves the heartbeat thread) — either way the
caller gets :class:`LaneError` naming the lane, as it does if the monitor itself can no longer read the
heartbeats. (A worker started by hand on another host cannot be killed from here: a hung one is caught
by the transport's own timeout.) Any failure, exception, Ctrl-C or abandoned run
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
from engines.lanes.messages import Emit, LaneError, LanesUnavailable, Message, Recv, Send
from engines.lanes.serial import MessageCost

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TRANSPORT_FACTOR = 10  # the driver's transport timeout, and a busy worker's allowance: this × hang_seconds
# A worker's exit codes when it ends itself, and what each means in the driver's error (_exit_reason)
EXIT_STORE_LOST, EXIT_PARENT_GONE, EXIT_DRIVER_LOST = 3, 4, 75
EXIT_MEANINGS = {
    EXIT_STORE_LOST: "it lost its connection to the driver's store (its heartbeat could not be sent)",
    EXIT_PARENT_GONE: "the process that started it had ended",
    EXIT_DRIVER_LOST: "its connection to the driver closed under it",
}
LOG_PREFIX = "specviz-lane"  # specviz-lane<rank>-<driver pid>-<random>.log in the temporary directory


@dataclass
class LaneSpec:
    """Rank ``i`` runs on ``lanes[i]`` (``"cpuK"``: the K-th core this process may use; ``"cuda:K"``);
    rank 0 is the driver itself. ``spawn=False`` waits for workers started by hand, on any host, that
    join ``address:port``. ``hang_seconds``: how long a stopped worker's heartbeat may be silent before it
    is killed; a running one (busy holding the GIL) is given ``TRANSPORT_FACTOR ×`` that, the transport's
    own timeout."""

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


def sweep_stale_logs(folder: Path | None = None) -> int:
    """Remove worker logs left by drivers that are gone (killed before they could close their lanes: a
    SIGKILL, a power cut): the next group starts clean. A log names its driver's pid; POSIX only, since
    ``os.kill(pid, 0)`` asks whether a process lives there and on Windows would end it instead."""
    if os.name == "nt":
        return 0
    removed = 0
    for log in Path(folder or tempfile.gettempdir()).glob(f"{LOG_PREFIX}*-*.log"):
        parts = log.name[len(LOG_PREFIX):].split("-")
        if len(parts) < 3 or not parts[1].isdigit():  # an older name with no pid: stale by now
            driver = None
        else:
            driver = int(parts[1])
        if driver == os.getpid():
            continue
        if driver is not None:
            try:
                os.kill(driver, 0)
                continue  # its driver lives: the log is in use
            except PermissionError:
                continue  # another user's live process
            except OSError:
                pass
        try:
            log.unlink()
            removed += 1
        except OSError:
            pass
    return removed


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


def process_stopped(process: subprocess.Popen) -> bool:
    """Whether a worker's process is stopped (``SIGSTOP``, a debugger's break): what tells a hung worker
    from one whose heartbeat thread is only starved because its main thread holds the GIL (a long weight
    load, a compiled call), which is running or sleeping in the OS's eyes.

    POSIX: ``os.waitid(WSTOPPED | WNOHANG | WNOWAIT)``, which reports a stop without consuming it and never
    reaps an exit (that stays ``Popen.poll()``'s), or ``ps`` where Python has no ``waitid`` (macOS before
    3.13). Windows has no stopped state to ask about: ``False``, so a frozen worker there counts as busy
    and is caught at the busy allowance instead."""
    if process.poll() is not None:
        return False
    waitid = getattr(os, "waitid", None)
    if waitid is not None:
        try:
            return waitid(os.P_PID, process.pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT) is not None
        except OSError:  # already reaped, or not our child
            return False
    if os.name == "nt":
        return False
    try:
        state = subprocess.run(["ps", "-o", "state=", "-p", str(process.pid)], capture_output=True, text=True,
                               timeout=5, stdin=subprocess.DEVNULL).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    return state.startswith("T")


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
                    os._exit(EXIT_PARENT_GONE)
                client.add(f"hb/{rank}", 1)
                stop.wait(period)
        except Exception:
            if not stop.is_set():  # after a shutdown the driver may close its store first: that is the end
                os._exit(EXIT_STORE_LOST)

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
        self.group = self._form_group()
        device = torch.device(spec.lanes[0] if spec.lanes[0].startswith("cuda") else "cpu")
        self.channel = Channel(self.group, self.hidden_size, self.dtype, device, self._failed, list(range(1, self.world)))
        threading.Thread(target=self._monitor, args=(port,), name="lane-monitor", daemon=True).start()
        self._handshake()

    def _form_group(self):
        """The driver's side of the process group, formed on a helper thread while this one watches the
        spawned workers: gloo's rendezvous blocks until every rank joins or its timeout passes (half a
        minute, or minutes for a peer that died after posting its address), so a worker that dies now is
        reported at once, naming its lane, instead. A helper left waiting then ends with gloo's timeout;
        the group's store stays up until it does."""
        formed: dict[str, object] = {}

        def form():
            try:
                formed["group"] = make_group(self.store, 0, self.world, self.spec.lanes[0],
                                             self.spec.hang_seconds * TRANSPORT_FACTOR)
            except Exception as error:
                formed["error"] = error

        helper = threading.Thread(target=form, name="lane-group-setup", daemon=True)
        helper.start()
        while helper.is_alive():
            self._check_processes(starting=True)
            helper.join(0.02)
        if "error" in formed:
            error = formed["error"]
            self._check_processes(starting=True)  # a worker's exit is the better explanation
            lanes = ", ".join(self.spec.lanes)
            raise LaneError(f"the lanes' process group did not form ({lanes}): {error}") from error
        return formed["group"]

    def _spawn(self, rank: int, port: int) -> None:
        sweep_stale_logs()
        handle, name = tempfile.mkstemp(prefix=f"{LOG_PREFIX}{rank}-{os.getpid()}-", suffix=".log")
        os.close(handle)  # an open handle would stop close() from deleting the log on Windows
        log = Path(name)
        self.logs[rank] = log
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])}
        command = [sys.executable, "-m", "engines.lanes.worker", "--address", "127.0.0.1", "--port", str(port),
                   "--rank", str(rank), "--world-size", str(self.world), "--lane", self.spec.lanes[rank],
                   "--die-with-parent"]
        with open(log, "w") as out:  # a stream the worker appends to while it lives, read only to explain its death
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
        driver's blocked wait on it fails instead of hanging (:meth:`_check_silent`). If the heartbeats
        cannot be read, fail the group saying so (:meth:`_lost_heartbeats`) rather than stop watching."""
        address = "127.0.0.1" if self.spec.spawn else self.spec.address
        where = f"{address}:{port}"
        try:
            client = dist.TCPStore(address, port, is_master=False, timeout=datetime.timedelta(seconds=10))
        except Exception as error:
            self._lost_heartbeats(where, error)
            return
        beats: dict[int, tuple[int, float]] = {}
        looked: dict[int, float] = {}
        while not self._stop.wait(0.05):
            now = time.monotonic()
            for rank in range(1, self.world):
                process = self.processes.get(rank)
                if process is not None and process.poll() is not None:
                    self._fault = self._fault or self._exit_reason(rank)
                    continue
                try:
                    count = client.add(f"hb/{rank}", 0)
                except Exception as error:
                    self._lost_heartbeats(where, error)
                    return
                seen, since = beats.get(rank, (-1, now))
                if count != seen:
                    beats[rank] = (count, now)
                elif process is not None and now >= looked.get(rank, 0.0):
                    looked[rank] = now + 0.25  # asking the OS (a `ps` on some systems) four times a second at most
                    self._check_silent(rank, process, now - since)

    def _check_silent(self, rank: int, process: subprocess.Popen, silent: float) -> None:
        """A worker whose heartbeat has been silent for ``silent`` seconds: hung, and killed, if its process is
        stopped (after ``hang_seconds``) or if it stays silent past the transport's timeout. Until then a
        running one is busy, not hung: the heartbeat is a Python thread, starved while the main thread holds
        the GIL (a long weight load, a compiled call on a loaded machine), and killing it would fail a
        healthy run."""
        hang = self.spec.hang_seconds
        if silent <= hang:
            return
        if silent > hang * TRANSPORT_FACTOR:
            why = (f"running but no heartbeat for {silent:.1f} s, longer than the {hang * TRANSPORT_FACTOR:.0f} s "
                   "a lane busy in a call that holds the GIL is given")
        elif process_stopped(process):
            why = f"its process is stopped; no heartbeat for {silent:.1f} s"
        else:
            return
        self._fault = self._fault or f"{self.name(rank)} stopped responding ({why})"
        kill_process_tree(process)

    def _lost_heartbeats(self, where: str, error: Exception) -> None:
        """The monitor cannot read the heartbeats: a hang would now go unseen and a wait on it block until the
        transport's timeout. So the group fails, saying why: its spawned workers are ended, which fails a
        pending wait at once, and the next run on this group raises the same (see :meth:`run`)."""
        if self._stop.is_set():  # closing: the store may be going away under us
            return
        self._fault = self._fault or (f"the lane monitor could not read the workers' heartbeats from the store at "
                                      f"{where} ({type(error).__name__}: {error}); with hangs no longer detected, "
                                      "the lanes were stopped")
        for process in self.processes.values():
            kill_process_tree(process)

    def _exit_reason(self, rank: int, starting: bool = False) -> str:
        code = self.processes[rank].poll()
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if code in EXIT_MEANINGS:
            how += f": {EXIT_MEANINGS[code]}"
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
        if self._fault is not None:  # the monitor failed the group while it was idle: say why, start afresh next time
            self.close()
            raise LaneError(self._fault)
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
    from engines.storage import write_json_atomic

    write_json_atomic(_message_cost_path(), {"latency_s": cost.latency_s, "bytes_per_s": cost.bytes_per_s,
                                             "measured": time.strftime("%Y-%m-%d %H:%M")})


# What a message costs where lanes cannot run to measure it (no torch.distributed): a loopback hop of
# ~0.1 ms and ~1 GB/s, the order of what gloo measures between two processes on one host.
ASSUMED_MESSAGE_COST = MessageCost(latency_s=1e-4, bytes_per_s=1e9)


def load_message_cost() -> MessageCost | None:
    """The message cost measured when lanes last started on this host; ``None`` where none was measured
    yet (the caller starts lanes to measure it), or :data:`ASSUMED_MESSAGE_COST` where lanes cannot run
    here, so that virtual mode still runs."""
    from engines.storage import discard_damaged, read_json_record

    path, what = _message_cost_path(), "the lanes' message cost"
    record = read_json_record(path, what, then="it will be measured again")
    if record is None:
        return ASSUMED_MESSAGE_COST if lanes_unavailable() else None
    try:
        return MessageCost(float(record["latency_s"]), float(record["bytes_per_s"]))
    except (KeyError, TypeError, ValueError) as error:
        discard_damaged(path, what, f"not a message cost: {error!r}", then="it will be measured again")
        return ASSUMED_MESSAGE_COST if lanes_unavailable() else None
