"""What one target forward of n new tokens costs on the running machine: the verify-cost curve.

Every speculative method trades draft work for fewer target calls, and what a call over n tokens costs
decides whether that pays: on a GPU verifying 16 tokens costs about what one does, on a 2-core CPU it
may cost twice as much. So the curve is measured where the engine runs, never assumed, and cached per
machine, model, dtype, device and thread count (``<cache_dir>/verify_cost/``). Methods read it to size
their drafts (``gamma=auto``, ``total_tokens=auto``); the Theory page and notebook 03 draw it;
docs/verify-cost.md tables the measured curves.

Measuring it also tunes the matmul kernel per row count (see :mod:`engines.model.kernels`): each candidate
kernel times the same forwards and the fastest per n is kept, so the stored curve is the one the
engine will actually run. ``ceiling_tokens_per_s`` is the memory-bandwidth bound it is compared with:
the bytes of weights one decoding step reads ÷ the bandwidth of a large read measured here.
"""

from __future__ import annotations

import hashlib
import os
import platform
import statistics
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from engines.model.kernels import KernelPlan, available_kernels, install
from engines.model import gguf_blocks
from engines.model.machine import cache_dir, os_cpu_name
from engines.storage import discard_damaged, read_json_record, write_json_atomic

CURVE_VERSION = 1
FUSED = "fused"  # the curve's label for forwards through engines.model.fused_layer (packed oneDNN products)
NATIVE = "native"  # ... and through engines.model.native.step (the C decode step)


@dataclass
class VerifyCost:
    """Median seconds of one target forward of n new tokens after ``prefix`` cached ones."""

    key: str
    seconds: dict  # n → seconds with the chosen kernels
    kernels: dict  # n → kernel name chosen for that many rows
    by_kernel: dict = field(default_factory=dict)  # kernel → {n → seconds}: what tuning saw
    prefix: int = 0
    threads: int = 1
    bandwidth_gb_s: float = 0.0
    weight_bytes: int = 0
    version: int = CURVE_VERSION

    def __post_init__(self):
        self._costs: dict[int, float] = {}  # cost(n) memoised (a tree round asks it ~50 times): a curve is not
        # edited once made (a new measurement makes a new VerifyCost)
        self.seconds = {int(n): float(s) for n, s in self.seconds.items()}
        self.kernels = {int(n): k for n, k in self.kernels.items()}
        self.by_kernel = {k: {int(n): float(s) for n, s in v.items()} for k, v in self.by_kernel.items()}

    @property
    def max_tokens(self) -> int:
        return max(self.seconds)

    def cost(self, n: int) -> float:
        """Seconds for n tokens, read off the curve made non-decreasing (a forward over more tokens never
        costs less; a dip is noise). Beyond the measured range, extended by the slope of a least-squares
        line through its upper half, never below flat."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if n not in self._costs:
            self._costs[n] = self._cost(n)
        return self._costs[n]

    def _cost(self, n: int) -> float:
        known = sorted(self.seconds)
        monotone, running = {}, 0.0
        for m in known:
            running = max(running, self.seconds[m])
            monotone[m] = running
        if n in monotone:
            return monotone[n]
        if n > known[-1]:
            tail = known[len(known) // 2:] if len(known) > 2 else known
            return monotone[known[-1]] + _slope(tail, [monotone[m] for m in tail]) * (n - known[-1])
        below = max(m for m in known if m < n) if n > known[0] else known[0]
        above = min(m for m in known if m > n)
        weight = (n - below) / (above - below)
        return monotone[below] * (1 - weight) + monotone[above] * weight

    def relative(self, n: int) -> float:
        """Cost of verifying n tokens in units of one `ar` step."""
        return self.cost(n) / self.cost(1)

    @property
    def ceiling_tokens_per_s(self) -> float:
        return self.bandwidth_gb_s * 1e9 / self.weight_bytes if self.weight_bytes else 0.0

    def plan(self, row_invariant: bool = False) -> KernelPlan:
        return KernelPlan(self.kernels, row_invariant)

    def to_dict(self) -> dict:
        return asdict(self)


def _slope(xs: list[int], ys: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return max(sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread, 0.0)


def machine_key(model: torch.nn.Module, name: str, dtype: torch.dtype, device: torch.device,
                threads: int) -> str:
    """Names what the curve depends on: CPU (or GPU) model, torch, the model's weights, dtype, threads."""
    if device.type == "cuda":
        hardware = torch.cuda.get_device_name(device)
    else:
        hardware = _cpu_name()
    shapes = ",".join(f"{tuple(p.shape)}" for p in model.parameters())
    digest = hashlib.sha1(f"{hardware}|{torch.__version__}|{name}|{shapes}".encode()).hexdigest()[:10]
    return f"{name}-{str(dtype).removeprefix('torch.')}-{device.type}-t{threads}-{digest}"


