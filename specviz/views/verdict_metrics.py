"""Speculation on the verdict (Mirror-SD, paper 000; SSD, paper 002; docs/mirror-and-ssd.md) drawn from one
run's events.

Both methods let the draft lane prepare round t+1's window while the target is still verifying round t:
Mirror from the target's early exit (top-κ at each of the γ+1 positions), SSD from the draft's own logits
(fan-out F_k per accepted length k). When the verdict ``(k accepted, token c)`` arrives, a prepared window
is reused (hit) or a fresh one is made on the critical path (fallback / backup). Every view here answers
one question about that bet, from the trace schema 4 events of :mod:`engines.core.trace`:

* :func:`verdict_metrics` / :func:`draft_time_split` — the numbers: τ, acceptance, hit rate, how much draft
  work hid under target compute and how much the target waited for, stage costs, message hops, and the
  latency law (:func:`specviz.theory.mirror_step_time`, :func:`specviz.theory.ssd_round_time`) beside them.
* :func:`specviz.views.verdict_gantt.verdict_gantt` — the two-lane Gantt (§3.8 view 1, §5.9 view 5) with rendezvous arrows.
* :mod:`specviz.views.mirror_sd` — Mirror: the hypothesis grid, overlap rate, fallback heatmap and latency law.
* :mod:`specviz.views.ssd` — SSD: the speculation cache, the accepted lengths, hit rate against fan-out and the
  optimal fan-out.

Every function takes the events of ONE run and is safe on a partial list (a dashboard redraws while a run
streams): what has not happened yet is missing, never an error. Times in events are seconds; figures and
metrics show milliseconds.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import mean
from typing import Iterable, Sequence

import plotly.graph_objects as go

from engines.core.trace import (
    Backup,
    BranchRollout,
    CacheLookup,
    Commit,
    Event,
    LaneMessage,
    Prefill,
    RunEnd,
    RunStart,
    StageSpan,
)

from ..theory import law_tokens_per_s, mirror_step_time, ssd_round_time

TARGET_COMPUTE = ("prefix", "suffix", "verify")  # target-lane stages that do work ("wait" is idle)
RENDEZVOUS = ("ee", "verdict", "window")  # per-round messages ("start"/"end" happen once and include start-up)


HIT_GREEN, MISS_RED = "#2e7d32", "#c62828"
TARGET_Y, DRAFT_Y = 1.0, 0.0


# --- reading a run --------------------------------------------------------------------------------
def _first(events: Sequence[Event], cls) -> Event | None:
    return next((e for e in events if isinstance(e, cls)), None)


def _last(events: Sequence[Event], cls) -> Event | None:
    return next((e for e in reversed(events) if isinstance(e, cls)), None)


def _of(events: Iterable[Event], cls) -> list:
    return [e for e in events if isinstance(e, cls)]


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return mean(values) if values else None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1e3 * seconds


def run_config(events: Sequence[Event]) -> dict:
    start = _first(events, RunStart)
    return dict(start.config) if start is not None else {}


def run_mode(events: Sequence[Event]) -> str | None:
    """``lanes`` or ``serial`` (the method's option), else guessed from the lane names (``cpu0/target``)."""
    mode = run_config(events).get("mode")
    if mode is None:
        target, draft = run_lanes(events)
        if target and draft:
            mode = "serial" if target.split("/")[0] == draft.split("/")[0] and target != draft else "lanes"
    return mode


def run_lanes(events: Sequence[Event]) -> tuple[str | None, str | None]:
    """(target lane, draft lane): RunStart's lane map, or where the target's and draft's work ran."""
    start = _first(events, RunStart)
    lanes = start.lanes if start is not None and start.lanes else {}
    target, draft = lanes.get("target"), lanes.get("draft")
    if target is None:
        target = next((e.lane for e in events if isinstance(e, StageSpan) and e.stage in (*TARGET_COMPUTE, "wait")),
                      None)
    if draft is None:
        draft = next((e.lane for e in events if isinstance(e, (BranchRollout, Backup))), None)
    return target, draft


def lookahead(events: Sequence[Event]) -> int | None:
    """γ (Mirror; SSD's lookahead): the configured window, else the longest window a round drafted."""
    config = run_config(events)
    for key in ("gamma", "lookahead"):
        if key in config:
            return int(config[key])
    drafted = [c.drafted for c in _of(events, Commit)]
    return max(drafted) if drafted and max(drafted) > 0 else None


def verdict_rounds(events: Sequence[Event]) -> list[Commit]:
    """Commits of verification rounds (round ≥ 1; round 0 is the token the prefill produced)."""
    return [c for c in _of(events, Commit) if c.round >= 1]


# --- time on the two lanes ----------------------------------------------------------------------------
def _merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _split(start: float, end: float, covered: Sequence[tuple[float, float]]) -> list[tuple[float, float, bool]]:
    """[start, end] cut into pieces (a, b, hidden): hidden where it lies under ``covered`` (merged intervals)."""
    pieces, cursor = [], start
    for a, b in covered:
        if b <= cursor or a >= end:
            continue
        if a > cursor:
            pieces.append((cursor, a, False))
        pieces.append((max(a, cursor), min(b, end), True))
        cursor = min(b, end)
        if cursor >= end:
            break
    if cursor < end:
        pieces.append((cursor, end, False))
    return pieces


def target_compute(events: Sequence[Event]) -> list[tuple[float, float]]:
    """When the target lane computed (prefill, prefix, suffix, verify), merged: what draft work can hide under."""
    target, _ = run_lanes(events)
    spans = [(s.start, s.end) for s in _of(events, StageSpan) if s.stage in TARGET_COMPUTE
             and (target is None or s.lane == target)]
    spans += [(p.t - p.seconds, p.t) for p in _of(events, Prefill)]
    return _merge(spans)


def draft_work(events: Sequence[Event]) -> list[dict]:
    """Every piece of draft-lane work: glue spans, branch rollouts and backups, as
    ``{kind, round, start, end, label}`` sorted by start (``kind`` is ``glue``, ``rollout`` or ``backup:<kind>``)."""
    target, draft = run_lanes(events)
    items = []
    for e in events:
        if isinstance(e, StageSpan) and e.stage not in (*TARGET_COMPUTE, "wait") and e.lane != target:
            items.append(dict(kind=e.stage, round=e.round, start=e.start, end=e.end, label=f"{e.stage} · round {e.round}"))
        elif isinstance(e, BranchRollout):
            items.append(dict(kind="rollout", round=e.round, start=e.start, end=e.end,
                              label=f"branch rollout · round {e.round} · {len(e.roots)} roots × {e.steps} steps"))
        elif isinstance(e, Backup):
            items.append(dict(kind=f"backup:{e.backup}", round=e.round, start=e.start, end=e.end,
                              label=f"{e.backup} backup · round {e.round} · {e.tokens} tokens"))
    return sorted(items, key=lambda item: item["start"])


def draft_time_split(events: Sequence[Event]) -> list[dict]:
    """Per round, the draft lane's work cut into the part hidden under target compute and the exposed rest.

    A piece of draft work counts as hidden where the target lane was computing at the same time (it cost the
    run nothing) and exposed elsewhere (the target was idle, waiting for it, or the run is serial). So
    ``hidden_s + exposed_s = draft_s`` exactly. A round's work is everything tagged with that round: its glue,
    the rollout of the cache for its verdict and the backup after a miss (round 0 holds the first window).
    Rows: ``{round, draft_s, hidden_s, exposed_s, glue_s, rollout_s, backup_s}``."""
    covered = target_compute(events)
    rows: dict[int, dict] = {}
    for item in draft_work(events):
        row = rows.setdefault(item["round"], dict(round=item["round"], draft_s=0.0, hidden_s=0.0, exposed_s=0.0,
                                                  glue_s=0.0, rollout_s=0.0, backup_s=0.0))
        length = item["end"] - item["start"]
        hidden = sum(b - a for a, b, under in _split(item["start"], item["end"], covered) if under)
        row["draft_s"] += length
        row["hidden_s"] += hidden
        row["exposed_s"] += length - hidden
        part = "backup_s" if item["kind"].startswith("backup") else f"{item['kind']}_s"
        row[part] = row.get(part, 0.0) + length
    return [rows[r] for r in sorted(rows)]


def message_hops(events: Sequence[Event]) -> list[dict]:
    """Each rendezvous message with when its receiver acted on it: ``{what, round, lane, to_lane, sent,
    received, seconds}``.

    The receiver's action is its next piece of work (a span, rollout or backup start) or its next message sent,
    at or after the moment it was free: a message that arrives while the receiver is busy waits for that work
    to end, and that queueing is not the message's cost. In serial mode both lanes share one process, so work
    on either lane keeps it busy. ``received`` is ``None`` while the receiver has not acted yet (a live run)."""
    target, draft = run_lanes(events)
    serial = run_mode(events) == "serial"
    work: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if isinstance(e, StageSpan) and e.stage != "wait":
            work[e.lane].append((e.start, e.end))
        elif isinstance(e, (BranchRollout, Backup)):
            work[e.lane].append((e.start, e.end))
        elif isinstance(e, LaneMessage):
            work[e.lane].append((e.t, e.t))
    if serial:
        shared = work.get(target, []) + work.get(draft, [])
        work = defaultdict(list, {target: shared, draft: shared})
    hops = []
    for m in _of(events, LaneMessage):
        if m.what not in RENDEZVOUS:
            continue
        items = work.get(m.to_lane, [])
        free = max([m.t] + [end for start, end in items if start <= m.t < end])
        starts = [start for start, _ in items if start >= free - 1e-9]
        received = min(starts) if starts else None
        hops.append(dict(what=m.what, round=m.round, lane=m.lane, to_lane=m.to_lane, sent=m.t, received=received,
                         seconds=None if received is None else max(received - free, 0.0)))
    return sorted(hops, key=lambda hop: hop["sent"])


def _stage_seconds(events: Sequence[Event], stage: str) -> list[float]:
    return [s.end - s.start for s in _of(events, StageSpan) if s.stage == stage]


def _hop_seconds(hops: Sequence[dict], what: str) -> float | None:
    return _mean(h["seconds"] for h in hops if h["what"] == what and h["seconds"] is not None)


def waits_after_lookup(events: Sequence[Event]) -> dict[str, list[float]]:
    """The target's wait (seconds) at the start of each round, grouped by how the previous round's lookup went
    (``hit`` or ``miss``): what a hit saves is the difference. Mirror-SD and SSD both log a lookup per round."""
    target = run_lanes(events)[0]
    waits = {s.round: s.end - s.start for s in _of(events, StageSpan) if s.stage == "wait" and s.lane == target}
    after: dict[str, list[float]] = {"hit": [], "miss": []}
    for lookup in _of(events, CacheLookup):
        if lookup.round + 1 in waits:
            after["hit" if lookup.hit else "miss"].append(waits[lookup.round + 1])
    return after


def verdict_metrics(events: Sequence[Event]) -> dict:
    """One run's numbers, with the latency law at the measured costs beside the measured throughput.

    * ``tau``: tokens committed per verification round; ``acceptance``: accepted/drafted (α = E[A]/γ; the SSD paper's ρ);
      ``hit_rate``: cache lookups that hit; ``fallback_rate = 1 − hit_rate``.
    * ``hidden_draft_ms`` / ``exposed_draft_ms``: mean per round of :func:`draft_time_split` (they sum to the
      draft work). ``wait_ms``: the target's mean "wait" span, which is the exposed draft time plus message
      hops; the first wait is left out of that mean because it also covers the draft lane's start-up.
    * ``prefix_ms``, ``suffix_ms``, ``verify_ms``, ``glue_ms``, ``rollout_ms``: mean per occurrence;
      ``backup_ms``: mean of the backups after misses (the first window is ``initial_ms``);
      ``draftwork_ms``: glue + rollout, the draft's per-round work SSD's law compares with T_v.
    * ``message_ms``: mean hop of the ee/verdict/window messages (:func:`message_hops`), ``None`` if none
      could be timed; ``message_ms_by_kind`` per kind.
    * ``tokens_per_s``: RunEnd's (all tokens over the decode time), or from the commits so far in a live run;
      ``steady_tokens_per_s``: from the second round's commit on, so neither lane start-up nor the first
      window counts — the law models a steady round, so ``law["ratio"]`` divides this one.
    * ``law``: ``{"tokens_per_s", "ratio", "step_ms", "no_overlap_tokens_per_s", "formula"}`` — Mirror:
      :func:`~specviz.theory.mirror_step_time` with T_gen = rollout, T_rv = ee + verdict hops, FF =
      ``fallback_rate`` and the measured fallback cost; SSD: :func:`~specviz.theory.ssd_round_time` with T_v =
      verify, T_draftwork = glue + rollout, T_comm = verdict + window hops, T_backup = ``backup_ms``.
      ``no_overlap_tokens_per_s`` is the same costs with nothing overlapped (what the serial mode should reach).
      ``None`` for other methods or before the costs are known.
    """
    start = _first(events, RunStart)
    method = start.method if start is not None else None
    commits = verdict_rounds(events)
    drafted = sum(c.drafted for c in commits)
    lookups = _of(events, CacheLookup)
    hits = sum(1 for x in lookups if x.hit)
    hit_rate = hits / len(lookups) if lookups else None
    split = draft_time_split(events)
    hops = message_hops(events)
    waits = [s for s in _of(events, StageSpan) if s.stage == "wait"]
    steady_waits = [s.end - s.start for s in waits if s.round >= 2] or [s.end - s.start for s in waits]
    backups = _of(events, Backup)
    misses = [b.end - b.start for b in backups if b.backup != "initial"]
    initial = [b.end - b.start for b in backups if b.backup == "initial"]
    rollouts = [r.end - r.start for r in _of(events, BranchRollout)]
    glue = _stage_seconds(events, "glue")
    config = run_config(events)
    metrics = dict(
        method=method, mode=run_mode(events), clock=start.clock if start is not None else None,
        rounds=len(commits), lookahead=lookahead(events), kappa=config.get("kappa"),
        exit_layer=config.get("exit_layer"),
        tau=sum(len(c.tokens) for c in commits) / len(commits) if commits else None,
        acceptance=sum(c.accepted for c in commits) / drafted if drafted else None,
        hit_rate=hit_rate, fallback_rate=None if hit_rate is None else 1 - hit_rate,
        lookups=len(lookups), hits=hits,
        hidden_draft_ms=_ms(_mean(r["hidden_s"] for r in split)),
        exposed_draft_ms=_ms(_mean(r["exposed_s"] for r in split)),
        wait_ms=_ms(_mean(steady_waits)),
        prefix_ms=_ms(_mean(_stage_seconds(events, "prefix"))), suffix_ms=_ms(_mean(_stage_seconds(events, "suffix"))),
        verify_ms=_ms(_mean(_stage_seconds(events, "verify"))), glue_ms=_ms(_mean(glue)),
        rollout_ms=_ms(_mean(rollouts)), backup_ms=_ms(_mean(misses)), initial_ms=_ms(_mean(initial)),
        draftwork_ms=_ms((_mean(glue) or 0.0) + _mean(rollouts)) if rollouts else None,
        message_ms=_ms(_mean(h["seconds"] for h in hops if h["seconds"] is not None)),
        message_ms_by_kind={what: _ms(_hop_seconds(hops, what)) for what in RENDEZVOUS
                            if any(h["what"] == what for h in hops)},
        tokens_per_s=_tokens_per_s(events), steady_tokens_per_s=_steady_tokens_per_s(events),
    )
    metrics["law"] = _law(metrics)
    return metrics


def _tokens_per_s(events: Sequence[Event]) -> float | None:
    end = _last(events, RunEnd)
    if end is not None and "tokens_per_s" in end.stats:
        return float(end.stats["tokens_per_s"])
    commits, prefill = _of(events, Commit), _first(events, Prefill)
    if not commits or prefill is None or commits[-1].t <= prefill.t:
        return None
    return sum(len(c.tokens) for c in commits) / (commits[-1].t - prefill.t)


def _steady_tokens_per_s(events: Sequence[Event]) -> float | None:
    commits = verdict_rounds(events)
    if len(commits) < 2 or commits[-1].t <= commits[0].t:
        return None
    return sum(len(c.tokens) for c in commits[1:]) / (commits[-1].t - commits[0].t)


def _law(m: dict) -> dict | None:
    """The latency law at the measured costs (see :func:`verdict_metrics`)."""
    def ms(key: str) -> float:  # seconds; a cost not measured counts as free
        return (m.get(key) or 0.0) / 1e3

    def hop(what: str) -> float:
        return (m["message_ms_by_kind"].get(what) or 0.0) / 1e3

    miss = m["fallback_rate"] if m["fallback_rate"] is not None else 0.0
    if m["tau"] is None:
        return None
    if m["method"] == "mirror" and m["prefix_ms"] is not None and m["suffix_ms"] is not None and m["rollout_ms"]:
        t_rv = hop("ee") + hop("verdict")
        fresh = ms("backup_ms") if m["backup_ms"] is not None else None
        step = mirror_step_time(ms("prefix_ms"), ms("suffix_ms"), ms("rollout_ms"), t_rv, miss, fresh)
        serial = (ms("prefix_ms") + ms("suffix_ms") + ms("glue_ms") + ms("rollout_ms") + t_rv
                  + miss * (ms("rollout_ms") if fresh is None else fresh))
        formula = "T_prefix + T_rv + max(T_suffix, T_rollout) + FF·T_fallback"
    elif m["method"] == "ssd" and m["verify_ms"] is not None:
        t_comm = hop("verdict") + hop("window")
        step = ssd_round_time(ms("verify_ms"), t_comm, 1 - miss, ms("backup_ms"), ms("draftwork_ms"))
        serial = ms("verify_ms") + ms("draftwork_ms") + t_comm + miss * ms("backup_ms")
        formula = "max(T_v, T_glue + T_rollout) + T_comm + (1 − h)·T_backup"
    else:
        return None
    if m.get("mode") == "serial":  # nothing overlaps in serial mode: its law is the no-overlap sum
        step, formula = serial, "no overlap (serial mode): every cost in turn"
    predicted = law_tokens_per_s(m["tau"], step)
    measured = m["steady_tokens_per_s"] if m["steady_tokens_per_s"] is not None else m["tokens_per_s"]
    return dict(tokens_per_s=predicted, ratio=None if measured is None else measured / predicted, step_ms=1e3 * step,
                no_overlap_tokens_per_s=law_tokens_per_s(m["tau"], serial), formula=formula)


def _empty(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=message, height=200, xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig
