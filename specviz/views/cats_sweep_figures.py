"""CATS's sweeps drawn: BPT and speedup against the shallow verifier's layer ℓ_SV and γ (:func:`sweep_figure`),
speedup against the emulated flash bandwidth with the §7.6 time model beside it (:func:`bandwidth_figure`), and
the time model alone (:func:`cats_theory_figure`). The sweeps themselves run in
:mod:`specviz.experiments.cats_sweeps`.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..experiments.cats_sweeps import KANGAROO
from ..theory import streamed_pass_seconds
from .cats_costs import RunCosts, TimeModel, sweep_models
from .cats_cycles import IO_COLOUR, MB, STAGE_COLOURS

METHOD_COLOURS = {"ar": "#616161", "kangaroo": "#ef6c00", "cats": "#2e7d32"}
BANDWIDTH_TICKS = (20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000)


def bandwidth_axis(lo: float, hi: float, title: str) -> dict:
    """A log bandwidth axis with whole labelled ticks (plotly's own log ticks label 2 and 5 in tiny digits)."""
    ticks = [t for t in BANDWIDTH_TICKS if lo <= t <= hi]
    return dict(type="log", title=dict(text=title), range=[math.log10(lo), math.log10(hi)], tickvals=ticks,
                ticktext=[f"{t:,}" for t in ticks], tickfont=dict(size=12))


def sweep_figure(sweep: dict, along: str = "sv_layer") -> go.Figure:
    """BPT (left) and speedup over ``ar`` under the same budget (right) against ℓ_SV or γ (``along``)."""
    if along not in ("sv_layer", "gamma"):
        raise ValueError(f"along must be 'sv_layer' or 'gamma', got {along!r}")
    points = sweep["sv_points" if along == "sv_layer" else "gamma_points"]
    axis = ("ℓ_SV: the shallow verifier's layer (layers 1..ℓ_SV resident)" if along == "sv_layer"
            else f"γ: drafting passes per cycle (ℓ_SV = {sweep['sv_layer']})")
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "BPT: MB streamed per committed token", "speedup over ar under the same budget"))
    xs = [p[along] for p in points]
    hover = [[p["tau"], p["tokens_per_s"], p["budget_mb"]] for p in points]
    template = "τ = %{customdata[0]:.2f} · %{customdata[1]:.1f} tok/s · budget %{customdata[2]:.0f} MB<extra></extra>"
    series = [("cats", "bpt", "speedup", "tau", METHOD_COLOURS["cats"], "circle")]
    if points and all(p.get("kangaroo_speedup") is not None for p in points):
        series.append((KANGAROO, "kangaroo_bpt", "kangaroo_speedup", "kangaroo_tau", METHOD_COLOURS["kangaroo"],
                       "square"))
    for name, bpt_key, speed_key, tau_key, colour, symbol in series:
        for col, key in ((1, bpt_key), (2, speed_key)):
            scale = 1 / MB if col == 1 else 1.0
            fig.add_trace(go.Scatter(x=xs, y=[p[key] * scale for p in points], name=name,
                                     mode="lines+markers+text" if col == 2 else "lines+markers",
                                     text=[f"τ {p[tau_key]:.2f}" for p in points] if col == 2 else None,
                                     textposition="top center", textfont=dict(size=10, color=colour),
                                     legendgroup=name, showlegend=col == 1, customdata=hover,
                                     marker=dict(size=10, color=colour, symbol=symbol), line=dict(color=colour),
                                     hovertemplate=f"{name}: %{{y:.2f}} · " + template), row=1, col=col)
    fig.add_trace(go.Scatter(x=xs, y=[p["ar_bpt"] / MB for p in points], mode="lines+markers", name="ar",
                             marker=dict(size=8, color=METHOD_COLOURS["ar"], symbol="x"),
                             line=dict(color=METHOD_COLOURS["ar"], dash="dot"),
                             hovertemplate="ar: %{y:.2f} MB per token<extra></extra>"), row=1, col=1)
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"), row=1, col=2)
    note = "; ".join(sweep.get("notes", [])) if along == "sv_layer" else ""
    title = (f"CATS against {'ℓ_SV' if along == 'sv_layer' else 'γ'} · flash {sweep['flash_mb_s']:g} MB/s, "
             f"{sweep['max_new_tokens']} tokens per run")
    if note:
        title += f"<br><sup>{note}</sup>"
    if not points:
        fig.add_annotation(text="nothing measured: " + ("; ".join(sweep.get("notes", [])) or "no points"),
                           xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)
    fig.update_layout(title=title, height=420, legend=dict(orientation="h", y=-0.25), margin=dict(t=90))
    fig.update_xaxes(title_text=axis, dtick=5 if along == "sv_layer" else 1)
    fig.update_yaxes(rangemode="tozero")
    speeds = [p[speed_key] for p in points for _, _, speed_key, *_ in series]
    if speeds:  # room above the highest point for its τ label
        fig.update_yaxes(range=[0, 1.2 * max(max(speeds), 1.0)], row=1, col=2)
    return fig


