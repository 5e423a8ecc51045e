"""The hardware a projection runs on: a few editable numbers per machine, and the presets the map compares.

A method's speedup is not a property of the method: it is its measured acceptance (τ, α) meeting the costs of
the machine it runs on. :class:`Hardware` describes a machine by the numbers the latency laws need, and
:func:`step_seconds` turns them into the time of one forward (the model, fitted on this machine, is in
docs/regime.md):

    t(n rows, share f of the weights) = f · (o + max(m, k) + (1 − overlap) · min(m, k))
    m = resident bytes / B + streamed bytes / flash bandwidth      k = n · FLOPs per row / compute

with o the fixed cost of one forward (kernel launches, thread barriers), ``overlap`` 1 where memory traffic and
arithmetic run at once (a GPU, a multi-core CPU that prefetches) and 0 where they add (one CPU thread: the
verify-cost curve measured here is a straight line in n, so they add). Weights past the memory budget M are
read from flash on every forward.

Presets (editable: :func:`dataclasses.replace` any field); the sources are public spec sheets, rounded:

| preset | B | compute | lanes | link latency / bandwidth | flash, M | o | source |
|---|---|---|---|---|---|---|---|
| this machine | measured (large read) | fitted (curve's slope) | cores | measured lane hop | none | fitted | verify-cost curve |
| laptop | 100 GB/s | 2 TFLOP/s | 8 | 20 µs / 50 GB/s | none | 0.3 ms | Apple M2-class LPDDR5 |
| phone | 50 GB/s | 1 TFLOP/s | 4 | 50 µs / 20 GB/s | 1.5 GB/s, 128 MB | 0.5 ms | UFS 3.1 flash, LPDDR5 |
| GPU | 3.35 TB/s | 990 TFLOP/s | 1 | 5 µs / 300 GB/s | none | 1 ms | H100 SXM, eager launches |
| two GPUs | 3.35 TB/s | 990 TFLOP/s | 2 | 5 µs / 300 GB/s | none | 1 ms | 2 × H100, NVLink |
| client over 4G | client: laptop, server: GPU | | | the `4g` link profile: 25.5 ms one way / 2.5 MB/s | | | engines/network/link.py (notebook 08's simulated 4G) |
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace

from engines.network.link import PROFILES, transfer_seconds

GB = 1e9


@dataclass(frozen=True)
class Hardware:
    """One machine, or a client–server pair (``client`` set: drafting runs on the client, verification here,
    and every round crosses the link)."""

    name: str
    bandwidth: float  # B, bytes/s the weights are read at from memory
    compute: float  # FLOP/s a forward reaches
    lanes: int = 1  # independent devices or cores a method can spread over
    link_latency: float = 0.0  # s, one message one way (between lanes, or client ↔ server)
    link_bandwidth: float = math.inf  # bytes/s over that link
    flash_bandwidth: float = 0.0  # bytes/s weights stream at from flash (0: no flash tier)
    memory_budget: float = math.inf  # M, bytes of weights that may stay resident
    step_overhead: float = 0.0  # o, s per forward: launches, barriers
    overlap: float = 1.0  # 1: memory and compute overlap; 0: they add
    client: "Hardware | None" = None

    def __post_init__(self):
        if not self.name:
            raise ValueError("name must be non-empty")
        for name in ("bandwidth", "compute", "link_bandwidth"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not isinstance(self.lanes, int) or self.lanes < 1:
            raise ValueError(f"lanes must be an integer >= 1, got {self.lanes!r}")
        for name in ("link_latency", "flash_bandwidth", "step_overhead"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.memory_budget > 0:
            raise ValueError(f"memory_budget must be > 0, got {self.memory_budget}")
        if not 0 <= self.overlap <= 1:
            raise ValueError(f"overlap must be in [0, 1], got {self.overlap}")
        if self.client is not None and self.client.client is not None:
            raise ValueError("client must be a single machine, not itself a client–server pair")

    def with_numbers(self, **changes) -> "Hardware":
        """A copy with some numbers changed (the editable-preset example); unknown names raise ValueError."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown hardware field(s) {unknown}; known: {sorted(known)}")
        return replace(self, **changes)

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "client"}
        out["client"] = None if self.client is None else self.client.to_dict()
        return out

    @classmethod
    def from_dict(cls, record: dict) -> "Hardware":
        record = dict(record)
        client = record.pop("client", None)
        return cls(**record, client=None if client is None else cls.from_dict(client))


