"""What the suffix drafter matched in one run (``engines/drafters/suffix.py``), from its events alone.

Every suffix-drafted token was copied from somewhere: the prompt, the answer so far, or an earlier answer of
the session (the corpus), after an n-gram of some length. :func:`suffix_matches` joins each round's
``SuffixMatch`` with its ``Verification`` (did the target keep the token?); :func:`suffix_match_figure` draws
where the accepted drafts came from round by round, the source position each was copied from, and the match
lengths of kept and refused tokens. Works for ``sps(draft=suffix)`` chains and ``eagle(merge_suffix=true)``
trees alike (node ids are the round's DraftTree numbering in both).
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engines.core.trace import Event, SuffixMatch, Verification

from .verdict_metrics import _empty, _of

ORIGINS = ("prompt", "answer", "corpus")
ORIGIN_LABELS = {"prompt": "prompt", "answer": "answer so far", "corpus": "earlier answer"}
ORIGIN_COLOURS = {"prompt": "#1f77b4", "answer": "#ff7f0e", "corpus": "#2ca02c"}


def suffix_matches(events: Sequence[Event]) -> list[dict]:
    """One row per suffix-drafted token: the ``SuffixMatch`` fields (round, id, origin, position, document,
    length, count, total) and ``outcome``: accepted | rejected | unreached (its parent was refused) | unsent
    (pruned before verification)."""
    verdicts = {v.round: v for v in _of(events, Verification)}
    rows = []
    for match in _of(events, SuffixMatch):
        verdict = verdicts.get(match.round)
        judged = {n["id"]: n["outcome"] for n in verdict.nodes} if verdict else {}
        for node in match.nodes:
            if verdict is None:
                outcome = "unsent"
            elif node["id"] in verdict.accepted:
                outcome = "accepted"
            else:
                outcome = judged.get(node["id"], "unreached" if node["id"] in verdict.rejected else "unsent")
            rows.append({"round": match.round, **node, "outcome": outcome})
    return rows


def match_summary(rows: Sequence[dict]) -> dict[str, dict]:
    """Per origin: tokens drafted, accepted, and the mean match length of the accepted ones."""
    summary = {}
    for origin in ORIGINS:
        mine = [r for r in rows if r["origin"] == origin]
        kept = [r for r in mine if r["outcome"] == "accepted"]
        summary[origin] = {"drafted": len(mine), "accepted": len(kept),
                           "mean_length": sum(r["length"] for r in kept) / len(kept) if kept else None}
    return summary


# proposed but never sent to the target: cut by gamma=auto (its kind of match did not pay) or pruned from a tree
NOT_VERIFIED = "not verified (cut by gamma=auto, or pruned)"


def suffix_match_figure(events: Sequence[Event]) -> go.Figure:
    """Three panels: accepted suffix drafts per round by origin (stacked); the position in its source each
    drafted token was copied from, by round (filled: kept, open: refused; size: match length); the match
    lengths of kept, refused and never verified tokens (stacked): with ``gamma=auto`` the short matches a run
    learned to distrust pile up in the last."""
    rows = suffix_matches(events)
    if not rows:
        return _empty("No suffix drafts in this run (sps(draft=suffix), eagle(merge_suffix=true), ssd(backup=suffix)).")
    fig = make_subplots(rows=3, cols=1, vertical_spacing=0.1, subplot_titles=(
        "accepted suffix drafts per round, by where they were copied from",
        "where each drafted token was copied from (filled: kept, open: refused; size: match length)",
        "match length of kept, refused and unverified tokens"))
    rounds = sorted({r["round"] for r in rows})
    for origin in ORIGINS:
        kept = Counter(r["round"] for r in rows if r["origin"] == origin and r["outcome"] == "accepted")
        colour, label = ORIGIN_COLOURS[origin], ORIGIN_LABELS[origin]
        fig.add_trace(go.Bar(x=rounds, y=[kept[r] for r in rounds], name=label, marker_color=colour,
                             legendgroup=origin), row=1, col=1)
        mine = [r for r in rows if r["origin"] == origin and r["outcome"] in ("accepted", "rejected")]
        if mine:
            fig.add_trace(go.Scatter(
                x=[r["round"] for r in mine], y=[r["position"] for r in mine], mode="markers", name=label,
                legendgroup=origin, showlegend=False,
                marker=dict(color=colour, size=[4 + 2 * r["length"] for r in mine],
                            symbol=["circle" if r["outcome"] == "accepted" else "circle-open" for r in mine]),
                customdata=[[r["length"], r["count"], r["total"], r["document"], r["outcome"]] for r in mine],
                hovertemplate=(f"{label}" + "<br>position %{y}, document %{customdata[3]}<br>match length "
                               "%{customdata[0]}, seen %{customdata[1]} of %{customdata[2]}<br>%{customdata[4]}"
                               "<extra></extra>")), row=2, col=1)
    for outcome, colour, label in (("accepted", "#2ca02c", "accepted"), ("rejected", "#d62728", "rejected"),
                                   ("unsent", "#9e9e9e", NOT_VERIFIED)):
        lengths = Counter(r["length"] for r in rows if r["outcome"] == outcome)
        if lengths or outcome != "unsent":
            fig.add_trace(go.Bar(x=sorted(lengths), y=[lengths[n] for n in sorted(lengths)], name=label,
                                 marker_color=colour, opacity=0.8), row=3, col=1)
    fig.update_layout(barmode="stack", height=760, margin=dict(t=60, b=40))
    fig.update_xaxes(title_text="round", row=1, col=1)
    fig.update_xaxes(title_text="round", row=2, col=1)
    fig.update_yaxes(title_text="tokens", row=1, col=1)
    fig.update_yaxes(title_text="position in its source", row=2, col=1)
    fig.update_xaxes(title_text="n-gram length matched", dtick=1, row=3, col=1)
    fig.update_yaxes(title_text="tokens", row=3, col=1)
    return fig
