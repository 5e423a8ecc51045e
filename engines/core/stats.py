"""Run statistics, derived from the event stream alone so a replayed trace gives the same numbers.

Definitions (README, "Glossary"): tokens/s over generated tokens excluding prefill time;
τ (mean accepted length) = tokens committed per verification round, bonus/correction included, so
autoregressive decoding has τ = 1.0; α (the acceptance rate, ``acceptance_rate``) = accepted ÷ drafted,
pooled over the run. Two other ratios, never called α: the acceptance by draft position
(``acceptance_by_position``: at each depth, accepted ÷ rounds that reached it) and the per-position
acceptance (``per_token_acceptance``: accepted ÷ positions the target judged — a rejection ends a round,
so later drafts are never tested), the estimate of the per-token acceptance probability in the i.i.d.
acceptance model of Leviathan et al. The token the prefill produces belongs to no round; target calls
count the prefill plus one call per round.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Iterable

from engines.core.trace import Commit, Event, LinkSend, Prefill, RunEnd, RunStart, StreamChunk


@dataclass
class Stats:
    new_tokens: int
    target_calls: int
    rounds: int
    drafted: int
    accepted: int
    prefill_seconds: float
    decode_seconds: float
    tokens_per_s: float
    mean_accepted_length: float
    acceptance_rate: float
    # Counts, not ratios, so runs can be pooled (the benchmark sums them over prompts).
    reached_by_position: list  # rounds whose draft the target judged at each position (a rejection ends the round)
    passed_by_position: list  # of those, the rounds where the target accepted that position
    # Memory-budget runs only (engines.memory_budget.weight_stream); 0 where the whole model stayed resident.
    bytes_streamed: int = 0  # layer-file bytes read from the emulated flash
    bytes_per_token: float = 0.0  # bytes_streamed ÷ new tokens
    peak_resident_bytes: int = 0  # weights in memory at the peak, streamed layers counted while loaded
    clock: str = "wall"  # "virtual": seconds replayed from measured per-operation costs, never wall time
    # Client–server runs only (engines.programs.client_server): the simulated link's share, already inside
    # decode_seconds (clock "wall+link": measured compute plus simulated network time).
    link_seconds: float = 0.0
    link_bytes: int = 0
    link_messages: int = 0
    link_resends: int = 0

    DERIVED = ("acceptance_by_position", "positions_tested", "per_token_acceptance")

    @property
    def acceptance_by_position(self) -> list[float]:
        return [p / r for p, r in zip(self.passed_by_position, self.reached_by_position)]

    @property
    def positions_tested(self) -> int:
        return sum(self.reached_by_position)

    @property
    def per_token_acceptance(self) -> float:
        """Per-position acceptance: accepted ÷ positions tested, the estimate of the per-token acceptance
        probability of Leviathan et al.'s i.i.d. model (the papers' α; not this project's α, ``acceptance_rate``)."""
        return sum(self.passed_by_position) / self.positions_tested if self.positions_tested else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), **{name: getattr(self, name) for name in self.DERIVED}}

    @classmethod
    def from_dict(cls, record: dict) -> "Stats":
        return cls(**{f.name: record[f.name] for f in fields(cls) if f.name in record})  # older: defaults


def position_counts(rounds: Iterable[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """``rounds``: (accepted, depth) per round, depth the longest draft the target judged. Returns
    (reached, passed) per draft position: the rounds whose draft the target judged there, and of those the
    rounds where it accepted. A round judges positions up to its first refusal (accepted + 1) and never past
    its depth; the positions after a refusal were never judged, so they count nowhere. Kept apart from
    :func:`compute_stats` because it is the one place the acceptance-by-position profile is defined (and the
    exercise of notebook 02 rewrites it)."""
    reached: list[int] = []
    passed: list[int] = []
    for accepted, depth in rounds:
        for position in range(min(accepted + 1, depth)):
            if position == len(reached):
                reached.append(0)
                passed.append(0)
            reached[position] += 1
            passed[position] += position < accepted
    return reached, passed


def compute_stats(events: Iterable[Event], end_time: float | None = None) -> Stats:
    commits: list[Commit] = []
    prefill_end = prefill_seconds = 0.0
    bytes_streamed = peak_resident_bytes = 0
    clock = "wall"
    link_seconds, link_bytes, link_messages, link_resends = 0.0, 0, 0, 0
    for event in events:
        if isinstance(event, RunStart):
            clock = event.clock
        if isinstance(event, LinkSend):
            link_seconds += event.seconds
            link_bytes += event.bytes
            link_messages += 1
            link_resends += event.attempts - 1
        if isinstance(event, StreamChunk):
            bytes_streamed += event.bytes
            peak_resident_bytes = max(peak_resident_bytes, event.resident_bytes)
        elif isinstance(event, RunStart) and event.memory:
            peak_resident_bytes = max(peak_resident_bytes, event.memory.get("resident_bytes", 0))
        elif isinstance(event, Commit):
            commits.append(event)
        elif isinstance(event, Prefill):
            prefill_end, prefill_seconds = event.t, event.seconds
        elif isinstance(event, RunEnd):
            end_time = event.t
    # a disconnected client's own tokens (fate "client", engines.programs.client_server) are no target call
    rounds = [c for c in commits if c.round > 0 and "client" not in c.fates]
    new_tokens = sum(len(c.tokens) for c in commits)
    drafted = sum(c.drafted for c in rounds)
    accepted = sum(c.accepted for c in rounds)
    decode_seconds = max((end_time if end_time is not None else prefill_end) - prefill_end, 1e-9)
    reached, passed = position_counts([(c.accepted, c.drafted if c.draft_depth is None else c.draft_depth)
                                       for c in rounds])
    return Stats(
        new_tokens=new_tokens,
        target_calls=len(rounds) + (1 if commits else 0),
        rounds=len(rounds),
        drafted=drafted,
        accepted=accepted,
        prefill_seconds=prefill_seconds,
        decode_seconds=decode_seconds,
        tokens_per_s=new_tokens / decode_seconds,
        mean_accepted_length=sum(len(c.tokens) for c in rounds) / len(rounds) if rounds else 1.0,
        acceptance_rate=accepted / drafted if drafted else 0.0,
        reached_by_position=reached,
        passed_by_position=passed,
        bytes_streamed=bytes_streamed,
        bytes_per_token=bytes_streamed / new_tokens if new_tokens else 0.0,
        peak_resident_bytes=peak_resident_bytes,
        clock=clock,
        link_seconds=link_seconds,
        link_bytes=link_bytes,
        link_messages=link_messages,
        link_resends=link_resends,
    )