def bandwidth_figure(sweep: dict, grid: tuple[float, float] = (50.0, 5000.0), mark_mb_s: float | None = None
                     ) -> go.Figure:
    """Measured speedup over ``ar`` at each bandwidth (markers) beside the §7.6 model (lines) evaluated at
    each method's measured τ, stage costs, deep compute and bytes per pass. Log bandwidth axis; as the
    bandwidth falls the model tends to τ·B_AR/B (bytes per token decide), as it grows the compute does."""
    models = sweep_models(sweep)
    lo, hi = grid
    rates = [lo * (hi / lo) ** (i / 80) for i in range(81)]
    fig = go.Figure()
    names = {"kangaroo": KANGAROO, "cats": "cats"}
    for method, model in models.items():
        colour = METHOD_COLOURS.get(method, "#1565c0")
        fig.add_trace(go.Scatter(
            x=rates, y=[model.speedup(r) for r in rates], mode="lines", line=dict(color=colour, dash="dash"),
            name=f"{names.get(method, method)}: time model (τ = {model.tau:.2f})", legendgroup=method,
            hovertemplate="%{x:.0f} MB/s: model %{y:.2f}×<extra></extra>"))
        measured = [p for p in sweep["points"] if p["method"] == method]
        fig.add_trace(go.Scatter(
            x=[p["flash_mb_s"] for p in measured], y=[p["speedup"] for p in measured], mode="markers",
            marker=dict(size=11, color=colour, symbol="circle" if method == "cats" else "square"),
            name=f"{names.get(method, method)}: measured", legendgroup=method,
            customdata=[[p["tau"], p["tokens_per_s"], p["bpt"] / MB, RunCosts.from_dict(p["costs"]).read_mb_s]
                        for p in measured],
            hovertemplate="%{x:.0f} MB/s: %{y:.2f}× · τ = %{customdata[0]:.2f} · %{customdata[1]:.1f} tok/s · "
                          "BPT %{customdata[2]:.1f} MB · reads reached %{customdata[3]:.0f} MB/s<extra></extra>"))
    fig.add_hline(y=1.0, line=dict(color=METHOD_COLOURS["ar"], dash="dot"), annotation_text="ar (same budget)",
                  annotation_position="bottom right")
    if mark_mb_s:  # one bandwidth to point at; on a log axis a shape takes data coordinates, an annotation their log10
        fig.add_vline(x=mark_mb_s, line=dict(color="#bdbdbd", dash="dot"))
        fig.add_annotation(x=math.log10(mark_mb_s), y=1.0, yref="paper", yanchor="bottom", showarrow=False,
                           text=f"{mark_mb_s:g} MB/s", font=dict(size=10, color="#757575"))
    fig.update_layout(
        title=(f"Speedup against flash bandwidth · layers 1..{sweep['resident_layers']} resident "
               f"({sweep['budget_mb']:.0f} MB), {sweep['max_new_tokens']} tokens per run"),
        height=430, legend=dict(orientation="h", y=-0.25),
        xaxis=bandwidth_axis(lo, hi, "emulated flash bandwidth (MB/s)"),
        yaxis=dict(title="speedup over ar under the same budget", rangemode="tozero"))
    return fig


# --- the formula, for sliders ---------------------------------------------------------------------
def cats_theory_readout(model: TimeModel, flash_mb_s: float) -> str:
    """The model's numbers at one bandwidth, as HTML: bytes, BPT, the cycle and the speedup."""
    cycle, ar = model.cycle_seconds(flash_mb_s), model.ar_token_seconds(flash_mb_s)
    io = model.deep_bytes / (flash_mb_s * MB)
    return (f"bytes<sub>deep</sub> = <b>{model.deep_bytes / MB:.1f} MB</b> streamed per deep pass; "
            f"BPT<sub>CATS</sub> = bytes/τ = <b>{model.bytes_per_token / MB:.1f} MB</b> per token "
            f"(ar: {model.ar_deep_bytes / MB:.1f} MB)<br>"
            f"T<sub>cycle</sub> = γ·t<sub>DM</sub> + t<sub>SV</sub> + t<sub>ref</sub> + max(bytes/B, t<sub>deep</sub>) "
            f"+ t<sub>other</sub> = {model.gamma:g}·{1e3 * model.draft_step:.1f} + {1e3 * model.shallow_verify:.1f} + "
            f"{1e3 * model.reforward:.1f} + max({1e3 * io:.1f}, {1e3 * model.deep_compute:.1f}) + "
            f"{1e3 * model.other:.1f} = <b>{1e3 * cycle:.1f} ms</b><br>"
            f"T<sub>AR</sub> = <b>{1e3 * ar:.1f} ms</b> per token; S = τ·T<sub>AR</sub>/T<sub>cycle</sub> = "
            f"{model.tau:.2f}·{1e3 * ar:.1f}/{1e3 * cycle:.1f} = <b>{model.speedup(flash_mb_s):.2f}×</b> "
            f"(at the slowest flash: τ·bytes<sub>AR</sub>/bytes = {model.asymptote:.2f}×)")


def cats_theory_figure(model: TimeModel, flash_mb_s: float, grid: tuple[float, float] = (50.0, 5000.0)) -> go.Figure:
    """Left: speedup against bandwidth at the model's τ and costs, your bandwidth marked. Right: one
    token's time under ar and under CATS (a cycle ÷ τ), stage by stage, at your bandwidth."""
    lo, hi = grid
    rates = [lo * (hi / lo) ** (i / 80) for i in range(81)]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.12, subplot_titles=(
        "speedup over ar against flash bandwidth", f"time per token at {flash_mb_s:g} MB/s (ms)"))
    fig.add_trace(go.Scatter(x=rates, y=[model.speedup(r) for r in rates], mode="lines", name="model",
                             line=dict(color=METHOD_COLOURS["cats"]), showlegend=False,
                             hovertemplate="%{x:.0f} MB/s: %{y:.2f}×<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[flash_mb_s], y=[model.speedup(flash_mb_s)], mode="markers", showlegend=False,
                             marker=dict(size=13, color="#c62828"), hovertemplate="your bandwidth: %{y:.2f}×<extra></extra>"),
                  row=1, col=1)
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"), row=1, col=1)
    rate = flash_mb_s * MB
    ar_pass = streamed_pass_seconds(model.ar_deep_bytes, rate, model.ar_deep_compute)
    pass_ = streamed_pass_seconds(model.deep_bytes, rate, model.deep_compute)
    per_token = {"ar": {"deep pass (streamed)": ar_pass, "other": model.ar_other},
                 "CATS": {"draft": model.gamma * model.draft_step, "sv": model.shallow_verify,
                          "reforward": model.reforward, "deep pass (streamed)": pass_, "other": model.other}}
    colours = {"draft": STAGE_COLOURS["draft"], "sv": STAGE_COLOURS["sv"], "reforward": STAGE_COLOURS["reforward"],
               "deep pass (streamed)": IO_COLOUR, "other": "#bdbdbd"}
    for part, colour in colours.items():
        ys = [1e3 * per_token[m].get(part, 0.0) / (model.tau if m == "CATS" else 1.0) for m in ("ar", "CATS")]
        fig.add_trace(go.Bar(x=["ar", "CATS"], y=ys, name=part, marker_color=colour,
                             hovertemplate=f"{part}: %{{y:.1f}} ms per token<extra></extra>"), row=1, col=2)
    fig.update_layout(barmode="stack", height=380, legend=dict(orientation="h", y=-0.25), margin=dict(t=50))
    fig.update_xaxes(**bandwidth_axis(lo, hi, "flash bandwidth B (MB/s)"), row=1, col=1)
    fig.update_yaxes(rangemode="tozero", title_text="speedup", row=1, col=1)
    return fig
