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
* :func:`verdict_gantt` — the two-lane Gantt (§3.8 view 1, §5.9 view 5) with rendezvous arrows.
* :func:`hypothesis_grid`, :func:`overlap_rate`, :func:`fallback_heatmap`, :func:`mirror_law_figure` — Mirror.
* :func:`ssd_cache_table`, :func:`k_histogram`, :func:`hit_rate_vs_fanout`, :func:`acceptance_vs_hit`,
  :func:`fanout_figure` — SSD.

Every function takes the events of ONE run and is safe on a partial list (a dashboard redraws while a run
streams): what has not happened yet is missing, never an error. Times in events are seconds; figures and
metrics show milliseconds.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import mean
from typing import Callable, Iterable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engines.core.trace import (
    Backup,
    BranchRollout,
    CacheBuild,
    CacheLookup,
    Commit,
    EeMessage,
    Event,
    LaneMessage,
    Prefill,
    ReuseDecision,
    RunEnd,
    RunStart,
    StageSpan,
)
from engines.programs.verdict.speculation_cache import (
    acceptance_law,
    fit_power_law,
    geometric_fanout,
    predicted_hit_rate,
    uniform_fanout,
)

from .theory import law_tokens_per_s, mirror_step_time, ssd_round_time

TARGET_COMPUTE = ("prefix", "suffix", "verify")  # target-lane stages that do work ("wait" is idle)
RENDEZVOUS = ("ee", "verdict", "window")  # per-round messages ("start"/"end" happen once and include start-up)
KIND_COLOURS = {"prefill": "#1565c0", "prefix": "#78909c", "suffix": "#37474f", "verify": "#455a64",
                "wait": "#e0e0e0", "glue": "#8d6e63", "rollout": "#2e7d32", "backup:initial": "#9e9e9e",
                "backup:jit": "#c62828", "backup:fast": "#ef6c00", "backup:fallback": "#c62828"}
KIND_LABELS = {"prefill": "prefill (target)", "prefix": "prefix: layers 1..l_e + early exit",
               "suffix": "suffix: layers l_e+1..N + verify", "verify": "verify (whole target)",
               "wait": "wait: target idle for the next window", "glue": "glue: draft over the window",
               "rollout": "branch rollout (the cache)", "backup:initial": "first window",
               "backup:jit": "backup: JIT draft (miss)", "backup:fast": "backup: fast lookup (miss)",
               "backup:fallback": "fallback: fresh rollout (miss)"}
MESSAGE_COLOURS = {"ee": "#6a1b9a", "verdict": "#1565c0", "window": "#ef6c00"}
MESSAGE_LABELS = {"ee": "ee: early-exit top-κ → draft", "verdict": "verdict (k, c) → draft",
                  "window": "next window → target"}
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
    """γ (Mirror) or K (SSD): the configured window, else the longest window a round drafted."""
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


