"""The two-lane Gantt of a Mirror-SD or SSD run (§3.8 view 1, §5.9 view 5): target and draft lanes on one time
axis, with the rendezvous messages (early exit, verdict, window) as arrows between them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import plotly.graph_objects as go

from engines.core.trace import Event, Prefill, RunStart, StageSpan

from .verdict_metrics import (
    DRAFT_Y,
    MISS_RED,
    RENDEZVOUS,
    TARGET_COMPUTE,
    TARGET_Y,
    _first,
    _of,
    _split,
    draft_work,
    message_hops,
    run_lanes,
    run_mode,
    target_compute,
)

KIND_COLOURS = {"prefill": "#1565c0", "prefix": "#78909c", "suffix": "#37474f", "verify": "#455a64",
                "wait": "#e0e0e0", "glue": "#8d6e63", "rollout": "#2e7d32", "backup:initial": "#9e9e9e",
                "backup:jit": "#c62828", "backup:fast": "#ef6c00", "backup:fallback": "#c62828"}
KIND_LABELS = {"prefill": "prefill (target)", "prefix": "prefix: layers 1..ℓ + early exit",
               "suffix": "suffix: layers ℓ+1..L + verify", "verify": "verify (whole target)",
               "wait": "wait: target idle for the next window", "glue": "glue: draft over the window",
               "rollout": "branch rollout (the cache)", "backup:initial": "first window",
               "backup:jit": "backup: JIT draft (miss)", "backup:fast": "backup: fast lookup (miss)",
               "backup:fallback": "fallback: fresh rollout (miss)"}
MESSAGE_COLOURS = {"ee": "#6a1b9a", "verdict": "#1565c0", "window": "#ef6c00"}
MESSAGE_LABELS = {"ee": "ee: early-exit top-κ → draft", "verdict": "verdict (k, c) → draft",
                  "window": "next window → target"}


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
    from .ppsd_runs import is_virtual

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
