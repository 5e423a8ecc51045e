"""Draft → verify, round by round: what each round proposed, what the target kept and refused, why it
refused (its p against the draft's q), and where each round's time went.

Read from a run's events alone (``DraftTree``, ``Verification``, ``Commit``, ``StageSpan``), so a
finished run can be replayed round by round in the dashboard or a notebook. A run without detailed
events (``instrument=False``, or a method that reports commits only) still gets one line per round from
its commits, without the refused tokens.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Callable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engines.core.trace import Commit, DraftTree, Event, Prefill, RunStart, StageSpan, Verification

from .tokens import FATE_COLOURS

OneToken = Callable[[int], str]
REFUSED_COLOUR = "#c62828"
UNREACHED_COLOUR = "#9e9e9e"
STAGE_GROUPS = {"draft": "draft", "verify": "verify", "prefix": "verify", "suffix": "verify", "sv": "verify",
                "reforward": "verify", "wait": "waiting", "glue": "other work"}
GROUP_COLOURS = {"draft": "#ef6c00", "verify": "#1565c0", "waiting": "#cfd8dc", "other work": "#8e24aa",
                 "outside spans": "#9e9e9e"}


@dataclass
class RoundView:
    """One target verification: the drafted tokens with their fate (accepted | refused | unreached), the
    token the target added, and how many other tree nodes were verified and thrown away."""

    round: int
    drafted: list[tuple[int, str]]
    next_token: int
    next_fate: str
    other_nodes: int = 0
    rejection: dict | None = None
    committed: list[int] = field(default_factory=list)


def round_views(events: Sequence[Event]) -> list[RoundView]:
    trees = {e.round: e for e in events if isinstance(e, DraftTree)}
    verdicts = {e.round: e for e in events if isinstance(e, Verification)}
    views = []
    for commit in (e for e in events if isinstance(e, Commit)):
        verdict, tree = verdicts.get(commit.round), trees.get(commit.round)
        if verdict is None:
            views.append(_from_commit(commit))
        elif tree is None:  # drafted on another lane (mirror, ssd): the refused token is in the verdict
            view = _from_commit(commit)
            view.rejection = verdict.rejection
            view.drafted += [(token, "refused") for token in (verdict.rejection or {}).get("refused", [])]
            views.append(view)
        else:
            views.append(_from_verdict(commit, tree, verdict))
    return views


def _from_commit(commit: Commit) -> RoundView:
    kept = [(token, "accepted") for token, fate in zip(commit.tokens, commit.fates) if fate == "accepted"]
    return RoundView(commit.round, kept, commit.tokens[-1], commit.fates[-1], committed=list(commit.tokens))


def _from_verdict(commit: Commit, tree: DraftTree, verdict: Verification) -> RoundView:
    by_id = {node["id"]: node for node in tree.nodes}
    drafted = [(by_id[i]["token"], "accepted") for i in verdict.accepted]
    refused = list((verdict.rejection or {}).get("refused", []))
    chain = all(node.get("parent") == node["id"] - 1 for node in tree.nodes)
    if chain:  # the first refused position, then the drafts the refusal threw away unseen
        for i in range(len(verdict.accepted), len(tree.nodes)):
            drafted.append((by_id[i]["token"], "refused" if i == len(verdict.accepted) else "unreached"))
        other = 0
    else:  # a tree: the accepted path, then the children tried and refused where the walk stopped
        drafted += [(token, "refused") for token in refused]
        sent = sum(1 for node in tree.nodes if node.get("sent", True))
        other = max(sent - len(verdict.accepted) - len(refused), 0)
    return RoundView(commit.round, drafted, verdict.next_token, verdict.next_fate, other, verdict.rejection,
                     list(commit.tokens))


def _piece(token: int, one_token: OneToken) -> str:
    return html.escape(one_token(token)).replace("\n", "↵")


def round_html(view: RoundView, one_token: OneToken) -> str:
    """One round as a line: accepted drafts green, the refused one struck through in red, drafts thrown
    away unseen struck through in grey, then the target's correction or bonus."""
    styles = {"accepted": f"color:{FATE_COLOURS['accepted']};border-bottom:2px solid {FATE_COLOURS['accepted']}",
              "refused": f"color:{REFUSED_COLOUR};text-decoration:line-through;text-decoration-thickness:2px",
              "unreached": f"color:{UNREACHED_COLOUR};text-decoration:line-through"}
    titles = {"accepted": "accepted draft", "refused": "refused by the target", "unreached": "never judged: "
              "an earlier draft was refused"}
    cells = [f'<span title="{titles[fate]}" style="{styles[fate]}">{_piece(token, one_token)}</span>'
             for token, fate in view.drafted]
    colour = FATE_COLOURS.get(view.next_fate, "#000")
    cells.append(f'→ <span title="{view.next_fate}" style="background:{colour};color:white;padding:0 3px;'
                 f'border-radius:3px">{_piece(view.next_token, one_token)}</span>')
    extra = f' <small style="color:#757575">+{view.other_nodes} other tree nodes thrown away</small>' \
        if view.other_nodes else ""
    return (f'<div style="font-family:monospace;white-space:pre-wrap;line-height:1.8">'
            f'<small style="color:#757575">round {view.round:>3} · </small>{" ".join(cells)}{extra}</div>')


