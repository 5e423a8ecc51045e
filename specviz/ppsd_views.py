"""PPSD (paper 003; docs/ppsd.md) drawn from live runs: who computed what and when, and the paper's formulas.

In the formulas, a is the per-token acceptance probability (the paper's α); measured, it is the run's
per-position acceptance, accepted ÷ draft positions the target judged (``Stats.per_token_acceptance``).
For ``ppsd`` that equals the run's α (accepted ÷ drafted): every judged draft is its own round and flushed
drafts are never counted. For ``eesd`` it does not: α also counts drafts after a rejection, never judged.

Everything here reads the engine's event stream (``StageCompute``, ``Check``, ``Flush``, ``StageSpan``,
``Prefill``, ``RunStart``, ``RunEnd``) through :mod:`specviz.pipeline`, so a replayed trace draws the same
pictures as a live run, and a run still in progress draws what it has done so far.

* :func:`lane_gantt_figure` — the worker × time Gantt of the paper's Figure 2, from real runs: one row per
  lane of each run (``ar · cpu0``, ``eesd · cpu0``, ``ppsd · cpu0``, ``ppsd · cpu1``), each stage compute
  coloured by the fate of the draft it carried. Idle time is the gaps.
* :func:`speedup_surface_figure` — ρ*(a, E) of Eq. 6 beside EESD's ρ(a, γ, E) of Eq. 4, measured runs as
  markers; :func:`gain_heatmap_figure` — λ of Eq. 7 (the formula, with a note on the paper's claim at a = 1);
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
import math
from typing import Callable, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engines.core.trace import Check, Event, Prefill, RunEnd, RunStart

from .pipeline import gantt_rows, pipeline_metrics
from .theory import eesd_speedup, ppsd_gain, ppsd_speedup

VIRTUAL = "clock=virtual"
SHIPPED_EXITS = (3, 4, 5, 6, 8, 10, 15)  # exit@E-{norm,layer} heads in data/drafts
FATE_COLOURS = {"prefill": "#1565c0", "accepted": "#2e7d32", "rejected": "#c62828", "flushed": "#757575",
                "unused": "#e0e0e0", "pending": "#fff59d", "draft": "#8d6e63", "verify": "#546e7a"}
FATE_LABELS = {"prefill": "prefill (the prompt)", "accepted": "draft accepted", "rejected": "draft rejected",
               "flushed": "flushed (stale after a rejection)", "unused": "unused (the run ended first)",
               "pending": "in flight (not judged yet)", "draft": "draft (ar/eesd)", "verify": "verify (ar/eesd)"}
HEAD_COLOURS = {"layer": "#6a1b9a", "norm": "#ef6c00", "none": "#455a64"}
EXIT_PALETTE = ("#1565c0", "#2e7d32", "#ef6c00", "#6a1b9a", "#c62828", "#00838f", "#5d4037", "#ad1457")
ALPHA_NOTE = ("At a = 1 (every draft accepted), Eq. 7 gives λ = (γ + N/E)/(γ + 1), not the paper's stated γ + N/E: "
              "plotted is the formula.")


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
    """The Gantt's bars for one run: :func:`specviz.pipeline.gantt_rows`, plus the prefill of a single-lane
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
    """One finished run as a point for the formula figures: its method, exit layer, head, ``alpha`` (the
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
            "alpha": end.stats.get("per_token_acceptance", end.stats.get("acceptance_rate", 0.0)),
            "tokens_per_s": end.stats["tokens_per_s"], "speedup": speedup, "clock": start.clock,
            "label": clock_label(label or start.method, events)}


def run_metrics_rows(runs: Mapping[str, Sequence[Event]], n_layers: int, baseline: str | None = "auto") -> list[dict]:
    """A row per run with what the pipeline did (:func:`specviz.pipeline.pipeline_metrics`) and Eq. 6 beside
    it: measured tokens/s against Eq. 6 at the measured per-position acceptance a and tick, and measured
    speedup against ρ*(a, E) of Eq. 6 — over the run named ``baseline``, or with ``"auto"`` over
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
               "speedup vs ar": point["speedup"],
               "per-position acceptance": point["alpha"] if start.method != "ar" else None}
        metrics = pipeline_metrics(events)
        if metrics:
            exit_layer = point["exit_layer"]
            row.update({
                "stages S": metrics["stages"], "ticks/token": metrics["ticks_per_token"],
                "tick ms": _ms(metrics["tick_seconds"]),
                "stage ms": " · ".join(f"{lane} {1e3 * s:.1f}" for lane, s in metrics["stage_seconds"].items()),
                "idle": " · ".join(f"{lane} {100 * v:.0f}%" for lane, v in metrics["idle"].items()),
                "message ms": _ms(metrics["message_seconds"]),
                "message kB/token": (metrics["message_bytes_per_token"] or 0.0) / 1e3,
                "Eq. 6 tok/s (measured a, tick)": metrics["eq6_tokens_per_s"],
                "Eq. 6 ρ* (measured a)": ppsd_speedup(point["alpha"], exit_layer, n_layers) if exit_layer else None,
            })
        rows.append(row)
    return rows


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1e3 * seconds