def verdict_metrics(events: Sequence[Event]) -> dict:
    """One run's numbers, with the latency law at the measured costs beside the measured throughput.

    * ``tau``: tokens committed per verification round; ``acceptance``: accepted/drafted (the paper's ρ = E[A]/γ);
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
        formula = "max(T_v, T_glue + T_rollout) + T_comm + (1 − P(hit))·T_backup"
    else:
        return None
    if m.get("mode") == "serial":  # nothing overlaps in serial mode: its law is the no-overlap sum
        step, formula = serial, "no overlap (serial mode): every cost in turn"
    predicted = law_tokens_per_s(m["tau"], step)
    measured = m["steady_tokens_per_s"] if m["steady_tokens_per_s"] is not None else m["tokens_per_s"]
    return dict(tokens_per_s=predicted, ratio=None if measured is None else measured / predicted, step_ms=1e3 * step,
                no_overlap_tokens_per_s=law_tokens_per_s(m["tau"], serial), formula=formula)


# --- (1) the two-lane Gantt -----------------------------------------------------------------------------
def gantt_bars(events: Sequence[Event]) -> list[dict]:
    """The bars :func:`verdict_gantt` draws: ``{lane: "target"|"draft", kind, round, start, end, hidden, label}``.
    Target bars are the prefill and every target-lane span (``hidden`` None); each piece of draft work is cut
    at the edges of target compute into hidden (True) and exposed (False) pieces."""
    target, _ = run_lanes(events)
    bars = [dict(lane="target", kind="prefill", round=0, start=p.t - p.seconds, end=p.t, hidden=None,
                 label=f"prefill · {p.n_tokens} prompt tokens") for p in _of(events, Prefill)]
    for s in _of(events, StageSpan):
        if s.stage in (*TARGET_COMPUTE, "wait") and (target is None or s.lane == target):
            bars.append(dict(lane="target", kind=s.stage, round=s.round, start=s.start, end=s.end, hidden=None,
                             label=f"{s.stage} · round {s.round}"))
    covered = target_compute(events)
    for item in draft_work(events):
        for a, b, under in _split(item["start"], item["end"], covered):
            bars.append(dict(lane="draft", kind=item["kind"], round=item["round"], start=a, end=b, hidden=under,
                             label=item["label"]))
    return bars


def verdict_gantt(events: Sequence[Event], title: str | None = None,
                  rounds: tuple[int, int] | None = None) -> go.Figure:
    """Target lane above draft lane, x = seconds since the run started: the target's prefill, prefix/suffix (or
    verify) and its waits; the draft's glue, branch rollouts and backups coloured by kind. Draft work done
    while the target computed is hatched and faded (hidden: it cost nothing); the rest is solid with a red
    edge (exposed: the target waited — backups after a miss, and everything in serial mode). Arrows are the
    rendezvous messages (ee, verdict, window) from sender at send time to receiver when it acted.
    ``rounds=(first, last)`` keeps only those rounds' bars and arrows (a long run is dense)."""
    bars = gantt_bars(events)
    hops = message_hops(events)
    if rounds is not None:
        lo, hi = rounds
        bars = [b for b in bars if lo <= b["round"] <= hi]
        hops = [h for h in hops if lo <= h["round"] <= hi]
    fig = go.Figure()
    groups: dict[tuple[str, bool | None], list[dict]] = defaultdict(list)
    for bar in bars:
        groups[(bar["kind"], bar["hidden"])].append(bar)
    order = list(KIND_COLOURS)
    for (kind, hidden), group in sorted(groups.items(), key=lambda kv: (order.index(kv[0][0]) if kv[0][0] in order
                                                                         else len(order), str(kv[0][1]))):
        fig.add_trace(_bar_trace(kind, hidden, group))
    target, draft = run_lanes(events)
    lane_y = {target: TARGET_Y, draft: DRAFT_Y}
    for what in RENDEZVOUS:
        chosen = [h for h in hops if h["what"] == what]
        if chosen:
            fig.add_trace(_arrow_trace(what, chosen, lane_y))
    from .ppsd_views import is_virtual  # one clock convention for every Gantt

    hidden = sum(b["end"] - b["start"] for b in bars if b["hidden"] is True)
    exposed = sum(b["end"] - b["start"] for b in bars if b["hidden"] is False)
    shown = f"rounds {rounds[0]}–{rounds[1]}" if rounds is not None else "whole run"
    note = (f"draft work ({shown}) {1e3 * (hidden + exposed):.0f} ms: {1e3 * hidden:.0f} ms hidden under target "
            f"compute, {1e3 * exposed:.0f} ms exposed · mode {run_mode(events) or '?'}"
            + (" · clock=virtual" if is_virtual(events) else ""))
    start = _first(events, RunStart)
    name = title or f"{start.method if start else 'run'}: who waits for whom"
    xaxis: dict = dict(title="seconds since the run started", rangemode="tozero")
    view = _view_range(bars)
    if view is not None:
        xaxis["range"] = list(view)
        if view[0] > 0.1:
            fig.add_annotation(x=view[0], y=TARGET_Y + 0.45, xanchor="left", showarrow=False,
                               font=dict(size=10, color="#616161"),
                               text=f"← {view[0]:.2f} s before: prefill and lane start-up (zoom out)")
    fig.update_layout(
        title=dict(text=f"{name}<br><sup>{note}</sup>"), barmode="overlay", height=380,
        xaxis=xaxis,
        yaxis=dict(tickvals=[TARGET_Y, DRAFT_Y], ticktext=[f"target · {target}", f"draft · {draft}"],
                   range=[-0.6, 1.6], title=None, automargin=True),
        legend=dict(orientation="h", x=0, y=-0.25, xanchor="left", yanchor="top"), margin=dict(t=70, b=40))
    return fig


def _view_range(bars: Sequence[dict]) -> tuple[float, float] | None:
    """The x range worth looking at: from the first draft work shown (the first window, in a whole run) to the
    last bar's end. What came before — the prefill and, in lanes mode, seconds of the draft lane starting up,
    which the first "wait" covers — would squeeze every round into a sliver."""
    work = [b["start"] for b in bars if b["lane"] == "draft" or b["kind"] in TARGET_COMPUTE]
    if not any(b["lane"] == "draft" for b in bars):
        return None
    lo, hi = min(work), max(b["end"] for b in bars)
    pad = 0.02 * (hi - lo)
    return max(lo - pad, 0.0), hi + pad


