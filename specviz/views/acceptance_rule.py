"""The speculative-sampling rule's experiment drawn (:mod:`specviz.experiments.acceptance_rule`): the emitted
tokens' distribution beside the target's, and the acceptance probability at each position.
"""

from __future__ import annotations

from typing import Callable, Sequence

import plotly.graph_objects as go
import torch


def distribution_figure(p: torch.Tensor, series: dict[str, torch.Tensor], label: Callable[[int], str] = str,
                        top: int = 12, title: str = "Emitted-token distribution vs the target's p") -> go.Figure:
    """Grouped bars over the ``top`` most likely target tokens: p itself, then each named series (normalized)."""
    order = torch.argsort(p, descending=True)[:top].tolist()
    names = [label(i) for i in order]
    fig = go.Figure(go.Bar(x=names, y=[float(p[i]) for i in order], name="target p", marker_color="#222"))
    for name, values in series.items():
        values = values.double() / values.sum()
        fig.add_trace(go.Bar(x=names, y=[float(values[i]) for i in order], name=name))
    fig.update_layout(title=title, barmode="group", yaxis_title="probability", xaxis_title="token", height=420)
    return fig


def acceptance_by_position_figure(alphas: torch.Tensor, labels: Sequence[str],
                                  title: str = "Expected acceptance Σ min(p, q) at each position") -> go.Figure:
    """One bar per position, labelled with the token the target actually produced there. ``alphas``: the
    expected acceptance Σ min(p, q) at each position (:func:`acceptance_by_position`), not a run's
    acceptance by draft position."""
    xs = [f"{j}:{label}" for j, label in enumerate(labels)]
    mean = float(alphas.mean())
    fig = go.Figure(go.Bar(x=xs, y=alphas.tolist(), marker_color="#2e7d32", name="expected acceptance"))
    fig.add_hline(y=mean, line_dash="dot", annotation_text=f"mean expected acceptance = {mean:.2f}")
    fig.update_layout(title=title, yaxis=dict(title="expected acceptance Σ min(p, q)", range=[0, 1]),
                      xaxis_title="position: token produced", height=380, showlegend=False)
    return fig
