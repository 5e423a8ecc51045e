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

import numpy as np
import torch


@dataclass(frozen=True)
class LinkProfile:
    """One network's numbers, in the terms netem takes them: a fixed one-way delay, a random extra delay,
    a bandwidth cap and a per-packet loss rate."""

    name: str
    base_delay_s: float  # one-way propagation: half the ping
    jitter_mean_s: float  # extra one-way delay ~ N(mean, std), clipped at 0 (netem's "delay mean std")
    jitter_std_s: float
    bandwidth_bps: float | None  # bits per second; None = unlimited
    loss: float  # per-packet drop probability, in [0, 1)


# The paper's two machines: ~300 km apart, ping ≈ 9 ms (so 4.5 ms each way), ≈ 50 Mbit/s. 5G and 4G add
# netem's delay (and 4G its 20 Mbit/s cap) on top of that real link, so they keep its 4.5 ms.
PROFILES: dict[str, LinkProfile] = {
    "local": LinkProfile("local", 0.0, 0.0, 0.0, None, 0.0),
    "base": LinkProfile("base", 0.0045, 0.0, 0.0, 50e6, 0.0),
    "5g": LinkProfile("5g", 0.0045, 0.010, 0.010, 50e6, 0.001),
    "4g": LinkProfile("4g", 0.0045, 0.021, 0.019, 20e6, 0.001),
}


def link_profile(name: str, loss: float | None = None) -> LinkProfile:
    """A named profile, optionally with another per-packet loss rate."""
    if name not in PROFILES:
        raise ValueError(f"network profile name must be one of {', '.join(PROFILES)}, got {name!r}")
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
    """What one message cost on the link: the record the explorer shows and sums."""

    direction: str  # "up": client → server; "down": server → client
    bytes: int
    seconds: float  # simulated one-way time until the message is whole at the receiver, resends included
    attempts: int  # 1 + resends
    packets: int


@dataclass
class Link:
    """A simulated link: ``send`` says how long a message takes and logs it. Its own seeded random
    stream, so the same run over the same profile sees the same delays and losses."""

    profile: LinkProfile
    seed: int = 0
    log: list[Delivery] = field(default_factory=list, init=False)  # every delivery so far

    MTU = 1500  # payload bytes per packet
    RTO_S = 0.2  # Linux's minimum TCP retransmission timeout: what a lost packet costs before the resend

    def __post_init__(self):
        self._random = random.Random(self.seed)

    def send(self, payload: bytes, direction: str) -> Delivery:
        """Carry ``payload`` one way ("up": client → server, "down": server → client).

        An attempt that loses any of its packets delivers nothing usable: the sender only notices after the
        retransmission timeout, so a lost attempt costs RTO_S and the message goes again with a fresh delay.
        """
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
        """Sums over the log: messages, resends, and bytes and seconds per direction."""
        out = {"messages": len(self.log), "resends": sum(d.attempts - 1 for d in self.log)}
        for direction in ("up", "down"):
            out[f"bytes_{direction}"] = sum(d.bytes for d in self.log if d.direction == direction)
            out[f"seconds_{direction}"] = sum(d.seconds for d in self.log if d.direction == direction)
        return out


# --- the wire format ----------------------------------------------------------------------------------
# Every message starts with a 4-byte header, struct "<BBH", so it decodes with no side information:
#   byte 0    kind: 1 = draft, 2 = verdict; flag 0x40 = activations follow the ids; flag 0x80 = body gzipped
#   byte 1    count: draft nodes M, or verdict tokens A (both at most 255)
#   bytes 2-3 draft: 0 (spare); verdict: the activation width W (< 65536, little-endian)
# Draft body:   M token ids (3 bytes each, little-endian), then M positions (1 byte each: parent index + 1,
#               so the root's children store 0 and nodes 0..254 fit).
# Verdict body: A token ids (3 bytes each); with activations, one float16 scale per row (2 bytes each), then
#               rows·W int8 values, row-major. The row count is not stored: it is the rest of the body's
#               length divided by 2 + W (the first message carries one token but a prompt's worth of rows).
# So a draft is Table 7's 4M bytes + 4, and a plain verdict is Table 7's 3A + A·W bytes (8-bit values)
# + 4 header bytes + 2 scale bytes per row. A gzipped message is whatever gzip makes of the body, + 4.
DRAFT, VERDICT, HAS_ACTIVATIONS, GZIPPED = 1, 2, 0x40, 0x80
HEADER = struct.Struct("<BBH")
MAX_ID = 1 << 24
MAX_COUNT = 255
_FP16_TINY, _FP16_MAX = 2.0 ** -24, 65504.0  # smallest (subnormal) and largest float16


def _ids(tokens: list[int]) -> bytes:
    for token in tokens:
        if not 0 <= token < MAX_ID:
            raise ValueError(f"token ids must be in [0, 2^24) to fit 3 bytes, got {token}")
    return b"".join(int(t).to_bytes(3, "little") for t in tokens)


def _read_ids(body: bytes, count: int) -> list[int]:
    return [int.from_bytes(body[3 * i: 3 * i + 3], "little") for i in range(count)]


