"""Speculative speculative decoding (SSD, paper 002; docs/mirror-and-ssd.md) from one run's events: the
speculation cache round by round (:func:`ssd_cache_table`), the accepted lengths and the power law fitted to
them (:func:`k_histogram`), the hit rate against fan-out (:func:`hit_rate_vs_fanout`,
:func:`acceptance_vs_hit`) and the optimal fan-out (:func:`fanout_figure`).
"""

from __future__ import annotations

from collections import Counter
from statistics import mean
from typing import Callable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engines.core.trace import CacheBuild, CacheLookup, Event
from engines.programs.verdict.speculation_cache import (
    acceptance_law,
    fit_power_law,
    geometric_fanout,
    predicted_hit_rate,
    uniform_fanout,
)

from ..theory import ssd_round_time
from .mirror_sd import _by_round
from .verdict_metrics import HIT_GREEN, MISS_RED, _empty, _of, lookahead, run_config, verdict_metrics, verdict_rounds


# --- (3) SSD: the cache, k, fan-out and SAGUARO ------------------------------------------------------------
def hit_counts(events: Sequence[Event]) -> Counter:
    """Hits per cache cell ``(k, slot)`` over the run: a lookup with accepted = k that hit at rank = slot."""
    return Counter((x.accepted, x.rank) for x in _of(events, CacheLookup) if x.hit)


def ssd_cache_table(events: Sequence[Event], round_: int | None = None,
                    token_text: Callable[[int], str] | None = None) -> go.Figure:
    """SSD's speculation cache for one round (§5.9 view 1): rows A = 0..γ accepted, columns the fan-out slots
    (rank in the draft's z_A), cell text the guessed bonus token. Colour: how often that cell was the one that
    hit over the whole run (hits / lookups) — the fan-out's shape should follow it. The round's realized verdict
    is boxed: green on the cell that hit, red around row A on a miss. Default round: the last cache built."""
    builds = _by_round(events, CacheBuild)
    text = token_text or str
    if not builds:
        return _empty("No speculation cache built yet (SSD runs build one per round).")
    r = round_ if round_ is not None else max(builds)
    if r not in builds:
        raise ValueError(f"no cache built in round {r}; rounds with one: {sorted(builds)}")
    build = builds[r]
    k_max = max(len(build.fanout) - 1, max((e[0] for e in build.entries), default=0))
    counts, lookups = hit_counts(events), _of(events, CacheLookup)
    slots = max([f for b in builds.values() for f in b.fanout] + [rank + 1 for _, rank in counts] + [1])
    cells = [[""] * slots for _ in range(k_max + 1)]
    for k, token, rank, q in build.entries:
        if 0 <= rank < slots:
            cells[k][rank] = text(token)
    z = [[counts[(k, s)] / len(lookups) if lookups else 0.0 for s in range(slots)] for k in range(k_max + 1)]
    fig = go.Figure(go.Heatmap(z=z, x=[f"#{s + 1}" for s in range(slots)], y=[f"A = {k}" for k in range(k_max + 1)],
                               text=cells, texttemplate="%{text}", colorscale="Greens", zmin=0,
                               colorbar=dict(title="hit freq."),
                               hovertemplate="%{y}, slot %{x}: %{text} · hit in %{z:.1%} of lookups<extra></extra>"))
    lookup = _by_round(events, CacheLookup).get(r)
    if lookup is None:
        verdict = "verdict pending"
    elif lookup.hit:
        fig.add_shape(type="rect", x0=lookup.rank - 0.5, x1=lookup.rank + 0.5, y0=lookup.accepted - 0.5,
                      y1=lookup.accepted + 0.5, name="hit", line=dict(color=HIT_GREEN, width=4))
        verdict = f"verdict A = {lookup.accepted}, x* = {text(lookup.token)!r}: hit in slot #{lookup.rank + 1}"
    else:
        fig.add_shape(type="rect", x0=-0.5, x1=slots - 0.5, y0=lookup.accepted - 0.5, y1=lookup.accepted + 0.5,
                      name="miss", line=dict(color=MISS_RED, width=3, dash="dash"))
        where = "not ranked" if lookup.rank < 0 else f"rank {lookup.rank + 1} in z_A"
        verdict = f"verdict A = {lookup.accepted}, x* = {text(lookup.token)!r} ({where}): miss → backup"
    fig.update_layout(title=dict(text=f"Round {r}: the speculation cache, fan-out {build.fanout}<br><sup>{verdict} · "
                                      f"{sum(counts.values())}/{len(lookups)} lookups hit over the run</sup>"),
                      xaxis=dict(title="fan-out slot (rank of the guess)"),
                      yaxis=dict(title="accepted drafts A", autorange="reversed"), height=170 + 40 * (k_max + 1),
                      margin=dict(t=90, b=50))
    return fig


