"""CATS (paper 004; docs/trees-and-cats.md) drawn from a run's events: the cycle's tree, the io/compute Gantt, the
shallow verifier against the target, and the sweeps that put measurement beside the §7.6 time model.

Everything reads the engine's event stream (``ShallowVerification``, ``DraftTree``, ``Verification``,
``StageSpan``, ``StreamChunk``, ``Commit``), so a replayed trace draws the same pictures as a live run.

* :func:`cycle_tree_figure` — one cycle's tree: the draft chain d_0..d_{γ−1} and a correction sibling
  (the shallow verifier's ĉ_i, drawn as a hexagon) wherever the verifier disagreed with the draft, coloured
  by what the target did (:func:`specviz.views.draft_trees.tree_figure`), and :func:`cycle_mask_figure` its tree mask.
* :func:`gantt_figure` — per cycle, the io lane (each streamed chunk's read, ``load_start → load_end``) above
  the compute lane (the draft, sv, reforward and verify stages, and each chunk's
  ``compute_start → compute_end`` inside the verify stage): where the flash, not the arithmetic, sets the pace.
* :func:`confusion_figure` — at every draft position the target judged, did the shallow verifier agree with
  the draft, and did the target accept it? The off-diagonal cells are what the verifier gets wrong; the
  "disagreed × rejected" cell is where a correction sibling can save the cycle.
* :func:`specviz.experiments.cats_sweeps.cats_sweep` / :func:`specviz.views.cats_sweep_figures.sweep_figure` — BPT and speedup against the shallow verifier's layer ℓ_SV
  (with layers 1..ℓ_SV resident: the memory budget) and against γ.
* :func:`specviz.experiments.cats_sweeps.bandwidth_sweep` / :func:`specviz.views.cats_sweep_figures.bandwidth_figure` — speedup against the emulated flash bandwidth for
  ``ar``, Kangaroo (``eesd(exit_layer=3, head=cats)``) and ``cats``, with the §7.6 time model
  (:mod:`specviz.theory`) evaluated at the measured τ and stage costs (:class:`specviz.views.cats_costs.TimeModel`).

Assignment of streamed chunks to cycles: a chunk belongs to the cycle during which its read started (the
engine never reads ahead across a commit in ``stream="deep"`` mode). Cycle r runs from the commit of cycle
r − 1 to its own commit; cycle 0 is the prefill.

BPT here is the paper's: weight bytes streamed per cycle ÷ tokens the cycle commits (τ), over decoding
cycles only (the prefill's pass is left out); the run's ``stats.bytes_per_token`` divides all bytes,
the prefill's included, by all new tokens.

A run with ``RunStart.lossless`` False (``acceptance="typical"``) is labelled LOSSY in every title.
"""

from __future__ import annotations

import bisect
from typing import Sequence

import plotly.graph_objects as go

from engines.core.trace import (
    Commit,
    DraftTree,
    Event,
    Prefill,
    RunStart,
    ShallowVerification,
    StageSpan,
    StreamChunk,
    Verification,
)
from engines.memory_budget import weight_stream

from .draft_trees import Detokenize, node_outcomes, root_token, token_label, tree_figure, tree_mask_figure, tree_nodes

MB = weight_stream.MB
STAGE_COLOURS = {"prefill": "#9e9e9e", "draft": "#1565c0", "sv": "#8e24aa", "reforward": "#ef6c00",
                 "verify": "#78909c"}
STAGE_LABELS = {"prefill": "prefill", "draft": "draft (layers 1..ℓ_DM + DM adapter, γ steps)",
                "sv": "shallow verify (layers ℓ_DM+1..ℓ_SV + SV adapter)",
                "reforward": "re-forward (corrections + last draft, layers 1..ℓ_SV)",
                "verify": "verify (deep layers over the tree, walk, rollback)"}
IO_COLOUR = "#00897b"
CHUNK_COMPUTE_COLOUR = "#263238"
IO_LANE, COMPUTE_LANE = "io (flash reads)", "compute"


LOSSY = "LOSSY (typical acceptance: the output may differ from the target's)"


# --- reading events -----------------------------------------------------------------------------
def run_start(events: Sequence[Event]) -> RunStart | None:
    return next((e for e in events if isinstance(e, RunStart)), None)


def is_lossy(events: Sequence[Event]) -> bool:
    start = run_start(events)
    return start is not None and not start.lossless


def lossy_suffix(events: Sequence[Event]) -> str:
    """`` — LOSSY (…)`` for a lossy run, else nothing: appended to every title."""
    return f" — {LOSSY}" if is_lossy(events) else ""


