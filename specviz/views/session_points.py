"""A finished chain run as a point on Leviathan et al.'s model: measure a (per-position acceptance), c
(draft cost) and γ (tokens drafted per round, on average) from its trace, predict the speedup on this
machine's verify-cost curve, and set the prediction beside the speedup the run measured against its own
``ar`` baseline.

The Theory page draws the session's runs this way, so the model is checked on what was just decoded.
"""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from engines.core.stats import Stats
from engines.core.trace import Event, RunEnd, RunStart

from .chain import chain_speedup_on_curve, draft_seconds


def chain_run_point(events: Sequence[Event], ar_events: Sequence[Event], curve, label: str = "") -> dict | None:
    """None for a run that drafts no chain (``ar``, trees, pipelines) or drafted nothing."""
    start = next((e for e in events if isinstance(e, RunStart)), None)
    end = next((e for e in reversed(events) if isinstance(e, RunEnd)), None)
    ar_end = next((e for e in reversed(ar_events) if isinstance(e, RunEnd)), None)
    if start is None or end is None or ar_end is None or "gamma" not in start.config:
        return None
    stats, ar = Stats.from_dict(end.stats), Stats.from_dict(ar_end.stats)
    if not stats.drafted or not stats.rounds or not ar.new_tokens or not ar.tokens_per_s:
        return None
    # the draft length the run actually used, on average: gamma=auto settles on one, and pld drafts only as
    # far as its match goes, so the configured γ would overstate both τ and the verification's width
    gamma = max(1, round(stats.drafted / stats.rounds))
    ar_step = ar.decode_seconds / ar.new_tokens
    a = stats.per_token_acceptance
    c = (draft_seconds(events) / stats.drafted) / ar_step
    return {"run": label or start.method, "γ": gamma, "a": a, "c": c, "τ": stats.mean_accepted_length,
            "predicted": chain_speedup_on_curve(min(a, 0.999), gamma, c, curve),
            "measured": stats.tokens_per_s / ar.tokens_per_s}


def predicted_vs_measured_figure(points: Sequence[dict]) -> go.Figure:
    """Each run's predicted speedup against its measured one; on the diagonal the model is right."""
    if not points:
        raise ValueError("points must hold at least one run (chain_run_point)")
    top = max(max(p["predicted"], p["measured"]) for p in points) * 1.15
    fig = go.Figure([go.Scatter(x=[0, top], y=[0, top], mode="lines", name="prediction = measurement",
                                line=dict(color="#9e9e9e", dash="dot"), hoverinfo="skip"),
                     go.Scatter(x=[p["predicted"] for p in points], y=[p["measured"] for p in points],
                                mode="markers+text", text=[p["run"] for p in points], textposition="top center",
                                marker=dict(size=11, color="#1565c0"), name="this session's runs",
                                customdata=[[p["γ"], p["a"], p["c"]] for p in points],
                                hovertemplate="predicted %{x:.2f}× · measured %{y:.2f}×<br>γ %{customdata[0]} · "
                                              "a %{customdata[1]:.2f} · c %{customdata[2]:.2f}<extra>%{text}</extra>")])
    fig.update_layout(title="Leviathan's model on this machine's curve, against the measured speedup", height=420,
                      xaxis=dict(title="predicted speedup (measured a, c, γ)", range=[0, top]),
                      yaxis=dict(title="measured speedup over ar", range=[0, top]), legend=dict(orientation="h", y=-0.2))
    return fig
