"""Draft trees drawn from a run's events: one round's tree, its attention mask, and τ against tree size.

Everything here reads the engine's event stream only (``DraftTree``, ``Verification``, ``Commit``), so a
replayed trace draws the same pictures as a live run, and chains (``sps``) draw too: their nodes lack
``sent``/``score``/``rank``, which read as sent, the cumulative log-prob and rank 0.

* :func:`tree_figure` — which branches were drafted, which the target was shown, which it tried and
  which path it kept: the reason a tree commits more per call than a chain of the same drafter.
* :func:`tree_mask_figure` — how one target forward verifies every branch at once: each node attends
  to the root, its ancestors and itself (:func:`engines.model.layers.tree_mask`, the mask the engine uses).
* :mod:`specviz.views.tree_budget` (and :mod:`specviz.experiments.tree_size_sweep`) — how τ grows with the
  number of nodes sent, measured by runs at several ``total_tokens`` and predicted from the trees of a
  single large run (greedy: smaller trees keep the best-scoring nodes, so a round's outcome at size m
  can be read off its large tree).
  The analytic side there too: what the best tree of n nodes should commit and what verifying it costs.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import plotly.graph_objects as go
import torch

from engines.core.trace import Commit, DraftTree, Event, Verification
from engines.model.layers import tree_mask

from .tokens import FATE_COLOURS

Detokenize = Callable[[list[int]], str]

STATUS_COLOURS = {"accepted": "#2e7d32", "rejected": "#c62828", "unreached": "#9e9e9e", "pruned": "#c8c8c8",
                  "sent": "#546e7a"}
STATUS_LABELS = {"accepted": "accepted path", "rejected": "tried, rejected", "unreached": "sent, never reached",
                 "pruned": "pruned by the rerank (not sent)", "sent": "sent to the target"}
ROOT_COLOUR = "#222222"
CORRECTION_SYMBOL = "hexagon"  # CATS's correction siblings (source "correction"): shape, not colour, marks them
CORRECTION_OUTLINE = 2.5
CORRECTION_LABEL = "correction sibling (the shallow verifier's token)"
LABEL_WIDTH = 0.62  # x units a node's label may take, right of its marker (edges leave from its end)
MAX_LABEL_CHARS = 9


# --- reading events -----------------------------------------------------------------------------
def tree_nodes(tree: DraftTree) -> list[dict]:
    """The event's nodes with every tree field present: a chain's nodes read as sent, rank 0, scored by
    their cumulative log-prob (the score EAGLE-2 ranks by)."""
    nodes = sorted((dict(node) for node in tree.nodes), key=lambda n: n["id"])
    score = {}
    for node in nodes:
        node.setdefault("sent", True)
        node.setdefault("rank", 0)
        node.setdefault("source", "draft")
        if "score" not in node:
            node["score"] = score.get(node["parent"], 0.0) + node.get("logprob", 0.0)
        score[node["id"]] = node["score"]
    return nodes


def sent_nodes(tree: DraftTree) -> list[dict]:
    """The nodes the target verified, in the order it saw them (the event's ids, parents first)."""
    return [node for node in tree_nodes(tree) if node["sent"]]


def node_outcomes(tree: DraftTree, verification: Verification | None) -> dict[int, str]:
    """Node id → accepted | rejected (tried and refused) | unreached (sent, its parent never accepted,
    or a later sibling of the accepted one under sampling) | pruned (never sent); ``sent`` when the round
    has no verification. A chain's verification lists no tried nodes: there the tried ones are the sent
    nodes hanging off the root or the accepted path, exactly what a greedy walk tries."""
    nodes = tree_nodes(tree)
    if verification is None:
        return {n["id"]: "sent" if n["sent"] else "pruned" for n in nodes}
    accepted = set(verification.accepted)
    tried = {record["id"]: record["outcome"] for record in verification.nodes}
    outcomes = {}
    for node in nodes:
        if not node["sent"]:
            outcomes[node["id"]] = "pruned"
        elif node["id"] in accepted:
            outcomes[node["id"]] = "accepted"
        elif node["id"] in tried or (not tried and (node["parent"] < 0 or node["parent"] in accepted)):
            outcomes[node["id"]] = tried.get(node["id"], "rejected")
        else:
            outcomes[node["id"]] = "unreached"
    return outcomes


def tree_rounds(events: Sequence[Event]) -> list[tuple[DraftTree, Verification | None]]:
    """(DraftTree, Verification) of every round that drafted, in round order."""
    verifications = {e.round: e for e in events if isinstance(e, Verification)}
    return [(e, verifications.get(e.round)) for e in events if isinstance(e, DraftTree)]


def round_events(events: Sequence[Event], round_: int) -> tuple[DraftTree, Verification | None]:
    """One round's tree and verification, or a message listing the rounds that have a tree."""
    for tree, verification in tree_rounds(events):
        if tree.round == round_:
            return tree, verification
    raise ValueError(f"round {round_} drafted no tree (rounds with a tree: "
                     f"{[t.round for t, _ in tree_rounds(events)]})")


def root_token(events: Sequence[Event], round_: int) -> int | None:
    """The token a round's tree hangs off: the last one committed before it."""
    before = [e for e in events if isinstance(e, Commit) and e.round < round_ and e.tokens]
    return before[-1].tokens[-1] if before else None


def showcase_round(events: Sequence[Event], min_accepted: int = 2) -> int:
    """A round worth drawing: the first whose accepted path reaches ``min_accepted`` nodes and which sent
    more than that path (so something was refused), else the one with the longest accepted path."""
    rounds = [(t.round, len(v.accepted) if v else 0, len(v.rejected) if v else 0) for t, v in tree_rounds(events)]
    if not rounds:
        raise ValueError("the run drafted nothing: no DraftTree events (was it run with instrument=False?)")
    good = [r for r, accepted, rejected in rounds if accepted >= min_accepted and rejected]
    return good[0] if good else max(rounds, key=lambda r: r[1])[0]


def mean_tree_size(events: Sequence[Event]) -> float:
    """Nodes sent to the target per round (what a round's verification paid for)."""
    rounds = [e for e in events if isinstance(e, Commit) and e.round > 0]
    return sum(c.drafted for c in rounds) / len(rounds) if rounds else 0.0


def mean_levels(events: Sequence[Event]) -> float:
    """Levels the drafter grew per round (its deepest node; a grafted suffix chain's nodes are not its own): one
    drafter call each, whether the depth was fixed or chosen round by round (``depth="auto"``)."""
    depths = [max((n["depth"] for n in e.nodes if n.get("source") != "suffix"), default=0)
              for e in events if isinstance(e, DraftTree)]
    return sum(depths) / len(depths) if depths else 0.0


def run_row(name: str, events: Sequence[Event], ar_tokens_per_s: float | None = None) -> dict:
    """One line of a comparison table: speed, τ, tree size and the speedup over ``ar``."""
    stats = events[-1].stats
    return {"run": name, "tok/s": stats["tokens_per_s"],
            "speedup": stats["tokens_per_s"] / ar_tokens_per_s if ar_tokens_per_s else None,
            "τ": stats["mean_accepted_length"], "mean tree size": mean_tree_size(events),
            "rounds": stats["rounds"]}


# --- one round's tree -----------------------------------------------------------------------------
def token_label(token: int, detokenize: Detokenize | None = None, width: int = MAX_LABEL_CHARS) -> str:
    """A token as a short visible label: spaces as ␣, newlines as ↵, ids where there is no text."""
    text = detokenize([token]) if detokenize else ""
    text = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
    if not text:
        return f"#{token}"
    return text if len(text) <= width else text[: width - 1] + "…"


def tree_layout(nodes: Sequence[dict]) -> dict[int, tuple[float, float]]:
    """Node id (−1 = root) → (x, y): depth on x; leaves one row apart in depth-first order (siblings by
    rank, so the drafter's favourite is on top), a parent centred on its children."""
    kids: dict[int, list[dict]] = {}
    for node in nodes:
        kids.setdefault(node["parent"], []).append(node)
    for siblings in kids.values():
        siblings.sort(key=lambda n: (n["rank"], n["id"]))
    position: dict[int, tuple[float, float]] = {}
    next_row = [0.0]

    def place(node_id: int, depth: int) -> float:
        children = kids.get(node_id, [])
        if children:
            ys = [place(child["id"], child["depth"]) for child in children]
            y = (ys[0] + ys[-1]) / 2
        else:
            y = next_row[0]
            next_row[0] += 1
        position[node_id] = (float(depth), y)
        return y

    place(-1, 0)
    return position


def _hover(node: dict, label: str, outcome: str, record: dict | None) -> str:
    lines = [f"<b>{label}</b> (node {node['id']}, token {node['token']})",
             f"depth {node['depth']} · rank {node['rank']} among siblings",
             f"log q = {node.get('logprob', 0.0):.2f} · score {node['score']:.2f} "
             f"(path prob. {math.exp(node['score']):.3f})",
             STATUS_LABELS[outcome] + ("" if node.get("source", "draft") == "draft" else f" · {node['source']} node")]
    if record and record.get("p") is not None:
        q = record.get("q")
        lines.append(f"p = {record['p']:.3f} · q = {q:.3f}{' (a top-k pick: point mass)' if q == 1.0 else ''}"
                     f" · u = {record['draw']:.3f}")
    return "<br>".join(lines)


NEXT = -2  # layout id of the target's own token after the accepted path


def tree_figure(tree: DraftTree, verification: Verification | None = None, detokenize: Detokenize | None = None,
                show_pruned: bool = True, root_text: str | None = None) -> go.Figure:
    """One round's draft tree, root (the last committed token) at the left, depth to the right.

    Green: the path the target accepted; red: nodes it tried and refused; grey: nodes sent but never
    reached (their parent was refused); faint and dotted: nodes the rerank dropped before verification.
    The diamond after the path is the token the target added itself (bonus or correction), given a row of
    its own above its siblings. Hover a node for its score and rank (and p, q and the draw when sampling).
    Nodes whose ``source`` is ``"correction"`` (CATS: the shallow verifier's token where it disagreed with
    the draft, a sibling of that draft) keep their outcome's colour but are drawn as hexagons with a dark
    outline, and a legend entry says so.
    """
    nodes = tree_nodes(tree)
    outcomes = node_outcomes(tree, verification)
    if not show_pruned:
        nodes = [n for n in nodes if n["sent"]]
    records = {r["id"]: r for r in (verification.nodes if verification else [])}
    placed = list(nodes)
    if verification is not None:
        last = verification.accepted[-1] if verification.accepted else -1
        depth = next((n["depth"] for n in nodes if n["id"] == last), 0) + 1
        placed.append({"id": NEXT, "parent": last, "depth": depth, "rank": -1})
    position = tree_layout(placed)
    labels = {n["id"]: token_label(n["token"], detokenize) for n in nodes}
    fig = go.Figure()
    groups = {outcome: [n for n in nodes if outcomes[n["id"]] == outcome]
              for outcome in ("pruned", "unreached", "rejected", "sent", "accepted")}
    for outcome, members in groups.items():
        if members:
            _add_edges(fig, members, position, outcome)
    for outcome, members in groups.items():
        if not members:
            continue
        colour = STATUS_COLOURS[outcome]
        faint = outcome == "pruned"
        fig.add_trace(go.Scatter(
            x=[position[n["id"]][0] for n in members], y=[position[n["id"]][1] for n in members],
            mode="markers+text", text=[labels[n["id"]] for n in members], textposition="middle right",
            textfont=dict(size=11, color="#a0a0a0" if faint else colour),
            marker=_node_marker(members, colour, faint),
            hovertext=[_hover(n, labels[n["id"]], outcome, records.get(n["id"])) for n in members],
            hoverinfo="text", name=STATUS_LABELS[outcome]))
    if any(_is_correction(n) for n in nodes):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=CORRECTION_LABEL, hoverinfo="skip",
                                 marker=dict(size=12, symbol=CORRECTION_SYMBOL, color="white",
                                             line=dict(width=CORRECTION_OUTLINE, color=ROOT_COLOUR))))
    root_x, root_y = position[-1]
    fig.add_trace(go.Scatter(x=[root_x], y=[root_y], mode="markers+text", text=[root_text or "root"],
                             textposition="middle left", marker=dict(size=11, color=ROOT_COLOUR, symbol="square"),
                             hovertext=["the root: the last committed token, run by the target with the tree"],
                             hoverinfo="text", name="root", showlegend=False))
    if verification is not None:
        _add_next_token(fig, verification, position, detokenize)
    rows = len({y for _, y in position.values()})
    fig.update_layout(title=_tree_title(tree, verification),
                      height=int(min(1000, max(340, 140 + 18 * rows))), margin=dict(l=60, r=20, t=90, b=40),
                      plot_bgcolor="white", legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom"),
                      xaxis=dict(title="depth (1 = the root's children)", dtick=1, zeroline=False, showgrid=False,
                                 range=[-0.6, max(x for x, _ in position.values()) + LABEL_WIDTH + 0.3]),
                      yaxis=dict(visible=False, autorange="reversed"))
    return fig


