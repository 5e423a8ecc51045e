"""The introduction's memory-bound measurements drawn: milliseconds per forward against the chunk of tokens it
processes (measured by :func:`specviz.experiments.forward_costs.forward_costs`).
"""

from __future__ import annotations

import plotly.colors
import plotly.graph_objects as go

PALETTE = plotly.colors.qualitative.Plotly


def forward_cost_figure(runs: dict[str, list[dict]]) -> go.Figure:
    """Milliseconds per forward against tokens per forward, with the "cost ∝ tokens" line for contrast.

    ``runs`` maps a label (e.g. a dtype) to the output of :func:`forward_costs`.
    """
    fig = go.Figure()
    ticks: set[int] = set()
    for i, (label, costs) in enumerate(runs.items()):
        xs = [c["tokens"] for c in costs]
        ms = [1000 * c["seconds"] for c in costs]
        ticks.update(xs)
        colour = PALETTE[i % len(PALETTE)]
        fig.add_trace(go.Scatter(x=xs, y=ms, mode="lines+markers", name=f"{label}: measured",
                                 line=dict(color=colour)))
        fig.add_trace(go.Scatter(x=xs, y=[ms[0] * n / xs[0] for n in xs], mode="lines", name=f"{label}: if cost ∝ tokens",
                                 line=dict(dash="dot", color=colour)))
    fig.update_layout(title="One forward with a KV cache: time vs tokens in the forward",
                      xaxis=dict(title="tokens in one forward", type="log", tickvals=sorted(ticks)),
                      yaxis=dict(title="milliseconds per forward", type="log"), height=420)
    return fig
