"""MoA from ``specviz bench`` results: τ by drafter (:func:`tau_by_drafter_figure`), tokens/s on each link profile
(:func:`network_figure`) and the disconnection experiment (:func:`disconnection_points`,
:func:`disconnection_curve`; lossy, and every title says so).
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engines.core.trace import Commit, Event, RunEnd

from .moa_runs import INF_KEYS, LOSSY, _last, _of


# --- (4) from benchmark results -------------------------------------------------------------------------
def short_label(label: str) -> str:
    """A bench label as its drafter: ``moa(tli=1)`` → ``moa-tli1``, ``moa(drafter=moa-tli0-nolsa)`` → ``−LSA
    (moa-tli0-nolsa)``, ``eagle(draft=eagle-matched)`` → ``eagle-matched``, ``eagle(draft=tiny)`` → ``tiny``;
    a ``network`` option is dropped (it is the profile, not the drafter)."""
    options = dict(re.findall(r"(\w+)\s*=\s*([^,()]+)", label))
    name = label.split("(")[0].strip()
    if name == "moa":
        drafter = options.get("drafter") or (f"moa-tli{options.get('tli', '0').strip()}"
                                             + ("-nolsa" if options.get("lsa", "").strip().lower() == "false" else ""))
        drafter = drafter.strip()
        base = f"−LSA ({drafter})" if drafter.endswith("-nolsa") else drafter
        extra = "" if options.get("tree", "true").strip().lower() != "false" else " chain"
    elif name == "eagle":
        base, extra = options.get("draft", "eagle").strip(), ""
    else:
        base, extra = name, ""
    if "disconnect_after" in options:
        extra += f" disconnect_after={options['disconnect_after'].strip()}"
    return base + extra


DRAFTER_COLOURS = {"moa-tli0": "#1b5e20", "moa-tli1": "#43a047", "moa-tli3": "#81c784", "−LSA": "#827717",
                   "eagle": "#1565c0", "eagle-matched": "#64b5f6", "tiny": "#9e9e9e", "ar": "#424242"}


def drafter_colour(name: str, index: int = 0) -> str:
    """One colour per drafter across the benchmark figures: MoA greens, EAGLE blues, tiny grey, ar dark grey."""
    base = name.split(" ")[0]
    if base in DRAFTER_COLOURS:
        return DRAFTER_COLOURS[base]
    palette = ("#6a1b9a", "#ef6c00", "#00838f", "#5d4037", "#ad1457")
    return palette[index % len(palette)]


def label_profile(label: str) -> str:
    match = re.search(r"network\s*=\s*([\w.]+)", label)
    return match.group(1) if match else "none"


def _overall(row: Mapping) -> Mapping:
    return row["overall"] if "overall" in row else row


def _measured_shape(names: list[str], taus: list, speedups: list) -> str:
    """The subtitle: what these bars show (highest τ, fastest), not what the paper expects them to show."""
    measured = [(n, t) for n, t in zip(names, taus) if t is not None]
    parts = [f"highest τ: {max(measured, key=lambda x: x[1])[0]}"] if measured else []
    fast = [(n, s) for n, s in zip(names, speedups) if s is not None]
    if fast:
        name, best = max(fast, key=lambda x: x[1])
        parts.append(f"fastest: {name} at {best:.2f}× ar")
    return " · ".join(parts) or "no measured rows"


def tau_by_drafter_figure(rows: Mapping[str, Mapping]) -> go.Figure:
    """τ (bars) and speedup (diamonds, right axis) per drafter, from a ``specviz bench`` results' ``methods``
    (``{label: {"overall": {"tau", "speedup"}, ...}}``; plain ``{label: {"tau", "speedup"}}`` works too)."""
    labels = list(rows)
    taus = [_overall(rows[k]).get("tau") for k in labels]
    speedups = [_overall(rows[k]).get("speedup") for k in labels]
    names = [short_label(k) for k in labels]
    colours = [drafter_colour(n, i) for i, n in enumerate(names)]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=names, y=taus, name="τ (tokens per target call)", marker_color=colours,
                         text=[f"τ {t:.2f}" if t is not None else "—" for t in taus], textposition="inside",
                         insidetextanchor="middle", textfont=dict(color="white"),
                         hovertext=labels, hoverinfo="text+y"), secondary_y=False)
    if any(s is not None for s in speedups):
        fig.add_trace(go.Scatter(x=names, y=speedups, mode="markers", name="speedup over ar (right axis)",
                                 hovertemplate="%{x}: %{y:.2f}× ar<extra></extra>",
                                 marker=dict(symbol="diamond", size=13, color="#c62828",
                                             line=dict(width=1.5, color="white"))), secondary_y=True)
        fig.update_xaxes(tickvals=names, ticktext=[f"{n}<br>{s:.2f}× ar" if s is not None else n
                                                   for n, s in zip(names, speedups)])
    lossy = any("disconnect_after" in k for k in labels)
    fig.update_layout(title=dict(text="τ by drafter (benchmark)" + (" — LOSSY rows (disconnect_after)" if lossy else "")
                                      + f"<br><sup>{_measured_shape(names, taus, speedups)}</sup>"),
                      height=400, margin=dict(t=80, b=40), legend=dict(orientation="h", x=0, y=-0.15))
    fig.update_yaxes(title_text="τ", rangemode="tozero", secondary_y=False)
    top = max([s for s in speedups if s is not None] + [1.0])
    fig.update_yaxes(title_text="speedup × (1 = ar)", range=[0, 1.25 * top], tickformat=".1f", showgrid=False,
                     secondary_y=True)
    if any(s is not None for s in speedups):
        fig.add_hline(y=1.0, line_dash="dot", line_color="#c62828", secondary_y=True)
    return fig


def network_rows(results_by_profile: Mapping) -> list[dict]:
    """``{profile, drafter, label, tokens_per_s, server_calls, tau, clock}`` per bench row. Input: ``{profile:
    bench results}`` or one bench results dict whose labels carry ``network=...`` (grouped by it)."""
    if "methods" in results_by_profile:
        parts = {None: results_by_profile}
    else:
        parts = results_by_profile
    rows = []
    for profile, results in parts.items():
        for label, row in results["methods"].items():
            overall = _overall(row)
            link = overall.get("link") or {}
            rows.append(dict(profile=profile if profile is not None else label_profile(label),
                             drafter=short_label(label), label=label, tokens_per_s=overall.get("tokens_per_s"),
                             server_calls=link.get("server_calls_per_answer"), tau=overall.get("tau"),
                             clock=overall.get("clock", "wall")))
    return rows


def network_figure(results_by_profile: Mapping) -> go.Figure:
    """Tokens/s (left) and server calls per answer (right) per drafter under each link profile, from bench
    results (:func:`network_rows`). Client–server rows run on the ``wall+link`` clock: compute measured, the
    link simulated. The paper's shape: under a slow link, fewer server calls (higher τ) win."""
    rows = network_rows(results_by_profile)
    profiles = list(dict.fromkeys(r["profile"] for r in rows))
    drafters = list(dict.fromkeys(r["drafter"] for r in rows))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens/s (wall+link clock)", "server calls per answer"))
    for i, drafter in enumerate(drafters):
        chosen = {r["profile"]: r for r in rows if r["drafter"] == drafter}
        colour = drafter_colour(drafter, i)
        for col, key in ((1, "tokens_per_s"), (2, "server_calls")):
            fig.add_trace(go.Bar(x=profiles, y=[chosen[p][key] if p in chosen else None for p in profiles],
                                 name=drafter, legendgroup=drafter, showlegend=col == 1, marker_color=colour,
                                 hovertext=[chosen[p]["label"] if p in chosen else "" for p in profiles]),
                          row=1, col=col)
    lossy = any("disconnect_after" in r["label"] for r in rows)
    fig.update_layout(title=dict(text="Client–server under simulated links" + (" — LOSSY rows" if lossy else "")
                                      + "<br><sup>compute measured where the runs were made, link seconds simulated "
                                        "and added (clock wall+link)</sup>"),
                      barmode="group", height=420, margin=dict(t=90, b=40),
                      legend=dict(orientation="h", x=0, y=-0.15))
    fig.update_xaxes(title_text="link profile")
    return fig