def _is_correction(node: dict) -> bool:
    return node.get("source", "draft") == "correction"


def _node_marker(members: list[dict], colour: str, faint: bool) -> dict:
    """One outcome group's markers: circles; correction nodes (if any) hexagons with a dark outline."""
    if not any(_is_correction(n) for n in members):  # plain trees keep scalar marker settings
        return dict(size=8 if faint else 9, color=colour, symbol="circle-open" if faint else "circle",
                    line=dict(width=1.5))
    corrections = [_is_correction(n) for n in members]
    plain = "circle-open" if faint else "circle"
    return dict(size=[13 if c else (8 if faint else 9) for c in corrections], color=colour,
                symbol=[CORRECTION_SYMBOL if c else plain for c in corrections],
                line=dict(width=[CORRECTION_OUTLINE if c else 1.5 for c in corrections],
                          color=[ROOT_COLOUR if c else colour for c in corrections]))


def _add_edges(fig: go.Figure, members: list[dict], position: dict, outcome: str) -> None:
    """Edges into ``members`` from the end of their parent's label, so lines never cross a label."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    for node in members:
        (px, py), (cx, cy) = position[node["parent"]], position[node["id"]]
        xs += [_edge_start(px, node["parent"]), cx - 0.06, None]
        ys += [py, cy, None]
    dash = "dot" if outcome == "pruned" else "solid"
    width = 3 if outcome == "accepted" else 1.2
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                             line=dict(color=STATUS_COLOURS[outcome], width=width, dash=dash)))


def _edge_start(x: float, node_id: int) -> float:
    return x + (0.12 if node_id < 0 else LABEL_WIDTH)


def _add_next_token(fig: go.Figure, verification: Verification, position: dict, detokenize: Detokenize | None) -> None:
    """The target's own token after the accepted path, joined to the last accepted node (or the root)."""
    last = verification.accepted[-1] if verification.accepted else -1
    (px, py), (x, y) = position[last], position[NEXT]
    colour = FATE_COLOURS.get(verification.next_fate, ROOT_COLOUR)
    label = token_label(verification.next_token, detokenize)
    fig.add_trace(go.Scatter(x=[_edge_start(px, last), x - 0.08], y=[py, y], mode="lines", hoverinfo="skip",
                             showlegend=False, line=dict(color=colour, width=2, dash="dash")))
    fig.add_trace(go.Scatter(
        x=[x], y=[y], mode="markers+text", text=[label], textposition="middle right",
        textfont=dict(size=11, color=colour), marker=dict(size=13, color=colour, symbol="diamond"),
        hovertext=[f"<b>{label}</b>: the target's {verification.next_fate} token, committed after "
                   f"{len(verification.accepted)} accepted node(s)"],
        hoverinfo="text", name=f"{verification.next_fate}: the target's own token"))