def _bar_trace(kind: str, hidden: bool | None, bars: Sequence[dict]) -> go.Bar:
    colour = KIND_COLOURS.get(kind, "#90a4ae")
    label = KIND_LABELS.get(kind, kind)
    y = TARGET_Y if bars[0]["lane"] == "target" else DRAFT_Y
    marker: dict = dict(color=colour, line=dict(width=0.5, color="#ffffff"))
    if hidden is True:
        label += " — hidden"
        marker.update(opacity=0.55, pattern=dict(shape="/", fgcolor="#ffffff", solidity=0.3))
    elif hidden is False:
        label += " — exposed"
        marker.update(line=dict(width=1.5, color=MISS_RED))
    elif kind == "wait":
        marker.update(pattern=dict(shape="x", fgcolor="#bdbdbd", solidity=0.2))
    return go.Bar(orientation="h", y=[y] * len(bars), base=[b["start"] for b in bars],
                  x=[max(b["end"] - b["start"], 0.0) for b in bars], width=0.5, name=label, marker=marker,
                  customdata=[[b["label"], 1e3 * b["start"], 1e3 * (b["end"] - b["start"])] for b in bars],
                  hovertemplate="%{customdata[0]}<br>start %{customdata[1]:.1f} ms · %{customdata[2]:.2f} ms"
                                f"<extra>{label}</extra>")


def _arrow_trace(what: str, hops: Sequence[dict], lane_y: dict) -> go.Scatter:
    """One trace of arrows (tail at the sender when sent, head at the receiver when it acted), None-separated."""
    xs, ys, sizes, custom = [], [], [], []
    for hop in hops:
        y0, y1 = lane_y.get(hop["lane"], TARGET_Y), lane_y.get(hop["to_lane"], DRAFT_Y)
        inset = 0.27 if y1 < y0 else -0.27
        received = hop["received"] if hop["received"] is not None else hop["sent"]
        ms = "not yet" if hop["seconds"] is None else f"{1e3 * hop['seconds']:.2f} ms"
        xs += [hop["sent"], received, None]
        ys += [y0 - inset, y1 + inset, None]
        sizes += [0, 9, 0]
        custom += [[hop["round"], ms]] * 3
    return go.Scatter(x=xs, y=ys, mode="lines+markers", name=MESSAGE_LABELS[what], customdata=custom,
                      line=dict(color=MESSAGE_COLOURS[what], width=1),
                      marker=dict(symbol="arrow", angleref="previous", size=sizes, color=MESSAGE_COLOURS[what]),
                      hovertemplate=f"{what} · round %{{customdata[0]}} · hop %{{customdata[1]}}<extra></extra>")


def arrow_count(fig: go.Figure) -> int:
    """Rendezvous arrows drawn in a :func:`verdict_gantt`."""
    return sum(sum(1 for x in trace.x if x is None) for trace in fig.data if trace.type == "scatter")


# --- (2) Mirror: the hypothesis grid, Ω_κ and the fallback heatmap ---------------------------------------
def _by_round(events: Sequence[Event], cls) -> dict[int, Event]:
    return {e.round: e for e in events if isinstance(e, cls)}