def step_seconds(hw: Hardware, weight_bytes: float, rows: float, share: float = 1.0,
                 resident_bytes: float | None = None) -> float:
    """One forward over ``rows`` positions through ``share`` of a model of ``weight_bytes`` (bf16: one FLOP
    per weight byte per row, 2·params). ``resident_bytes`` (default: what M allows) stay in memory; the rest
    streams from flash, or from memory where the machine has no flash tier."""
    if rows < 1 or not 0 < share <= 1:
        raise ValueError(f"rows must be >= 1 and share in (0, 1], got rows={rows}, share={share}")
    resident = min(weight_bytes, hw.memory_budget if resident_bytes is None else resident_bytes)
    streamed = weight_bytes - resident
    slow = hw.flash_bandwidth if hw.flash_bandwidth > 0 else hw.bandwidth
    memory = resident / hw.bandwidth + streamed / slow
    arithmetic = rows * weight_bytes / hw.compute
    return share * (hw.step_overhead + max(memory, arithmetic) + (1 - hw.overlap) * min(memory, arithmetic))


def fit_this_machine(curve_seconds: dict, weight_bytes: int, bandwidth_gb_s: float, lane_hop_s: float,
                     name: str = "this machine") -> Hardware:
    """This machine from its verify-cost curve (n → seconds, one thread), with the weights read at the measured
    bandwidth B: the compute, the overlap of memory traffic with arithmetic and the fixed cost per forward o
    that make :func:`step_seconds` closest to the curve (least squares over a grid of compute and overlap, o the
    mean residual). A straight line through the curve would do nearly as well overall but overstates the few-row
    forwards that chains verify, which is where most rounds sit. ``lane_hop_s`` is a message between lanes as
    measured in the same session."""
    if not curve_seconds or weight_bytes <= 0 or bandwidth_gb_s <= 0:
        raise ValueError("curve_seconds, weight_bytes and bandwidth_gb_s must be non-empty and > 0")
    xs = [int(n) for n in curve_seconds]
    ys = [float(curve_seconds[n]) for n in curve_seconds]
    bandwidth = bandwidth_gb_s * GB
    memory = weight_bytes / bandwidth
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs) or 1.0
    slope = max(sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread, 1e-9)
    best = None
    for overlap in (i / 20 for i in range(21)):
        for scale in (0.25 * 1.05 ** j for j in range(80)):  # seconds per row from a quarter of the line's slope
            per_row = slope * scale
            shape = [max(memory, n * per_row) + (1 - overlap) * min(memory, n * per_row) for n in xs]
            overhead = max(sum(y - m for y, m in zip(ys, shape)) / len(ys), 0.0)
            error = sum((y - m - overhead) ** 2 for y, m in zip(ys, shape))
            if best is None or error < best[0]:
                best = (error, per_row, overlap, overhead)
    _, per_row, overlap, overhead = best
    return Hardware(name=name, bandwidth=bandwidth, compute=weight_bytes / per_row, lanes=os.cpu_count() or 1,
                    link_latency=max(lane_hop_s, 0.0), link_bandwidth=bandwidth, step_overhead=overhead,
                    overlap=overlap)


LAPTOP = Hardware("laptop", bandwidth=100 * GB, compute=2e12, lanes=8, link_latency=20e-6, link_bandwidth=50 * GB,
                  step_overhead=0.3e-3)
PHONE = Hardware("phone (flash)", bandwidth=50 * GB, compute=1e12, lanes=4, link_latency=50e-6,
                 link_bandwidth=20 * GB, flash_bandwidth=1.5 * GB, memory_budget=128e6, step_overhead=0.5e-3)
GPU = Hardware("GPU (H100)", bandwidth=3350 * GB, compute=990e12, lanes=1, link_latency=5e-6,
               link_bandwidth=300 * GB, step_overhead=1e-3)
TWO_GPUS = replace(GPU, name="two GPUs (NVLink)", lanes=2)
# one source of truth for 4G: the link profile notebook 08 simulates (mean one-way delay, its bandwidth in bytes/s)
CLIENT_4G = replace(GPU, name="client over 4G", link_latency=transfer_seconds(PROFILES["4g"], 0),
                    link_bandwidth=PROFILES["4g"].bandwidth_bps / 8, client=LAPTOP)


def presets(this_machine: Hardware) -> list[Hardware]:
    """The map's columns, this machine first."""
    return [this_machine, LAPTOP, PHONE, GPU, TWO_GPUS, CLIENT_4G]
