"""Plotly figures built from engine traces (lists of events) and measured sweeps."""

from __future__ import annotations

from typing import Iterable, Sequence

import plotly.graph_objects as go

from engines.core.stats import compute_stats
from engines.core.trace import Commit, Event, StageSpan

from ..theory import expected_speedup, expected_tokens_per_round
from .tokens import FATE_COLOURS, FATE_LABELS, fated_pieces


def token_stream_figure(events: Sequence[Event], max_tokens: int = 400) -> go.Figure:
    """Each committed token as a cell, coloured by fate, one row per verification round."""
    pieces = fated_pieces(events)[:max_tokens]
    fig = go.Figure()
    for fate, colour in FATE_COLOURS.items():
        xs, ys, texts = [], [], []
        column: dict[int, int] = {}
        for piece, f, round_ in pieces:
            x = column.get(round_, 0)
            column[round_] = x + 1
            if f == fate:
                xs.append(x)
                ys.append(round_)
                texts.append(piece.replace("\n", "↵"))
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers+text", text=texts, textposition="middle right",
                                 marker=dict(symbol="square", size=12, color=colour),
                                 name=FATE_LABELS[fate], hovertext=texts))
    fig.update_layout(title="Committed tokens per round, coloured by fate", xaxis_title="token within round",
                      yaxis_title="round (0 = prefill)", yaxis_autorange="reversed", height=500,
                      xaxis=dict(range=[-0.5, 14]))
    return fig


def accepted_lengths(events: Iterable[Event]) -> list[int]:
    """Tokens committed per verification round (τ samples): accepted drafts + 1."""
    return [len(e.tokens) for e in events if isinstance(e, Commit) and e.round > 0]


def accepted_length_histogram(runs: dict[str, Sequence[Event]]) -> go.Figure:
    """Distribution of tokens per round for one or more runs (name → events)."""
    fig = go.Figure()
    for name, events in runs.items():
        lengths = accepted_lengths(events)
        mean = sum(lengths) / len(lengths) if lengths else float("nan")
        fig.add_trace(go.Histogram(x=lengths, name=f"{name} (τ = {mean:.2f})", histnorm="probability",
                                   xbins=dict(start=0.5, end=max(lengths or [1]) + 0.5, size=1)))
    fig.update_layout(title="Tokens committed per target call", xaxis_title="accepted drafts + 1",
                      yaxis_title="fraction of rounds", barmode="group", bargap=0.1)
    return fig


def draft_depth_acceptance_figure(runs: dict[str, Sequence[Event]]) -> go.Figure:
    """Acceptance by draft position: at each draft depth, accepted ÷ rounds that reached it. A flat profile
    means the drafter's first guess bounds τ; a falling one means its own earlier guesses lead it astray."""
    fig = go.Figure()
    for name, events in runs.items():
        stats = compute_stats(events)
        depths = list(range(1, len(stats.acceptance_by_position) + 1))
        fig.add_trace(go.Bar(x=depths, y=stats.acceptance_by_position, name=name,
                             customdata=stats.reached_by_position,
                             hovertemplate="depth %{x}: acceptance %{y:.2f} (accepted ÷ the %{customdata} rounds "
                                           "that reached it)<extra></extra>"))
    fig.update_layout(title="Acceptance by draft position", xaxis_title="draft position (1 = first guess)",
                      yaxis_title="accepted ÷ rounds that reached it", yaxis_range=[0, 1], barmode="group")
    return fig


def speedup_vs_gamma(points: Sequence[dict], a: float, cost_ratio: float, max_gamma: int | None = None,
                     title: str = "S against γ: measured and Leviathan et al.'s model") -> go.Figure:
    """``points``: measured ``{"gamma", "speedup"}``; the curve is the model at the measured c and a, the
    per-token acceptance probability (a measured per-position acceptance, e.g.
    :func:`specviz.experiments.gamma_sweep.gamma_sweep`'s ``"a"``; never called alpha, which is α)."""
    gammas = [p["gamma"] for p in points]
    top = max_gamma or max(gammas + [8])
    grid = list(range(1, top + 1))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=grid, y=[expected_speedup(a, g, cost_ratio) for g in grid], mode="lines",
                             name=f"theory (a = {a:.2f}, c = {cost_ratio:.2f})"))
    fig.add_trace(go.Scatter(x=gammas, y=[p["speedup"] for p in points], mode="markers+lines",
                             marker=dict(size=10), name="measured"))
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="ar (S = 1)")
    fig.update_layout(title=title, xaxis_title="γ (draft length)", yaxis_title="S (speedup over ar)")
    return fig


def kernel_curves_figure(curve) -> go.Figure:
    """Milliseconds of one target forward over n tokens with each matmul kernel the engine tried, and the
    curve it kept (the fastest per n): where the default kernel's line rises steeply, verifying a few
    tokens was not free on this machine until the kernel was chosen by measurement."""
    fig = go.Figure()
    tried = curve.by_kernel if len(curve.by_kernel) > 1 else {}  # fused layers: one curve, nothing was chosen
    for kernel, seconds in tried.items():
        ns = sorted(seconds)
        fig.add_trace(go.Scatter(x=ns, y=[seconds[n] * 1e3 for n in ns], mode="lines", name=kernel,
                                 line=dict(dash="dot"), hovertemplate=f"{kernel}: n = %{{x}}, %{{y:.1f}} ms<extra></extra>"))
    ns = sorted(curve.seconds)
    fig.add_trace(go.Scatter(x=ns, y=[curve.seconds[n] * 1e3 for n in ns], mode="lines+markers",
                             name="kept (fastest)" if tried else next(iter(curve.by_kernel), "measured"),
                             line=dict(color="#222", width=3),
                             customdata=[curve.kernels[n] if tried else next(iter(curve.by_kernel), "") for n in ns],
                             hovertemplate="n = %{x}: %{y:.1f} ms (%{customdata})<extra></extra>"))
    if curve.ceiling_tokens_per_s:
        fig.add_hline(y=1e3 / curve.ceiling_tokens_per_s, line=dict(color="#c62828", dash="dash"),
                      annotation_text="memory-bandwidth bound for one token", annotation_position="bottom right")
    fig.update_layout(title="What a target forward over n tokens costs on this machine", height=400,
                      xaxis_title="n: tokens in one forward (γ + 1 for a chain, nodes + 1 for a tree)",
                      yaxis=dict(title="ms", rangemode="tozero"), legend=dict(orientation="h", y=-0.25))
    return fig


def chain_speedup_on_curve(alpha: float, gamma: int, cost_ratio: float, curve) -> float:
    """Leviathan's speedup with the verify cost read off the machine's curve instead of assumed equal
    to one step: τ·cost(1) / (γ·c·cost(1) + cost(γ + 1))."""
    return expected_tokens_per_round(alpha, gamma) * curve.cost(1) / (gamma * cost_ratio * curve.cost(1)
                                                                       + curve.cost(gamma + 1))


def chain_theory_on_curve_figure(alpha: float, cost_ratio: float, curve, max_gamma: int = 16) -> go.Figure:
    """Speedup against γ under Leviathan's assumption (verifying γ + 1 tokens costs one step) and on this
    machine's measured curve: the gap is what the assumption hides, and the best γ moves. ``alpha``: a, the
    per-token acceptance probability."""
    gammas = list(range(1, max_gamma + 1))
    flat = [expected_speedup(alpha, g, cost_ratio) for g in gammas]
    measured = [chain_speedup_on_curve(alpha, g, cost_ratio, curve) for g in gammas]
    fig = go.Figure([go.Scatter(x=gammas, y=flat, mode="lines", name="verification assumed free (Leviathan)",
                                line=dict(dash="dot")),
                     go.Scatter(x=gammas, y=measured, mode="lines+markers", name="on this machine's verify-cost curve")])
    best = gammas[max(range(len(gammas)), key=measured.__getitem__)]
    fig.add_vline(x=best, line=dict(color="#1565c0", dash="dash"), annotation_text=f"best γ here: {best}")
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"))
    fig.update_layout(title=f"Chain speedup against γ (a = {alpha:.2f}, c = {cost_ratio:.2f})", height=380,
                      xaxis_title="γ: tokens drafted per round", yaxis=dict(title="speedup over ar", rangemode="tozero"),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def draft_seconds(events) -> float:
    return sum(e.end - e.start for e in events if isinstance(e, StageSpan) and e.stage == "draft")
