"""A memory budget for the target model: the layers that do not fit stream from emulated flash.

**Why.** On an edge device (a phone, a Jetson AGX Orin with ≤ 16 GB of shared DRAM) the model does
not fit in memory. The layers that do not fit are read from flash on every forward, at ~2 GB/s, and
that traffic — not the arithmetic — sets the speed. This is the setting of CATS (paper 004): a
memory-limited method is judged by the bytes it streams per token, and a speculative method pays off
when one pass over the streamed layers verifies many tokens. To study it on an ordinary machine, a run
can be given a budget ``memory_budget_mb`` (M) and a flash bandwidth ``flash_mb_s`` (B); every method
then runs under the same rules, with real reads from disk rather than a cost model.

**How.**

- The embeddings, the final norm and the LM head (and the engine's fp32 copy of the head, where it
  keeps one) are always resident; a budget smaller than they are is refused.
- The first decoder layers, 0..k−1, are resident while they fit in what the budget leaves (the
  paper's "layers 1..L_SV resident").
- Every decoder layer is written once per model and dtype as its own safetensors file under
  ``cache_dir()/layers/<key>/``. A layer that is not resident has its parameters emptied (``param.data``
  becomes a 0-element tensor, so its memory is freed) and is read back from its file when a forward
  needs it.
- Streamed layers are grouped into chunks of ``chunk_layers`` consecutive layers. Forward hooks on the
  decoder layers do the work, so no method knows about any of it. A layer's pre-hook waits until its
  chunk is loaded and asks a background reader thread for the next streamed chunk: chunk i+1 is read
  while chunk i computes. A layer's post-hook drops the chunk after its last layer.
- The reader reads each file in 1 MiB pieces and sleeps as needed, so the average rate stays at or
  below B MB/s. The reads are real and there are no simulated delays. With ``flash_mb_s=None`` the
  reads are not throttled.
- MB means 10⁶ bytes, as in flash bandwidths.

**The paper's two modes** (the paper is inconsistent about which one it runs):

- ``stream="deep"`` (default) — Algorithm 1: layers 0..k−1 stay resident. Every other layer is
  streamed on every forward that uses it and dropped right after that forward.
- ``stream="all"`` — Fig. 4 and §4.2, "the full model streamed once per cycle": every decoder layer
  is streamed.
  - Layers 0..k−1 (those the budget could hold) are read at their first use in a round and held until
    the round ends. The engine ends a round at each ``Commit``. So the draft and shallow-verifier
    passes that reuse those layers within a cycle cost no further flash traffic.
  - Deeper layers could not stay within the budget, so they behave as in ``"deep"``.

**What counts.** Each load of a chunk is a :class:`~engines.core.trace.StreamChunk` event. The run's stats
give ``bytes_streamed``, ``bytes_per_token`` and ``peak_resident_bytes``. The peak counts the
always-resident weights, the resident layers and every streamed chunk while it is loaded. A forward
therefore holds up to two chunks beyond the budget: the one computing and the one being read.

**Chunk size.** The default ``chunk_layers=1``:

- At the bandwidths that make flash dominate (100–200 MB/s on a CPU), the reader is
  the bottleneck. A 7 MB bf16 SmolLM2 layer takes ~35 ms to read and ~1 ms to compute, so larger
  chunks cannot make a forward faster.
- Larger chunks enlarge the two-chunk buffer beyond the budget.
- They also lengthen the first read of each forward, which nothing overlaps.
- One layer is the smallest unit the hooks see.

**Limits.**

- The budget applies to the target model's decoder layers only. Drafters that are separate modules
  (``tiny``, the EAGLE, exit and CATS heads, a draft model) stay resident.
- Self-drafts run the target's own layers (``sps draft=self``, ``eesd``, CATS's stages), so they go
  through the budget like any other forward.
- A drafter built from the target's layers copies them when it is first loaded. The engine loads
  drafters before it applies a run's budget; under a persistent :meth:`Engine.set_memory_budget`, load
  them first.
- Reads go through the OS page cache. The throttle, not the disk, sets the rate.
- The verify-cost curve (``gamma=auto``, ``total_tokens=auto``) is the whole model's compute cost. Its key
  ignores emptied layers, and it is measured with the budget lifted, never through the emulated flash.
"""