def hypothesis_grid(events: Sequence[Event], round_: int | None = None,
                    token_text: Callable[[int], str] | None = None) -> go.Figure:
    """Mirror's bet for one round: the early exit's top-κ (columns, best first) at each of the γ+1 verified
    positions (rows, j = 0 predicts the first draft token), coloured by log p̃. Outlined: the tokens the
    target actually took — accepted drafts (blue) up to the verdict's position A, where the correction or bonus
    c sits (green fill = its branch was reused, a hit). Rows past A were never reached (greyed). A cell with no
    branch is the draft's own token there: matching it is an acceptance, not a correction. Default round:
    the last one with an early-exit message."""
    messages = _by_round(events, EeMessage)
    text = token_text or str
    if not messages:
        return _empty("No early-exit message yet (Mirror-SD runs send one per round).")
    r = round_ if round_ is not None else max(messages)
    if r not in messages:
        raise ValueError(f"no early-exit message in round {r}; rounds with one: {sorted(messages)}")
    ee = messages[r]
    commit, decision = _by_round(events, Commit).get(r), _by_round(events, ReuseDecision).get(r)
    lookup = _by_round(events, CacheLookup).get(r)
    rollout = _by_round(events, BranchRollout).get(r)
    roots = {tuple(root) for root in rollout.roots} if rollout is not None else None
    kappa = max(len(row) for row in ee.ids)
    rows = [f"j = {j}" for j in range(len(ee.ids))]
    z = [list(lp) + [None] * (kappa - len(lp)) for lp in ee.logprobs]
    cells, hover = [], []
    for j, ids in enumerate(ee.ids):
        cells.append([text(t) for t in ids] + [""] * (kappa - len(ids)))
        hover.append([f"{text(t)!r} (id {t}) · log p̃ = {lp:.2f}"
                      + ("" if roots is None or (j, t) in roots else " · no branch (the draft's own token)")
                      for t, lp in zip(ids, ee.logprobs[j])] + [""] * (kappa - len(ids)))
    fig = go.Figure(go.Heatmap(z=z, x=[f"#{i + 1}" for i in range(kappa)], y=rows, text=cells,
                               texttemplate="%{text}", customdata=hover, colorscale="Blues", zmax=0,
                               colorbar=dict(title="log p̃"), hovertemplate="%{y}, %{x}: %{customdata}<extra></extra>"))

    def box(j: int, i: int, name: str, colour: str, fill: str | None = None) -> None:
        fig.add_shape(type="rect", x0=i - 0.5, x1=i + 0.5, y0=j - 0.5, y1=j + 0.5, name=name,
                      line=dict(color=colour, width=3), fillcolor=fill or "rgba(0,0,0,0)",
                      opacity=1 if fill is None else 0.45)

    if commit is None:
        verdict = "verdict pending"
    else:
        a = commit.accepted
        for j, token in enumerate(commit.tokens[:a]):
            if j < len(ee.ids) and token in ee.ids[j]:
                box(j, ee.ids[j].index(token), "accepted", "#0d47a1")
        c = commit.tokens[a] if a < len(commit.tokens) else None
        hit = decision.outcome != "fallback" if decision is not None else (lookup.hit if lookup is not None else None)
        if c is not None and a < len(ee.ids) and c in ee.ids[a]:
            rank = ee.ids[a].index(c)
            if hit:
                box(a, rank, "reused root", HIT_GREEN, HIT_GREEN)
            else:
                box(a, rank, "correction", MISS_RED)
        for j in range(a + 1, len(ee.ids)):
            fig.add_shape(type="rect", x0=-0.5, x1=kappa - 0.5, y0=j - 0.5, y1=j + 0.5, name="not reached",
                          line=dict(width=0), fillcolor="rgba(158,158,158,0.55)")
        fate = commit.fates[a] if a < len(commit.fates) else "?"
        verdict = f"A = {a}, c = {text(c)!r} ({fate})" if c is not None else f"A = {a}"
        if hit is None:
            verdict += " · reuse pending"
        elif hit:
            kind = decision.outcome.replace("_", " ") if decision is not None else "hit"
            verdict += f" · {kind}: the branch at (j = {a}, {text(c)!r}) is the next window"
        else:
            verdict += f" · fallback: c is not in the early exit's top-{kappa} at j = {a}; a fresh rollout follows"
    fig.update_layout(title=dict(text=f"Round {r}: the early exit's top-{kappa} at layer {ee.exit_layer} "
                                      f"({len(ee.ids)} positions)<br><sup>{verdict}</sup>"),
                      xaxis=dict(title="rank in the early exit's top-κ"),
                      yaxis=dict(title="verified position", autorange="reversed"),
                      height=160 + 42 * len(rows), margin=dict(t=90, b=50))
    return fig


def overlap_rate(events: Sequence[Event]) -> dict:
    """Measured Ω_κ (the Mirror-SD paper's Eq. 9): over every round and position j ≤ A, how often the token the target
    took there (the accepted draft for j < A, the correction or bonus c at j = A) was in the early exit's top-κ
    at j. FF ≤ 1 − Ω_κ bounds the fallback rate. ``rank_counts[i]``: how often it was the (i+1)-th choice.
    Returns ``{omega, positions, in_top_k, outside, rank_counts, kappa, exit_layer, rounds}``; ``omega`` is
    ``None`` before any round has both its message and its verdict."""
    messages = _by_round(events, EeMessage)
    kappa = max((len(row) for m in messages.values() for row in m.ids), default=run_config(events).get("kappa", 0))
    ranks: Counter = Counter()
    positions = outside = rounds = 0
    for commit in verdict_rounds(events):
        ee = messages.get(commit.round)
        if ee is None:
            continue
        rounds += 1
        for j, token in enumerate(commit.tokens[:commit.accepted + 1]):
            if j >= len(ee.ids):
                break
            positions += 1
            if token in ee.ids[j]:
                ranks[ee.ids[j].index(token)] += 1
            else:
                outside += 1
    exit_layer = next(iter(messages.values())).exit_layer if messages else run_config(events).get("exit_layer")
    return dict(omega=(positions - outside) / positions if positions else None, positions=positions,
                in_top_k=positions - outside, outside=outside, rank_counts=[ranks[i] for i in range(kappa)],
                kappa=kappa, exit_layer=exit_layer, rounds=rounds)


def fallback_point(events: Sequence[Event]) -> dict:
    """One Mirror run as a point of :func:`fallback_heatmap`: its κ, l_e, fallback rate and measured Ω_κ."""
    metrics, overlap = verdict_metrics(events), overlap_rate(events)
    return dict(kappa=metrics["kappa"] or overlap["kappa"], exit_layer=overlap["exit_layer"],
                fallback_rate=metrics["fallback_rate"], omega=overlap["omega"])