def rounds_html(views: Sequence[RoundView], one_token: OneToken, last: int | None = None,
                highlight: int | None = None) -> str:
    """Rounds up to ``last`` (a round number; all when None), newest last; ``highlight`` frames one."""
    shown = [v for v in views if last is None or v.round <= last]
    lines = []
    for view in shown:
        line = round_html(view, one_token)
        if view.round == highlight:
            line = f'<div style="background:#fff8e1;border-left:3px solid #ffa000;padding-left:4px">{line}</div>'
        lines.append(line)
    return f'<div data-view="rounds">{"".join(lines)}</div>'


def rounds_legend_html() -> str:
    return (f'<small><span style="color:{FATE_COLOURS["accepted"]};border-bottom:2px solid '
            f'{FATE_COLOURS["accepted"]}">accepted draft</span> · <span style="color:{REFUSED_COLOUR};'
            f'text-decoration:line-through">refused by the target</span> · <span style="color:{UNREACHED_COLOUR};'
            f'text-decoration:line-through">thrown away unjudged</span> · → the target\'s '
            f'<span style="background:{FATE_COLOURS["correction"]};color:white;padding:0 3px">correction</span> '
            f'or <span style="background:{FATE_COLOURS["bonus"]};color:white;padding:0 3px">bonus</span></small>')


def refused_rounds(views: Sequence[RoundView]) -> list[int]:
    """Rounds whose rejection was recorded (the ones :func:`rejection_figure` can draw)."""
    return [v.round for v in views if v.rejection]


def rejection_figure(view: RoundView, one_token: OneToken) -> go.Figure:
    """The target's p against the draft's q over the target's top tokens at the refused position."""
    if not view.rejection:
        raise ValueError(f"round {view.round} refused no draft token (nothing to compare)")
    rejection = view.rejection
    labels = [f"{one_token(t)!r}" + (" ✗" if t in rejection["refused"] else "") for t in rejection["tokens"]]
    q_known = [q for q in rejection["q"]]
    fig = go.Figure([
        go.Bar(name="target p", x=labels, y=rejection["p"], marker_color=FATE_COLOURS["bonus"],
               text=[f"{p:.2f}" for p in rejection["p"]], textposition="outside"),
        go.Bar(name="draft q", x=labels, y=[q if q is not None else 0 for q in q_known],
               marker_color=FATE_COLOURS["accepted"],
               text=[f"{q:.2f}" if q is not None else "?" for q in q_known], textposition="outside"),
    ])
    refused = ", ".join(repr(one_token(t)) for t in rejection["refused"])
    fig.update_layout(barmode="group", height=360, margin=dict(t=70, b=40, l=50, r=20),
                      title=dict(text=f"Round {view.round}: the target refused {refused}", font=dict(size=14), y=0.97),
                      xaxis=dict(title=dict(text=f"p: {rejection['p_source']}<br>✗ refused draft · ? q not recorded",
                                            font=dict(size=11))),
                      yaxis=dict(title="probability", range=[0, 1.15]), legend=dict(orientation="h", y=1.12, x=0))
    return fig