from __future__ import annotations

import hashlib
import json
import math
import queue
import re
import shutil
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save_file

from engines.core.trace import Commit, Event, StreamChunk
from engines.model.layers import LayerStack
from engines.model.machine import cache_dir
from engines.storage import discard_damaged, staged_directory

MB = 1_000_000
STREAM_MODES = ("deep", "all")
READ_PIECE_BYTES = 1 << 20
READER_THREAD_NAME = "specviz-weight-stream"
LAYER_FILES_VERSION = 1


# --- the run setting ------------------------------------------------------------------------------
def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class MemoryBudget:
    """The memory-budget setting of a run: validated on construction."""

    memory_budget_mb: float
    flash_mb_s: float | None = None  # None: unthrottled reads
    stream: str = "deep"
    chunk_layers: int = 1

    def __post_init__(self):
        if not _is_number(self.memory_budget_mb) or self.memory_budget_mb <= 0:
            raise ValueError(f"memory_budget_mb must be a positive number of MB, got {self.memory_budget_mb!r}")
        if self.flash_mb_s is not None and (not _is_number(self.flash_mb_s) or self.flash_mb_s <= 0):
            raise ValueError(f"flash_mb_s must be a positive number of MB/s, got {self.flash_mb_s!r}")
        check_stream_mode(self.stream)
        if isinstance(self.chunk_layers, bool) or not isinstance(self.chunk_layers, int) or self.chunk_layers < 1:
            raise ValueError(f"chunk_layers must be an integer >= 1, got {self.chunk_layers!r}")

    @property
    def budget_bytes(self) -> int:
        return round(self.memory_budget_mb * MB)

    @property
    def flash_bytes_per_s(self) -> float | None:
        return None if self.flash_mb_s is None else self.flash_mb_s * MB


def check_stream_mode(stream) -> None:
    if stream not in STREAM_MODES:
        raise ValueError(f"stream must be one of {STREAM_MODES}, got {stream!r}")


def memory_budget(memory_budget_mb=None, flash_mb_s=None, stream: str = "deep",
                  chunk_layers: int = 1) -> MemoryBudget | None:
    """The validated setting, or ``None`` where no budget is asked for (then the other two must be unset)."""
    check_stream_mode(stream)
    if memory_budget_mb is not None:
        return MemoryBudget(memory_budget_mb, flash_mb_s, stream, chunk_layers)
    if flash_mb_s is not None:
        raise ValueError(f"flash_mb_s={flash_mb_s!r} needs memory_budget_mb: without a budget nothing streams")
    if stream != "deep":
        raise ValueError(f"stream={stream!r} needs memory_budget_mb: without a budget nothing streams")
    return None


# --- what fits ------------------------------------------------------------------------------------
_LAYER_BYTES: "weakref.WeakKeyDictionary[torch.nn.Module, tuple[int, ...]]" = weakref.WeakKeyDictionary()


def _param_bytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def always_resident_bytes(stack: LayerStack) -> int:
    """Embeddings, final norm, LM head (a tied head counted once) and the fp32 head copy, if any."""
    in_layers = {id(p) for p in stack.layers.parameters()}
    own = _param_bytes(p for p in stack.model.parameters() if id(p) not in in_layers)
    return own + (_param_bytes(stack.fp32_head.parameters()) if stack.fp32_head is not None else 0)


def layer_bytes(stack: LayerStack) -> tuple[int, ...]:
    """Parameter bytes of each decoder layer, measured once per model (before any layer is emptied)."""
    if stack.model not in _LAYER_BYTES:
        _LAYER_BYTES[stack.model] = tuple(_param_bytes(layer.parameters()) for layer in stack.layers)
    return _LAYER_BYTES[stack.model]