def cats_cycles(events: Sequence[Event]) -> list[int]:
    """Rounds that ran the shallow verifier (every decoding cycle of an instrumented ``cats`` run)."""
    return [e.round for e in events if isinstance(e, ShallowVerification)]


def cycle_bounds(events: Sequence[Event]) -> dict[int, tuple[float, float]]:
    """Round → (start, end) on the run's clock: round 0 is the prefill (from the run's start to the first
    commit), round r runs from the commit of round r − 1 to its own."""
    commits = [e for e in events if isinstance(e, Commit)]
    bounds, previous = {}, 0.0
    for commit in commits:
        if commit.round not in bounds:
            bounds[commit.round] = (previous, commit.t)
        else:  # a round committed twice (never by the engine): widen it
            bounds[commit.round] = (bounds[commit.round][0], commit.t)
        previous = commit.t
    return bounds


def chunk_cycles(events: Sequence[Event]) -> list[tuple[int, StreamChunk]]:
    """Every streamed chunk with the round during which its read started (reads after the last commit,
    drained at the run's end, go to the last round)."""
    bounds = cycle_bounds(events)
    rounds = sorted(bounds)
    ends = [bounds[r][1] for r in rounds]
    assigned = []
    for event in events:
        if isinstance(event, StreamChunk):
            i = min(bisect.bisect_left(ends, event.load_start), len(rounds) - 1) if rounds else 0
            assigned.append((rounds[i] if rounds else 0, event))
    return assigned


def deep_layer_start(events: Sequence[Event]) -> int:
    """The first layer streamed on every forward: the resident layers (mode ``deep``) or those held per
    round (mode ``all``) come before it."""
    start = run_start(events)
    memory = (start.memory if start else None) or {}
    return memory.get("resident_layers", 0) + memory.get("held_per_round_layers", 0)


def decode_bytes_per_token(events: Sequence[Event]) -> float:
    """The paper's BPT: bytes streamed during decoding cycles ÷ tokens those cycles committed (= bytes per
    cycle ÷ τ); the prefill's pass and its token are left out. 0 for a run without a memory budget."""
    streamed = sum(chunk.bytes for round_, chunk in chunk_cycles(events) if round_ > 0)
    tokens = sum(len(e.tokens) for e in events if isinstance(e, Commit) and e.round > 0)
    return streamed / tokens if tokens else 0.0


def memory_caption(events: Sequence[Event]) -> str:
    """``layers 1–15 resident, 16–30 streamed at 1000 MB/s (deep; budget …)`` or ``no memory budget…``;
    layers counted from 1, as the paper does (the engine's events count from 0)."""
    start = run_start(events)
    memory = start.memory if start else None
    if not memory:
        return "no memory budget: every layer resident"
    streamed = memory.get("streamed_layers") or []
    resident = memory.get("resident_layers", 0)
    rate = memory.get("flash_mb_s")
    parts = [f"layers 1–{resident} resident" if resident else "no layer pinned"]
    if streamed:
        parts.append(f"{_layer_range(streamed)} streamed at {'unthrottled' if rate is None else f'{rate:g} MB/s'}")
    return ", ".join(parts) + f" ({memory.get('stream', 'deep')}; budget {memory['memory_budget_mb']:.1f} MB)"


def _layer_name(layers: Sequence[int]) -> str:
    return f"layer{'s' if len(layers) > 1 else ''} {_layer_range(layers)}"


def _layer_range(layers: Sequence[int]) -> str:
    """Engine layer indices (from 0) as the paper counts them (from 1): ``[15, 16]`` → ``16–17``."""
    return f"{layers[0] + 1}–{layers[-1] + 1}" if len(layers) > 1 else str(layers[0] + 1)


# --- (a) one cycle's tree -----------------------------------------------------------------------
def cycle_events(events: Sequence[Event], round_: int) -> tuple[ShallowVerification, DraftTree, Verification | None]:
    """One cycle's shallow verification, tree and verification, or a message listing the cycles there are."""
    sv = next((e for e in events if isinstance(e, ShallowVerification) and e.round == round_), None)
    tree = next((e for e in events if isinstance(e, DraftTree) and e.round == round_), None)
    if sv is None or tree is None:
        raise ValueError(f"cycle {round_} has no shallow verification and tree (cycles that do: {cats_cycles(events)}; "
                         "was the run a `cats` run with instrument=True?)")
    verification = next((e for e in events if isinstance(e, Verification) and e.round == round_), None)
    return sv, tree, verification


