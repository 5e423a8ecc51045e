"""PPSD (paper 003; docs/ppsd.md) drawn from live runs: who computed what and when, and the paper's formulas.

In the formulas, a is the per-token acceptance probability (the paper's α); measured, it is the run's
per-position acceptance, accepted ÷ draft positions the target judged (``Stats.per_token_acceptance``).
For ``ppsd`` that equals the run's α (accepted ÷ drafted): every judged draft is its own round and flushed
drafts are never counted. For ``eesd`` it does not: α also counts drafts after a rejection, never judged.

Everything here reads the engine's event stream (``StageCompute``, ``Check``, ``Flush``, ``StageSpan``,
``Prefill``, ``RunStart``, ``RunEnd``) through :mod:`specviz.views.ppsd_pipeline`, so a replayed trace draws the same
pictures as a live run, and a run still in progress draws what it has done so far.

* :func:`lane_gantt_figure` — the worker × time Gantt of the paper's Figure 2, from real runs: one row per
  lane of each run (``ar · cpu0``, ``eesd · cpu0``, ``ppsd · cpu0``, ``ppsd · cpu1``), each stage compute
  coloured by the fate of the draft it carried. Idle time is the gaps.
* :mod:`specviz.views.ppsd_theory`: :func:`speedup_surface_figure` — S_PPSD(a, ℓ) of Eq. 6 beside EESD's S_EESD(a, γ, ℓ) of Eq. 4, measured runs as
  markers; :func:`gain_heatmap_figure` — the gain S_PPSD ÷ S_EESD of Eq. 7 (the formula, with a note on the paper's claim at a = 1);
  :func:`speedup_vs_exit_figure` — measured speedup against the exit layer for norm and layer heads.
* :func:`text_strip_html` — the case-study strip: accepted drafts plain, rejected ones struck out, the
  target's corrections highlighted.
* :func:`run_metrics_rows` / :func:`measured_point` — the numbers behind the figures, Eq. 6 beside them.

Clocks: a ``mode="virtual"`` run replays its schedule on one virtual clock per lane
(:mod:`engines.lanes.serial`). Its times are never wall-clock time, so every figure, row and point built
from one says ``clock=virtual``.
"""

from __future__ import annotations

import html
from typing import Callable, Mapping, Sequence

import plotly.graph_objects as go

from engines.core.trace import Check, Event, Prefill, RunEnd, RunStart

from ..theory import ppsd_speedup
from .ppsd_pipeline import gantt_rows, pipeline_metrics

VIRTUAL = "clock=virtual"


FATE_COLOURS = {"prefill": "#1565c0", "accepted": "#2e7d32", "rejected": "#c62828", "flushed": "#757575",
                "unused": "#e0e0e0", "pending": "#fff59d", "draft": "#8d6e63", "verify": "#546e7a"}
FATE_LABELS = {"prefill": "prefill (the prompt)", "accepted": "draft accepted", "rejected": "draft rejected",
               "flushed": "flushed (stale after a rejection)", "unused": "unused (the run ended first)",
               "pending": "in flight (not judged yet)", "draft": "draft (ar/eesd)", "verify": "verify (ar/eesd)"}


# --- reading runs -------------------------------------------------------------------------------
def run_start(events: Sequence[Event]) -> RunStart | None:
    return next((e for e in events if isinstance(e, RunStart)), None)


def run_end(events: Sequence[Event]) -> RunEnd | None:
    return next((e for e in reversed(events) if isinstance(e, RunEnd)), None)


def run_clock(events: Sequence[Event]) -> str:
    """``wall`` or ``virtual`` (the run's RunStart; ``wall`` before it arrives)."""
    start = run_start(events)
    return start.clock if start is not None else "wall"


def is_virtual(events: Sequence[Event]) -> bool:
    return run_clock(events) == "virtual"


def clock_label(name: str, events: Sequence[Event]) -> str:
    """``name`` with `` [clock=virtual]`` appended for a virtual run, so the label travels with its numbers."""
    return f"{name} [{VIRTUAL}]" if is_virtual(events) and VIRTUAL not in name else name


def run_lanes(events: Sequence[Event]) -> list[str]:
    """The run's lanes in stage order: from RunStart (so a live run shows every row from the start), then any
    lane its events used that RunStart did not name."""
    start = run_start(events)
    lanes = list(dict.fromkeys(start.lanes.values())) if start is not None and start.lanes else []
    for row in gantt_rows(events):
        if row["lane"] not in lanes:
            lanes.append(row["lane"])
    return lanes


