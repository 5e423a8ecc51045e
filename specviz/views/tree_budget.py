"""τ against draft-tree size, measured and predicted, and the analytic tree budget (:mod:`specviz.theory`):

* :func:`predicted_tau` / :func:`tau_vs_tree_size` — how τ grows with the number of nodes sent, measured by runs
  at several ``total_tokens`` (:func:`specviz.experiments.tree_size_sweep.tree_size_sweep`) and predicted from
  the trees of a single large run (greedy: smaller trees keep the best-scoring nodes, so a round's outcome at
  size m can be read off its large tree).
* :func:`tree_budget_figure` / :func:`verify_cost_figure` — what the best tree of n nodes should commit and
  what verifying it costs on this machine.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engines.core.trace import Event, RunStart

from ..theory import best_tree_paths, expected_tree_tokens, tree_speedup
from .draft_trees import STATUS_COLOURS, round_hits, tree_rounds


def predicted_tau(events: Sequence[Event], sizes: Sequence[int] | None = None) -> list[dict]:
    """τ each tree size m would have reached, read off one greedy run's trees.

    At size m the rerank sends the m best-scoring nodes, which include their own ancestors; a greedy walk
    then accepts exactly the accepted-path nodes among them (the path's next node is the only child
    whose token is the target's argmax). So the round would have committed 1 + (accepted-path nodes among
    its m best) tokens. Averaged over rounds. It is exact for the first round only: at another size the
    later rounds start from other places. Sizes beyond a round's sent nodes see only those (predict from
    a run with a fixed, large ``total_tokens``).
    """
    start = next((e for e in events if isinstance(e, RunStart)), None)
    if start is not None and start.temperature > 0:
        raise ValueError("predicting τ from a run's trees needs a greedy run (temperature 0): under sampling "
                         "which path survives depends on the draws, not on the tree alone")
    hits = [round_hits(tree, verification) for tree, verification in tree_rounds(events) if verification]
    if not hits:
        raise ValueError("the run has no verified trees to predict from")
    largest = max(len(h) for h in hits)
    sizes = list(sizes) if sizes is not None else list(range(1, largest + 1))
    return [{"size": m, "tau": sum(1 + sum(h[:m]) for h in hits) / len(hits), "rounds": len(hits)} for m in sizes]


def tau_vs_tree_size(points: Sequence[dict], predicted: Sequence[dict] = (), predict_from: int | None = None,
                     title: str = "τ against tree size: measured runs and the prediction from one run's trees"
                     ) -> go.Figure:
    """Left: measured τ per run (a fixed size at its ``total_tokens``, ``auto`` at its mean tree size)
    beside the curve predicted from one large run. Right: the same runs' speedup over ``ar`` (tok/s when
    there is no baseline), because τ only grows with the tree while the cost of verifying it grows too."""
    speed = "speedup" if points and all(p.get("speedup") for p in points) else "tokens_per_s"
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "τ: tokens committed per target call", "S: speedup over ar" if speed == "speedup" else "tokens/s"))
    if predicted:
        source = f" from the run at {predict_from}" if predict_from else ""
        fig.add_trace(go.Scatter(x=[p["size"] for p in predicted], y=[p["tau"] for p in predicted], mode="lines",
                                 line=dict(color="#888", dash="dot", shape="hv"), name=f"τ predicted{source}"),
                      row=1, col=1)
    fixed = sorted((p for p in points if p["total_tokens"] != "auto"), key=_size)
    auto = [p for p in points if p["total_tokens"] == "auto"]
    for group, name, symbol in ((fixed, "measured, fixed size", "circle"), (auto, "measured, auto size", "star")):
        if not group:
            continue
        hover = [[p["tokens_per_s"], p["tree_size"], p["tau"]] for p in group]
        template = ("size %{x:.1f}: τ = %{customdata[2]:.2f} · %{customdata[0]:.1f} tok/s · "
                    "%{customdata[1]:.1f} nodes sent per round<extra></extra>")
        colour = STATUS_COLOURS["accepted"] if symbol == "circle" else "#ef6c00"
        marker = dict(size=13 if symbol == "star" else 10, color=colour, symbol=symbol)
        for col, key in ((1, "tau"), (2, speed)):
            fig.add_trace(go.Scatter(x=[_size(p) for p in group], y=[p[key] for p in group], customdata=hover,
                                     mode="lines+markers" if col == 2 and symbol == "circle" else "markers",
                                     line=dict(color=colour, dash="dash"), marker=marker, name=name,
                                     legendgroup=name, showlegend=col == 1, hovertemplate=template), row=1, col=col)
    if speed == "speedup":
        fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"), row=1, col=2)
    fig.update_layout(title=title, height=400, legend=dict(orientation="h", y=-0.25))
    fig.update_xaxes(title_text="nodes sent to the target per round")
    fig.update_yaxes(rangemode="tozero")
    return fig


def _size(point: dict) -> float:
    return point["tree_size"] if point["total_tokens"] == "auto" else point["total_tokens"]


# --- the analytic side: what the best tree of n nodes is worth ----------------------------------------
class CostCurve(Protocol):
    def cost(self, n: int) -> float: ...


def tree_budget_rows(rank_probs: Sequence[float], depth: int, draft_cost: float, curve: CostCurve,
                     max_nodes: int = 60) -> list[dict]:
    """τ and estimated speedup of the best n-node tree, n = 1 … ``max_nodes`` (:mod:`specviz.theory`)."""
    paths = best_tree_paths(rank_probs, depth, max_nodes)
    rows, tau = [], 1.0
    for n, p in enumerate(paths, start=1):
        tau += p
        rows.append({"nodes": n, "tau": tau, "speedup": tree_speedup(tau, n, depth, draft_cost, curve.cost)})
    return rows


def tree_budget_figure(rank_probs: Sequence[float], depth: int, draft_cost: float, curve: CostCurve,
                       nodes: int | None = None, max_nodes: int = 60) -> go.Figure:
    """τ (left) and estimated speedup (right) of the best n-node tree against n, beside the chain of the
    same depth (top-1 only): τ keeps growing with n, the speedup peaks where verifying one more node
    costs more than the token it is expected to add."""
    rows = tree_budget_rows(rank_probs, depth, draft_cost, curve, max_nodes)
    chain_tau = expected_tree_tokens(rank_probs[:1], depth)
    chain = {"tau": chain_tau, "speedup": tree_speedup(chain_tau, depth, depth, draft_cost, curve.cost)}
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "τ: expected tokens per round", "S: estimated speedup over ar"))
    chosen = rows[nodes - 1] if nodes is not None and 1 <= nodes <= len(rows) else None
    for col, key, colour in ((1, "tau", STATUS_COLOURS["accepted"]), (2, "speedup", "#1565c0")):
        fig.add_trace(go.Scatter(x=[r["nodes"] for r in rows], y=[r[key] for r in rows], mode="lines",
                                 line=dict(color=colour), name=f"best tree, k = {len(rank_probs)}",
                                 legendgroup="tree", showlegend=col == 1,
                                 hovertemplate="n = %{x}: %{y:.2f}<extra></extra>"), row=1, col=col)
        fig.add_trace(go.Scatter(x=[depth], y=[chain[key]], mode="markers", legendgroup="chain", showlegend=col == 1,
                                 marker=dict(symbol="square", size=10, color="#555"),
                                 name=f"chain of depth {depth} (n = {depth})",
                                 hovertemplate="chain: %{y:.2f}<extra></extra>"), row=1, col=col)
        if chosen:
            fig.add_trace(go.Scatter(x=[nodes], y=[chosen[key]], mode="markers", marker=dict(size=13, color="#c62828"),
                                     name=f"your n = {nodes}", legendgroup="chosen", showlegend=col == 1,
                                     hovertemplate="n = %{x}: %{y:.2f}<extra></extra>"), row=1, col=col)
    if rows:
        best = max(rows, key=lambda r: r["speedup"])
        fig.add_vline(x=best["nodes"], line=dict(color="#1565c0", dash="dash"), row=1, col=2,
                      annotation_text=f"fastest: n = {best['nodes']}", annotation_position="bottom right")
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"), row=1, col=2)
    fig.update_layout(title=f"The best tree of n nodes (depth d ≤ {depth}, k ≤ {len(rank_probs)} children per node)",
                      height=380, legend=dict(orientation="h", y=-0.25))
    fig.update_xaxes(title_text="n: nodes verified per round")
    fig.update_yaxes(rangemode="tozero")
    return fig


def verify_cost_figure(curve, highlight: int | None = None, up_to: int = 61) -> go.Figure:
    """The machine's verify-cost curve: one target forward over n tokens, in ``ar`` steps (measured for
    n ≤ the curve's largest n, extended linearly beyond it, as the engine's ``cost`` does)."""
    measured = sorted(curve.seconds)
    beyond = list(range(measured[-1], up_to + 1))
    fig = go.Figure(go.Scatter(x=measured, y=[curve.cost(n) / curve.cost(1) for n in measured], mode="lines+markers",
                               name="measured", line=dict(color="#222"),
                               customdata=[curve.cost(n) * 1e3 for n in measured],
                               hovertemplate="n = %{x}: %{y:.2f} ar steps (%{customdata:.1f} ms)<extra></extra>"))
    if len(beyond) > 1:
        fig.add_trace(go.Scatter(x=beyond, y=[curve.cost(n) / curve.cost(1) for n in beyond], mode="lines",
                                 line=dict(color="#222", dash="dot"), name="extrapolated"))
    if highlight is not None:
        fig.add_trace(go.Scatter(x=[highlight], y=[curve.cost(highlight) / curve.cost(1)], mode="markers",
                                 marker=dict(size=13, color="#c62828"), name=f"root + nodes = {highlight}"))
    fig.update_layout(title="What verifying n tokens costs here", height=400, legend=dict(orientation="h", y=-0.22),
                      xaxis_title="n: tokens in one target forward (root + tree nodes)",
                      yaxis=dict(title="cost ÷ cost of one token", rangemode="tozero"))
    return fig