def minimum_budget_mb(stack: LayerStack) -> float:
    """The smallest budget accepted: the always-resident weights, rounded up to the kB."""
    return math.ceil(always_resident_bytes(stack) / 1000) / 1000


def budget_for_resident_layers(stack: LayerStack, n_layers: int) -> float:
    """The smallest ``memory_budget_mb`` that keeps layers 0..n_layers−1 resident."""
    return (always_resident_bytes(stack) + sum(layer_bytes(stack)[:n_layers])) / MB


@dataclass(frozen=True)
class Residency:
    """Which decoder layers the budget holds: the first ``fitting_layers``, in order."""

    budget: MemoryBudget
    always_bytes: int
    layer_bytes: tuple[int, ...]
    fitting_layers: int

    @property
    def pinned_layers(self) -> int:
        """Layers resident for the whole run: the fitting ones in ``deep`` mode, none in ``all``."""
        return self.fitting_layers if self.budget.stream == "deep" else 0

    @property
    def baseline_bytes(self) -> int:
        return self.always_bytes + sum(self.layer_bytes[: self.pinned_layers])


def plan_residency(stack: LayerStack, budget: MemoryBudget) -> Residency:
    """Fit layers 0, 1, … into what the always-resident weights leave; refuse a budget below them."""
    always = always_resident_bytes(stack)
    if budget.budget_bytes < always:
        head = " (with its fp32 copy)" if stack.fp32_head is not None else ""
        raise ValueError(f"memory_budget_mb={budget.memory_budget_mb:g} is below the minimum of "
                         f"{minimum_budget_mb(stack):.3f} MB: the embeddings, final norm and LM head{head} "
                         "are always resident")
    sizes = layer_bytes(stack)
    used, fitting = always, 0
    while fitting < len(sizes) and used + sizes[fitting] <= budget.budget_bytes:
        used += sizes[fitting]
        fitting += 1
    return Residency(budget, always, sizes, fitting)


# --- layer files ----------------------------------------------------------------------------------
def layer_files_key(stack: LayerStack, name: str) -> str:
    """Model name + dtype + a hash of the parameter shapes (and, for a model built in memory, of its
    layers' bytes: its name says nothing about its weights)."""
    digest = hashlib.sha256()
    for param_name, param in stack.model.named_parameters():
        digest.update(f"{param_name}{tuple(param.shape)};".encode())
    if name == "custom":
        for param in stack.layers.parameters():
            digest.update(param.detach().cpu().contiguous().view(torch.uint8).numpy())
    safe_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "model"
    return f"{safe_name}-{str(stack.dtype).removeprefix('torch.')}-{digest.hexdigest()[:16]}"


def layer_file_name(index: int) -> str:
    return f"layer_{index}.safetensors"


def _layer_files_problem(folder: Path, n_layers: int) -> str | None:
    """Why the layer files in ``folder`` cannot stream (``None``: they are whole): no manifest, one that does not
    read, another version, a layer file missing or of another size than the manifest wrote down (cut short)."""
    try:
        record = json.loads((folder / "manifest.json").read_text())
    except FileNotFoundError:
        return "no manifest.json"
    except (OSError, ValueError) as error:
        return f"manifest.json does not read: {error}"
    if not isinstance(record, dict) or record.get("version") != LAYER_FILES_VERSION or record.get("layers") != n_layers:
        return "another version"
    sizes = record.get("file_bytes") or []
    for index in range(n_layers):
        file = folder / layer_file_name(index)
        if not file.exists():
            return f"{file.name} is missing"
        if index < len(sizes) and file.stat().st_size != sizes[index]:
            return f"{file.name} holds {file.stat().st_size} bytes, the manifest says {sizes[index]}"
    return None