def _cpu_name() -> str:
    """The CPU's model, for :func:`machine_key`: ``/proc/cpuinfo`` on Linux (unchanged, so curves cached
    there keep their keys); elsewhere, or where it cannot be read, the OS's own name for it."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            fields.setdefault(name.strip(), value.strip())
    except (OSError, UnicodeDecodeError):
        pass
    parts = [fields.get(k, "") for k in ("model name", "cpu family", "model")]
    if not fields:  # nothing read: not Linux
        parts[0] = os_cpu_name()
    return "|".join(parts + [platform.machine(), str(os.cpu_count())])


def curve_path(key: str) -> Path:
    return cache_dir() / "verify_cost" / f"{key}.json"


def load_curve(key: str) -> VerifyCost | None:
    """The cached curve, or ``None`` (then it is measured): none yet, an older version, or a damaged record,
    which is reported once by name and set aside."""
    path = curve_path(key)
    record = read_json_record(path, "the verify-cost curve", then="it will be measured again")
    if record is None or record.get("version") != CURVE_VERSION:
        return None
    try:
        curve = VerifyCost(**record)
        if not curve.seconds:
            raise ValueError("no timings")
    except (TypeError, ValueError, AttributeError) as error:
        discard_damaged(path, "the verify-cost curve", f"not a curve: {error}", then="it will be measured again")
        return None
    return curve


def save_curve(curve: VerifyCost) -> Path:
    return write_json_atomic(curve_path(curve.key), curve.to_dict(), indent=1)


def weight_bytes(model: torch.nn.Module, native=None, held: bool = False) -> int:
    """Bytes of weights one decoding step reads: every parameter once (a tied head counts once), a weight whose
    products read the GGUF blocks it came from at the blocks' size (:mod:`engines.model.gguf_blocks`); for a
    weight not packed yet, whether ``native`` (a ``NativeStep``) would read them. ``held``: the bytes as the model
    holds them instead, blocks or not."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += (p.numel() * p.element_size() if held else
                      gguf_blocks.bytes_read(p, native is not None and native.reads_blocks(p)))
    return total


def measure_bandwidth(device: torch.device, megabytes: int = 512, repeats: int = 5) -> float:
    """GB/s of a large sequential read (a sum over a buffer far larger than the caches)."""
    buffer = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32, device=device)
    best = float("inf")
    for _ in range(repeats + 1):
        _sync(device)
        start = time.perf_counter()
        buffer.sum()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return buffer.numel() * 4 / best / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_forwards(stack, prefix: int, ns: list[int], repeats: int) -> dict[int, float]:
    """Median seconds of a forward of n tokens after ``prefix`` cached tokens, for each n in ``ns``.

    The n's are interleaved across repeats so drift on a shared machine spreads over all of them. On the
    native step the forwards run as a decode run's do, inside one run's trust (``NativeStep.trusted_during``):
    the layers and the cache are checked once, not on every forward. Checked every time, as they were timed
    before, a forward cost about 1.2 ms more (2-core Zen 4, bf16: one token 10.9 against 9.7 ms), which no
    run pays and which made many tokens look cheaper against one.
    """
    vocab = stack.config.vocab_size
    ids = [(7 * i + 3) % vocab for i in range(prefix + max(ns))]
    cache = stack.new_cache(prefix + max(ns))
    samples: dict[int, list[float]] = {n: [] for n in ns}
    native = getattr(stack, "native", None)
    with torch.inference_mode(), (native.trusted_during(object()) if native is not None else nullcontext()):
        stack.forward(ids[:prefix], cache)
        for n in ns:  # warm-up: first calls at a new shape allocate
            stack.forward(ids[prefix:prefix + n], cache)
            cache.crop(prefix)
        for _ in range(repeats):
            for n in ns:
                _sync(stack.device)
                start = time.perf_counter()
                stack.forward(ids[prefix:prefix + n], cache)
                _sync(stack.device)
                samples[n].append(time.perf_counter() - start)
                cache.crop(prefix)
    return {n: statistics.median(s) for n, s in samples.items()}