def accepted_lengths(events: Sequence[Event]) -> list[tuple[int, int]]:
    """``(k accepted, window drafted)`` per verification round that drafted something."""
    return [(c.accepted, c.drafted) for c in verdict_rounds(events) if c.drafted > 0]


def fit_acceptance(events: Sequence[Event]) -> float | None:
    """The maximum-likelihood a (``a_p`` in the code) of the truncated geometric law P(A) = a^A·(1 − a),
    P(A = γ) = a^γ: every accepted token is a success and every round that stopped short of its window a
    failure, so a = ΣA / (ΣA + #rounds with A < drafted). Windows cut short near the end count at their own length."""
    rounds = accepted_lengths(events)
    successes = sum(k for k, _ in rounds)
    failures = sum(1 for k, drafted in rounds if k < drafted)
    return successes / (successes + failures) if successes + failures else None


def k_histogram(events: Sequence[Event]) -> go.Figure:
    """Accepted drafts A per round (§5.9 view 2) with the fitted geometric law a^A·(1 − a), truncated at γ
    (P(A = γ) = a^γ), as expected counts: the acceptance model SSD's fan-out is optimised for."""
    rounds = accepted_lengths(events)
    k_max = lookahead(events) or max((d for _, d in rounds), default=0)
    counts = Counter(k for k, _ in rounds)
    a_p = fit_acceptance(events)
    ks = list(range(k_max + 1))
    fig = go.Figure(go.Bar(x=ks, y=[counts[k] for k in ks], name="rounds", marker_color="#1565c0"))
    if a_p is not None:
        law = acceptance_law(a_p, k_max)
        fig.add_trace(go.Scatter(x=ks, y=[len(rounds) * p for p in law], mode="lines+markers", name="geometric fit",
                                 line=dict(color="#c62828")))
        title = f"Accepted drafts A per round: fitted a = {a_p:.3f} ({len(rounds)} rounds, γ = {k_max})"
    else:
        title = "Accepted drafts A per round: no verified round yet"
    fig.update_layout(title=title, xaxis=dict(title="A (draft tokens accepted)", dtick=1),
                      yaxis=dict(title="rounds"), height=340, margin=dict(t=60, b=40))
    return fig


def miss_curve(events: Sequence[Event], max_fanout: int = 64) -> list[tuple[int, float]]:
    """``(F, miss(F))``: the fraction of lookups whose true token ranked ≥ F (or not at all), i.e. what a
    row A with a fan-out of F_A would have missed. Mirror's ranks only exist inside the top-κ, so F_A stops at κ."""
    ranks = [x.rank for x in _of(events, CacheLookup)]
    if not ranks:
        return []
    kappa = run_config(events).get("kappa")
    top = min(max_fanout, kappa) if kappa else max_fanout
    return [(f, sum(1 for r in ranks if r < 0 or r >= f) / len(ranks)) for f in range(1, top + 1)]


def hit_rate_vs_fanout(events: Sequence[Event], max_fanout: int = 64) -> go.Figure:
    """miss(F) against F on log–log axes (§5.9 view 3) from the logged ranks, with the power law β·F_A^(−r)
    fitted by :func:`engines.programs.verdict.speculation_cache.fit_power_law`: r is what the geometric fan-out needs."""
    curve = miss_curve(events, max_fanout)
    ranks = [x.rank for x in _of(events, CacheLookup)]
    fig = go.Figure()
    shown = [(f, m) for f, m in curve if m > 0]
    fig.add_trace(go.Scatter(x=[f for f, _ in shown], y=[m for _, m in shown], mode="markers", name="measured miss(F)",
                             marker=dict(color="#1565c0", size=8)))
    top = curve[-1][0] if curve else max_fanout
    c, r = fit_power_law(ranks, top)
    if len(ranks) >= 4:
        grid = [f for f in range(1, top + 1)]
        fig.add_trace(go.Scatter(x=grid, y=[c * f ** (-r) for f in grid], mode="lines",
                                 name=f"fit β·F_A^(−r): β = {c:.2f}, r = {r:.2f}", line=dict(color="#c62828")))
    builds = _of(events, CacheBuild)
    if builds and curve:
        fan = builds[-1].fanout
        used = sum(fan) / len(fan)
        hit = sum(1 for x in _of(events, CacheLookup) if x.hit) / len(ranks)
        if hit < 1:
            fig.add_trace(go.Scatter(x=[used], y=[1 - hit], mode="markers", name=f"this run (mean F = {used:.1f})",
                                     marker=dict(symbol="x", size=12, color="#222")))
    fig.update_layout(title=f"Miss rate vs fan-out ({len(ranks)} lookups)", height=360, margin=dict(t=60, b=40),
                      xaxis=dict(title="fan-out F_A (guesses in row A)", type="log"),
                      yaxis=dict(title="miss rate at fan-out F_A", type="log"))
    return fig


def tradeoff_point(events: Sequence[Event]) -> dict:
    """One SSD run as a point of :func:`acceptance_vs_hit`: :func:`verdict_metrics` plus its SAGUARO C."""
    return {**verdict_metrics(events), "c": run_config(events).get("c", 1.0)}


def acceptance_vs_hit(points: Sequence[dict], lookahead: int | None = None, t_verify: float | None = None,
                      t_backup: float | None = None, t_comm: float | None = None,
                      t_draftwork: float | None = None) -> go.Figure:
    """SAGUARO's trade-off (§5.9 view 4): each run's acceptance against its hit rate, labelled by C and coloured
    by measured tokens/s, over throughput contours of the model

        tokens/s(h, α) = (γ·α + 1) / (max(T_v, T_draftwork) + T_comm + (1 − h)·T_backup)

    with α = accepted ÷ drafted (so γ·α + 1 is the expected tokens per round) and γ the lookahead and the round time of
    :func:`specviz.theory.ssd_round_time`. Costs in seconds; any left ``None`` is the mean over the points' own
    ``lookahead``, ``verify_ms``, ``backup_ms``, ``message_ms`` and ``draftwork_ms`` (so :func:`tradeoff_point`
    dicts carry everything). Without γ, T_v or T_backup the contours are left out and the title says so."""
    def mean_of(key: str, scale: float = 1e-3) -> float | None:
        values = [p[key] for p in points if p.get(key) is not None]
        return scale * mean(values) if values else None

    k = lookahead if lookahead is not None else (round(mean_of("lookahead", 1.0)) if mean_of("lookahead", 1.0) else None)
    t_v = t_verify if t_verify is not None else mean_of("verify_ms")
    t_b = t_backup if t_backup is not None else mean_of("backup_ms")
    t_c = t_comm if t_comm is not None else (mean_of("message_ms") or 0.0)
    t_d = t_draftwork if t_draftwork is not None else (mean_of("draftwork_ms") or 0.0)
    hits = [p["hit_rate"] for p in points]
    accs = [p["acceptance"] for p in points]
    fig = go.Figure()
    note = ""
    if k and t_v and t_b is not None:
        hs = [i / 40 for i in range(41)]
        top = max([0.3] + [a * 1.2 for a in accs if a is not None])
        rhos = [top * i / 40 for i in range(41)]
        z = [[(k * rho + 1) / ssd_round_time(t_v, t_c, h, t_b, t_d) for h in hs] for rho in rhos]
        fig.add_trace(go.Contour(x=hs, y=rhos, z=z, colorscale="Greys", opacity=0.5, showscale=False,
                                 contours=dict(showlabels=True), name="model tokens/s",
                                 hovertemplate="h = %{x:.2f}, α = %{y:.3f}: %{z:.1f} tok/s<extra>model</extra>"))
        note = (f"contours: (γ·α + 1)/(max(T_v, T_dw) + T_comm + (1 − h)·T_backup), γ = {k}, T_v = {1e3 * t_v:.1f} ms, "
                f"T_backup = {1e3 * t_b:.1f} ms, T_dw = {1e3 * t_d:.1f} ms")
    else:
        note = "no contours: γ, T_v or T_backup unknown"
    fig.add_trace(go.Scatter(x=hits, y=accs, mode="markers+text", text=[f"C = {p['c']}" for p in points],
                             textposition="top center", name="runs",
                             marker=dict(size=13, color=[p.get("tokens_per_s") for p in points], colorscale="Viridis",
                                         showscale=True, colorbar=dict(title="tok/s"), line=dict(width=1, color="#222")),
                             hovertemplate="hit %{x:.2f} · acceptance %{y:.3f}<extra>%{text}</extra>"))
    fig.update_layout(title=dict(text=f"SAGUARO: acceptance α against hit rate h, one run per C<br><sup>{note}</sup>"),
                      xaxis=dict(title="hit rate h", range=[0, 1]), yaxis=dict(title="α = accepted ÷ drafted",
                                                                                   rangemode="tozero"),
                      height=420, margin=dict(t=80, b=40))
    return fig


