"""ipywidgets explorables for the notebooks: turn a formula's knobs.

Formula explorers, plain ipywidgets + plotly (no extra front-end packages), sliders only; the explorers that run
the real engine are :mod:`specviz.widgets.run_explorers`:

* :func:`theory_explorer` — sliders for a (the per-token acceptance probability), γ and c over Leviathan
  et al.'s speedup model (:mod:`specviz.theory`), so a reader can feel why a draft must be both agreeing
  (a) and cheap (c).
* :func:`tree_theory_explorer` — depth, candidates per level, draft cost and node budget → what a
  draft tree should commit and what verifying it costs on this machine's verify-cost curve.
* :func:`cats_theory_explorer` — flash bandwidth, τ, γ and ℓ_SV → CATS's bytes per token and its
  §7.6 time model against autoregressive decoding under the same memory budget.
* :func:`fanout_explorer` — a, r, cache budget F and lookahead γ → SSD's optimal fan-out F_A beside the
  uniform one, with the predicted hit rate of each.
* :func:`message_size_explorer` — τ, n, TLI, E_kv, E (MoA's own letters: one layer's key width, the hidden size) and bytes per value → MoA's, EAGLE's and an independent
  draft's messages per cycle (the MoA paper's Table 7) and the TLI from which MoA sends more than EAGLE.

Figures are re-drawn into an ``Output`` widget rather than updated in a ``FigureWidget``, because
plotly's ``FigureWidget`` needs the ``anywidget`` front-end, which the project does not depend on.
Executed headless (nbmake), each explorable renders its initial state once and nothing else runs.
"""

from __future__ import annotations

from typing import Sequence

import ipywidgets as W
import plotly.graph_objects as go
from IPython.display import display

from ..theory import (
    expected_speedup,
    expected_tokens_per_round,
    expected_tree_tokens,
    full_tree_nodes,
    optimal_gamma,
    rank_probabilities,
    tree_speedup,
)
from ..views.cats_costs import layer_time_model
from ..views.cats_sweep_figures import cats_theory_figure, cats_theory_readout
from ..views.tree_budget import tree_budget_figure, verify_cost_figure


# --- theory ---------------------------------------------------------------------------------------
def theory_figure(a: float, gamma: int, cost_ratio: float, max_gamma: int = 16,
                  measured: Sequence[dict] = ()) -> go.Figure:
    """Leviathan's speedup S against γ at (a, c), the chosen γ and the best γ marked, measured points optional.
    ``a`` is the per-token acceptance probability of the model (the paper's α; this project's α is
    accepted ÷ drafted, so the argument is never called alpha)."""
    grid = list(range(1, max_gamma + 1))
    best = optimal_gamma(a, cost_ratio, max_gamma)
    fig = go.Figure(go.Scatter(x=grid, y=[expected_speedup(a, g, cost_ratio) for g in grid], mode="lines",
                               name=f"theory (a = {a:.2f}, c = {cost_ratio:.2f})"))
    fig.add_trace(go.Scatter(x=[gamma], y=[expected_speedup(a, gamma, cost_ratio)], mode="markers",
                             marker=dict(size=14, color="#c62828"), name=f"your γ = {gamma}"))
    if measured:
        fig.add_trace(go.Scatter(x=[p["gamma"] for p in measured], y=[p["speedup"] for p in measured],
                                 mode="markers", marker=dict(size=10, symbol="x", color="#222"), name="measured"))
    fig.add_vline(x=best, line_dash="dash", line_color="#2e7d32", annotation_text=f"best γ = {best}")
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="ar (S = 1)")
    fig.update_layout(title="Expected speedup S over ar (Leviathan et al.)", xaxis_title="γ (draft length)",
                      yaxis=dict(title="S", rangemode="tozero"), height=380, margin=dict(t=50, b=40))
    return fig


def theory_readout(a: float, gamma: int, cost_ratio: float) -> str:
    """The two numbers behind the curve, as one line of HTML."""
    tokens = expected_tokens_per_round(a, gamma)
    return (f"τ = (1 − a<sup>γ+1</sup>)/(1 − a) = <b>{tokens:.2f}</b>; "
            f"cost per round = γ·c + 1 = <b>{gamma * cost_ratio + 1:.2f}</b> ar steps; "
            f"S = <b>{expected_speedup(a, gamma, cost_ratio):.2f}×</b>")


