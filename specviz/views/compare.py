"""Views that lay several runs of the same prompt side by side (the dashboard's Compare page, notebooks)."""

from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go

from engines.core.trace import Commit, Event, Prefill


def cumulative_tokens(events: Sequence[Event]) -> tuple[list[float], list[int]]:
    """(decode seconds, tokens committed so far) at every commit; time 0 is the end of the prefill, which
    commits the first token. A run's mean slope is its tokens/s; its steps are its target calls."""
    start = next((e.t for e in events if isinstance(e, Prefill)), None)
    seconds, tokens, total = [], [], 0
    for event in events:
        if isinstance(event, Commit):
            total += len(event.tokens)
            seconds.append(max(event.t - (start if start is not None else event.t), 0.0))
            tokens.append(total)
            if start is None:
                start = event.t
    return seconds, tokens


def cumulative_tokens_figure(runs: Mapping[str, Sequence[Event]], title: str = "Tokens committed over decode time"
                             ) -> go.Figure:
    """One step line per run (name → events): the steeper, the faster; a long flat step is a slow round."""
    fig = go.Figure()
    for name, events in runs.items():
        seconds, tokens = cumulative_tokens(events)
        fig.add_trace(go.Scatter(x=seconds, y=tokens, mode="lines+markers", line_shape="hv", name=name,
                                 marker=dict(size=4),
                                 hovertemplate=f"{name}<br>%{{y}} tokens at %{{x:.3f}} s<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="seconds since the prefill ended", yaxis_title="tokens committed",
                      legend=dict(orientation="h", y=-0.25), height=420)
    return fig


def speedup_bar_figure(labels: Sequence[str], speedups: Sequence[float | None], title: str = "Speedup over ar",
                       hover: Sequence[str] | None = None) -> go.Figure:
    """Horizontal bars of speedup (``None``: not measured, drawn as 0 and labelled so), a line at 1×."""
    values = [s if s is not None else 0.0 for s in speedups]
    text = [f"{s:.2f}×" if s is not None else "—" for s in speedups]
    colours = ["#2e7d32" if (s or 0) >= 1 else "#c62828" for s in speedups]
    fig = go.Figure(go.Bar(x=values, y=list(labels), orientation="h", text=text, textposition="outside",
                           marker_color=colours, customdata=list(hover) if hover else None,
                           hovertemplate="%{y}: %{text}" + ("<br>%{customdata}" if hover else "") + "<extra></extra>"))
    fig.add_vline(x=1.0, line=dict(color="#555", dash="dot"), annotation_text="ar", annotation_position="top")
    fig.update_layout(title=title, xaxis_title="speedup (tokens/s ÷ ar's)", yaxis=dict(autorange="reversed"),
                      height=max(260, 34 * len(labels) + 120), margin=dict(l=10))
    return fig