def fanout_figure(a_p: float, r: float, budget: int, lookahead: int, c: float = 1.0) -> go.Figure:
    """SSD's fan-out (§5.3, §5.9 view 6): the optimal F_A ∝ P(A)^{1/(1+r)} beside the uniform
    F_A = ⌊F/(γ+1)⌋ (F the budget, γ the lookahead), with P(A) on the right axis and each shape's predicted
    h = Σ_A P(A)(1 − β·F_A^{−r}) in the title (β: ``c`` here). Geometric spends the budget where verdicts land."""
    geometric = geometric_fanout(lookahead, budget, a_p, r)
    uniform = uniform_fanout(lookahead, budget // (lookahead + 1))
    hit_g, hit_u = predicted_hit_rate(geometric, a_p, r, c), predicted_hit_rate(uniform, a_p, r, c)
    ks = list(range(lookahead + 1))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=ks, y=geometric, name=f"geometric (Σ = {sum(geometric)})", marker_color="#2e7d32",
                         text=geometric, textposition="outside"), secondary_y=False)
    fig.add_trace(go.Bar(x=ks, y=uniform, name=f"uniform f = {budget // (lookahead + 1)} (Σ = {sum(uniform)})",
                         marker_color="#90a4ae", text=uniform, textposition="outside"), secondary_y=False)
    fig.add_trace(go.Scatter(x=ks, y=acceptance_law(a_p, lookahead), mode="lines+markers", name="P(A)",
                             line=dict(color="#c62828", dash="dot")), secondary_y=True)
    fig.update_layout(title=dict(text=f"Fan-out for a = {a_p:.2f}, r = {r:.2f}, F = {budget}, γ = {lookahead}<br>"
                                      f"<sup>predicted h: geometric {hit_g:.3f} · uniform {hit_u:.3f}</sup>"),
                      barmode="group", height=380, margin=dict(t=80, b=40), xaxis=dict(title="A accepted", dtick=1))
    fig.update_yaxes(title_text="F_A (guesses)", range=[0, 1.2 * max(geometric + uniform + [1])], secondary_y=False)
    fig.update_yaxes(title_text="P(A)", range=[0, 1], secondary_y=True)
    return fig