def showcase_cycle(events: Sequence[Event]) -> int:
    """A cycle worth drawing: the first whose shallow verifier proposed a correction that the target then
    tried, else the first with a correction, else the one with the longest accepted path."""
    cycles = cats_cycles(events)
    if not cycles:
        raise ValueError("the run has no CATS cycle: no ShallowVerification events (a `cats` run with instrument=True?)")
    tried, proposed, longest = None, None, (cycles[0], -1)
    for round_ in cycles:
        sv, tree, verification = cycle_events(events, round_)
        outcomes = node_outcomes(tree, verification)
        corrections = [n["id"] for n in tree_nodes(tree) if n["source"] == "correction"]
        if tried is None and any(outcomes[i] in ("accepted", "rejected") for i in corrections):
            tried = round_
        if proposed is None and corrections:
            proposed = round_
        accepted = len(verification.accepted) if verification else 0
        if accepted > longest[1]:
            longest = (round_, accepted)
    return tried if tried is not None else proposed if proposed is not None else longest[0]


def cycle_caption(events: Sequence[Event], round_: int, detokenize: Detokenize | None = None) -> str:
    """What one cycle drafted, what the shallow verifier said, what the target kept and what it streamed."""
    sv, tree, verification = cycle_events(events, round_)
    commit = next(e for e in events if isinstance(e, Commit) and e.round == round_)
    outcomes = node_outcomes(tree, verification)
    taken = [n for n in tree_nodes(tree) if n["source"] == "correction" and outcomes[n["id"]] == "accepted"]
    if sv.mismatches:
        said = (f"the shallow verifier disagreed at position{'s' if len(sv.mismatches) > 1 else ''} "
                f"{', '.join(str(i) for i in sv.mismatches)} ({len(sv.mismatches)} correction sibling"
                f"{'s' if len(sv.mismatches) > 1 else ''})")
    else:
        said = "the shallow verifier agreed with every draft (a plain chain)"
    kept = f"the target accepted {commit.accepted} node{'s' if commit.accepted != 1 else ''}"
    if taken:
        kept += f" (ending on the correction “{token_label(taken[0]['token'], detokenize)}”)"
    fate = verification.next_fate if verification else commit.fates[-1]
    text = "".join(commit.pieces).replace("\n", "↵")
    streamed = [chunk for r, chunk in chunk_cycles(events) if r == round_]
    io = ""
    if streamed:
        io = (f"; streamed {sum(c.bytes for c in streamed) / MB:.1f} MB in "
              f"{1e3 * (max(c.load_end for c in streamed) - min(c.load_start for c in streamed)):.0f} ms of reads")
    return (f"Cycle {round_}: {len(sv.drafts)} drafts; {said}; {kept} + 1 {fate} → committed “{text}”{io}."
            + (" LOSSY run." if is_lossy(events) else ""))


def cycle_tree_figure(events: Sequence[Event], round_: int, detokenize: Detokenize | None = None) -> go.Figure:
    """One cycle's tree (main chain + correction siblings, hexagons) coloured by the target's verdict, the
    root labelled with the token it hangs off; the title adds what the shallow verifier said."""
    sv, tree, verification = cycle_events(events, round_)
    root = root_token(events, round_)
    fig = tree_figure(tree, verification, detokenize, root_text=None if root is None else token_label(root, detokenize))
    said = (f"SV disagreed at {', '.join(f'd{i}' for i in sv.mismatches)}" if sv.mismatches
            else "SV agreed with every draft")
    fig.update_layout(title=f"Cycle {fig.layout.title.text.removeprefix('Round ')} · {said}{lossy_suffix(events)}",
                      xaxis_title="depth (d_i sits at depth i + 1; its correction ĉ_i beside it)",
                      legend=dict(orientation="h", x=0, y=-0.3, yanchor="top"),  # below: it wraps in narrow columns
                      margin=dict(t=60, b=190), height=fig.layout.height + 120)
    return fig


def cycle_mask_figure(events: Sequence[Event], round_: int, detokenize: Detokenize | None = None) -> go.Figure:
    """The tree mask the deep pass verified the cycle under (:func:`specviz.views.draft_trees.tree_mask_figure`): a
    correction sibling's row sees exactly what the draft it would replace sees."""
    _, tree, verification = cycle_events(events, round_)
    root = root_token(events, round_)
    fig = tree_mask_figure(tree, verification, detokenize, None if root is None else token_label(root, detokenize))
    fig.update_layout(title=f"Cycle {fig.layout.title.text.removeprefix('Round ')}{lossy_suffix(events)}")
    return fig


