"""Projected speedup of each method on a :class:`~specviz.regime.hardware.Hardware`: pure arithmetic, no model.

Inputs are a method's terms measured on this machine (:class:`MethodTerms`, from :mod:`specviz.regime.terms`):
what does not depend on the hardware (τ, α, the rows each round sends to the target, the layers each forward
covers, bytes over a link) and the costs that do, measured here in units of one ``ar`` step (drafting, the
draft lane's work, lane hops, bookkeeping). On a machine H:

* every target forward is costed by the hardware model (:func:`~specviz.regime.hardware.step_seconds`), never
  read off the measured spans: that is what the check against this machine tests;
* drafting measured here is scaled by how a resident forward costs on H against here (a drafter is a share c
  of a forward: its weights, its launches); bookkeeping stays the same seconds (the host does it); a lane hop costs H's link latency plus
  its bytes over H's link bandwidth;
* each family's latency law puts the pieces together:
  chain and tree (Leviathan; the tree model): T = T_draft + T_verify(n) + T_other;
  (MoA adds its server-side LSA, measured, as drafter upkeep);
  CATS: T = γ̄·t_draft + t_SV + t_reforward + t_deep (its memory-budget cycle: the deep pass streams what M
  leaves out);
  Mirror-SD: T = T_prefix + T_rv + max(T_suffix, T_gen) + FF·T_fallback;
  SSD: T = max(T_v, T_draftwork) + T_comm + (1 − h)·T_backup;
  PPSD: tokens/s = 1 ÷ (tick·(a + (1 − a)·P)), a tick the slowest stage's forward (its layers, the exit
  head, the LM head: the law's head term) plus its hop, P stages on P lanes;
  client–server (a machine with a ``client``): drafting on the client, verification on the server, and every
  round (ar: every token) pays a round trip and its bytes (MoA's cycle law).
  With fewer lanes than a law overlaps, the overlap is lost and the pieces add.

speedup = τ·t_ar / T, t_ar one ``ar`` token on the same H. Everything here is a projection: only the row for
this machine is checked against a measurement.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .hardware import Hardware, step_seconds

LAWS = ("ar", "serial", "cats", "mirror", "ssd", "ppsd")


@dataclass
class MethodTerms:
    """One method's round, measured on this machine (times in ``ar`` steps of that machine)."""

    label: str
    method: str
    law: str
    tau: float  # tokens committed per round (PPSD: 1)
    alpha: float
    a: float  # per-position acceptance (PPSD's law uses it)
    gamma_bar: float
    c: float  # draft cost: one draft token ÷ one ar token, measured here
    forwards: list = field(default_factory=list)  # [[role, rows, share of the weights], ...] per round
    draft: float = 0.0  # drafting per round on the critical path (serial laws); the draft lane's work (mirror/ssd)
    other: float = 0.0  # bookkeeping per round
    hops: float = 0.0  # lane messages per round (PPSD: per tick) on the critical path
    hop_bytes: float = 0.0  # bytes per such message
    fallback: float = 0.0  # Mirror: FF·T_fallback; SSD: (1 − h)·T_backup
    link_bytes: float = 0.0  # bytes per round a client–server link carries
    upkeep: float = 0.0  # drafter upkeep inside verification (MoA's LSA), measured; scales like drafting
    stages: int = 1  # PPSD's P; lanes the method needs
    measured_speedup: float = float("nan")
    measured_verify: float = float("nan")  # the target's measured work per round, for the record

    def __post_init__(self):
        if self.law not in LAWS:
            raise ValueError(f"law must be one of {LAWS}, got {self.law!r}")
        if not self.tau >= 1:
            raise ValueError(f"tau must be >= 1, got {self.tau}")
        if self.c < 0 or self.draft < 0 or self.other < 0:
            raise ValueError("c, draft and other must be >= 0")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class MachineTerms:
    """Every method's terms from one session, with the model of the machine they were measured on."""

    weight_bytes: float
    ar_step_model: float  # seconds of one ar forward on this machine by the hardware model
    ar_tokens_per_s: float  # measured in the same session
    this_machine: Hardware
    methods: list[MethodTerms]
    setup: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(weight_bytes=self.weight_bytes, ar_step_model=self.ar_step_model,
                    ar_tokens_per_s=self.ar_tokens_per_s, this_machine=self.this_machine.to_dict(),
                    methods=[m.to_dict() for m in self.methods], setup=self.setup)

    @classmethod
    def from_dict(cls, record: dict) -> "MachineTerms":
        return cls(weight_bytes=record["weight_bytes"], ar_step_model=record["ar_step_model"],
                   ar_tokens_per_s=record["ar_tokens_per_s"], this_machine=Hardware.from_dict(record["this_machine"]),
                   methods=[MethodTerms(**m) for m in record["methods"]], setup=record.get("setup", {}))

    def method(self, label: str) -> MethodTerms:
        for m in self.methods:
            if m.label == label:
                return m
        raise ValueError(f"label must be one of {[m.label for m in self.methods]}, got {label!r}")


