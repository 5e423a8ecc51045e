"""The τ the shipped drafters reach, on the curve τ = (1 − a^{γ+1}) ÷ (1 − a) that a drafter accepted with the
same probability a at every position would follow (the runs: :mod:`specviz.experiments.drafter_compare`).
"""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from ..theory import expected_tokens_per_round


def tau_vs_acceptance_figure(rows: Sequence[dict], gamma: int = 5, goal: float | None = 2.5) -> go.Figure:
    """Measured (per-position acceptance, τ) of each drafter on the flat-acceptance curve at ``gamma``."""
    grid = [i / 100 for i in range(0, 96)]
    fig = go.Figure(go.Scatter(x=grid, y=[expected_tokens_per_round(a, gamma) for a in grid], mode="lines",
                               name=f"τ if every position is accepted with probability a (γ = {gamma})",
                               line=dict(color="#888", dash="dot")))
    fig.add_trace(go.Scatter(x=[r["per-position acceptance"] for r in rows], y=[r["τ"] for r in rows],
                             mode="markers+text", text=[r["drafter"] for r in rows], textposition="top center",
                             name="measured drafters", marker=dict(size=10)))
    if goal:
        needed = next((a for a in grid if expected_tokens_per_round(a, gamma) >= goal), None)
        fig.add_hline(y=goal, line=dict(color="#c62828", dash="dash"),
                      annotation_text=f"τ = {goal}" + (f" needs a ≈ {needed:.2f}" if needed is not None else ""))
    fig.update_layout(title="Tokens per round against per-position acceptance",
                      xaxis_title="per-position acceptance a: accepted ÷ draft positions the target judged",
                      yaxis_title="τ: tokens committed per target call", xaxis_range=[0, 1], height=420)
    return fig