def lane_stages(events: Sequence[Event]) -> dict[str, str]:
    """Lane → what runs there (``stage 2 (layers 16..30)``), from RunStart's lane map."""
    start = run_start(events)
    lanes = start.lanes if start is not None and start.lanes else {}
    return {lane: role for role, lane in lanes.items() if role.startswith("stage")}


def run_bars(events: Sequence[Event]) -> list[dict]:
    """The Gantt's bars for one run: :func:`specviz.views.ppsd_pipeline.gantt_rows`, plus the prefill of a single-lane
    run (its Prefill event; a pipeline's prefill is already a stage compute). While the run is live, a tick
    not yet judged is ``pending`` rather than ``unused``; once it has ended, a draft judged after the last
    committed token (still in flight at the end, never committed) is ``unused`` too."""
    rows = gantt_rows(events)
    late = uncommitted_ticks(events)
    finished = run_end(events) is not None
    for row in rows:
        if row["tick"] in late and row["fate"] in ("accepted", "rejected"):
            row["fate"] = "unused"
        if row["fate"] == "unused" and not finished:
            row["fate"] = "pending"
    if not any(e.kind == "stage_compute" for e in events):
        lanes = run_lanes(events) or ["cpu0"]
        for event in events:
            if isinstance(event, Prefill):
                rows.insert(0, {"lane": lanes[0], "start": event.t - event.seconds, "end": event.t, "tick": 0,
                                "stage": 0, "position": None, "fate": "prefill",
                                "label": f"prefill · {event.n_tokens} prompt tokens"})
    return rows


def committed_limit(events: Sequence[Event]) -> int | None:
    """One past the last committed position (prompt included), or None while the run is live."""
    start, end = run_start(events), run_end(events)
    if start is None or end is None:
        return None
    return start.prompt_tokens + len(end.token_ids)


def uncommitted_ticks(events: Sequence[Event]) -> set[int]:
    """Ticks whose draft the last stage judged at or after :func:`committed_limit`: the run had ended."""
    limit = committed_limit(events)
    if limit is None:
        return set()
    return {e.tick for e in events if isinstance(e, Check) and e.position >= limit}


# --- (1) worker × time Gantt ---------------------------------------------------------------------
def lane_gantt_figure(runs: Mapping[str, Sequence[Event]], title: str | None = None) -> go.Figure:
    """The paper's Figure 2 from live runs: one group of rows per run (``name · lane``), x = seconds since
    that run started, one bar per stage compute (PPSD) or stage span (ar, eesd), coloured by fate. Each run
    ends at a marker giving its time and tokens/s. Safe on partial event lists (a run still streaming)."""
    fig = go.Figure()
    order: list[str] = []
    by_fate: dict[str, dict[str, list]] = {}
    virtual = [name for name, events in runs.items() if is_virtual(events)]
    for name, events in runs.items():
        shown = clock_label(name, events)
        stages = lane_stages(events)
        rows = {lane: f"{shown} · {lane}" for lane in run_lanes(events)}
        order.extend(rows.values())
        for bar in run_bars(events):
            row = rows.setdefault(bar["lane"], f"{shown} · {bar['lane']}")
            if row not in order:
                order.append(row)
            where = stages.get(bar["lane"], "")
            cell = by_fate.setdefault(bar["fate"], {"y": [], "base": [], "x": [], "custom": []})
            cell["y"].append(row)
            cell["base"].append(bar["start"])
            cell["x"].append(max(bar["end"] - bar["start"], 0.0))
            cell["custom"].append([bar["label"], where, 1e3 * bar["start"], 1e3 * (bar["end"] - bar["start"])])
        end = run_end(events)
        if end is not None and rows:
            rate = end.stats.get("tokens_per_s", 0.0)
            fig.add_annotation(x=end.t, y=next(iter(rows.values())), text=f"end {end.t:.2f} s · {rate:.1f} tok/s",
                               showarrow=False, xanchor="left", xshift=4, font=dict(size=10, color="#424242"))
    for fate in FATE_COLOURS:
        cell = by_fate.pop(fate, None)
        if cell:
            fig.add_trace(_gantt_trace(fate, cell))
    for fate, cell in by_fate.items():  # a span stage no colour was chosen for
        fig.add_trace(_gantt_trace(fate, cell))
    clock = ""
    if virtual:
        clock = f"<br><sup>{VIRTUAL} for {', '.join(virtual)}: per-lane virtual clocks, not wall time</sup>"
    fig.update_layout(
        title=dict(text=(title or "Who computes what, when: worker × time (the paper's Figure 2, measured)") + clock,
                   yref="container", y=1.0, yanchor="top", pad=dict(t=14)),
        barmode="overlay", height=170 + 34 * max(len(order), 1),
        xaxis=dict(title=f"seconds since the run started{' (' + VIRTUAL + ' where marked)' if virtual else ''}",
                   rangemode="tozero"),
        yaxis=dict(categoryorder="array", categoryarray=order, autorange="reversed", title=None, automargin=True),
        legend=dict(orientation="h", x=0, y=1.0, xanchor="left", yanchor="bottom"), margin=dict(t=95, b=50))
    return fig