def _draft_scale(terms: MachineTerms, m: MethodTerms, hw: Hardware) -> float:
    """How much longer (or shorter) drafting takes on ``hw`` than here: a forward over a share c of the target,
    held in memory (a drafter is small enough to stay resident), costs the same share of a resident step."""
    where = hw.client or hw
    share = min(max(m.c, 1e-3), 1.0)
    w = terms.weight_bytes
    return (step_seconds(where, w, 1, share, resident_bytes=w)
            / step_seconds(terms.this_machine, w, 1, share, resident_bytes=w))


def _forward(terms: MachineTerms, m: MethodTerms, hw: Hardware, rows: float, share: float) -> float:
    """A target forward on ``hw`` (the server, in client–server): M holds the same target bytes as for ``ar``
    (the drafter's own weights are not charged to M: self-speculative drafters share the target's, and the
    measured c counts time, not bytes)."""
    return step_seconds(hw, terms.weight_bytes, rows, share)


def _hop(m: MethodTerms, hw: Hardware) -> float:
    return hw.link_latency + m.hop_bytes / hw.link_bandwidth


def ar_token_seconds(terms: MachineTerms, hw: Hardware) -> float:
    """One ``ar`` token on ``hw``: one forward; in client–server, plus the round trip of its token."""
    t = step_seconds(hw, terms.weight_bytes, 1)
    if hw.client is not None:
        t += 2 * hw.link_latency + 8 / hw.link_bandwidth
    return t


def round_seconds(terms: MachineTerms, m: MethodTerms, hw: Hardware) -> float:
    """Seconds of one round of ``m`` on ``hw`` by its law (PPSD: seconds per token)."""
    unit = terms.ar_step_model  # one ar step here, in seconds, by the same hardware model
    scale = _draft_scale(terms, m, hw)
    parts = {role: _forward(terms, m, hw, rows, share) for role, rows, share in m.forwards}
    other = m.other * unit
    if m.law == "ar":
        return ar_token_seconds(terms, hw)
    if m.law == "ppsd":
        share = m.forwards[0][2] if m.forwards else 1 / m.stages
        tick = _forward(terms, m, hw, 1, share) + m.hops * _hop(m, hw)
        if hw.lanes < m.stages and hw.client is None:
            tick *= m.stages  # one lane runs every stage in turn: no pipelining
        return tick * (m.a + (1 - m.a) * m.stages)
    overlap = hw.lanes >= 2 or hw.client is not None
    if m.law == "mirror":
        gen = m.draft * unit * scale
        rv = m.hops * _hop(m, hw)
        suffix = parts["suffix"]
        core = max(suffix, gen) if overlap else suffix + gen
        return parts["prefix"] + rv + core + m.fallback * unit * scale + other
    if m.law == "ssd":
        work = m.draft * unit * scale
        core = max(parts["verify"], work) if overlap else parts["verify"] + work
        return core + m.hops * _hop(m, hw) + m.fallback * unit * scale + other
    # serial laws: chain, tree, CATS's cycle, MoA's (client–server) cycle
    t = (m.draft + m.upkeep) * unit * scale + sum(parts.values()) + other
    if hw.client is not None:
        t += 2 * hw.link_latency + m.link_bytes / hw.link_bandwidth
    return t


def projected_speedup(terms: MachineTerms, m: MethodTerms, hw: Hardware) -> float:
    """S on ``hw``: τ tokens per round over the round's seconds, against ``ar`` on the same ``hw``."""
    if m.law == "ar":
        return 1.0
    return m.tau * ar_token_seconds(terms, hw) / round_seconds(terms, m, hw)


def projection_table(terms: MachineTerms, machines: list[Hardware]) -> dict[str, dict[str, float]]:
    """label → machine name → projected speedup."""
    return {m.label: {hw.name: projected_speedup(terms, m, hw) for hw in machines} for m in terms.methods}


def check_rows(terms: MachineTerms) -> list[dict]:
    """Projected (this machine, by the law and the hardware model) against measured speedup, per method."""
    rows = []
    for m in terms.methods:
        projected = projected_speedup(terms, m, terms.this_machine)
        measured = m.measured_speedup
        ratio = projected / measured if measured and not math.isnan(measured) else float("nan")
        rows.append(dict(label=m.label, law=m.law, projected=projected, measured=measured, ratio=ratio))
    return rows


def winners(table: dict[str, dict[str, float]]) -> dict[str, tuple[str, float]]:
    """machine → (the method with the highest projected speedup there, that speedup)."""
    machines = next(iter(table.values())).keys() if table else []
    return {hw: max(((label, row[hw]) for label, row in table.items()), key=lambda x: x[1]) for hw in machines}