# --- (2) the formulas ---------------------------------------------------------------------------------
def _alphas(step: float = 0.01) -> list[float]:
    n = round(1 / step)
    return [i / n for i in range(n + 1)]


def exit_colour(exit_layer: int, exits: Sequence[int] = SHIPPED_EXITS) -> str:
    return EXIT_PALETTE[list(exits).index(exit_layer) % len(EXIT_PALETTE)] if exit_layer in exits else "#212121"


def speedup_surface_figure(n_layers: int = 30, gamma: int = 5, measured: Sequence[dict] | None = None,
                           exits: Sequence[int] = SHIPPED_EXITS) -> go.Figure:
    """ρ*(a, E) of Eq. 6 (left) against EESD's ρ(a, γ, E) of Eq. 4 (right), one line per exit layer E, on one
    y scale. ``measured``: dicts with ``alpha`` (a per-position acceptance), ``exit_layer``, ``speedup``,
    ``label``, ``clock`` (and ``method``: ``eesd`` points go on the right, the rest on the left);
    virtual-clock points are open markers labelled clock=virtual."""
    alphas = _alphas()
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("PPSD: ρ* = N / (aE + (1 − a)·⌈N/E⌉·E)  (Eq. 6)",
                                        f"EESD, γ = {gamma}: ρ = (1 − a^(γ+1))·N / ((1 − a)(γE + N))"
                                        "  (Eq. 4)"))
    for e in exits:
        colour, stages = exit_colour(e, exits), math.ceil(n_layers / e)
        for col, curve in ((1, lambda a: ppsd_speedup(a, e, n_layers)),
                           (2, lambda a: eesd_speedup(a, gamma, e, n_layers))):
            fig.add_trace(go.Scatter(x=alphas, y=[curve(a) for a in alphas], mode="lines", line=dict(color=colour),
                                     name=f"E = {e} (S = {stages})", legendgroup=f"E{e}", showlegend=col == 1,
                                     hovertemplate=f"E = {e}: a %{{x:.2f}} → %{{y:.2f}}×<extra></extra>"),
                          row=1, col=col)
    for point in measured or ():
        col = 2 if point.get("method") == "eesd" else 1
        virtual = point.get("clock") == "virtual"
        e = point["exit_layer"]
        theory = (eesd_speedup(point["alpha"], gamma, e, n_layers) if col == 2
                  else ppsd_speedup(point["alpha"], e, n_layers))
        label = point.get("label", f"E = {e}")
        if virtual and VIRTUAL not in label:
            label += f" [{VIRTUAL}]"
        fig.add_trace(go.Scatter(
            x=[point["alpha"]], y=[point["speedup"]], mode="markers", name=f"measured: {label}",
            marker=dict(size=13, color=exit_colour(e, exits), symbol="diamond-open" if virtual else "diamond",
                        line=dict(width=2, color=exit_colour(e, exits) if virtual else "#000000")),
            hovertemplate=(f"{html.escape(label)}<br>per-position acceptance %{{x:.2f}} · measured %{{y:.2f}}× · "
                           f"formula at this a "
                           f"{theory:.2f}×<extra></extra>")), row=1, col=col)
    for col in (1, 2):
        fig.add_hline(y=1.0, line_dash="dot", line_color="#9e9e9e", row=1, col=col)
        fig.update_xaxes(title_text="a: per-token acceptance probability (measured: per-position acceptance)",
                         range=[0, 1], row=1, col=col)
    fig.update_yaxes(title_text="speedup over autoregressive", rangemode="tozero", row=1, col=1)
    fig.update_layout(title=f"Speedup against per-token acceptance a for each exit layer E (N = {n_layers} layers;"
                            " dotted: ar)",
                      height=460, margin=dict(t=80, b=50), legend=dict(title="exit layer"))
    return fig


def gain_grid(n_layers: int = 30, gamma: int = 5,
              step: float = 0.02) -> tuple[list[float], list[int], list[list[float]]]:
    """Values of a (per-token acceptance probability), exit layers 1..N−1 and λ(a, E) of Eq. 7 (rows: E,
    columns: a)."""
    alphas, exits = _alphas(step), list(range(1, n_layers))
    return alphas, exits, [[ppsd_gain(a, gamma, e, n_layers) for a in alphas] for e in exits]


def gain_heatmap_figure(n_layers: int = 30, gamma: int = 5) -> go.Figure:
    """λ = ρ*/ρ of Eq. 7 over a × E (left) and, at a = 1, the formula against the paper's stated γ + N/E
    (right): the plots draw the formula, and the note says why the two differ."""
    alphas, exits, grid = gain_grid(n_layers, gamma)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.68, 0.32], horizontal_spacing=0.1,
                        subplot_titles=(f"λ(a, E) = ρ*/ρ, Eq. 7 (γ = {gamma}, N = {n_layers})",
                                        "at a = 1: the formula vs the paper's claim"))
    fig.add_trace(go.Heatmap(x=alphas, y=exits, z=grid, colorscale="Viridis",
                             colorbar=dict(title="λ", x=0.62, thickness=14),
                             hovertemplate="a %{x:.2f} · E = %{y} → λ = %{z:.2f}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=exits, y=[ppsd_gain(1.0, gamma, e, n_layers) for e in exits], mode="lines+markers",
                             name="Eq. 7 at a = 1 = (γ + N/E)/(γ + 1)", line=dict(color="#2e7d32")), row=1, col=2)
    fig.add_trace(go.Scatter(x=exits, y=[gamma + n_layers / e for e in exits], mode="lines",
                             name="the paper's claim γ + N/E", line=dict(color="#c62828", dash="dash")), row=1, col=2)
    example = SHIPPED_EXITS[-1] if SHIPPED_EXITS[-1] < n_layers else exits[len(exits) // 2]
    note = (f"{ALPHA_NOTE} E.g. E = {example}: λ(1) = {ppsd_gain(1.0, gamma, example, n_layers):.2f}, "
            f"the claim says {gamma + n_layers / example:.2f}.")
    fig.update_xaxes(title_text="a: per-token acceptance probability", row=1, col=1)
    fig.update_yaxes(title_text="exit layer E", row=1, col=1)
    fig.update_xaxes(title_text="exit layer E", row=1, col=2)
    fig.update_yaxes(title_text="λ at a = 1", type="log", row=1, col=2)
    lowest = min(min(row) for row in grid)
    fig.update_layout(title=f"PPSD's gain over EESD at the same exit (smallest λ here: {lowest:.2f})"
                            f"<br><sup>{note}</sup>",
                      height=480, margin=dict(t=100, b=90), legend=dict(orientation="h", x=0.7, y=-0.15,
                                                                        yanchor="top"))
    return fig


def speedup_vs_exit_figure(points: Sequence[dict], n_layers: int | None = None) -> go.Figure:
    """Measured speedup against the exit layer E, one line per head (norm, layer) and clock (Tables 6/7 of
    the paper, measured). Points: dicts ``exit_layer``, ``head``, ``speedup``, ``clock``, ``alpha`` (its
    per-position acceptance); virtual points are open markers on a dashed line labelled clock=virtual. Given
    ``n_layers``, Eq. 6 at each point's per-position acceptance is drawn as a small grey cross beside it."""
    fig = go.Figure()
    groups: dict[tuple[str, str], list[dict]] = {}
    for point in points:
        if point.get("speedup") is None:
            continue
        groups.setdefault((point.get("head") or "none", point.get("clock", "wall")), []).append(point)
    for (head, clock), group in sorted(groups.items()):
        group = sorted(group, key=lambda p: p["exit_layer"])
        virtual = clock == "virtual"
        colour = HEAD_COLOURS.get(head, "#212121")
        fig.add_trace(go.Scatter(
            x=[p["exit_layer"] for p in group], y=[p["speedup"] for p in group], mode="lines+markers",
            name=f"{head} head" + (f" [{VIRTUAL}]" if virtual else " (wall clock)"),
            line=dict(color=colour, dash="dash" if virtual else "solid"),
            marker=dict(size=11, color=colour, symbol="circle-open" if virtual else "circle", line=dict(width=2)),
            customdata=[[p.get("alpha", float("nan")), p.get("label", "")] for p in group],
            hovertemplate="%{customdata[1]}<br>E = %{x} · per-position acceptance %{customdata[0]:.2f} · "
                          "%{y:.2f}×<extra></extra>"))
    if n_layers:
        alphas = [p for g in groups.values() for p in g if p.get("alpha") is not None]
        fig.add_trace(go.Scatter(x=[p["exit_layer"] for p in alphas],
                                 y=[ppsd_speedup(p["alpha"], p["exit_layer"], n_layers) for p in alphas],
                                 mode="markers", marker=dict(symbol="x", size=8, color="#9e9e9e"),
                                 name="Eq. 6 at each point's per-position acceptance"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#9e9e9e", annotation_text="ar")
    virtual = any(clock == "virtual" for _, clock in groups)
    fig.update_layout(title="Speedup against the exit layer, norm vs layer heads"
                            + (f" (open markers: {VIRTUAL})" if virtual else ""),
                      xaxis_title="exit layer E (stage 1 = layers 1..E)", yaxis=dict(title="speedup over ar",
                                                                                    rangemode="tozero"),
                      height=400, margin=dict(t=60, b=50))
    return fig


def exit_points_from_bench(results: dict) -> list[dict]:
    """Points for :func:`speedup_vs_exit_figure` from a recorded ``specviz bench`` run with ppsd rows (e.g.
    ``data/bench/bf16/ppsd-exits/results.json``): each row's exit layer and head from its label, its overall
    speedup (virtual rows against ``ar(threads=1)``, as the benchmark computes them), ``alpha`` and clock.
    ``alpha`` is the row's recorded α, accepted ÷ drafted, which for ``ppsd`` is its per-position acceptance
    (every judged draft is a round of one drafted token)."""
    from .bench import parse_method

    points = []
    for label, by_category in results["methods"].items():
        spec = parse_method(label)
        if spec.name != "ppsd":
            continue
        overall = by_category["overall"]
        points.append({"exit_layer": spec.options.get("exit_layer", 15), "head": spec.options.get("head", "layer"),
                       "speedup": overall["speedup"], "alpha": overall["alpha"],
                       "clock": overall.get("clock", "wall"), "label": label})
    return points


def formula_readout(alpha: float, exit_layer: int, gamma: int, n_layers: int = 30) -> str:
    """Eq. 6, Eq. 4 and λ at one setting, as a line of HTML (the formula explorer's readout)."""
    stages = math.ceil(n_layers / exit_layer)
    rho_star = ppsd_speedup(alpha, exit_layer, n_layers)
    rho = eesd_speedup(alpha, gamma, exit_layer, n_layers)
    return (f"S = ⌈N/E⌉ = ⌈{n_layers}/{exit_layer}⌉ = <b>{stages}</b> stages · PPSD ρ* (Eq. 6) = "
            f"<b>{rho_star:.2f}×</b> · EESD ρ (Eq. 4, γ = {gamma}) = <b>{rho:.2f}×</b> · λ = ρ*/ρ (Eq. 7) = "
            f"<b>{ppsd_gain(alpha, gamma, exit_layer, n_layers):.2f}</b><br><small>An accepted token costs one "
            f"tick of {exit_layer} layers; a rejected one {stages} ticks (a whole pipeline). {ALPHA_NOTE}</small>")


def formula_figure(alpha: float, exit_layer: int, gamma: int, n_layers: int = 30) -> go.Figure:
    """ρ* (Eq. 6) and ρ (Eq. 4) against a, the per-token acceptance probability, at one E and γ; the chosen
    a (``alpha``) marked on both."""
    alphas = _alphas()
    fig = go.Figure()
    curves = (("PPSD ρ* (Eq. 6)", lambda a: ppsd_speedup(a, exit_layer, n_layers), "#2e7d32"),
              (f"EESD ρ, γ = {gamma} (Eq. 4)", lambda a: eesd_speedup(a, gamma, exit_layer, n_layers), "#ef6c00"))
    for name, curve, colour in curves:
        fig.add_trace(go.Scatter(x=alphas, y=[curve(a) for a in alphas], mode="lines", name=name,
                                 line=dict(color=colour)))
        fig.add_trace(go.Scatter(x=[alpha], y=[curve(alpha)], mode="markers", showlegend=False,
                                 marker=dict(size=12, color=colour),
                                 hovertemplate=f"{name}: %{{y:.2f}}×<extra></extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#9e9e9e", annotation_text="ar")
    fig.update_layout(title=f"E = {exit_layer} of N = {n_layers} (S = {math.ceil(n_layers / exit_layer)} stages)",
                      xaxis=dict(title="a: per-token acceptance probability", range=[0, 1]),
                      yaxis=dict(title="speedup over autoregressive", rangemode="tozero"), height=360,
                      margin=dict(t=50, b=40))
    return fig


# --- (5) the text strip -------------------------------------------------------------------------
STRIP_STYLES = {"accepted": "",
                "rejected": "color:#c62828;text-decoration:line-through",
                "correction": "background:#c8e6c9;color:#1b5e20;border-radius:3px"}


def text_strip_html(strip: Sequence[dict]) -> str:
    """The run as the paper's case study: accepted drafts plain, each rejected draft struck out in red
    (``<s>``) and followed by the target's correction, highlighted green. ``strip`` comes from
    :func:`specviz.pipeline.text_strip`."""
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
    """The engine's ``detokenize`` (a list of ids) as the one-id function :func:`specviz.pipeline.text_strip` takes."""
    return lambda token: detokenize([token])