def _gantt_trace(fate: str, cell: dict) -> go.Bar:
    return go.Bar(orientation="h", y=cell["y"], base=cell["base"], x=cell["x"], customdata=cell["custom"],
                  name=FATE_LABELS.get(fate, fate), marker=dict(color=FATE_COLOURS.get(fate, "#90a4ae"),
                                                                 line=dict(width=0.5, color="#ffffff")),
                  hovertemplate=("%{y}<br>%{customdata[0]}<br>%{customdata[1]}<br>start %{customdata[2]:.1f} ms · "
                                 f"%{{customdata[3]:.1f}} ms · {fate}<extra></extra>"))


def gantt_bar_count(fig: go.Figure) -> int:
    """Bars drawn in a Gantt (every trace is a bar trace)."""
    return sum(len(trace.y or ()) for trace in fig.data if trace.type == "bar")


# --- the numbers ----------------------------------------------------------------------------------
def comparable(events: Sequence[Event], baseline: Sequence[Event] | None) -> bool:
    """Whether ``baseline`` may divide ``events``' speed: a wall-clock run against any wall-clock run, a
    virtual-clock run only against one that ran on one thread (one lane's real speed) — never a replayed
    clock against a multi-threaded wall-clock one."""
    start, base = run_start(events), run_start(baseline) if baseline is not None else None
    if start is None or base is None or base.clock == "virtual":
        return False
    return start.clock != "virtual" or base.threads == 1


def baseline_for(events: Sequence[Event], runs: Mapping[str, Sequence[Event]]) -> Sequence[Event] | None:
    """The ``ar`` run among ``runs`` that ``events`` is compared with: for a wall-clock run the one with the
    most threads (ar at its fastest), for a virtual run the one-thread one; ``None`` if there is none."""
    candidates = [r for r in runs.values() if (run_start(r) is not None and run_start(r).method == "ar"
                                               and run_end(r) is not None and comparable(events, r))]
    return max(candidates, key=lambda r: run_start(r).threads or 0, default=None)


def measured_point(events: Sequence[Event], baseline: Sequence[Event] | None = None, label: str | None = None) -> dict:
    """One finished run as a point for the formula figures: its method, exit layer, head, ``position_acceptance`` (the per-position acceptance, estimating a; the
    per-position acceptance, accepted ÷ draft positions the target judged: the formulas' a), tokens/s,
    speedup over ``baseline`` (an ``ar`` run of the same prompt; None without one, or if the two clocks
    cannot be compared: see :func:`comparable`) and clock."""
    start, end = run_start(events), run_end(events)
    if start is None or end is None:
        raise ValueError("measured_point needs a finished run (RunStart … RunEnd)")
    speedup = None
    if baseline is not None and comparable(events, baseline):
        base = run_end(baseline)
        if base is not None and base.stats.get("tokens_per_s"):
            speedup = end.stats["tokens_per_s"] / base.stats["tokens_per_s"]
    config = start.config or {}
    return {"method": start.method, "exit_layer": config.get("exit_layer"), "head": config.get("head"),
            "position_acceptance": end.stats.get("per_token_acceptance", end.stats.get("acceptance_rate", 0.0)),
            "tokens_per_s": end.stats["tokens_per_s"], "speedup": speedup, "clock": start.clock,
            "label": clock_label(label or start.method, events)}