def write_layer_files(stack: LayerStack, name: str) -> Path:
    """One safetensors file per decoder layer, written once per model and dtype; returns their folder.

    Built in a staging folder renamed into place (:func:`engines.storage.staged_directory`), so an interrupted
    write never leaves a partial set; a set damaged since (a file cut short) is reported once and written again.
    """
    folder = cache_dir() / "layers" / layer_files_key(stack, name)
    problem = _layer_files_problem(folder, stack.n_layers) if folder.exists() else "absent"
    if problem is None:
        return folder
    if problem == "another version":
        shutil.rmtree(folder, ignore_errors=True)
    elif problem != "absent":
        discard_damaged(folder, "the memory budget's layer files", problem, then="they will be written again")
    with staged_directory(folder, replace=False) as staging:  # another process's whole set, if first, stays
        for index, layer in enumerate(stack.layers):
            tensors = {param_name: p.detach().cpu().contiguous() for param_name, p in layer.named_parameters()}
            save_file(tensors, str(staging / layer_file_name(index)))
        (staging / "manifest.json").write_text(json.dumps({
            "version": LAYER_FILES_VERSION, "model": name, "dtype": str(stack.dtype), "layers": stack.n_layers,
            "file_bytes": [(staging / layer_file_name(i)).stat().st_size for i in range(stack.n_layers)]}))
    return folder


# --- the emulated flash ---------------------------------------------------------------------------
class ReadCancelled(Exception):
    """The streamer stopped while this read was under way."""


class ThrottledReader:
    """Reads whole files in pieces, sleeping so the average rate stays at or below ``bytes_per_s``.

    The emulated flash is busy until ``n / rate`` after each piece it starts, and idle time earns no
    credit, so bursts never exceed the rate either. ``bytes_per_s=None`` reads at the disk's own speed.
    """

    def __init__(self, bytes_per_s: float | None, piece_bytes: int = READ_PIECE_BYTES):
        self.bytes_per_s = bytes_per_s
        self.piece_bytes = piece_bytes
        self._busy_until = 0.0

    def read(self, path: Path, cancelled: Callable[[], bool] = lambda: False) -> bytes:
        pieces = []
        with open(path, "rb", buffering=0) as source:
            while True:
                if cancelled():
                    raise ReadCancelled(str(path))
                started = time.perf_counter()
                piece = source.read(self.piece_bytes)
                if not piece:
                    return b"".join(pieces)
                pieces.append(piece)
                self._hold_rate(len(piece), started)

    def _hold_rate(self, n_bytes: int, started: float) -> None:
        if self.bytes_per_s is None:
            return
        self._busy_until = max(self._busy_until, started) + n_bytes / self.bytes_per_s
        delay = self._busy_until - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


# --- streaming ------------------------------------------------------------------------------------
EMPTY, LOADING, LOADED = "empty", "loading", "loaded"


@dataclass(eq=False)
class Chunk:
    """Consecutive streamed layers loaded and dropped together."""

    index: int
    layers: tuple[int, ...]
    held_for_round: bool  # mode "all": kept from its first use until the round ends
    state: str = EMPTY
    ready: threading.Event = field(default_factory=threading.Event)
    weights: list | None = None  # per layer, the tensors the reader read; installed by the compute thread
    installed: bool = False
    error: BaseException | None = None
    bytes_read: int = 0
    resident_after_load: int = 0
    load_start: float = 0.0
    load_end: float = 0.0
    compute_start: float | None = None
    compute_end: float | None = None