def fallback_heatmap(points: Sequence[dict]) -> go.Figure:
    """The paper's Figure 7 analogue: measured fallback frequency over κ × l_e (left) beside the bound
    1 − Ω_κ from the same runs' measured overlap (right). FF should fall with κ and with a deeper exit, and
    stay at or under the bound. ``points``: ``[{kappa, exit_layer, fallback_rate, omega}]`` (e.g.
    :func:`fallback_point` of each run); a later point for the same cell replaces an earlier one."""
    kappas = sorted({p["kappa"] for p in points})
    layers = sorted({p["exit_layer"] for p in points})
    ff = [[None] * len(kappas) for _ in layers]
    bound = [[None] * len(kappas) for _ in layers]
    for p in points:
        i, j = layers.index(p["exit_layer"]), kappas.index(p["kappa"])
        ff[i][j] = p.get("fallback_rate")
        bound[i][j] = None if p.get("omega") is None else 1 - p["omega"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("fallback frequency FF (measured)",
                                                        "bound 1 − Ω_κ (measured overlap)"), horizontal_spacing=0.12)
    x, y = [str(k) for k in kappas], [str(layer) for layer in layers]
    for col, z in ((1, ff), (2, bound)):
        text = [["" if v is None else f"{v:.2f}" for v in row] for row in z]
        fig.add_trace(go.Heatmap(z=z, x=x, y=y, text=text, texttemplate="%{text}", zmin=0, zmax=1,
                                 colorscale="Reds", showscale=col == 2, colorbar=dict(title="rate"),
                                 hovertemplate="κ = %{x}, l_e = %{y}: %{z:.3f}<extra></extra>"), row=1, col=col)
        fig.update_xaxes(title_text="κ (top-κ width)", type="category", row=1, col=col)
        fig.update_yaxes(title_text="l_e (exit layer)" if col == 1 else None, type="category", row=1, col=col)
    fig.update_layout(title="Mirror-SD fallbacks vs κ and exit depth (FF ≤ 1 − Ω_κ)", height=360,
                      margin=dict(t=80, b=40))
    return fig


def mirror_law_figure(t_prefix: float, t_suffix: float, t_rv: float, draft_gen_by_gamma: dict[int, float]) -> go.Figure:
    """The overlap budget Δ = T^{l_e+1:N} (the target's suffix) against the draft's
    generation time T_gen(γ), with the Mirror step T^{1:l_e} + T_rv + max(Δ, T_gen) and vanilla SD's
    T_target + T_gen beside them. Where T_gen ≤ Δ the Mirror step is flat in γ (zero slope, shaded): a longer
    window is free until the draft no longer fits under the suffix. Times in seconds, drawn in ms."""
    gammas = sorted(draft_gen_by_gamma)
    gen = [draft_gen_by_gamma[g] for g in gammas]
    mirror = [mirror_step_time(t_prefix, t_suffix, t, t_rv) for t in gen]
    sd = [t_prefix + t_suffix + t for t in gen]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=gammas, y=[1e3 * t for t in gen], mode="lines+markers", name="T_gen(γ): draft rollout",
                             line=dict(color="#2e7d32")))
    fig.add_trace(go.Scatter(x=gammas, y=[1e3 * t_suffix] * len(gammas), mode="lines",
                             name="Δ = T^{l_e+1:N} (overlap budget)", line=dict(color="#37474f", dash="dash")))
    fig.add_trace(go.Scatter(x=gammas, y=[1e3 * t for t in mirror], mode="lines+markers", name="Mirror step",
                             line=dict(color="#6a1b9a")))
    fig.add_trace(go.Scatter(x=gammas, y=[1e3 * t for t in sd], mode="lines+markers", name="vanilla SD step",
                             line=dict(color="#9e9e9e", dash="dot")))
    flat = [g for g, t in zip(gammas, gen) if t <= t_suffix]
    if flat:
        fig.add_vrect(x0=min(flat) - 0.5, x1=max(flat) + 0.5, fillcolor=HIT_GREEN, opacity=0.1, line_width=0,
                      name="zero slope", annotation_text="T_gen ≤ Δ: zero slope", annotation_position="top left")
        note = f"the draft fits under the suffix for γ ≤ {max(flat)}"
    else:
        note = "the draft never fits under the suffix: every γ costs"
    fig.update_layout(title=dict(text=f"Overlap budget Δ = {1e3 * t_suffix:.1f} ms vs draft time<br><sup>{note}</sup>"),
                      xaxis=dict(title="γ (window)", dtick=1), yaxis=dict(title="ms", rangemode="tozero"),
                      height=380, margin=dict(t=70, b=40))
    return fig


# --- (3) SSD: the cache, k, fan-out and SAGUARO ------------------------------------------------------------
def hit_counts(events: Sequence[Event]) -> Counter:
    """Hits per cache cell ``(k, slot)`` over the run: a lookup with accepted = k that hit at rank = slot."""
    return Counter((x.accepted, x.rank) for x in _of(events, CacheLookup) if x.hit)