def theory_explorer(a: float = 0.8, gamma: int = 5, cost_ratio: float = 0.1, max_gamma: int = 16,
                    measured: Sequence[dict] = ()) -> W.VBox:
    """Sliders a (per-token acceptance probability), γ, c → the speedup curve. Pass a sweep's ``points`` as
    ``measured`` to fit them by hand."""
    sliders = dict(
        a=W.FloatSlider(value=a, min=0.0, max=0.99, step=0.01, description="a (per token)",
                            tooltip="a: the probability that each drafted token is accepted (per-token acceptance)"),
        gamma=W.IntSlider(value=gamma, min=1, max=max_gamma, description="γ (draft length)"),
        cost_ratio=W.FloatSlider(value=cost_ratio, min=0.0, max=1.0, step=0.01, description="c (draft cost)"),
    )
    return slider_explorer(sliders, lambda values: (theory_readout(**values), [
        theory_figure(**values, max_gamma=max_gamma, measured=measured)]), width="420px")


def slider_explorer(sliders: dict, render, width: str = "380px") -> W.VBox:
    """Sliders beside a readout, figures below, redrawn on every change: the shape of every formula explorer.
    ``render(values)`` gets ``{name: slider value}`` and returns the readout's HTML and the figures to show."""
    for slider in sliders.values():
        slider.style.description_width = "110px"
        slider.layout.width = width
    readout, plot = W.HTML(), W.Output()

    def redraw(_change=None):
        readout.value, figures = render({name: s.value for name, s in sliders.items()})
        with plot:
            plot.clear_output(wait=True)
            for figure in figures:
                display(figure)

    for slider in sliders.values():
        slider.observe(redraw, names="value")
    redraw()
    return W.VBox([W.HBox([W.VBox(list(sliders.values())), readout]), plot])


# --- draft trees ----------------------------------------------------------------------------------
def tree_theory_readout(coverage: dict[int, float], depth: int, topk: int, draft_cost: float, nodes: int,
                        curve) -> str:
    """Chain, full tree and best n-node tree side by side: τ, nodes verified and the speedup estimate."""
    probs = rank_probabilities(coverage, topk)
    a1, ak = probs[0], sum(probs)
    shapes = [("chain (top-1 only)", expected_tree_tokens(probs[:1], depth), depth),
              (f"full tree ({topk} children everywhere)", expected_tree_tokens(probs, depth),
               full_tree_nodes(topk, depth)),
              (f"best tree of n = {nodes} nodes", expected_tree_tokens(probs, depth, nodes), nodes)]
    rows = "".join(f"<tr><td>{name}</td><td>{tau:.2f}</td><td>{n:,}</td>"
                   f"<td>{tree_speedup(tau, n, depth, draft_cost, curve.cost):.2f}×</td></tr>"
                   for name, tau, n in shapes)
    return (f"a = r<sub>1</sub> = <b>{a1:.2f}</b>, r<sub>1</sub> + … + r<sub>{topk}</sub> = <b>{ak:.2f}</b> "
            f"(top-{topk} coverage); τ<sub>chain</sub> = (1 − a<sup>d+1</sup>)/(1 − a); "
            "S ≈ τ·cost(1) / (d·c·cost(1) + cost(n + 1))"
            "<table style='margin-top:4px'><tr><th style='text-align:left'>shape</th><th>τ</th><th>nodes n</th>"
            f"<th>S</th></tr>{rows}</table>")


def tree_theory_explorer(curve, coverage: dict[int, float], depth: int = 5, topk: int = 4, draft_cost: float = 0.1,
                         nodes: int = 12) -> W.VBox:
    """Sliders d, k, c and n → what a tree is expected to commit and cost on this machine's verify-cost
    ``curve``, with ``coverage`` the drafter's measured top-k agreement ``{k: a_k}``."""
    sliders = dict(
        depth=W.IntSlider(value=depth, min=1, max=8, description="d (depth)"),
        topk=W.IntSlider(value=topk, min=1, max=8, description="k (candidates)"),
        draft_cost=W.FloatSlider(value=draft_cost, min=0.0, max=0.5, step=0.01, description="c_d (per level)"),
        nodes=W.IntSlider(value=nodes, min=1, max=60, description="n (nodes sent)"),
    )

    def render(values: dict):
        probs = rank_probabilities(coverage, values["topk"])
        return tree_theory_readout(coverage, curve=curve, **values), [
            tree_budget_figure(probs, values["depth"], values["draft_cost"], curve, nodes=values["nodes"]),
            verify_cost_figure(curve, highlight=values["nodes"] + 1)]

    return slider_explorer(sliders, render)


