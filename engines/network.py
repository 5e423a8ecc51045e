"""The client–server link, simulated: real bytes on the wire, simulated seconds for carrying them.

The MoA paper runs its client and server 300 km apart (ping ≈ 9 ms, ≈ 50 Mbit/s) and emulates 5G and 4G
on top with Linux traffic control (netem). Here both halves share one machine, so the messages are
really serialized — token ids in 3 bytes, tree positions in 1, activations quantized to 8 bits, the first
prompt-sized message gzipped (paper §4.3, Table 7) — and this module says how long each would take:

    one-way time = base delay + max(0, N(jitter mean, jitter std)) + 8·bytes / bandwidth

A message is cut into 1500-byte packets; each is dropped with the profile's loss rate, and a message
with a dropped packet is resent after TCP's minimum retransmission timeout (200 ms on Linux), with a
new delay. Seeded, so a run's link is reproducible.
"""

from __future__ import annotations

import gzip
import math
import random
import struct
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class LinkProfile:
    name: str
    base_delay_s: float  # one-way propagation: half the ping
    jitter_mean_s: float  # extra one-way delay ~ N(mean, std), clipped at 0 (netem's "delay mean std")
    jitter_std_s: float
    bandwidth_bps: float | None  # bits per second; None = unlimited
    loss: float  # per-packet drop probability


PROFILES: dict[str, LinkProfile] = {
    "local": LinkProfile("local", 0.0, 0.0, 0.0, None, 0.0),
    "base": LinkProfile("base", 0.0045, 0.0, 0.0, 50e6, 0.0),
    "5g": LinkProfile("5g", 0.0045, 0.010, 0.010, 50e6, 0.001),
    "4g": LinkProfile("4g", 0.0045, 0.021, 0.019, 20e6, 0.001),
}


def link_profile(name: str, loss: float | None = None) -> LinkProfile:
    """A named profile, optionally with another per-packet loss rate."""
    if name not in PROFILES:
        raise ValueError(f"network profile must be one of {', '.join(PROFILES)}, got {name!r}")
    profile = PROFILES[name]
    if loss is None:
        return profile
    if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 0 <= loss < 1:
        raise ValueError(f"loss must be in [0, 1), got {loss!r}")
    return LinkProfile(profile.name, profile.base_delay_s, profile.jitter_mean_s, profile.jitter_std_s,
                       profile.bandwidth_bps, float(loss))


def transfer_seconds(profile: LinkProfile, n_bytes: int) -> float:
    """Mean one-way time of an ``n_bytes`` message with no loss (for formulas and plots)."""
    wire = 8 * n_bytes / profile.bandwidth_bps if profile.bandwidth_bps else 0.0
    return profile.base_delay_s + max(0.0, profile.jitter_mean_s) + wire


@dataclass
class Delivery:
    direction: str  # "up": client → server; "down": server → client
    bytes: int
    seconds: float  # simulated one-way time until the message is whole at the receiver, resends included
    attempts: int  # 1 + resends
    packets: int


@dataclass
class Link:
    profile: LinkProfile
    seed: int = 0
    log: list[Delivery] = field(default_factory=list)

    MTU = 1500  # payload bytes per packet
    RTO_S = 0.2  # Linux's minimum TCP retransmission timeout: what a lost packet costs before the resend

    def __post_init__(self):
        self._random = random.Random(self.seed)

    def send(self, payload: bytes, direction: str) -> Delivery:
        if direction not in ("up", "down"):
            raise ValueError(f"direction must be 'up' or 'down', got {direction!r}")
        profile, n = self.profile, len(payload)
        packets = max(1, math.ceil(n / self.MTU))
        seconds, attempts = 0.0, 0
        while True:
            attempts += 1
            jitter = max(0.0, self._random.gauss(profile.jitter_mean_s, profile.jitter_std_s)) \
                if profile.jitter_std_s or profile.jitter_mean_s else 0.0
            wire = 8 * n / profile.bandwidth_bps if profile.bandwidth_bps else 0.0
            lost = profile.loss > 0 and any(self._random.random() < profile.loss for _ in range(packets))
            if not lost:
                seconds += profile.base_delay_s + jitter + wire
                break
            seconds += self.RTO_S  # nothing arrives; the sender waits out the timeout and resends
        delivery = Delivery(direction, n, seconds, attempts, packets)
        self.log.append(delivery)
        return delivery

    def totals(self) -> dict:
        out = {"messages": len(self.log), "resends": sum(d.attempts - 1 for d in self.log)}
        for direction in ("up", "down"):
            out[f"bytes_{direction}"] = sum(d.bytes for d in self.log if d.direction == direction)
            out[f"seconds_{direction}"] = sum(d.seconds for d in self.log if d.direction == direction)
        return out