def _header(payload: bytes, expected: int) -> tuple[int, int, int, bytes]:
    """Split a message into (flags, count, field, body), refusing a message of another kind."""
    if len(payload) < HEADER.size:
        raise ValueError(f"payload must hold at least the {HEADER.size}-byte header, got {len(payload)} bytes")
    kind, count, extra = HEADER.unpack_from(payload)
    if kind & ~(HAS_ACTIVATIONS | GZIPPED) != expected:
        raise ValueError(f"payload kind must be {expected}, got {kind & ~(HAS_ACTIVATIONS | GZIPPED)}")
    return kind, count, extra, payload[HEADER.size:]


def encode_draft(tokens: list[int], parents: list[int]) -> bytes:
    """Client → server: the draft tree, M nodes of a 3-byte id and a 1-byte position (parent index + 1,
    0 = a child of the root). Nodes come in order, each after its parent, so one byte names the parent."""
    if len(tokens) != len(parents):
        raise ValueError(f"tokens and parents must have the same length, got {len(tokens)} and {len(parents)}")
    if len(tokens) > MAX_COUNT:
        raise ValueError(f"a draft tree must have at most {MAX_COUNT} nodes to fit 1-byte positions, "
                         f"got {len(tokens)}")
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"node {i}'s parent must be -1 (the root) or an earlier node, got {parent}")
    return HEADER.pack(DRAFT, len(tokens), 0) + _ids(tokens) + bytes(p + 1 for p in parents)


def decode_draft(payload: bytes) -> tuple[list[int], list[int]]:
    """The server's side of :func:`encode_draft`: (token ids, parent indices, -1 = the root)."""
    _, count, _, body = _header(payload, DRAFT)
    if len(body) != 4 * count:
        raise ValueError(f"a draft of {count} nodes must have a {4 * count}-byte body, got {len(body)}")
    return _read_ids(body, count), [b - 1 for b in body[3 * count:]]


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: ``values = round(x / scale)`` with ``scale = max|x| / 127`` as float16.

    One scale per row (not per tensor) because activation rows differ a lot in magnitude; the float16 scale
    costs 2 bytes per row. Each value is then off by at most ``scale / 2``. The scale is kept within float16's
    range: an all-zero (or tiny) row gets the smallest float16, 2^-24; rows beyond ±65504·127 would clip.
    """
    if x.dim() != 2:
        raise ValueError(f"activations must be 2-D [rows, width], got shape {tuple(x.shape)}")
    x = x.detach().float().cpu()
    if not bool(torch.isfinite(x).all()):
        raise ValueError("activations must be finite, got inf or nan")
    peak = x.abs().amax(dim=1) if x.shape[1] else torch.zeros(x.shape[0])
    scales = (peak / 127).clamp(_FP16_TINY, _FP16_MAX).half()
    values = torch.round(x / scales.float()[:, None]).clamp(-127, 127).to(torch.int8)
    return values, scales


def dequantize_rows(values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Back to float32: ``values · scale`` per row."""
    return values.float() * scales.float()[:, None]


def encode_verdict(tokens: list[int], activations: torch.Tensor | None = None, compress: bool = False) -> bytes:
    """Server → client: the accepted ids (+ the bonus or correction), then optionally activations ``[rows, width]``
    quantized to 8 bits; ``compress`` gzips the body (the paper gzips the first, prompt-sized message, where
    the savings pay for the codec's time)."""
    if len(tokens) > MAX_COUNT:
        raise ValueError(f"a verdict must carry at most {MAX_COUNT} tokens, got {len(tokens)}")
    body, kind, width = _ids(tokens), VERDICT, 0
    if activations is not None:
        values, scales = quantize_rows(activations)
        width = values.shape[1]
        if width >= 1 << 16:
            raise ValueError(f"activation width must be < 65536 to fit 2 bytes, got {width}")
        body += scales.numpy().astype("<f2").tobytes() + values.numpy().tobytes()
        kind |= HAS_ACTIVATIONS
    if compress:
        body, kind = gzip.compress(body, mtime=0), kind | GZIPPED
    return HEADER.pack(kind, len(tokens), width) + body


def decode_verdict(payload: bytes) -> tuple[list[int], torch.Tensor | None]:
    """The client's side of :func:`encode_verdict`: (token ids, float32 activations or None)."""
    kind, count, width, body = _header(payload, VERDICT)
    if kind & GZIPPED:
        body = gzip.decompress(body)
    if len(body) < 3 * count:
        raise ValueError(f"a verdict of {count} tokens must have at least {3 * count} body bytes, got {len(body)}")
    ids, rest = _read_ids(body, count), body[3 * count:]
    if not kind & HAS_ACTIVATIONS:
        if rest:
            raise ValueError(f"a verdict without activations must end after its ids, got {len(rest)} more bytes")
        return ids, None
    rows, leftover = divmod(len(rest), 2 + width)
    if leftover:
        raise ValueError(f"activation bytes must be a multiple of 2 + width = {2 + width}, got {len(rest)}")
    scales = torch.from_numpy(np.frombuffer(rest, dtype="<f2", count=rows).astype(np.float16))
    values = torch.from_numpy(np.frombuffer(rest, dtype=np.int8, offset=2 * rows).copy()).view(rows, width)
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