# --- CATS under a memory budget ----------------------------------------------------------------------
def cats_theory_explorer(layer_bytes: Sequence[int], flash_mb_s: float = 1000.0, tau: float = 1.6, gamma: int = 5,
                         sv_layer: int = 15, dm_layer: int = 3, layer_seconds: float = 0.0012,
                         head_seconds: float = 0.002) -> W.VBox:
    """Sliders B (flash bandwidth), τ, γ and ℓ_SV → BPT and the §7.6 time model (:func:`specviz.views.cats_costs.layer_time_model`):
    layers 1..ℓ_SV resident, the rest (``layer_bytes``, one entry per decoder layer) streamed once per deep
    pass; ``layer_seconds`` / ``head_seconds`` are the compute of one layer per forward and of one adapter or
    LM head call."""
    n = len(layer_bytes)
    sliders = dict(
        flash_mb_s=W.FloatLogSlider(value=flash_mb_s, base=10, min=1.5, max=4, step=0.05, description="B (MB/s)",
                                    readout_format=".0f"),
        tau=W.FloatSlider(value=tau, min=1.0, max=8.0, step=0.05, description="τ (tokens/cycle)"),
        gamma=W.IntSlider(value=gamma, min=1, max=10, description="γ (drafts)"),
        sv_layer=W.IntSlider(value=sv_layer, min=dm_layer + 1, max=n - 1, description="ℓ_SV (resident)"),
    )

    def render(values: dict):
        if values["tau"] > values["gamma"] + 1:  # a cycle commits at most γ + 1 tokens
            sliders["tau"].value = values["tau"] = float(values["gamma"] + 1)
        model = layer_time_model(layer_bytes, values["sv_layer"], values["tau"], values["gamma"], dm_layer,
                                 layer_seconds, head_seconds)
        return cats_theory_readout(model, values["flash_mb_s"]), [cats_theory_figure(model, values["flash_mb_s"])]

    return slider_explorer(sliders, render)