def _empty_like(param: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode(False):  # a parameter's data must stay usable outside inference mode
        return torch.empty(0, dtype=param.dtype, device=param.device)


class WeightStreamer:
    """Holds a stack's decoder layers to a memory budget; see the module docstring.

    Built: writes the layer files (once), empties the layers that do not stay resident and hooks them.
    Between :meth:`start` and :meth:`stop` (one run) a reader thread prefetches and the streamer records
    :class:`StreamChunk` events; outside a run a forward still works, reading in the calling thread.
    :meth:`close` removes the hooks and restores every layer's weights from its file.
    """

    def __init__(self, stack: LayerStack, name: str, budget: MemoryBudget):
        self.stack = stack
        self.budget = budget
        self.residency = plan_residency(stack, budget)
        self.folder = write_layer_files(stack, name)
        self.chunks = self._make_chunks()
        self._shapes = {i: {n: (p.shape, p.dtype) for n, p in stack.layers[i].named_parameters()}
                        for chunk in self.chunks for i in chunk.layers}
        self._reader = ThrottledReader(budget.flash_bytes_per_s)
        self._lock = threading.Lock()
        self._resident = self.residency.baseline_bytes
        self.peak_resident_bytes = self._resident
        self._events: list[StreamChunk] = []
        self._clock: Callable[[], float] | None = None
        self._thread: threading.Thread | None = None
        self._requests: queue.Queue = queue.Queue()
        self._stopping = threading.Event()
        for chunk in self.chunks:
            self._evict(chunk)
        self._hooks = self._register_hooks()

    # --- layout
    def _make_chunks(self) -> list[Chunk]:
        fitting, n = self.residency.fitting_layers, self.stack.n_layers
        groups = [(range(fitting, n), False)]
        if self.budget.stream == "all":
            groups.insert(0, (range(0, fitting), True))
        chunks: list[Chunk] = []
        for layers, held in groups:
            for start in range(layers.start, layers.stop, self.budget.chunk_layers):
                stop = min(start + self.budget.chunk_layers, layers.stop)
                chunks.append(Chunk(len(chunks), tuple(range(start, stop)), held))
        return chunks

    @property
    def streamed_layers(self) -> list[int]:
        return [i for chunk in self.chunks for i in chunk.layers]

    def layer_path(self, index: int) -> Path:
        return self.folder / layer_file_name(index)

    def describe(self) -> dict:
        """The setting as a run records it (``RunStart.memory``)."""
        r = self.residency
        return {"memory_budget_mb": self.budget.memory_budget_mb, "flash_mb_s": self.budget.flash_mb_s,
                "stream": self.budget.stream, "chunk_layers": self.budget.chunk_layers,
                "resident_layers": r.pinned_layers, "held_per_round_layers": r.fitting_layers - r.pinned_layers,
                "streamed_layers": self.streamed_layers, "always_resident_bytes": r.always_bytes,
                "resident_bytes": r.baseline_bytes}

    # --- hooks
    def _register_hooks(self) -> list:
        handles = []
        for chunk in self.chunks:
            for index in chunk.layers:
                layer = self.stack.layers[index]
                handles.append(layer.register_forward_pre_hook(partial(self._before_layer, chunk)))
                handles.append(layer.register_forward_hook(partial(self._after_layer, chunk, index)))
        return handles

    def _before_layer(self, chunk: Chunk, _module, _args) -> None:
        self._make_ready(chunk)
        if chunk.compute_start is None:
            chunk.compute_start = self._now()
        if chunk.index + 1 < len(self.chunks):
            self._prefetch(self.chunks[chunk.index + 1])

    def _after_layer(self, chunk: Chunk, index: int, _module, _args, _output) -> None:
        chunk.compute_end = self._now()
        if index == chunk.layers[-1] and not chunk.held_for_round:
            self._release(chunk)

    # --- loading
    def _make_ready(self, chunk: Chunk) -> None:
        if chunk.state == EMPTY:
            if self._thread is not None:
                self._request(chunk)
            else:
                chunk.state = LOADING
                self._load(chunk)
        chunk.ready.wait()
        if chunk.error is not None:
            raise RuntimeError(f"streaming layers {list(chunk.layers)} from {self.folder} failed: "
                               f"{chunk.error!r}") from chunk.error
        if not chunk.installed:
            self._install(chunk)

    def _prefetch(self, chunk: Chunk) -> None:
        if self._thread is not None and chunk.state == EMPTY:
            self._request(chunk)

    def _request(self, chunk: Chunk) -> None:
        chunk.state = LOADING
        chunk.ready.clear()
        self._requests.put(chunk)

    def _read_requests(self) -> None:
        for chunk in iter(self._requests.get, None):
            if self._stopping.is_set():
                chunk.error = ReadCancelled(str(chunk.layers))
                chunk.ready.set()
            else:
                self._load(chunk)

    def _load(self, chunk: Chunk) -> None:
        """Read the chunk's files through the throttle (reader thread, or inline outside a run)."""
        try:
            chunk.load_start = self._now()
            chunk.weights, chunk.bytes_read = [], 0
            for index in chunk.layers:
                data = self._reader.read(self.layer_path(index), self._stopping.is_set)
                chunk.bytes_read += len(data)
                chunk.weights.append(self._tensors_from(data))
            chunk.load_end = self._now()
            with self._lock:
                self._resident += sum(self.residency.layer_bytes[i] for i in chunk.layers)
                self.peak_resident_bytes = max(self.peak_resident_bytes, self._resident)
                chunk.resident_after_load = self._resident
            chunk.state = LOADED
        except BaseException as error:  # raised again by the layer's pre-hook, in the computing thread
            chunk.error = error
        finally:
            chunk.ready.set()

    def _tensors_from(self, data: bytes) -> dict[str, torch.Tensor]:
        """Fresh tensors of their own: safetensors' views of read-only ``bytes`` are neither writable nor
        aligned as the allocator aligns, and a kernel may round differently on differently aligned memory."""
        with torch.inference_mode(False):
            return {k: v.to(self.stack.device, copy=True) for k, v in load_safetensors(data).items()}

    def _install(self, chunk: Chunk) -> None:
        for index, tensors in zip(chunk.layers, chunk.weights):
            self._install_layer(index, tensors)
        chunk.weights, chunk.installed = None, True

    def _install_layer(self, index: int, tensors: dict[str, torch.Tensor]) -> None:
        for param_name, param in self.stack.layers[index].named_parameters():
            shape, dtype = self._shapes[index][param_name]
            tensor = tensors.get(param_name)
            if tensor is None or tensor.shape != shape or tensor.dtype != dtype:
                found = "nothing" if tensor is None else f"{tuple(tensor.shape)} {tensor.dtype}"
                raise RuntimeError(f"{self.layer_path(index)} holds {found} for {param_name}, "
                                   f"the model has {tuple(shape)} {dtype}")
            param.data = tensor

    # --- dropping
    def _release(self, chunk: Chunk) -> None:
        """Record the chunk's load (during a run) and drop its weights."""
        if self._clock is not None and chunk.state == LOADED:
            self._events.append(StreamChunk(
                t=self._now(), layers=list(chunk.layers), bytes=chunk.bytes_read, load_start=chunk.load_start,
                load_end=chunk.load_end, compute_start=chunk.compute_start, compute_end=chunk.compute_end,
                resident_bytes=chunk.resident_after_load))
        self._evict(chunk)

    def _evict(self, chunk: Chunk) -> None:
        for index in chunk.layers:
            for param in self.stack.layers[index].parameters():
                param.data = _empty_like(param)
        if chunk.state == LOADED:
            with self._lock:
                self._resident -= sum(self.residency.layer_bytes[i] for i in chunk.layers)
        chunk.state, chunk.weights, chunk.installed, chunk.error = EMPTY, None, False, None
        chunk.compute_start = chunk.compute_end = None
        chunk.ready.clear()

    @contextmanager
    def full_shapes(self) -> Iterator[None]:
        """Emptied parameters take their shapes back for a moment (zero-stride views, no memory), so code
        that names the model by its parameter shapes (the verify-cost curve's key) sees the whole model."""
        emptied = [(param, self._shapes[i][n][0]) for chunk in self.chunks if not chunk.installed
                   for i in chunk.layers for n, param in self.stack.layers[i].named_parameters()]
        for param, shape in emptied:
            with torch.inference_mode(False):
                param.data = torch.zeros((), dtype=param.dtype, device=param.device).expand(shape)
        try:
            yield
        finally:
            for param, _ in emptied:
                param.data = _empty_like(param)

    # --- a run
    def _now(self) -> float:
        return self._clock() if self._clock is not None else time.perf_counter()

    def start(self, clock: Callable[[], float]) -> None:
        """Start the reader thread and record chunk events on ``clock`` (the run's trace clock)."""
        self.stop()
        self._clock = clock
        self._stopping.clear()
        self._requests = queue.Queue()
        self.peak_resident_bytes = self._resident
        self._thread = threading.Thread(target=self._read_requests, name=READER_THREAD_NAME, daemon=True)
        self._thread.start()

    def events_before(self, event: Event) -> list[StreamChunk]:
        """Chunk events to emit ahead of the method's ``event``; a ``Commit`` ends the round first."""
        if isinstance(event, Commit):
            self.end_round()
        return self.drain()

    def end_round(self) -> None:
        """Mode ``all``: drop the layers held since their first use in this round."""
        for chunk in self.chunks:
            if chunk.held_for_round and chunk.state != EMPTY:
                self._release(chunk)

    def drain(self) -> list[StreamChunk]:
        events, self._events = self._events, []
        return events

    def stop(self) -> None:
        """Stop the reader (a read under way is cancelled) and drop every loaded chunk; idempotent.
        Chunks read but never used still count: their bytes crossed the emulated flash."""
        if self._thread is not None:
            self._stopping.set()
            self._requests.put(None)
            self._thread.join()
            self._thread = None
            self._stopping.clear()  # reads outside a run (in the calling thread) must not be cancelled
        for chunk in self.chunks:
            if chunk.state != EMPTY:
                self._release(chunk)
        self._clock = None

    def close(self) -> None:
        """Stop, remove the hooks and restore every streamed layer's weights from its file (unthrottled)."""
        self.stop()
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        reader, failed = ThrottledReader(None), []
        for index in self.streamed_layers:
            try:
                self._install_layer(index, self._tensors_from(reader.read(self.layer_path(index))))
            except Exception as error:  # restore the others before reporting
                failed.append((index, error))
        if failed:
            index, error = failed[0]
            raise RuntimeError(f"cannot restore layers {[i for i, _ in failed]} of the target: "
                               f"{self.layer_path(index)} is unreadable ({error!r}); reload the model") from error


class BudgetSlot:
    """The engine's memory budget: the one set with ``set_memory_budget``, and a run's own for that run."""

    def __init__(self, stack: LayerStack, name: str):
        self.stack = stack
        self.name = name
        self.streamer: WeightStreamer | None = None
        self._fused_before = False  # the stack ran fused layers before a budget switched them off

    @property
    def budget(self) -> MemoryBudget | None:
        return self.streamer.budget if self.streamer is not None else None

    def set(self, budget: MemoryBudget | None) -> None:
        """A budget switches the fused layers off (their copies of the weights would stay resident) and
        they come back when it is removed."""
        if budget == self.budget:
            return
        streamer, self.streamer = self.streamer, None
        if streamer is not None:
            streamer.close()
        if budget is not None:
            self._fused_before = self._fused_before or self.stack.fused
            self.stack.use_fused_layers(False)
            self.streamer = WeightStreamer(self.stack, self.name, budget)
        elif self._fused_before:
            self._fused_before = False
            self.stack.use_fused_layers(True)

    @contextmanager
    def full_shapes(self) -> Iterator[None]:
        if self.streamer is None:
            yield
        else:
            with self.streamer.full_shapes():
                yield

    @contextmanager
    def lifted(self) -> Iterator[None]:
        """The whole model resident for a while (measuring what compute costs), then the budget again."""
        previous = self.budget
        if previous is not None and self.streamer._thread is not None:
            raise RuntimeError("cannot lift the memory budget during a run (measure the verify-cost curve first: "
                               "`specviz verify-cost`)")
        self.set(None)
        try:
            yield
        finally:
            self.set(previous)

    @contextmanager
    def run(self, budget: MemoryBudget | None, clock: Callable[[], float]) -> Iterator[WeightStreamer | None]:
        """One run: under ``budget`` if given (the slot's own setting comes back afterwards), else the slot's."""
        previous = self.budget
        if budget is not None:
            self.set(budget)
        streamer = self.streamer
        try:
            if streamer is not None:
                streamer.start(clock)
            yield streamer
        finally:
            if streamer is not None:
                streamer.stop()
            if budget is not None:
                self.set(previous)
