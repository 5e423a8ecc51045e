"""Reading a pipelined run (PPSD) from its events: which lane did what when, and where the time went.

Every stage compute belongs to a *tick* (stage 1's step that drafted one token); the tick's fate is the
verdict on that draft — ``accepted``, ``rejected``, ``flushed`` (a rejection earlier in the pipeline made
it stale before it was judged) or ``unused`` (the run ended first). The prompt's tick is ``prefill``.
Single-lane runs (``ar``, ``eesd``) are read from their stage spans, so all three can be drawn on one
time axis.
"""

from __future__ import annotations

import statistics
from typing import Iterable, Sequence

from engines.core.trace import Check, Commit, Event, Flush, Prefill, RunEnd, RunStart, StageCompute, StageSpan

FATES = ("prefill", "accepted", "rejected", "flushed", "unused")


def tick_fates(events: Sequence[Event]) -> dict[int, str]:
    fates: dict[int, str] = {}
    for event in events:
        if isinstance(event, Check):
            fates[event.tick] = "accepted" if event.accepted else "rejected"
        elif isinstance(event, Flush):
            fates.setdefault(event.tick, "flushed")
    return fates


def gantt_rows(events: Sequence[Event]) -> list[dict]:
    """One row per piece of work: ``lane``, ``start``, ``end`` (seconds since the run started), ``label``
    and ``fate``. Pipelines give stage computes (fate of their tick); other runs give their stage spans
    (fate = the span's stage: draft, verify, …)."""
    fates = tick_fates(events)
    rows = []
    for event in events:
        if isinstance(event, StageCompute):
            fate = "prefill" if event.rows > 1 else fates.get(event.tick, "unused")
            rows.append({"lane": event.lane, "start": event.start, "end": event.end, "tick": event.tick,
                         "stage": event.stage, "position": event.position, "fate": fate,
                         "label": f"stage {event.stage + 1} · tick {event.tick} · pos {event.position}"})
        elif isinstance(event, StageSpan):
            rows.append({"lane": event.lane, "start": event.start, "end": event.end, "tick": event.round,
                         "stage": 0, "position": None, "fate": event.stage,
                         "label": f"{event.stage} · round {event.round}"})
    return rows


def pipeline_metrics(events: Iterable[Event]) -> dict:
    """Where a pipelined run's decode time went (prefill excluded).

    ``ticks_per_token``: stage-1 steps per committed token (1 if every draft is accepted, P if none is);
    ``tick_seconds``: decode time ÷ ticks; ``stage_seconds``: median compute per stage; ``idle``: each
    lane's idle fraction of the decode span; ``message_seconds``: median wait from a stage finishing to the
    next one starting on the same tick, when that one was ready (transfer and wake-up);
    ``message_bytes_per_token``; ``position_acceptance``: the per-position acceptance (estimates a), accepted ÷ judged drafts (the
    per-token acceptance probability a that Eq. 6 takes); ``eq6_tokens_per_s``: Eq. 6 at that a with one
    tick = the slowest stage's median compute plus the message time (``None`` for a serial run, whose
    stages never overlap).
    """
    events = list(events)
    computes = [e for e in events if isinstance(e, StageCompute) and e.rows == 1]
    if not computes:
        return {}
    start = next((e.t for e in events if isinstance(e, Prefill)), min(c.start for c in computes))
    end = next((e.t for e in events if isinstance(e, RunEnd)), max(c.end for c in computes))
    decode = [c for c in computes if c.start >= start - 1e-9] or computes
    tokens = sum(len(e.tokens) for e in events if isinstance(e, Commit) and e.round > 0)
    lanes: dict[int, str] = {}
    busy: dict[int, float] = {}
    durations: dict[int, list[float]] = {}
    for c in decode:
        lanes.setdefault(c.stage, c.lane)
        busy[c.stage] = busy.get(c.stage, 0.0) + c.end - c.start
        durations.setdefault(c.stage, []).append(c.end - c.start)
    span = max(end - start, 1e-9)
    by_tick = {(c.tick, c.stage): c for c in decode}
    waits = []
    for (tick, stage), c in by_tick.items():
        before = by_tick.get((tick, stage - 1))
        previous = [d.end for d in decode if d.stage == stage and d.end <= c.start and d.tick < tick]
        if before is not None and (not previous or max(previous) <= before.end):  # it was waiting for this one
            waits.append(max(c.start - before.end, 0.0))
    checks = [e for e in events if isinstance(e, Check)]
    accepted = sum(e.accepted for e in checks[1:])  # the first judges the prompt's draft (prefill)
    alpha = accepted / max(len(checks) - 1, 1)
    stages = max(lanes) + 1
    ticks = sum(1 for c in decode if c.stage == 0)
    message = statistics.median(waits) if waits else 0.0
    stage_seconds = {lanes[s]: statistics.median(d) for s, d in sorted(durations.items())}
    tick_model = max(stage_seconds.values()) + message
    sent = sum(getattr(e, "bytes", 0) for e in events if e.kind == "activation_send")
    start_event = next((e for e in events if isinstance(e, RunStart)), None)
    clock = start_event.clock if start_event else "wall"
    serial = bool(start_event) and start_event.config.get("mode") == "serial"  # not a pipeline in time
    from ..theory import ppsd_tokens_per_s

    return {
        "clock": clock,
        "stages": stages,
        "tokens": tokens,
        "ticks": ticks,
        "ticks_per_token": ticks / tokens if tokens else None,
        "tick_seconds": span / ticks if ticks else None,
        "stage_seconds": stage_seconds,
        "idle": {lanes[s]: 1 - busy[s] / span for s in sorted(busy)},
        "message_seconds": message,
        "message_bytes_per_token": sent / tokens if tokens else None,
        "position_acceptance": alpha,
        "checks": max(len(checks) - 1, 0),
        "accepted": accepted,
        "span": span,
        "busy": {lanes[s]: busy[s] for s in sorted(busy)},
        "tokens_per_s": tokens / span,
        "mode": "serial" if serial else clock,
        "eq6_tokens_per_s": None if serial else ppsd_tokens_per_s(alpha, stages, tick_model),
    }


def text_strip(events: Sequence[Event], detokenize) -> list[dict]:
    """The run as a strip of pieces: each judged draft in order, ``accepted`` (kept), or ``rejected`` (struck
    out) followed by the target's ``correction``; ``detokenize`` turns one token id into text."""
    strip = []
    for event in events:
        if isinstance(event, Check):
            if event.accepted:
                strip.append({"text": detokenize(event.draft), "fate": "accepted", "position": event.position})
            else:
                strip.append({"text": detokenize(event.draft), "fate": "rejected", "position": event.position})
                strip.append({"text": detokenize(event.target), "fate": "correction", "position": event.position})
    return strip
