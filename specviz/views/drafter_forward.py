"""One EAGLE draft forward drawn from its real numbers (:func:`specviz.experiments.drafter_forward.eagle_forward`):
the vectors it reads and writes as colour strips, the modules it runs, and its top-k at each drafted position."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..experiments.drafter_forward import DrafterForward

GREEN, GREY, RED = "#2e7d32", "#9e9e9e", "#c62828"


def _scaled(values: list[float]) -> list[float]:
    """A vector divided by its root mean square: the strips share one colour scale whatever their size."""
    rms = (sum(v * v for v in values) / len(values)) ** 0.5 or 1.0
    return [v / rms for v in values]


def _label(text: str) -> str:
    shown = text.replace("\n", "⏎").replace(" ", "␣")
    return shown if len(shown) <= 14 else shown[:13] + "…"


def drafter_forward_figure(forward: DrafterForward, dimensions: int = 96) -> go.Figure:
    """The first ``dimensions`` values of each vector as colour strips (the cosine uses all of them), then the top-k
    of each drafted position with the target's own token in green."""
    steps = forward.steps
    n = len(steps)
    strips = [("reads: the target's f", forward.read_feature),
              ("reads: the token's embedding", forward.read_embedding),
              ("fc output: the layer's input", forward.layer_input),
              ("the layer's output: predicted f̂", forward.predicted),
              ("the target's own f there", forward.target_feature)]
    width = len(forward.read_feature)
    shown = min(dimensions, width)
    titles = [f"dimensions 0–{shown - 1} of {width}, each vector ÷ its RMS · cos(f̂, the target's f) over all "
              f"{width}: {steps[0].feature_cosine:.2f}"]
    for i, step in enumerate(steps, 1):
        rank = "outside the draft vocabulary" if step.target_rank is None else f"rank {step.target_rank}"
        titles.append(f"guess {i}{'' if step.on_target_path else ', after a miss'}<br>"
                      f"target: “{_label(step.target_text)}” ({rank})")
    fig = make_subplots(rows=2, cols=n, specs=[[{"colspan": n}] + [None] * (n - 1), [{} for _ in range(n)]],
                        row_heights=[0.42, 0.58], vertical_spacing=0.2, horizontal_spacing=0.12, subplot_titles=titles)
    fig.add_trace(go.Heatmap(z=[_scaled(v)[:shown] for _, v in reversed(strips)], y=[name for name, _ in reversed(strips)],
                             colorscale="RdBu", zmid=0, zmin=-3, zmax=3, showscale=False,
                             hovertemplate="%{y}<br>dimension %{x}: %{z:.2f}<extra></extra>"), row=1, col=1)
    fig.update_xaxes(title_text="dimension of the hidden state", row=1, col=1)
    for i, step in enumerate(steps, 1):
        labels = [_label(t) for _, t, _ in step.candidates]
        colours = [GREEN if token == step.target_token else GREY for token, _, _ in step.candidates]
        fig.add_trace(go.Bar(x=[p for _, _, p in step.candidates], y=labels, orientation="h", marker_color=colours,
                             text=[f"{p:.0%}" for _, _, p in step.candidates], textposition="outside",
                             cliponaxis=False, showlegend=False,
                             hovertemplate="%{y}: %{x:.3f}<extra></extra>"), row=2, col=i)
        fig.update_yaxes(autorange="reversed", row=2, col=i)
        fig.update_xaxes(range=[0, 1.15], tickformat=".0%", title_text="probability (draft vocabulary)", row=2, col=i)
    chain = " → ".join(f"{what}: {shape}, {whose}" for what, shape, whose in forward.modules[2:])
    fig.update_layout(
        title=dict(text=f"One EAGLE draft after “…{' '.join(forward.context_tail[-40:].split())}”"
                        f"<br><sup>{chain.replace(' → 1 decoder', ' →<br>1 decoder')}</sup>", font=dict(size=15)),
        height=740, margin=dict(t=120, l=10, r=20, b=50), font=dict(size=12))
    fig.update_annotations(font_size=12)
    return fig