def measure(stack, name: str, max_tokens: int = 16, prefix: int = 256, repeats: int = 5,
            kernels: list[str] | None = None, progress: Callable[[str], None] | None = None) -> VerifyCost:
    """Time the target for n = 1..``max_tokens`` with every available kernel; keep the fastest per n.

    Leaves the chosen kernels installed on ``stack.model``.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if prefix < 1:
        raise ValueError(f"prefix must be >= 1, got {prefix}")
    capacity = getattr(stack.config, "max_position_embeddings", prefix + max_tokens)
    if prefix + max_tokens > capacity:
        raise ValueError(f"prefix + max_tokens must fit the context window of {capacity}, got {prefix + max_tokens}")
    kernels = kernels or available_kernels(stack.device)
    ns = list(range(1, max_tokens + 1))
    row_invariant = getattr(stack, "row_invariant", False)
    if getattr(stack, "fused", False):
        # fused layers and head run their own products, whatever the plan says: one curve to time; the plan
        # only serves the drafters and the layers a memory budget puts back on HF's path: the small-M kernel
        # where it runs (F.linear for anything it does not take), else plain linear
        label = NATIVE if getattr(stack, "native", None) is not None else FUSED
        if progress:
            progress(f"timing forwards of 1..{max_tokens} tokens through the {label} step")
        drafters_kernel = "small_m" if "small_m" in kernels else "linear"
        install_stack(stack, KernelPlan({1: drafters_kernel}, row_invariant))
        seconds = time_forwards(stack, prefix, ns, repeats)
        threads = torch.get_num_threads()
        return VerifyCost(machine_key(stack.model, name, stack.dtype, stack.device, threads), seconds,
                          {n: drafters_kernel for n in ns}, {label: seconds}, prefix, threads,
                          measure_bandwidth(stack.device), weight_bytes(stack.model))
    by_kernel = {}
    for kernel in kernels:
        if progress:
            progress(f"timing forwards of 1..{max_tokens} tokens with the {kernel} kernel")
        install_stack(stack, KernelPlan({1: kernel}, row_invariant))
        by_kernel[kernel] = time_forwards(stack, prefix, ns, repeats)
    chosen = {n: min(kernels, key=lambda k: by_kernel[k][n]) for n in ns}
    if row_invariant:  # kernels round differently: one for every n, the fastest over the whole curve
        best = min(kernels, key=lambda k: sum(by_kernel[k].values()))
        chosen = {n: best for n in ns}
    seconds = {n: by_kernel[chosen[n]][n] for n in ns}
    threads = torch.get_num_threads()
    curve = VerifyCost(machine_key(stack.model, name, stack.dtype, stack.device, threads), seconds, chosen,
                       by_kernel, prefix, threads, measure_bandwidth(stack.device), weight_bytes(stack.model))
    install_stack(stack, curve.plan(row_invariant))
    return curve


def install_stack(stack, plan: KernelPlan) -> None:
    """The model's linear layers and, where the stack keeps one, its fp32 head."""
    install(stack.model, plan)
    if getattr(stack, "fp32_head", None) is not None:
        install(stack.fp32_head, plan)