# --- the wire format ----------------------------------------------------------------------------------
# Header, 4 bytes: kind (1 byte: 1 = draft, 2 = verdict, 2 | 0x80 = gzipped verdict), then for a draft
# the node count (1 byte) and 2 spare bytes; for a verdict the token count (1 byte) and the activation
# width (2 bytes). A verdict's activations follow its ids: per row a float16 scale (2 bytes) and
# `width` int8 values. So a message is Table 7's size plus 4 header bytes plus 2 bytes per activation row.
DRAFT, VERDICT, GZIPPED = 1, 2, 0x80
HEADER = struct.Struct("<BBH")
MAX_ID = 1 << 24


def _ids(tokens: list[int]) -> bytes:
    for token in tokens:
        if not 0 <= token < MAX_ID:
            raise ValueError(f"token ids must be in [0, 2^24) to fit 3 bytes, got {token}")
    return b"".join(int(t).to_bytes(3, "little") for t in tokens)


def _read_ids(body: bytes, count: int) -> list[int]:
    return [int.from_bytes(body[3 * i: 3 * i + 3], "little") for i in range(count)]


def encode_draft(tokens: list[int], parents: list[int]) -> bytes:
    """Client → server: M tree nodes, 3-byte id + 1-byte position (parent index + 1; 0 = the root)."""
    if len(tokens) != len(parents):
        raise ValueError(f"tokens and parents must have the same length, got {len(tokens)} and {len(parents)}")
    if len(tokens) > 255:
        raise ValueError(f"a draft tree must have at most 255 nodes to fit 1-byte positions, got {len(tokens)}")
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"node {i}'s parent must be -1 or an earlier node, got {parent}")
    return HEADER.pack(DRAFT, len(tokens), 0) + _ids(tokens) + bytes(p + 1 for p in parents)


def decode_draft(payload: bytes) -> tuple[list[int], list[int]]:
    kind, count, _ = HEADER.unpack_from(payload)
    if kind != DRAFT:
        raise ValueError(f"not a draft message (kind {kind})")
    body = payload[HEADER.size:]
    return _read_ids(body, count), [b - 1 for b in body[3 * count: 4 * count]]


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: values ``round(x / scale)`` with ``scale = max|x| / 127`` (float16)."""
    x = x.float()
    scales = (x.abs().amax(dim=1) / 127).clamp_min(1e-8).half()
    values = torch.round(x / scales.float()[:, None]).clamp(-127, 127).to(torch.int8)
    return values, scales


def dequantize_rows(values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return values.float() * scales.float()[:, None]


def encode_verdict(tokens: list[int], activations: torch.Tensor | None = None, compress: bool = False) -> bytes:
    """Server → client: the accepted ids (+ the bonus or correction), then optionally activations ``[rows, width]``
    quantized to 8 bits; ``compress`` gzips the body (the paper gzips the first, prompt-sized message)."""
    if len(tokens) > 255:
        raise ValueError(f"a verdict carries at most 255 tokens, got {len(tokens)}")
    width = 0 if activations is None else activations.shape[1]
    if width >= 1 << 16:
        raise ValueError(f"activation width must be < 65536, got {width}")
    body = _ids(tokens)
    if activations is not None:
        values, scales = quantize_rows(activations.detach().cpu())
        body += scales.numpy().tobytes() + values.numpy().tobytes()
    kind = VERDICT | (GZIPPED if compress else 0)
    return HEADER.pack(kind, len(tokens), width) + (gzip.compress(body, mtime=0) if compress else body)


def decode_verdict(payload: bytes) -> tuple[list[int], torch.Tensor | None]:
    kind, count, width = HEADER.unpack_from(payload)
    if kind & ~GZIPPED != VERDICT:
        raise ValueError(f"not a verdict message (kind {kind})")
    body = payload[HEADER.size:]
    if kind & GZIPPED:
        body = gzip.decompress(body)
    ids = _read_ids(body, count)
    if not width:
        return ids, None
    rest = body[3 * count:]
    rows = len(rest) // (2 + width)
    scales = torch.frombuffer(bytearray(rest[: 2 * rows]), dtype=torch.float16)
    values = torch.frombuffer(bytearray(rest[2 * rows:]), dtype=torch.int8).view(rows, width)
    return ids, dequantize_rows(values, scales)


def table7_bytes(method: str, *, nodes: int = 0, accepted: int = 0, hidden: int = 576, kv_width: int = 192,
                 tli: int = 0, bytes_per_value: float = 1.0) -> dict:
    """The paper's Table 7 message sizes: up ``4M`` for everyone; down ``3A + 2A·E_kv·(TLI+1)`` values (MoA),
    ``3A + A·E`` (EAGLE), ``3A`` (an independent draft), one value = ``bytes_per_value`` bytes."""
    for name, value in (("nodes", nodes), ("accepted", accepted), ("hidden", hidden), ("kv_width", kv_width),
                        ("tli", tli)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if not bytes_per_value > 0:
        raise ValueError(f"bytes_per_value must be > 0, got {bytes_per_value!r}")
    activations = {"moa": 2 * kv_width * (tli + 1), "eagle": hidden, "tiny": 0}
    if method not in activations:
        raise ValueError(f"method must be one of {', '.join(activations)}, got {method!r}")
    return {"up": 4 * nodes, "down": 3 * accepted + accepted * activations[method] * bytes_per_value}