# --- SSD's fan-out (paper 002; docs/mirror-and-ssd.md) -----------------------------------------------
def fanout_readout(a_p: float, r: float, budget: int, lookahead: int) -> str:
    """The two fan-outs and their predicted hit rates, as one line of HTML."""
    from engines.programs.verdict.speculation_cache import geometric_fanout, predicted_hit_rate, uniform_fanout

    geometric = geometric_fanout(lookahead, budget, a_p, r)
    uniform = uniform_fanout(lookahead, budget // (lookahead + 1))
    return (f"F<sub>A</sub> ∝ P(A)<sup>1/(1+r)</sup>: geometric <b>{geometric}</b> → h = "
            f"<b>{predicted_hit_rate(geometric, a_p, r):.3f}</b>; uniform <b>{uniform}</b> → h = "
            f"<b>{predicted_hit_rate(uniform, a_p, r):.3f}</b> (miss model F<sup>−r</sup>)")


def fanout_explorer(a_p: float = 0.6, r: float = 0.5, budget: int = 24, lookahead: int = 7) -> W.VBox:
    """Sliders a (``a_p``), r, F (``budget``) and γ (``lookahead``) → SSD's optimal fan-out beside the uniform one (§5.9 view 6,
    :func:`specviz.views.ssd.fanout_figure`): the better the draft (a), the more of the budget goes to
    deep verdicts; the flatter the miss curve (small r), the more evenly it spreads."""
    from ..views.ssd import fanout_figure

    sliders = dict(
        a_p=W.FloatSlider(value=a_p, min=0.05, max=0.95, step=0.01, description="a (per token)"),
        r=W.FloatSlider(value=r, min=0.05, max=2.0, step=0.05, description="r (miss exponent)"),
        budget=W.IntSlider(value=budget, min=1, max=64, description="F (cache budget)"),
        lookahead=W.IntSlider(value=lookahead, min=1, max=10, description="γ (lookahead)"),
    )
    return slider_explorer(sliders, lambda values: (fanout_readout(**values), [fanout_figure(**values)]))


# --- PPSD (paper 003) -------------------------------------------------------------------------------
def ppsd_formula_explorer(alpha: float = 0.6, exit_layer: int = 15, gamma: int = 5, n_layers: int = 30) -> W.VBox:
    """Sliders a (per-token acceptance probability, the paper's α), ℓ and γ → PPSD's S_PPSD (Eq. 6), EESD's
    S_EESD (Eq. 4) and their ratio (Eq. 7), with both curves against a
    (:func:`specviz.views.ppsd_theory.formula_figure`): how a rejection's cost (a whole pipeline of P = ⌈L/ℓ⌉
    ticks) sets PPSD's speedup, and why EESD's long
    drafts do not pay."""
    from ..views.ppsd_theory import formula_figure, formula_readout

    sliders = dict(
        alpha=W.FloatSlider(value=alpha, min=0.0, max=1.0, step=0.01, description="a (per token)",
                            tooltip="a: the probability that each drafted token is accepted (per-token acceptance)"),
        exit_layer=W.IntSlider(value=exit_layer, min=1, max=n_layers - 1, description="ℓ (exit layer)"),
        gamma=W.IntSlider(value=gamma, min=1, max=16, description="γ (EESD drafts)"),
    )
    return slider_explorer(sliders, lambda values: (formula_readout(**values, n_layers=n_layers),
                                                    [formula_figure(**values, n_layers=n_layers)]))


# --- MoA's messages (paper 001, Table 7; docs/moa.md) ---------------------------------------------------
def message_size_readout(accepted: int, nodes: int, tli: int, kv_width: int, hidden: int,
                         bytes_per_value: float = 1.0) -> str:
    """MoA's and EAGLE's bytes down per cycle and the TLI from which MoA's message is the bigger one, as HTML."""
    from engines.network.link import table7_bytes

    from ..theory import moa_break_even_tli

    def down(kind: str) -> float:
        return table7_bytes(kind, accepted=accepted, nodes=nodes, hidden=hidden, kv_width=kv_width, tli=tli,
                            bytes_per_value=bytes_per_value)["down"]

    moa, eagle = down("moa"), down("eagle")
    even = moa_break_even_tli(hidden, kv_width)
    verdict = "bigger" if moa > eagle else ("the same size" if moa == eagle else "smaller")
    return (f"down per cycle: MoA 3τ + 2τ·E<sub>kv</sub>·(TLI+1)·b = <b>{moa:,.0f} bytes</b> vs EAGLE 3τ + τ·E·b = "
            f"<b>{eagle:,.0f} bytes</b> (MoA's is {verdict}); up 4n = <b>{4 * nodes:,} bytes</b> for both. "
            f"Break-even: MoA's message exceeds EAGLE's once 2·E<sub>kv</sub>·(TLI+1) &gt; E, i.e. from "
            f"<b>TLI = {even}</b> on.")


def message_size_explorer(accepted: int = 4, nodes: int = 16, tli: int = 0, kv_width: int = 192, hidden: int = 576,
                          bytes_per_value: float = 1, measured=None) -> W.VBox:
    """Sliders τ, n, TLI, E_kv, E and the bytes per value → Table 7's message sizes for MoA, EAGLE and an
    independent draft (:func:`specviz.views.moa_messages.message_size_figure`) and a one-line readout. ``measured``:
    runs (label → events) whose mean messages are drawn over the bars (for this model's E and E_kv)."""
    from ..views.moa_messages import message_size_figure

    sliders = dict(
        accepted=W.IntSlider(value=accepted, min=1, max=16, description="τ (tokens/cycle)"),
        nodes=W.IntSlider(value=nodes, min=1, max=60, description="n (tree nodes)"),
        tli=W.IntSlider(value=tli, min=0, max=8, description="TLI"),
        kv_width=W.IntSlider(value=kv_width, min=16, max=2048, step=16, description="E_kv"),
        hidden=W.IntSlider(value=hidden, min=64, max=8192, step=64, description="E (hidden)"),
        bytes_per_value=W.Dropdown(options=[("1 (int8, the paper)", 1), ("2 (fp16)", 2), ("4 (fp32)", 4)],
                                   value=bytes_per_value, description="bytes / value"),
    )

    def render(values: dict):
        return message_size_readout(**values), [message_size_figure(**values, measured=measured)]

    return slider_explorer(sliders, render)