def ssd_cache_table(events: Sequence[Event], round_: int | None = None,
                    token_text: Callable[[int], str] | None = None) -> go.Figure:
    """SSD's speculation cache for one round (§5.9 view 1): rows k = 0..K accepted, columns the fan-out slots
    (rank in the draft's z_k), cell text the guessed bonus token. Colour: how often that cell was the one that
    hit over the whole run (hits / lookups) — the fan-out's shape should follow it. The round's realized verdict
    is boxed: green on the cell that hit, red around row k on a miss. Default round: the last cache built."""
    builds = _by_round(events, CacheBuild)
    text = token_text or str
    if not builds:
        return _empty("No speculation cache built yet (SSD runs build one per round).")
    r = round_ if round_ is not None else max(builds)
    if r not in builds:
        raise ValueError(f"no cache built in round {r}; rounds with one: {sorted(builds)}")
    build = builds[r]
    k_max = max(len(build.fanout) - 1, max((e[0] for e in build.entries), default=0))
    counts, lookups = hit_counts(events), _of(events, CacheLookup)
    slots = max([f for b in builds.values() for f in b.fanout] + [rank + 1 for _, rank in counts] + [1])
    cells = [[""] * slots for _ in range(k_max + 1)]
    for k, token, rank, q in build.entries:
        if 0 <= rank < slots:
            cells[k][rank] = text(token)
    z = [[counts[(k, s)] / len(lookups) if lookups else 0.0 for s in range(slots)] for k in range(k_max + 1)]
    fig = go.Figure(go.Heatmap(z=z, x=[f"#{s + 1}" for s in range(slots)], y=[f"k = {k}" for k in range(k_max + 1)],
                               text=cells, texttemplate="%{text}", colorscale="Greens", zmin=0,
                               colorbar=dict(title="hit freq."),
                               hovertemplate="%{y}, slot %{x}: %{text} · hit in %{z:.1%} of lookups<extra></extra>"))
    lookup = _by_round(events, CacheLookup).get(r)
    if lookup is None:
        verdict = "verdict pending"
    elif lookup.hit:
        fig.add_shape(type="rect", x0=lookup.rank - 0.5, x1=lookup.rank + 0.5, y0=lookup.accepted - 0.5,
                      y1=lookup.accepted + 0.5, name="hit", line=dict(color=HIT_GREEN, width=4))
        verdict = f"verdict k = {lookup.accepted}, t* = {text(lookup.token)!r}: hit in slot #{lookup.rank + 1}"
    else:
        fig.add_shape(type="rect", x0=-0.5, x1=slots - 0.5, y0=lookup.accepted - 0.5, y1=lookup.accepted + 0.5,
                      name="miss", line=dict(color=MISS_RED, width=3, dash="dash"))
        where = "not ranked" if lookup.rank < 0 else f"rank {lookup.rank + 1} in z_k"
        verdict = f"verdict k = {lookup.accepted}, t* = {text(lookup.token)!r} ({where}): miss → backup"
    fig.update_layout(title=dict(text=f"Round {r}: the speculation cache, fan-out {build.fanout}<br><sup>{verdict} · "
                                      f"{sum(counts.values())}/{len(lookups)} lookups hit over the run</sup>"),
                      xaxis=dict(title="fan-out slot (rank of the guess)"),
                      yaxis=dict(title="accepted k", autorange="reversed"), height=170 + 40 * (k_max + 1),
                      margin=dict(t=90, b=50))
    return fig


def accepted_lengths(events: Sequence[Event]) -> list[tuple[int, int]]:
    """``(k accepted, window drafted)`` per verification round that drafted something."""
    return [(c.accepted, c.drafted) for c in verdict_rounds(events) if c.drafted > 0]


def fit_acceptance(events: Sequence[Event]) -> float | None:
    """The maximum-likelihood a_p of the truncated geometric law P(A = k) = a_p^k(1 − a_p), P(A = K) = a_p^K:
    every accepted token is a success and every round that stopped short of its window a failure, so
    a_p = Σk / (Σk + #rounds with k < drafted). Windows cut short near the end count at their own length."""
    rounds = accepted_lengths(events)
    successes = sum(k for k, _ in rounds)
    failures = sum(1 for k, drafted in rounds if k < drafted)
    return successes / (successes + failures) if successes + failures else None