def time_split_rows(events: Sequence[Event]) -> list[dict]:
    """Per round and lane: milliseconds in each kind of span (draft, verify, waiting, other work) and
    outside any span, out of the round's wall time (previous commit, or the prefill's end, to this commit)."""
    start = next((e for e in events if isinstance(e, RunStart)), None)
    previous = next((e.t for e in events if isinstance(e, Prefill)), start.t if start else 0.0)
    ends, lanes = {}, []
    for event in events:
        if isinstance(event, Commit):
            ends[event.round] = (previous, event.t)
            previous = event.t
        elif isinstance(event, StageSpan) and event.lane not in lanes:
            lanes.append(event.lane)
    busy: dict[tuple[int, str], dict[str, float]] = {}
    for span in (e for e in events if isinstance(e, StageSpan)):
        group = STAGE_GROUPS.get(span.stage, "other work")
        cell = busy.setdefault((span.round, span.lane), {})
        cell[group] = cell.get(group, 0.0) + (span.end - span.start) * 1000
    rows = []
    for round_, (begin, end) in ends.items():
        if round_ == 0:  # the prefill's token: no draft, no verification
            continue
        wall = (end - begin) * 1000
        for lane in lanes or ["main"]:
            cell = busy.get((round_, lane), {})
            rows.append({"round": round_, "lane": lane, "wall_ms": wall, **cell,
                         "outside spans": max(wall - sum(cell.values()), 0.0)})
    return rows


def time_split_figure(events: Sequence[Event], title: str = "Where the time goes, round by round") -> go.Figure:
    """Stacked bars per round, one panel per lane: draft, verify, waiting, other work, outside spans."""
    rows = time_split_rows(events)
    lanes = list(dict.fromkeys(r["lane"] for r in rows)) or ["main"]
    fig = make_subplots(rows=len(lanes), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[f"lane {lane}" for lane in lanes] if len(lanes) > 1 else None)
    for index, lane in enumerate(lanes, start=1):
        mine = [r for r in rows if r["lane"] == lane]
        for group, colour in GROUP_COLOURS.items():
            values = [r.get(group, 0.0) for r in mine]
            if not any(values):
                continue
            fig.add_bar(x=[r["round"] for r in mine], y=values, name=group, marker_color=colour, row=index, col=1,
                        legendgroup=group, showlegend=index == 1 or group not in _shown(fig),
                        hovertemplate=f"round %{{x}}<br>{group}: %{{y:.1f}} ms<extra>{lane}</extra>")
        fig.update_yaxes(title_text="ms", row=index, col=1)
    fig.update_xaxes(title_text="round (one target verification)", row=len(lanes), col=1)
    fig.update_layout(barmode="stack", title=title, height=260 + 140 * len(lanes), bargap=0.15,
                      margin=dict(t=60, b=40, l=50, r=20), legend=dict(orientation="h", y=-0.2))
    return fig


def _shown(fig: go.Figure) -> set[str]:
    return {trace.name for trace in fig.data if trace.showlegend}


def time_split_summary(events: Sequence[Event]) -> dict[str, float]:
    """Share of the decode wall time per kind of work on the lane that verifies (the first lane listed)."""
    rows = time_split_rows(events)
    if not rows:
        return {}
    lane = rows[0]["lane"]
    mine = [r for r in rows if r["lane"] == lane]
    wall = sum(r["wall_ms"] for r in mine)
    if wall <= 0:
        return {}
    return {group: sum(r.get(group, 0.0) for r in mine) / wall for group in GROUP_COLOURS
            if any(r.get(group) for r in mine)}