def _tree_title(tree: DraftTree, verification: Verification | None) -> str:
    sent = sum(n["sent"] for n in tree_nodes(tree))
    title = f"Round {tree.round}: {len(tree.nodes)} drafted, {sent} sent"
    if verification is not None:
        title += f", {len(verification.accepted)} accepted + 1 {verification.next_fate}"
    return title


# --- the attention mask that verifies it ------------------------------------------------------------
def verify_parents(tree: DraftTree) -> list[int]:
    """Parents for the target's forward over [root] + sent nodes (root at row 0), as the engine builds them
    (``DraftTreeNodes.verify_parents`` after the rerank's renumbering)."""
    sent = sent_nodes(tree)
    row = {node["id"]: i + 1 for i, node in enumerate(sent)}
    return [-1] + [row.get(node["parent"], 0) for node in sent]


def tree_mask_figure(tree: DraftTree, verification: Verification | None = None,
                     detokenize: Detokenize | None = None, root_text: str | None = None) -> go.Figure:
    """The verified tree's attention mask without the prefix columns (every row sees the whole prefix).

    Row i is the query of one node, column j a key: filled where i may attend to j — the root, i's
    ancestors and i itself. Each row therefore predicts the next token after exactly its own path, and
    one forward scores every branch. With the verification, cells between nodes of the accepted path are
    green: restricted to that path the mask is the ordinary causal one.
    """
    sent = sent_nodes(tree)
    parents = verify_parents(tree)
    allowed = (tree_mask(0, parents, torch.float32, "cpu")[0, 0] == 0).tolist()
    on_path = {0} | {i + 1 for i, node in enumerate(sent) if verification and node["id"] in verification.accepted}
    labels = [root_text or "root"] + [token_label(node["token"], detokenize) for node in sent]
    z = [[(2 if i in on_path and j in on_path else 1) if allowed[i][j] else 0 for j in range(len(parents))]
         for i in range(len(parents))]
    hover = [[f"{labels[i]} (row {i}) {'sees' if allowed[i][j] else 'cannot see'} {labels[j]} (column {j})"
              for j in range(len(parents))] for i in range(len(parents))]
    ticks = [f"<b>{label} ✓</b>" if i in on_path and i else label for i, label in enumerate(labels)]
    n = len(parents)
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(n)), y=list(range(n)), zmin=0, zmax=2, showscale=False, xgap=1, ygap=1,
        colorscale=[[0, "#f4f4f4"], [0.33, "#f4f4f4"], [0.33, "#78909c"], [0.67, "#78909c"],
                    [0.67, STATUS_COLOURS["accepted"]], [1, STATUS_COLOURS["accepted"]]],
        hovertext=hover, hoverinfo="text"))
    size = int(min(900, max(360, 170 + 22 * n)))
    fig.update_layout(title=f"Round {tree.round}: attention mask, root + {n - 1} nodes",
                      height=size, margin=dict(l=90, r=20, t=60, b=90), plot_bgcolor="white",
                      xaxis=dict(title="key (attended to)", tickvals=list(range(n)), ticktext=ticks, tickangle=-60,
                                 tickfont=dict(size=10), side="bottom"),
                      yaxis=dict(title="query (node)", tickvals=list(range(n)), ticktext=ticks, autorange="reversed",
                                 tickfont=dict(size=10)))
    return fig


# --- τ against tree size ----------------------------------------------------------------------------
def round_hits(tree: DraftTree, verification: Verification) -> list[bool]:
    """For the round's sent nodes ranked as the rerank ranks them (score, shallower first on ties), whether
    each is on the accepted path."""
    accepted = set(verification.accepted)
    ranked = sorted(sent_nodes(tree), key=lambda n: (-n["score"], n["depth"], n["id"]))
    return [node["id"] in accepted for node in ranked]