def k_histogram(events: Sequence[Event]) -> go.Figure:
    """Accepted length k per round (§5.9 view 2) with the fitted geometric law a_p^k(1 − a_p), truncated at K
    (P(A = K) = a_p^K), as expected counts: the acceptance model SSD's fan-out is optimised for."""
    rounds = accepted_lengths(events)
    k_max = lookahead(events) or max((d for _, d in rounds), default=0)
    counts = Counter(k for k, _ in rounds)
    a_p = fit_acceptance(events)
    ks = list(range(k_max + 1))
    fig = go.Figure(go.Bar(x=ks, y=[counts[k] for k in ks], name="rounds", marker_color="#1565c0"))
    if a_p is not None:
        law = acceptance_law(a_p, k_max)
        fig.add_trace(go.Scatter(x=ks, y=[len(rounds) * p for p in law], mode="lines+markers", name="geometric fit",
                                 line=dict(color="#c62828")))
        title = f"Accepted length k: fitted a_p = {a_p:.3f} ({len(rounds)} rounds, K = {k_max})"
    else:
        title = "Accepted length k: no verified round yet"
    fig.update_layout(title=title, xaxis=dict(title="k (draft tokens accepted)", dtick=1),
                      yaxis=dict(title="rounds"), height=340, margin=dict(t=60, b=40))
    return fig


def miss_curve(events: Sequence[Event], max_fanout: int = 64) -> list[tuple[int, float]]:
    """``(F, miss(F))``: the fraction of lookups whose true token ranked ≥ F (or not at all), i.e. what a
    fan-out of F per k would have missed. Mirror's ranks only exist inside the top-κ, so F stops at κ."""
    ranks = [x.rank for x in _of(events, CacheLookup)]
    if not ranks:
        return []
    kappa = run_config(events).get("kappa")
    top = min(max_fanout, kappa) if kappa else max_fanout
    return [(f, sum(1 for r in ranks if r < 0 or r >= f) / len(ranks)) for f in range(1, top + 1)]


def hit_rate_vs_fanout(events: Sequence[Event], max_fanout: int = 64) -> go.Figure:
    """miss(F) against F on log–log axes (§5.9 view 3) from the logged ranks, with the power law c·F^{−r}
    fitted by :func:`engines.programs.verdict.speculation_cache.fit_power_law`: r is what the geometric fan-out needs."""
    curve = miss_curve(events, max_fanout)
    ranks = [x.rank for x in _of(events, CacheLookup)]
    fig = go.Figure()
    shown = [(f, m) for f, m in curve if m > 0]
    fig.add_trace(go.Scatter(x=[f for f, _ in shown], y=[m for _, m in shown], mode="markers", name="measured miss(F)",
                             marker=dict(color="#1565c0", size=8)))
    top = curve[-1][0] if curve else max_fanout
    c, r = fit_power_law(ranks, top)
    if len(ranks) >= 4:
        grid = [f for f in range(1, top + 1)]
        fig.add_trace(go.Scatter(x=grid, y=[c * f ** (-r) for f in grid], mode="lines",
                                 name=f"fit c·F^(−r): c = {c:.2f}, r = {r:.2f}", line=dict(color="#c62828")))
    builds = _of(events, CacheBuild)
    if builds and curve:
        fan = builds[-1].fanout
        used = sum(fan) / len(fan)
        hit = sum(1 for x in _of(events, CacheLookup) if x.hit) / len(ranks)
        if hit < 1:
            fig.add_trace(go.Scatter(x=[used], y=[1 - hit], mode="markers", name=f"this run (mean F = {used:.1f})",
                                     marker=dict(symbol="x", size=12, color="#222")))
    fig.update_layout(title=f"Miss rate vs fan-out ({len(ranks)} lookups)", height=360, margin=dict(t=60, b=40),
                      xaxis=dict(title="fan-out F (guesses per k)", type="log"),
                      yaxis=dict(title="1 − P(hit | F)", type="log"))
    return fig


def tradeoff_point(events: Sequence[Event]) -> dict:
    """One SSD run as a point of :func:`acceptance_vs_hit`: :func:`verdict_metrics` plus its SAGUARO C."""
    return {**verdict_metrics(events), "c": run_config(events).get("c", 1.0)}