# --- (5) disconnection (lossy) -------------------------------------------------------------------------
def _ids_and_switch(run) -> tuple[list[int], int | None]:
    """Token ids (a list, or a run's events) and, for events, where the client started writing alone."""
    if run and isinstance(run[0], Event):
        end = _last(run, RunEnd)
        commits = _of(run, Commit)
        ids = list(end.token_ids) if end is not None else [t for c in commits for t in c.tokens]
        fates = [f for c in commits for f in c.fates]
        return ids, fates.index("client") if "client" in fates else None
    return list(run), None


def _budget_label(budget) -> str:
    return "∞" if budget in INF_KEYS or (isinstance(budget, float) and math.isinf(budget)) else str(budget)


def disconnection_points(connected_ids, disconnected_ids_by_B: Mapping) -> list[dict]:
    """For each budget B (``math.inf``/``"inf"``/``None`` = never disconnected): ``{B, label, first_divergence,
    equal_fraction, length, switch, kept_after_switch}``. ``first_divergence``: tokens equal to the connected
    run before the first difference (its length if none); ``equal_fraction``: positions equal over the longer
    of the two (missing positions count as different); ``switch``/``kept_after_switch``: where the client took
    over and how many of its own tokens stayed equal (known when events are passed, else ``None``). Values may
    be token-id lists or a run's events; ``connected_ids`` likewise."""
    connected, _ = _ids_and_switch(connected_ids)
    points = []
    for budget, run in disconnected_ids_by_B.items():
        ids, switch = _ids_and_switch(run)
        first = next((i for i, (a, b) in enumerate(zip(connected, ids)) if a != b), min(len(connected), len(ids)))
        length = max(len(connected), len(ids), 1)
        equal = sum(a == b for a, b in zip(connected, ids))
        label = _budget_label(budget)
        points.append(dict(B=math.inf if label == "∞" else budget, label=label, first_divergence=first,
                           equal_fraction=equal / length, length=len(ids), switch=switch,
                           kept_after_switch=None if switch is None else max(first - switch, 0)))
    return sorted(points, key=lambda p: p["B"])


def disconnection_points_from_results(results: Mapping) -> dict[str, list[dict]]:
    """``specviz disconnection``'s JSON (:mod:`specviz.experiments.disconnection`) as ``{label: points}``: per B the mean
    tokens the client kept equal after the server left and the mean share of equal positions."""
    out = {}
    for label, by_budget in results["methods"].items():
        points = []
        for key, row in by_budget.items():
            budget = math.inf if key in ("inf", "∞") else int(key)
            points.append(dict(B=budget, label=_budget_label(budget), first_divergence=None,
                               equal_fraction=row["equal_share"], length=None, switch=None,
                               kept_after_switch=row["kept_after_b"]))
        out[label] = sorted(points, key=lambda p: p["B"])
    return out


def disconnection_curve(runs) -> go.Figure:
    """The disconnection curve (§4.2, lossy): per budget B, how long the disconnected output stays equal to the
    connected one — tokens before the first difference (bars; or tokens kept after the server left, from
    results) and the share of equal positions (line, right axis). ``runs``: :func:`disconnection_points` of one
    drafter, or ``{label: points}`` for several."""
    series = {"": runs} if isinstance(runs, Sequence) else dict(runs)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for i, (label, points) in enumerate(series.items()):
        colour = drafter_colour(short_label(label), i) if label else drafter_colour("moa-tli0")
        label = short_label(label) if label else ""
        x = ["∞ (connected)" if p["label"] == "∞" else f"after {p['label']}" for p in points]
        kept = [p["first_divergence"] if p["first_divergence"] is not None else p["kept_after_switch"] for p in points]
        what = "tokens equal before the first difference" if points and points[0]["first_divergence"] is not None \
            else "tokens kept equal after the server left"
        fig.add_trace(go.Bar(x=x, y=kept, name=f"{label} {what}".strip(), marker_color=colour, opacity=0.75,
                             offsetgroup=str(i)), secondary_y=False)
        fig.add_trace(go.Scatter(x=x, y=[p["equal_fraction"] for p in points], mode="lines+markers",
                                 name=f"{label} share of positions equal".strip(), line=dict(color=colour, dash="dot")),
                      secondary_y=True)
    fig.update_layout(title=dict(text=f"Disconnection — {LOSSY}: the server leaves after disconnect_after new tokens, "
                                      "the client writes alone<br><sup>∞ is the connected (lossless) run; equal to it "
                                      "= what the target would have written</sup>"),
                      barmode="group", height=400, margin=dict(t=80, b=40), legend=dict(orientation="h", x=0, y=-0.15))
    fig.update_xaxes(title_text="disconnect_after (new tokens before the server leaves)")
    fig.update_yaxes(title_text="tokens", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="share of positions equal", range=[0, 1.05], tickformat=".0%", dtick=0.25,
                     showgrid=False, secondary_y=True)
    return fig