def run_metrics_rows(runs: Mapping[str, Sequence[Event]], n_layers: int, baseline: str | None = "auto") -> list[dict]:
    """A row per run with what the pipeline did (:func:`specviz.views.ppsd_pipeline.pipeline_metrics`) and Eq. 6 beside
    it: measured tokens/s against Eq. 6 at the measured per-position acceptance a and tick, and measured
    speedup against S_PPSD(a, ℓ) of Eq. 6 — over the run named ``baseline``, or with ``"auto"`` over
    :func:`baseline_for` (a virtual run over one-thread ``ar``); ``None``: no speedups. Single-lane runs fill
    only what they have."""
    rows = []
    for name, events in runs.items():
        start, end = run_start(events), run_end(events)
        if start is None or end is None:
            continue
        base = baseline_for(events, runs) if baseline == "auto" else runs.get(baseline) if baseline else None
        point = measured_point(events, base)
        row = {"run": clock_label(name, events), "clock": start.clock, "tok/s": end.stats["tokens_per_s"],
               "S vs ar": point["speedup"],
               "per-position acceptance": point["position_acceptance"] if start.method != "ar" else None}
        metrics = pipeline_metrics(events)
        if metrics:
            exit_layer = point["exit_layer"]
            row.update({
                "stages P": metrics["stages"], "ticks/token": metrics["ticks_per_token"],
                "tick ms": _ms(metrics["tick_seconds"]),
                "stage ms": " · ".join(f"{lane} {1e3 * s:.1f}" for lane, s in metrics["stage_seconds"].items()),
                "idle": " · ".join(f"{lane} {100 * v:.0f}%" for lane, v in metrics["idle"].items()),
                "message ms": _ms(metrics["message_seconds"]),
                "message kB/token": (metrics["message_bytes_per_token"] or 0.0) / 1e3,
                "Eq. 6 tok/s (measured a, tick)": metrics["eq6_tokens_per_s"],
                "Eq. 6 S (measured a)": ppsd_speedup(point["position_acceptance"], exit_layer, n_layers) if exit_layer else None,
            })
        rows.append(row)
    return rows


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1e3 * seconds


# --- (5) the text strip -------------------------------------------------------------------------
STRIP_STYLES = {"accepted": "",
                "rejected": "color:#c62828;text-decoration:line-through",
                "correction": "background:#c8e6c9;color:#1b5e20;border-radius:3px"}


def text_strip_html(strip: Sequence[dict]) -> str:
    """The run as the paper's case study: accepted drafts plain, each rejected draft struck out in red
    (``<s>``) and followed by the target's correction, highlighted green. ``strip`` comes from
    :func:`specviz.views.ppsd_pipeline.text_strip`."""
    spans = []
    for piece in strip:
        fate = piece["fate"]
        text = html.escape(piece["text"]).replace("\n", "↵")
        title = f' title="{fate} at position {piece["position"]}"' if piece.get("position") is not None else ""
        if fate == "rejected":
            spans.append(f'<s{title} style="{STRIP_STYLES[fate]}">{text}</s>')
        elif fate == "correction":
            spans.append(f'<span{title} style="{STRIP_STYLES[fate]}">{text}</span>')
        else:
            spans.append(f"<span{title}>{text}</span>")
    return ('<div style="font-family:monospace;line-height:1.8;white-space:pre-wrap">' + "".join(spans) + "</div>")


def committed_strip(strip: Sequence[dict], events: Sequence[Event]) -> list[dict]:
    """The strip cut at the last committed token: drafts still in flight when the run ended were judged by
    the last stage but never committed (positions count from the prompt's first token)."""
    limit = committed_limit(events)
    if limit is None:
        return list(strip)
    return [piece for piece in strip if piece.get("position") is None or piece["position"] < limit]


def text_strip_legend_html() -> str:
    return ('<small>accepted draft · <s style="color:#c62828">rejected draft</s> · '
            '<span style="background:#c8e6c9;color:#1b5e20">the target\'s correction</span></small>')


def one_token(detokenize: Callable[[list[int]], str]) -> Callable[[int], str]:
    """The engine's ``detokenize`` (a list of ids) as the one-id function :func:`specviz.views.ppsd_pipeline.text_strip` takes."""
    return lambda token: detokenize([token])