def acceptance_vs_hit(points: Sequence[dict], lookahead: int | None = None, t_verify: float | None = None,
                      t_backup: float | None = None, t_comm: float | None = None,
                      t_draftwork: float | None = None) -> go.Figure:
    """SAGUARO's trade-off (§5.9 view 4): each run's acceptance against its hit rate, labelled by C and coloured
    by measured tokens/s, over throughput contours of the model

        tokens/s(h, ρ) = (K·ρ + 1) / (max(T_v, T_draftwork) + T_comm + (1 − h)·T_backup)

    with ρ = accepted/drafted (so K·ρ + 1 is the expected tokens per round) and the round time of
    :func:`specviz.theory.ssd_round_time`. Costs in seconds; any left ``None`` is the mean over the points' own
    ``lookahead``, ``verify_ms``, ``backup_ms``, ``message_ms`` and ``draftwork_ms`` (so :func:`tradeoff_point`
    dicts carry everything). Without K, T_v or T_backup the contours are left out and the title says so."""
    def mean_of(key: str, scale: float = 1e-3) -> float | None:
        values = [p[key] for p in points if p.get(key) is not None]
        return scale * mean(values) if values else None

    k = lookahead if lookahead is not None else (round(mean_of("lookahead", 1.0)) if mean_of("lookahead", 1.0) else None)
    t_v = t_verify if t_verify is not None else mean_of("verify_ms")
    t_b = t_backup if t_backup is not None else mean_of("backup_ms")
    t_c = t_comm if t_comm is not None else (mean_of("message_ms") or 0.0)
    t_d = t_draftwork if t_draftwork is not None else (mean_of("draftwork_ms") or 0.0)
    hits = [p["hit_rate"] for p in points]
    accs = [p["acceptance"] for p in points]
    fig = go.Figure()
    note = ""
    if k and t_v and t_b is not None:
        hs = [i / 40 for i in range(41)]
        top = max([0.3] + [a * 1.2 for a in accs if a is not None])
        rhos = [top * i / 40 for i in range(41)]
        z = [[(k * rho + 1) / ssd_round_time(t_v, t_c, h, t_b, t_d) for h in hs] for rho in rhos]
        fig.add_trace(go.Contour(x=hs, y=rhos, z=z, colorscale="Greys", opacity=0.5, showscale=False,
                                 contours=dict(showlabels=True), name="model tokens/s",
                                 hovertemplate="h = %{x:.2f}, ρ = %{y:.3f}: %{z:.1f} tok/s<extra>model</extra>"))
        note = (f"contours: (K·ρ + 1)/(max(T_v, T_dw) + T_comm + (1 − h)·T_backup), K = {k}, T_v = {1e3 * t_v:.1f} ms, "
                f"T_backup = {1e3 * t_b:.1f} ms, T_dw = {1e3 * t_d:.1f} ms")
    else:
        note = "no contours: K, T_v or T_backup unknown"
    fig.add_trace(go.Scatter(x=hits, y=accs, mode="markers+text", text=[f"C = {p['c']}" for p in points],
                             textposition="top center", name="runs",
                             marker=dict(size=13, color=[p.get("tokens_per_s") for p in points], colorscale="Viridis",
                                         showscale=True, colorbar=dict(title="tok/s"), line=dict(width=1, color="#222")),
                             hovertemplate="hit %{x:.2f} · acceptance %{y:.3f}<extra>%{text}</extra>"))
    fig.update_layout(title=dict(text=f"SAGUARO: lower C trades acceptance for hits<br><sup>{note}</sup>"),
                      xaxis=dict(title="hit rate P(hit)", range=[0, 1]), yaxis=dict(title="acceptance ρ = accepted/drafted",
                                                                                   rangemode="tozero"),
                      height=420, margin=dict(t=80, b=40))
    return fig


def fanout_figure(a_p: float, r: float, budget: int, lookahead: int, c: float = 1.0) -> go.Figure:
    """SSD's fan-out (§5.3, §5.9 view 6): the optimal F_k ∝ P(A = k)^{1/(1+r)} beside the uniform
    F_k = ⌊B/(K+1)⌋, with P(A = k) on the right axis and each shape's predicted
    P(hit) = Σ_k P(A = k)(1 − c·F_k^{−r}) in the title. Geometric spends the budget where verdicts land."""
    geometric = geometric_fanout(lookahead, budget, a_p, r)
    uniform = uniform_fanout(lookahead, budget // (lookahead + 1))
    hit_g, hit_u = predicted_hit_rate(geometric, a_p, r, c), predicted_hit_rate(uniform, a_p, r, c)
    ks = list(range(lookahead + 1))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=ks, y=geometric, name=f"geometric (Σ = {sum(geometric)})", marker_color="#2e7d32",
                         text=geometric, textposition="outside"), secondary_y=False)
    fig.add_trace(go.Bar(x=ks, y=uniform, name=f"uniform f = {budget // (lookahead + 1)} (Σ = {sum(uniform)})",
                         marker_color="#90a4ae", text=uniform, textposition="outside"), secondary_y=False)
    fig.add_trace(go.Scatter(x=ks, y=acceptance_law(a_p, lookahead), mode="lines+markers", name="P(A = k)",
                             line=dict(color="#c62828", dash="dot")), secondary_y=True)
    fig.update_layout(title=dict(text=f"Fan-out for a_p = {a_p:.2f}, r = {r:.2f}, B = {budget}, K = {lookahead}<br>"
                                      f"<sup>predicted P(hit): geometric {hit_g:.3f} · uniform {hit_u:.3f}</sup>"),
                      barmode="group", height=380, margin=dict(t=80, b=40), xaxis=dict(title="k accepted", dtick=1))
    fig.update_yaxes(title_text="F_k (guesses)", range=[0, 1.2 * max(geometric + uniform + [1])], secondary_y=False)
    fig.update_yaxes(title_text="P(A = k)", range=[0, 1], secondary_y=True)
    return fig


def _empty(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=message, height=200, xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig
