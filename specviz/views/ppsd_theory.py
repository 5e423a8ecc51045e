"""PPSD's formulas (paper 003; docs/ppsd.md) drawn, with measured runs beside them: S_PPSD(a, ℓ) of Eq. 6
beside EESD's S_EESD(a, γ, ℓ) of Eq. 4 (:func:`speedup_surface_figure`), the gain S_PPSD ÷ S_EESD of Eq. 7
(:func:`gain_heatmap_figure`), measured speedup against the exit layer (:func:`speedup_vs_exit_figure`, from
bench results) and one point of the formulas (:func:`formula_figure`, :func:`formula_readout`). In the
project's notation (specviz.notation): a is the per-token acceptance probability (the paper's α), L the
target's layers (the paper's N), ℓ the exit layer (the paper's E), P = ⌈L/ℓ⌉ the pipeline stages and S a
speedup (the paper's ρ for EESD and its starred ρ for PPSD).
"""

from __future__ import annotations

import html
import math
from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..theory import eesd_speedup, ppsd_gain, ppsd_speedup
from .ppsd_runs import VIRTUAL

SHIPPED_EXITS = (3, 4, 5, 6, 8, 10, 15)  # exit@ℓ-{norm,layer} heads in data/drafts


HEAD_COLOURS = {"layer": "#6a1b9a", "norm": "#ef6c00", "none": "#455a64"}
EXIT_PALETTE = ("#1565c0", "#2e7d32", "#ef6c00", "#6a1b9a", "#c62828", "#00838f", "#5d4037", "#ad1457")
ALPHA_NOTE = ("At a = 1 (every draft accepted), Eq. 7 gives S_PPSD ÷ S_EESD = (γ + L/ℓ)/(γ + 1), not the paper's "
              "stated γ + L/ℓ: plotted is the formula.")


# --- (2) the formulas ---------------------------------------------------------------------------------
def _alphas(step: float = 0.01) -> list[float]:
    n = round(1 / step)
    return [i / n for i in range(n + 1)]


def exit_colour(exit_layer: int, exits: Sequence[int] = SHIPPED_EXITS) -> str:
    return EXIT_PALETTE[list(exits).index(exit_layer) % len(EXIT_PALETTE)] if exit_layer in exits else "#212121"


def speedup_surface_figure(n_layers: int = 30, gamma: int = 5, measured: Sequence[dict] | None = None,
                           exits: Sequence[int] = SHIPPED_EXITS) -> go.Figure:
    """S_PPSD(a, ℓ) of Eq. 6 (left) against EESD's S_EESD(a, γ, ℓ) of Eq. 4 (right), one line per exit layer ℓ,
    on one y scale. ``measured``: dicts with ``position_acceptance`` (the per-position acceptance, estimating a), ``exit_layer``, ``speedup``,
    ``label``, ``clock`` (and ``method``: ``eesd`` points go on the right, the rest on the left);
    virtual-clock points are open markers labelled clock=virtual."""
    alphas = _alphas()
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("PPSD: S_PPSD (Eq. 6)", f"EESD, γ = {gamma}: S_EESD (Eq. 4)"))
    for e in exits:
        colour, stages = exit_colour(e, exits), math.ceil(n_layers / e)
        for col, curve in ((1, lambda a: ppsd_speedup(a, e, n_layers)),
                           (2, lambda a: eesd_speedup(a, gamma, e, n_layers))):
            fig.add_trace(go.Scatter(x=alphas, y=[curve(a) for a in alphas], mode="lines", line=dict(color=colour),
                                     name=f"ℓ = {e} (P = {stages})", legendgroup=f"exit{e}", showlegend=col == 1,
                                     hovertemplate=f"ℓ = {e}: a %{{x:.2f}} → %{{y:.2f}}×<extra></extra>"),
                          row=1, col=col)
    for point in measured or ():
        col = 2 if point.get("method") == "eesd" else 1
        virtual = point.get("clock") == "virtual"
        e = point["exit_layer"]
        theory = (eesd_speedup(point["position_acceptance"], gamma, e, n_layers) if col == 2
                  else ppsd_speedup(point["position_acceptance"], e, n_layers))
        label = point.get("label", f"ℓ = {e}")
        if virtual and VIRTUAL not in label:
            label += f" [{VIRTUAL}]"
        fig.add_trace(go.Scatter(
            x=[point["position_acceptance"]], y=[point["speedup"]], mode="markers", name=f"measured: {label}",
            marker=dict(size=13, color=exit_colour(e, exits), symbol="diamond-open" if virtual else "diamond",
                        line=dict(width=2, color=exit_colour(e, exits) if virtual else "#000000")),
            hovertemplate=(f"{html.escape(label)}<br>per-position acceptance %{{x:.2f}} · measured %{{y:.2f}}× · "
                           f"formula at this a "
                           f"{theory:.2f}×<extra></extra>")), row=1, col=col)
    for col in (1, 2):
        fig.add_hline(y=1.0, line_dash="dot", line_color="#9e9e9e", row=1, col=col)
        fig.update_xaxes(title_text="a (measured: per-position acceptance)", range=[0, 1], row=1, col=col)
    fig.update_yaxes(title_text="speedup S over ar", rangemode="tozero", row=1, col=1)
    fig.update_layout(title=f"Speedup against per-token acceptance a, one line per exit layer ℓ (L = {n_layers};"
                            " dotted: ar)",
                      height=520, margin=dict(t=80, b=50), legend=dict(title="exit layer"))
    return fig


def gain_grid(n_layers: int = 30, gamma: int = 5,
              step: float = 0.02) -> tuple[list[float], list[int], list[list[float]]]:
    """Values of a (per-token acceptance probability), exit layers 1..L−1 and the gain S_PPSD ÷ S_EESD of Eq. 7
    at each (rows: ℓ, columns: a)."""
    alphas, exits = _alphas(step), list(range(1, n_layers))
    return alphas, exits, [[ppsd_gain(a, gamma, e, n_layers) for a in alphas] for e in exits]


def gain_heatmap_figure(n_layers: int = 30, gamma: int = 5) -> go.Figure:
    """The gain S_PPSD ÷ S_EESD of Eq. 7 over a × ℓ (left) and, at a = 1, the formula against the paper's stated
    γ + L/ℓ (right): the plots draw the formula, and the note says why the two differ."""
    alphas, exits, grid = gain_grid(n_layers, gamma)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.2,
                        subplot_titles=(f"S_PPSD ÷ S_EESD, Eq. 7 (γ = {gamma}, L = {n_layers})",
                                        "at a = 1: formula vs claim"))
    fig.add_trace(go.Heatmap(x=alphas, y=exits, z=grid, colorscale="Viridis",
                             colorbar=dict(title="gain", x=0.5, thickness=12, len=0.8, y=0.5),
                             hovertemplate="a %{x:.2f} · ℓ = %{y} → gain %{z:.2f}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=exits, y=[ppsd_gain(1.0, gamma, e, n_layers) for e in exits], mode="lines+markers",
                             name="Eq. 7 at a = 1 = (γ + L/ℓ)/(γ + 1)", line=dict(color="#2e7d32")), row=1, col=2)
    fig.add_trace(go.Scatter(x=exits, y=[gamma + n_layers / e for e in exits], mode="lines",
                             name="the paper's claim γ + L/ℓ", line=dict(color="#c62828", dash="dash")), row=1, col=2)
    example = SHIPPED_EXITS[-1] if SHIPPED_EXITS[-1] < n_layers else exits[len(exits) // 2]
    note = (f"At a = 1, Eq. 7 gives (γ + L/ℓ)/(γ + 1), not the paper's stated γ + L/ℓ; plotted is the formula.<br>"
            f"E.g. ℓ = {example}: the gain at a = 1 is {ppsd_gain(1.0, gamma, example, n_layers):.2f}, "
            f"the claim says {gamma + n_layers / example:.2f}.")
    fig.update_xaxes(title_text="a: per-token acceptance probability", row=1, col=1)
    fig.update_yaxes(title_text="exit layer ℓ", row=1, col=1)
    fig.update_xaxes(title_text="exit layer ℓ", row=1, col=2)
    fig.update_yaxes(title_text="gain at a = 1", type="log", row=1, col=2)
    lowest = min(min(row) for row in grid)
    fig.update_layout(title=f"PPSD's gain over EESD at the same exit, S_PPSD ÷ S_EESD (smallest here: {lowest:.2f})"
                            f"<br><sup>{note}</sup>",
                      height=540, margin=dict(t=150, b=110), legend=dict(orientation="h", x=0.0, y=-0.18,
                                                                         yanchor="top"))
    return fig


def speedup_vs_exit_figure(points: Sequence[dict], n_layers: int | None = None) -> go.Figure:
    """Measured speedup against the exit layer ℓ, one line per head (norm, layer) and clock (Tables 6/7 of
    the paper, measured). Points: dicts ``exit_layer``, ``head``, ``speedup``, ``clock``, ``position_acceptance`` (its
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
            customdata=[[p.get("position_acceptance", float("nan")), p.get("label", "")] for p in group],
            hovertemplate="%{customdata[1]}<br>ℓ = %{x} · per-position acceptance %{customdata[0]:.2f} · "
                          "%{y:.2f}×<extra></extra>"))
    if n_layers:
        alphas = [p for g in groups.values() for p in g if p.get("position_acceptance") is not None]
        fig.add_trace(go.Scatter(x=[p["exit_layer"] for p in alphas],
                                 y=[ppsd_speedup(p["position_acceptance"], p["exit_layer"], n_layers) for p in alphas],
                                 mode="markers", marker=dict(symbol="x", size=8, color="#9e9e9e"),
                                 name="Eq. 6 at each point's per-position acceptance"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#9e9e9e", annotation_text="ar")
    virtual = any(clock == "virtual" for _, clock in groups)
    fig.update_layout(title="Speedup against the exit layer, norm vs layer heads"
                            + (f" (open markers: {VIRTUAL})" if virtual else ""),
                      xaxis_title="exit layer ℓ (stage 1 = layers 1..ℓ)", yaxis=dict(title="speedup over ar",
                                                                                    rangemode="tozero"),
                      height=400, margin=dict(t=60, b=50))
    return fig


def _position_acceptance(overall: dict) -> float | None:
    """The per-position acceptance (estimating a) of a recorded row: its pipeline summary's (``alpha`` in runs recorded before the rename), else α."""
    from ..bench.tallies import position_acceptance

    pipeline = overall.get("pipeline") or {}
    value = position_acceptance(pipeline)
    return value if value is not None else overall.get("alpha")


def exit_points_from_bench(results: dict) -> list[dict]:
    """Points for :func:`speedup_vs_exit_figure` from a recorded ``specviz bench`` run with ppsd rows (e.g.
    ``data/bench/bf16/ppsd-exits/results.json``): each row's exit layer and head from its label, its overall
    speedup (virtual rows against ``ar(threads=1)``, as the benchmark computes them), ``position_acceptance``
    and clock. It is the pipeline summary's, or, in runs recorded without one, the row's α, accepted ÷
    drafted, which for ``ppsd`` is the same number (every judged draft is a round of one drafted token)."""
    from ..bench.method_specs import parse_method

    points = []
    for label, by_category in results["methods"].items():
        spec = parse_method(label)
        if spec.name != "ppsd":
            continue
        overall = by_category["overall"]
        points.append({"exit_layer": spec.options.get("exit_layer", 15), "head": spec.options.get("head", "layer"),
                       "speedup": overall["speedup"],
                       "position_acceptance": _position_acceptance(overall),
                       "clock": overall.get("clock", "wall"), "label": label})
    return points


def formula_readout(alpha: float, exit_layer: int, gamma: int, n_layers: int = 30) -> str:
    """Eq. 6, Eq. 4 and their ratio (Eq. 7) at one setting, as a line of HTML (the formula explorer's readout)."""
    stages = math.ceil(n_layers / exit_layer)
    s_ppsd = ppsd_speedup(alpha, exit_layer, n_layers)
    s_eesd = eesd_speedup(alpha, gamma, exit_layer, n_layers)
    return (f"P = ⌈L/ℓ⌉ = ⌈{n_layers}/{exit_layer}⌉ = <b>{stages}</b> stages · PPSD S_PPSD (Eq. 6) = "
            f"<b>{s_ppsd:.2f}×</b> · EESD S_EESD (Eq. 4, γ = {gamma}) = <b>{s_eesd:.2f}×</b> · gain S_PPSD ÷ S_EESD "
            f"(Eq. 7) = "
            f"<b>{ppsd_gain(alpha, gamma, exit_layer, n_layers):.2f}</b><br><small>An accepted token costs one "
            f"tick of {exit_layer} layers; a rejected one {stages} ticks (a whole pipeline). {ALPHA_NOTE}</small>")


def formula_figure(alpha: float, exit_layer: int, gamma: int, n_layers: int = 30) -> go.Figure:
    """S_PPSD (Eq. 6) and S_EESD (Eq. 4) against a, the per-token acceptance probability, at one ℓ and γ; the chosen
    a (``alpha``) marked on both."""
    alphas = _alphas()
    fig = go.Figure()
    curves = (("PPSD S_PPSD (Eq. 6)", lambda a: ppsd_speedup(a, exit_layer, n_layers), "#2e7d32"),
              (f"EESD S_EESD, γ = {gamma} (Eq. 4)", lambda a: eesd_speedup(a, gamma, exit_layer, n_layers), "#ef6c00"))
    for name, curve, colour in curves:
        fig.add_trace(go.Scatter(x=alphas, y=[curve(a) for a in alphas], mode="lines", name=name,
                                 line=dict(color=colour)))
        fig.add_trace(go.Scatter(x=[alpha], y=[curve(alpha)], mode="markers", showlegend=False,
                                 marker=dict(size=12, color=colour),
                                 hovertemplate=f"{name}: %{{y:.2f}}×<extra></extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#9e9e9e", annotation_text="ar")
    fig.update_layout(title=f"ℓ = {exit_layer} of L = {n_layers} (P = {math.ceil(n_layers / exit_layer)} stages)",
                      xaxis=dict(title="a: per-token acceptance probability", range=[0, 1]),
                      yaxis=dict(title="speedup over autoregressive", rangemode="tozero"), height=360,
                      margin=dict(t=50, b=40))
    return fig