# --- (b) io / compute Gantt ---------------------------------------------------------------------
def gantt_figure(events: Sequence[Event], rounds: Sequence[int] | None = None, title: str | None = None) -> go.Figure:
    """The io lane (each chunk's read) above the compute lane (stage spans, and each streamed chunk's
    compute drawn as a thin dark bar inside them), for ``rounds`` (default: all; 0 = the prefill).
    Milliseconds since the run started; alternate cycles are shaded and labelled so they read apart."""
    bounds = cycle_bounds(events)
    chosen = sorted(bounds) if rounds is None else sorted(r for r in set(rounds) if r in bounds)
    if not chosen:
        raise ValueError(f"no such cycle among {list(rounds or [])}; the run has cycles {sorted(bounds)}")
    wanted = set(chosen)
    fig = go.Figure()
    bars: dict[str, list[tuple[float, float, str]]] = {}
    for event in events:
        if isinstance(event, StageSpan) and event.round in wanted:
            bars.setdefault(event.stage, []).append((event.start, event.end, f"cycle {event.round}"))
        elif isinstance(event, Prefill) and 0 in wanted:
            bars.setdefault("prefill", []).append((event.t - event.seconds, event.t, f"{event.n_tokens} prompt tokens"))
    for stage, spans in bars.items():
        fig.add_trace(_bar(COMPUTE_LANE, spans, STAGE_COLOURS.get(stage, "#90a4ae"), STAGE_LABELS.get(stage, stage),
                           0.6, f"{stage}: %{{x:.1f}} ms · %{{customdata}}<extra></extra>"))
    chunks = [(r, c) for r, c in chunk_cycles(events) if r in wanted]
    if chunks:
        reads = [(c.load_start, c.load_end, _chunk_hover(c)) for _, c in chunks]  # layers counted from 1
        fig.add_trace(_bar(IO_LANE, reads, IO_COLOUR, "flash read of a streamed chunk", 0.6,
                           "read %{x:.1f} ms · %{customdata}<extra></extra>"))
        computes = [(c.compute_start, c.compute_end, _layer_name(c.layers)) for _, c in chunks
                    if c.compute_start is not None and c.compute_end is not None]
        if computes:
            fig.add_trace(_bar(COMPUTE_LANE, computes, CHUNK_COMPUTE_COLOUR, "compute of a streamed chunk", 0.25,
                               "compute %{x:.2f} ms · %{customdata}<extra></extra>"))
    for i, round_ in enumerate(chosen):
        start, end = bounds[round_]
        fig.add_vrect(x0=start * 1e3, x1=end * 1e3, fillcolor="#eceff1" if i % 2 == 0 else "#ffffff", opacity=0.6,
                      layer="below", line_width=0)
        fig.add_vline(x=end * 1e3, line=dict(color="#b0bec5", width=1, dash="dot"))
        fig.add_annotation(x=(start + end) / 2 * 1e3, y=1.0, yref="paper", yanchor="bottom", showarrow=False,
                           text="prefill" if round_ == 0 else f"cycle {round_}", font=dict(size=10, color="#546e7a"))
    first, last = bounds[chosen[0]][0], bounds[chosen[-1]][1]
    start = run_start(events)
    name = start.method if start else "run"
    cycles = f"cycle {chosen[0]}" if len(chosen) == 1 else f"cycles {chosen[0]}–{chosen[-1]}"
    fig.update_layout(
        title=title or f"{name}: io and compute, {cycles} · {memory_caption(events)}{lossy_suffix(events)}",
        barmode="overlay", height=340, margin=dict(l=110, r=20, t=80, b=120), plot_bgcolor="white",
        legend=dict(orientation="h", y=-0.42, yanchor="top"),
        xaxis=dict(title="ms since the run started", range=[first * 1e3, last * 1e3], showgrid=False),
        yaxis=dict(categoryorder="array", categoryarray=[COMPUTE_LANE, IO_LANE]))
    return fig


def _bar(lane: str, spans: list[tuple[float, float, str]], colour: str, name: str, width: float,
         template: str) -> go.Bar:
    return go.Bar(y=[lane] * len(spans), x=[(end - start) * 1e3 for start, end, _ in spans],
                  base=[start * 1e3 for start, _, _ in spans], customdata=[note for _, _, note in spans],
                  orientation="h", width=width, name=name, marker=dict(color=colour, line=dict(width=0.5, color="white")),
                  hovertemplate=template)


def _chunk_hover(chunk: StreamChunk) -> str:
    seconds = chunk.load_end - chunk.load_start
    rate = f" ({chunk.bytes / MB / seconds:.0f} MB/s)" if seconds > 0 else ""
    return f"{_layer_name(chunk.layers)} · {chunk.bytes / MB:.2f} MB{rate}"


