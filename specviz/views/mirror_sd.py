"""Mirror-SD (paper 000; docs/mirror-and-ssd.md) from one run's events: the hypotheses the draft lane prepared
from the target's early exit (:func:`hypothesis_grid`), how often the verdict hit one (:func:`overlap_rate`,
:func:`fallback_heatmap`) and the latency law (:func:`mirror_law_figure`).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engines.core.trace import BranchRollout, CacheLookup, Commit, EeMessage, Event, ReuseDecision

from ..theory import mirror_step_time
from .verdict_metrics import HIT_GREEN, MISS_RED, _empty, run_config, verdict_metrics, verdict_rounds


# --- (2) Mirror: the hypothesis grid, Ω_κ and the fallback heatmap ---------------------------------------
def _by_round(events: Sequence[Event], cls) -> dict[int, Event]:
    return {e.round: e for e in events if isinstance(e, cls)}


def hypothesis_grid(events: Sequence[Event], round_: int | None = None,
                    token_text: Callable[[int], str] | None = None) -> go.Figure:
    """Mirror's bet for one round: the early exit's top-κ (columns, best first) at each of the γ+1 verified
    positions (rows, j = 0 predicts the first draft token), coloured by log p̃. Outlined: the tokens the
    target actually took — accepted drafts (blue) up to the verdict's position A, where the correction or bonus
    c sits (green fill = its branch was reused, a hit). Rows past A were never reached (greyed). A cell with no
    branch is the draft's own token there: matching it is an acceptance, not a correction. Default round:
    the last one with an early-exit message."""
    messages = _by_round(events, EeMessage)
    text = token_text or str
    if not messages:
        return _empty("No early-exit message yet (Mirror-SD runs send one per round).")
    r = round_ if round_ is not None else max(messages)
    if r not in messages:
        raise ValueError(f"no early-exit message in round {r}; rounds with one: {sorted(messages)}")
    ee = messages[r]
    commit, decision = _by_round(events, Commit).get(r), _by_round(events, ReuseDecision).get(r)
    lookup = _by_round(events, CacheLookup).get(r)
    rollout = _by_round(events, BranchRollout).get(r)
    roots = {tuple(root) for root in rollout.roots} if rollout is not None else None
    kappa = max(len(row) for row in ee.ids)
    rows = [f"j = {j}" for j in range(len(ee.ids))]
    z = [list(lp) + [None] * (kappa - len(lp)) for lp in ee.logprobs]
    cells, hover = [], []
    for j, ids in enumerate(ee.ids):
        cells.append([text(t) for t in ids] + [""] * (kappa - len(ids)))
        hover.append([f"{text(t)!r} (id {t}) · log p̃ = {lp:.2f}"
                      + ("" if roots is None or (j, t) in roots else " · no branch (the draft's own token)")
                      for t, lp in zip(ids, ee.logprobs[j])] + [""] * (kappa - len(ids)))
    fig = go.Figure(go.Heatmap(z=z, x=[f"#{i + 1}" for i in range(kappa)], y=rows, text=cells,
                               texttemplate="%{text}", customdata=hover, colorscale="Blues", zmax=0,
                               colorbar=dict(title="log p̃"), hovertemplate="%{y}, %{x}: %{customdata}<extra></extra>"))

    def box(j: int, i: int, name: str, colour: str, fill: str | None = None) -> None:
        fig.add_shape(type="rect", x0=i - 0.5, x1=i + 0.5, y0=j - 0.5, y1=j + 0.5, name=name,
                      line=dict(color=colour, width=3), fillcolor=fill or "rgba(0,0,0,0)",
                      opacity=1 if fill is None else 0.45)

    if commit is None:
        verdict = "verdict pending"
    else:
        a = commit.accepted
        for j, token in enumerate(commit.tokens[:a]):
            if j < len(ee.ids) and token in ee.ids[j]:
                box(j, ee.ids[j].index(token), "accepted", "#0d47a1")
        c = commit.tokens[a] if a < len(commit.tokens) else None
        hit = decision.outcome != "fallback" if decision is not None else (lookup.hit if lookup is not None else None)
        if c is not None and a < len(ee.ids) and c in ee.ids[a]:
            rank = ee.ids[a].index(c)
            if hit:
                box(a, rank, "reused root", HIT_GREEN, HIT_GREEN)
            else:
                box(a, rank, "correction", MISS_RED)
        for j in range(a + 1, len(ee.ids)):
            fig.add_shape(type="rect", x0=-0.5, x1=kappa - 0.5, y0=j - 0.5, y1=j + 0.5, name="not reached",
                          line=dict(width=0), fillcolor="rgba(158,158,158,0.55)")
        fate = commit.fates[a] if a < len(commit.fates) else "?"
        verdict = f"A = {a}, x* = {text(c)!r} ({fate})" if c is not None else f"A = {a}"
        if hit is None:
            verdict += " · reuse pending"
        elif hit:
            kind = decision.outcome.replace("_", " ") if decision is not None else "hit"
            verdict += f" · {kind}: the branch at (j = {a}, {text(c)!r}) is the next window"
        else:
            verdict += f" · fallback: c is not in the early exit's top-{kappa} at j = {a}; a fresh rollout follows"
    fig.update_layout(title=dict(text=f"Round {r}: the early exit's top-{kappa} at layer {ee.exit_layer} "
                                      f"({len(ee.ids)} positions)<br><sup>{verdict}</sup>"),
                      xaxis=dict(title="rank in the early exit's top list (kappa)"),
                      yaxis=dict(title="verified position", autorange="reversed"),
                      height=160 + 42 * len(rows), margin=dict(t=90, b=50))
    return fig


def overlap_rate(events: Sequence[Event]) -> dict:
    """Measured Ω_κ (the Mirror-SD paper's Eq. 9): over every round and position j ≤ A, how often the token the target
    took there (the accepted draft for j < A, the correction or bonus c at j = A) was in the early exit's top-κ
    at j. FF ≤ 1 − Ω_κ bounds the fallback rate. ``rank_counts[i]``: how often it was the (i+1)-th choice.
    Returns ``{omega, positions, in_top_k, outside, rank_counts, kappa, exit_layer, rounds}``; ``omega`` is
    ``None`` before any round has both its message and its verdict."""
    messages = _by_round(events, EeMessage)
    kappa = max((len(row) for m in messages.values() for row in m.ids), default=run_config(events).get("kappa", 0))
    ranks: Counter = Counter()
    positions = outside = rounds = 0
    for commit in verdict_rounds(events):
        ee = messages.get(commit.round)
        if ee is None:
            continue
        rounds += 1
        for j, token in enumerate(commit.tokens[:commit.accepted + 1]):
            if j >= len(ee.ids):
                break
            positions += 1
            if token in ee.ids[j]:
                ranks[ee.ids[j].index(token)] += 1
            else:
                outside += 1
    exit_layer = next(iter(messages.values())).exit_layer if messages else run_config(events).get("exit_layer")
    return dict(omega=(positions - outside) / positions if positions else None, positions=positions,
                in_top_k=positions - outside, outside=outside, rank_counts=[ranks[i] for i in range(kappa)],
                kappa=kappa, exit_layer=exit_layer, rounds=rounds)


def fallback_point(events: Sequence[Event]) -> dict:
    """One Mirror run as a point of :func:`fallback_heatmap`: its κ, ℓ, fallback rate and measured Ω_κ."""
    metrics, overlap = verdict_metrics(events), overlap_rate(events)
    return dict(kappa=metrics["kappa"] or overlap["kappa"], exit_layer=overlap["exit_layer"],
                fallback_rate=metrics["fallback_rate"], omega=overlap["omega"])


def fallback_heatmap(points: Sequence[dict]) -> go.Figure:
    """The paper's Figure 7 analogue: measured fallback rate 1 − h over kappa × ℓ (left) beside the paper's bound
    1 − overlap from the same runs' measured overlap (right). The title counts the cells where the bound holds,
    so it states what the cells show rather than what the paper expects. ``points``: ``[{kappa, exit_layer, fallback_rate, omega}]`` (e.g.
    :func:`fallback_point` of each run); a later point for the same cell replaces an earlier one."""
    kappas = sorted({p["kappa"] for p in points})
    layers = sorted({p["exit_layer"] for p in points})
    ff = [[None] * len(kappas) for _ in layers]
    bound = [[None] * len(kappas) for _ in layers]
    for p in points:
        i, j = layers.index(p["exit_layer"]), kappas.index(p["kappa"])
        ff[i][j] = p.get("fallback_rate")
        bound[i][j] = None if p.get("omega") is None else 1 - p["omega"]
    cells = [(f, b) for row_f, row_b in zip(ff, bound) for f, b in zip(row_f, row_b) if f is not None and b is not None]
    held = sum(f <= b + 1e-9 for f, b in cells)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("fallback rate 1 − h (measured)",
                                                        "the paper's bound 1 − overlap (measured)"), horizontal_spacing=0.12)
    x, y = [str(k) for k in kappas], [str(layer) for layer in layers]
    for col, z in ((1, ff), (2, bound)):
        text = [["" if v is None else f"{v:.2f}" for v in row] for row in z]
        fig.add_trace(go.Heatmap(z=z, x=x, y=y, text=text, texttemplate="%{text}", zmin=0, zmax=1,
                                 colorscale="Reds", showscale=col == 2, colorbar=dict(title="rate"),
                                 hovertemplate="kappa = %{x}, ℓ = %{y}: %{z:.3f}<extra></extra>"), row=1, col=col)
        fig.update_xaxes(title_text="kappa (top list width)", type="category", row=1, col=col)
        fig.update_yaxes(title_text="ℓ (exit layer)" if col == 1 else None, type="category", row=1, col=col)
    fig.update_layout(title=f"Mirror-SD fallbacks vs kappa and exit layer ℓ: the bound holds in {held} of {len(cells)} cells",
                      height=360,
                      margin=dict(t=80, b=40))
    return fig


def mirror_law_figure(t_prefix: float, t_suffix: float | dict[int, float], t_rv: float,
                      draft_gen_by_gamma: dict[int, float]) -> go.Figure:
    """The overlap budget Δ = T^{ℓ+1:L} (the target's suffix) against the draft's
    generation time T_gen(γ), with the Mirror step T^{1:ℓ} + T_rv + max(Δ, T_gen) and vanilla SD's
    T_target + T_gen beside them. Where T_gen ≤ Δ the Mirror step is flat in γ (zero slope, shaded): a longer
    window is free until the draft no longer fits under the suffix. Times in seconds, drawn in ms.
    ``t_suffix``: one Δ for every γ (the law's model), or Δ by γ where each γ was measured in a run of its own;
    each γ's rollout is then set against its own run's suffix."""
    gammas = sorted(draft_gen_by_gamma)
    gen = [draft_gen_by_gamma[g] for g in gammas]
    per_gamma = isinstance(t_suffix, dict)
    if per_gamma and set(t_suffix) != set(gammas):
        raise ValueError(f"t_suffix by γ must cover the γ of draft_gen_by_gamma: {sorted(t_suffix)} vs {gammas}")
    suffix = [t_suffix[g] for g in gammas] if per_gamma else [t_suffix] * len(gammas)
    mirror = [mirror_step_time(t_prefix, d, t, t_rv) for d, t in zip(suffix, gen)]
    sd = [t_prefix + d + t for d, t in zip(suffix, gen)]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=gammas, y=[1e3 * t for t in gen], mode="lines+markers", name="T_gen(γ): draft rollout",
                             line=dict(color="#2e7d32")))
    fig.add_trace(go.Scatter(x=gammas, y=[1e3 * d for d in suffix], mode="lines+markers" if per_gamma else "lines",
                             name="Δ = T^{ℓ+1:L} (overlap budget)" + (", measured per γ" if per_gamma else ""),
                             line=dict(color="#37474f", dash="dash")))
    fig.add_trace(go.Scatter(x=gammas, y=[1e3 * t for t in mirror], mode="lines+markers", name="Mirror step",
                             line=dict(color="#6a1b9a")))
    fig.add_trace(go.Scatter(x=gammas, y=[1e3 * t for t in sd], mode="lines+markers", name="vanilla SD step",
                             line=dict(color="#9e9e9e", dash="dot")))
    flat = [g for g, d, t in zip(gammas, suffix, gen) if t <= d]
    for g in flat if per_gamma else ([min(flat)] if flat else []):
        x0, x1 = (g - 0.5, g + 0.5) if per_gamma else (min(flat) - 0.5, max(flat) + 0.5)
        fig.add_vrect(x0=x0, x1=x1, fillcolor=HIT_GREEN, opacity=0.1, line_width=0, name="zero slope",
                      annotation_text="T_gen ≤ Δ: zero slope" if g == flat[0] else None,
                      annotation_position="top left")
    if per_gamma:
        note = (f"the draft fits under its run's suffix at γ = {', '.join(map(str, flat))}" if flat else
                "the draft fits under its run's suffix at no γ measured")
        heading = "Overlap budget Δ (each γ's own run) vs draft time"
    else:
        note = f"the draft fits under the suffix for γ ≤ {max(flat)}" if flat else \
            "the draft never fits under the suffix: every γ costs"
        heading = f"Overlap budget Δ = {1e3 * t_suffix:.1f} ms vs draft time"
    fig.update_layout(title=dict(text=f"{heading}<br><sup>{note}</sup>"),
                      xaxis=dict(title="γ (window)", dtick=1), yaxis=dict(title="ms", rangemode="tozero"),
                      height=400, margin=dict(t=70, b=40))
    return fig