# --- (c) shallow verifier × target ---------------------------------------------------------------
def verdicts(events: Sequence[Event]) -> list[dict]:
    """Every draft position the target judged (accepted or refused d_i; positions after a refusal are
    never judged): ``round``, ``position``, ``sv_agrees`` (ĉ_i = d_i), ``target_accepts`` (d_i accepted) and
    ``correction`` (the correction sibling's outcome where there was one: accepted | rejected | unreached).
    Reads runs one after another, so several runs' events may be concatenated."""
    records: list[dict] = []
    pending_sv: dict[int, ShallowVerification] = {}
    pending_tree: dict[int, DraftTree] = {}
    for event in events:
        if isinstance(event, RunStart):
            pending_sv, pending_tree = {}, {}
        elif isinstance(event, ShallowVerification):
            pending_sv[event.round] = event
        elif isinstance(event, DraftTree):
            pending_tree[event.round] = event
        elif isinstance(event, Verification) and event.round in pending_sv and event.round in pending_tree:
            sv, tree = pending_sv.pop(event.round), pending_tree.pop(event.round)
            outcomes = node_outcomes(tree, event)
            nodes = tree_nodes(tree)
            correction = {n["depth"] - 1: outcomes[n["id"]] for n in nodes if n["source"] == "correction"}
            for node in nodes:
                position = node["depth"] - 1
                if node["source"] != "draft" or outcomes[node["id"]] not in ("accepted", "rejected"):
                    continue
                records.append({"round": event.round, "position": position,
                                "sv_agrees": position not in sv.mismatches,
                                "target_accepts": outcomes[node["id"]] == "accepted",
                                "correction": correction.get(position)})
    return records


def confusion_counts(events: Sequence[Event]) -> dict:
    """The 2 × 2 counts ``{(sv_agrees, target_accepts): n}`` plus ``corrections_taken`` (an accepted
    correction sibling, in the disagreed × refused cell) and ``positions``."""
    counts = {(a, b): 0 for a in (True, False) for b in (True, False)}
    taken = 0
    records = verdicts(events)
    for record in records:
        counts[(record["sv_agrees"], record["target_accepts"])] += 1
        taken += record["correction"] == "accepted"
    return {"cells": counts, "corrections_taken": taken, "positions": len(records)}


def confusion_figure(events: Sequence[Event], title: str | None = None) -> go.Figure:
    """Rows: did the shallow verifier agree with the draft d_i; columns: did the target accept d_i. Each cell
    gives its count and its share of the row; the disagreed × refused cell also counts the corrections the
    target then took (each one a token the cycle gained)."""
    summary = confusion_counts(events)
    cells = summary["cells"]
    rows = [(True, "SV agreed (ĉ_i = d_i)"), (False, "SV disagreed (ĉ_i ≠ d_i: a correction sibling)")]
    columns = [(True, "target accepted d_i"), (False, "target refused d_i")]
    z, text, hover = [], [], []
    for agrees, row_label in rows:
        total = sum(cells[(agrees, b)] for b, _ in columns)
        z.append([cells[(agrees, b)] for b, _ in columns])
        row_text, row_hover = [], []
        for accepts, column_label in columns:
            n = cells[(agrees, accepts)]
            share = f"{n / total:.0%} of row" if total else "—"
            note = f"<br>{summary['corrections_taken']} correction(s) taken" if (not agrees and not accepts) else ""
            row_text.append(f"<b>{n}</b><br>{share}{note}")
            row_hover.append(f"{row_label} and {column_label}: {n} position(s){note.replace('<br>', ' · ')}")
        text.append(row_text)
        hover.append(row_hover)
    fig = go.Figure(go.Heatmap(z=z, x=[c for _, c in columns], y=[r for _, r in rows], text=text,
                               texttemplate="%{text}", hovertext=hover, hoverinfo="text", showscale=False,
                               colorscale=[[0, "#f5f5f5"], [1, "#5c6bc0"]], xgap=2, ygap=2))
    judged = summary["positions"]
    agree = cells[(True, True)] + cells[(False, False)]
    fig.update_layout(
        title=title or (f"Shallow verifier vs target over {judged} judged draft positions"
                        + (f" · they agree on {agree / judged:.0%}" if judged else "") + lossy_suffix(events)),
        height=330, margin=dict(l=250, r=20, t=70, b=40),
        yaxis=dict(autorange="reversed"), xaxis=dict(side="top"))
    return fig
