"""CATS (paper 004; docs/trees-and-cats.md) drawn from a run's events: the cycle's tree, the io/compute Gantt, the
shallow verifier against the target, and the sweeps that put measurement beside the §7.6 time model.

Everything reads the engine's event stream (``ShallowVerification``, ``DraftTree``, ``Verification``,
``StageSpan``, ``StreamChunk``, ``Commit``), so a replayed trace draws the same pictures as a live run.

* :func:`cycle_tree_figure` — one cycle's tree: the draft chain d_0..d_{γ̄−1} and a correction sibling
  (the shallow verifier's ĉ_i, drawn as a hexagon) wherever the verifier disagreed with the draft, coloured
  by what the target did (:func:`specviz.trees.tree_figure`), and :func:`cycle_mask_figure` its tree mask.
* :func:`gantt_figure` — per cycle, the io lane (each streamed chunk's read, ``load_start → load_end``) above
  the compute lane (the draft, sv, reforward and verify stages, and each chunk's
  ``compute_start → compute_end`` inside the verify stage): where the flash, not the arithmetic, sets the pace.
* :func:`confusion_figure` — at every draft position the target judged, did the shallow verifier agree with
  the draft, and did the target accept it? The off-diagonal cells are what the verifier gets wrong; the
  "disagreed × rejected" cell is where a correction sibling can save the cycle.
* :func:`cats_sweep` / :func:`sweep_figure` — BPT and speedup against the shallow verifier's layer L_SV
  (with layers 1..L_SV resident: the memory budget) and against γ̄.
* :func:`bandwidth_sweep` / :func:`bandwidth_figure` — speedup against the emulated flash bandwidth for
  ``ar``, Kangaroo (``eesd(exit_layer=3, head=cats)``) and ``cats``, with the §7.6 time model
  (:mod:`specviz.theory`) evaluated at the measured τ and stage costs (:class:`TimeModel`).

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
import math
import re
from dataclasses import asdict, dataclass, fields
from typing import Callable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engines.core.trace import (
    Commit,
    DraftTree,
    Event,
    Prefill,
    RunEnd,
    RunStart,
    ShallowVerification,
    StageSpan,
    StreamChunk,
    Verification,
)
from engines.drafters.trained import available, read_card
from engines.memory_budget import weight_stream

from .theory import (
    bytes_per_token,
    cats_cycle_seconds,
    cats_speedup,
    streamed_pass_seconds,
)
from .trees import (
    Detokenize,
    node_outcomes,
    root_token,
    token_label,
    tree_figure,
    tree_mask_figure,
    tree_nodes,
)

MB = weight_stream.MB
STAGE_COLOURS = {"prefill": "#9e9e9e", "draft": "#1565c0", "sv": "#8e24aa", "reforward": "#ef6c00",
                 "verify": "#78909c"}
STAGE_LABELS = {"prefill": "prefill", "draft": "draft (layers 1..L_DM + DM adapter, γ̄ steps)",
                "sv": "shallow verify (layers L_DM+1..L_SV + SV adapter)",
                "reforward": "re-forward (corrections + last draft, layers 1..L_SV)",
                "verify": "verify (deep layers over the tree, walk, rollback)"}
IO_COLOUR = "#00897b"
CHUNK_COMPUTE_COLOUR = "#263238"
IO_LANE, COMPUTE_LANE = "io (flash reads)", "compute"
METHOD_COLOURS = {"ar": "#616161", "kangaroo": "#ef6c00", "cats": "#2e7d32"}
KANGAROO = "Kangaroo: eesd(exit_layer=3, head=cats)"
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
    """The tree mask the deep pass verified the cycle under (:func:`specviz.trees.tree_mask_figure`): a
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


# --- measured stage costs and the §7.6 time model -------------------------------------------------
@dataclass
class RunCosts:
    """Totals over one run's decoding cycles (the prefill left out), poolable with ``+``.

    ``deep_*``: the chunks streamed on every forward (layers past the resident ones); ``deep_wall`` runs
    from a cycle's first deep read to its last deep compute. ``bytes_streamed`` and ``target_calls`` come
    from the run's stats: in ``deep`` mode every target call streams the same deep layers once.
    """

    rounds: int = 0
    tokens: int = 0
    draft_steps: int = 0
    draft: float = 0.0
    sv: float = 0.0
    reforward: float = 0.0
    round_wall: float = 0.0
    deep_wall: float = 0.0
    deep_compute: float = 0.0
    deep_read: float = 0.0  # the deep chunks' reads, load_start → load_end, summed
    deep_passes: int = 0
    deep_pass_bytes: int = 0  # bytes of the deep chunks, over the same passes (all modes)
    bytes_streamed: int = 0
    target_calls: int = 0
    stream: str = "deep"

    def __add__(self, other: "RunCosts") -> "RunCosts":
        if self.stream != other.stream:
            raise ValueError("cannot pool runs of different stream modes")
        return RunCosts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)
                           if f.name != "stream"}, stream=self.stream)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict) -> "RunCosts":
        return cls(**{f.name: record[f.name] for f in fields(cls) if f.name in record})

    # per cycle
    @property
    def tau(self) -> float:
        return self.tokens / self.rounds if self.rounds else 0.0

    @property
    def gamma(self) -> float:
        return self.draft_steps / self.rounds if self.rounds else 0.0

    @property
    def draft_step(self) -> float:
        return self.draft / self.draft_steps if self.draft_steps else 0.0

    @property
    def sv_per_cycle(self) -> float:
        return self.sv / self.rounds if self.rounds else 0.0

    @property
    def reforward_per_cycle(self) -> float:
        return self.reforward / self.rounds if self.rounds else 0.0

    @property
    def deep_compute_per_pass(self) -> float:
        return self.deep_compute / self.deep_passes if self.deep_passes else 0.0

    @property
    def deep_wall_per_pass(self) -> float:
        return self.deep_wall / self.deep_passes if self.deep_passes else 0.0

    @property
    def deep_bytes_per_pass(self) -> float:
        """From the stats in ``deep`` mode (bytes streamed ÷ target calls); from the deep chunks otherwise."""
        if self.stream == "deep" and self.target_calls:
            return self.bytes_streamed / self.target_calls
        return self.deep_pass_bytes / self.deep_passes if self.deep_passes else 0.0

    @property
    def read_mb_s(self) -> float:
        """The rate the deep reads reached (MB/s): below the throttle's where the reader thread's own CPU
        work (parsing, copying the weights) cannot keep up."""
        return self.deep_pass_bytes / MB / self.deep_read if self.deep_read else 0.0

    @property
    def other_per_cycle(self) -> float:
        """Everything in a cycle outside the draft, sv and reforward stages and the deep pass: layers
        L_SV..deep start for Kangaroo and ar, the LM head, the walk, cache rollback, bookkeeping."""
        rest = self.round_wall - self.draft - self.sv - self.reforward - self.deep_wall
        return max(rest, 0.0) / self.rounds if self.rounds else 0.0

    @property
    def cycle_seconds(self) -> float:
        return self.round_wall / self.rounds if self.rounds else 0.0


def run_costs(events: Sequence[Event]) -> RunCosts:
    """What a run's decoding cycles cost, stage by stage, from its spans, chunks, commits and stats."""
    start = run_start(events)
    end = next((e for e in reversed(events) if isinstance(e, RunEnd)), None)
    bounds = cycle_bounds(events)
    costs = RunCosts(stream=((start.memory or {}).get("stream", "deep") if start else "deep"))
    for event in events:
        if isinstance(event, Commit) and event.round > 0:
            costs.rounds += 1
            costs.tokens += len(event.tokens)
            costs.draft_steps += event.draft_depth if event.draft_depth is not None else event.drafted
            first, last = bounds[event.round]
            costs.round_wall += last - first
        elif isinstance(event, StageSpan) and event.round > 0 and event.stage in ("draft", "sv", "reforward"):
            setattr(costs, event.stage, getattr(costs, event.stage) + event.end - event.start)
    deep_from = deep_layer_start(events)
    passes: dict[int, list[StreamChunk]] = {}
    for round_, chunk in chunk_cycles(events):
        if round_ > 0 and min(chunk.layers) >= deep_from and chunk.compute_end is not None:
            passes.setdefault(round_, []).append(chunk)
    for chunks in passes.values():
        costs.deep_passes += 1
        costs.deep_wall += max(c.compute_end for c in chunks) - min(c.load_start for c in chunks)
        costs.deep_compute += sum(c.compute_end - c.compute_start for c in chunks)
        costs.deep_read += sum(c.load_end - c.load_start for c in chunks)
        costs.deep_pass_bytes += sum(c.bytes for c in chunks)
    if end is not None:
        costs.bytes_streamed = end.stats.get("bytes_streamed", 0)
        costs.target_calls = end.stats.get("target_calls", 0)
    return costs


@dataclass
class TimeModel:
    """§7.6's [derived] time model with measured inputs (seconds, bytes):

        T_cycle(BW) = γ̄·t_DM + t_SV + t_ref + max(B_deep / BW, t_deep) + t_other
        T_AR(BW)    = t_other,AR + max(B_deep,AR / BW, t_deep,AR)
        speedup     = τ · T_AR / T_cycle,        BPT = B_deep / τ

    ``t_other`` (the LM head, the walk, rollback; for Kangaroo also its resident layers above L_DM) is not
    in :func:`specviz.theory.cats_cycle_seconds`; it is added so that the model meets the measurement at
    the measured bandwidth instead of overestimating the speedup by a constant. Kangaroo is the same model
    with t_SV = t_ref = 0.
    """

    tau: float
    gamma: float
    draft_step: float
    shallow_verify: float
    reforward: float
    other: float
    deep_bytes: float
    deep_compute: float
    ar_other: float
    ar_deep_bytes: float
    ar_deep_compute: float

    @classmethod
    def from_costs(cls, method: RunCosts, ar: RunCosts) -> "TimeModel":
        if not method.deep_passes or not ar.deep_passes:
            raise ValueError("the time model needs memory-budget runs (StreamChunk events) of the method and of ar")
        return cls(tau=method.tau, gamma=method.gamma, draft_step=method.draft_step,
                   shallow_verify=method.sv_per_cycle, reforward=method.reforward_per_cycle,
                   other=method.other_per_cycle, deep_bytes=method.deep_bytes_per_pass,
                   deep_compute=method.deep_compute_per_pass, ar_other=ar.other_per_cycle,
                   ar_deep_bytes=ar.deep_bytes_per_pass, ar_deep_compute=ar.deep_compute_per_pass)

    @classmethod
    def from_runs(cls, method_runs: Sequence[Sequence[Event]], ar_runs: Sequence[Sequence[Event]]) -> "TimeModel":
        return cls.from_costs(pool(run_costs(r) for r in method_runs), pool(run_costs(r) for r in ar_runs))

    def cycle_seconds(self, flash_mb_s: float) -> float:
        return cats_cycle_seconds(self.gamma, self.draft_step, self.shallow_verify, self.reforward, self.deep_bytes,
                                  flash_mb_s * MB, self.deep_compute) + self.other

    def ar_token_seconds(self, flash_mb_s: float) -> float:
        return self.ar_other + streamed_pass_seconds(self.ar_deep_bytes, flash_mb_s * MB, self.ar_deep_compute)

    def speedup(self, flash_mb_s: float) -> float:
        return cats_speedup(self.tau, self.cycle_seconds(flash_mb_s), self.ar_token_seconds(flash_mb_s))

    @property
    def bytes_per_token(self) -> float:
        return bytes_per_token(self.deep_bytes, self.tau)

    @property
    def asymptote(self) -> float:
        """The speedup as the bandwidth falls to nothing: τ · B_deep,AR / B_deep (bytes rule everything)."""
        return self.tau * self.ar_deep_bytes / self.deep_bytes if self.deep_bytes else float("inf")

    def to_dict(self) -> dict:
        return asdict(self)


def pool(costs) -> RunCosts:
    costs = list(costs)
    if not costs:
        raise ValueError("nothing to pool")
    total = costs[0]
    for item in costs[1:]:
        total = total + item
    return total


def layer_time_model(layer_bytes: Sequence[int], sv_layer: int, tau: float, gamma: int, dm_layer: int = 3,
                     layer_seconds: float = 0.0012, head_seconds: float = 0.002) -> TimeModel:
    """The same model for a slider: layers 1..``sv_layer`` resident, the rest streamed once per forward.

    Compute is ``layer_seconds`` per layer per forward (a handful of tokens cost about what one does on a
    CPU) and ``head_seconds`` per adapter + LM head call: t_DM = L_DM·ℓ + h, t_SV = (L_SV − L_DM)·ℓ + h,
    t_ref = L_SV·ℓ, t_deep = (L − L_SV)·ℓ, t_other = h; ar pays L_SV·ℓ + h besides its deep pass."""
    n = len(layer_bytes)
    if not 1 <= dm_layer < sv_layer < n:
        raise ValueError(f"need 1 <= dm_layer ({dm_layer}) < sv_layer ({sv_layer}) < {n}")
    deep = float(sum(layer_bytes[sv_layer:]))
    return TimeModel(tau=tau, gamma=gamma, draft_step=dm_layer * layer_seconds + head_seconds,
                     shallow_verify=(sv_layer - dm_layer) * layer_seconds + head_seconds,
                     reforward=sv_layer * layer_seconds, other=head_seconds, deep_bytes=deep,
                     deep_compute=(n - sv_layer) * layer_seconds, ar_other=sv_layer * layer_seconds + head_seconds,
                     ar_deep_bytes=deep, ar_deep_compute=(n - sv_layer) * layer_seconds)


def costs_rows(runs: dict[str, Sequence[Event]]) -> list[dict]:
    """Per run, what one cycle costs on average (ms, MB): the time model's inputs, side by side."""
    rows = []
    for name, events in runs.items():
        c = run_costs(events)
        end = events[-1]
        rows.append({"run": name, "τ": c.tau, "cycle ms": 1e3 * c.cycle_seconds,
                     "draft step ms": 1e3 * c.draft_step if c.draft_steps else None,
                     "γ̄": c.gamma, "sv ms": 1e3 * c.sv_per_cycle, "reforward ms": 1e3 * c.reforward_per_cycle,
                     "deep pass ms": 1e3 * c.deep_wall_per_pass, "deep compute ms": 1e3 * c.deep_compute_per_pass,
                     "other ms": 1e3 * c.other_per_cycle, "MB per pass": c.deep_bytes_per_pass / MB,
                     "reads MB/s": c.read_mb_s,
                     "BPT MB": decode_bytes_per_token(events) / MB, "tok/s": end.stats["tokens_per_s"]})
    return rows


# --- the shipped adapters and budgeted runs -------------------------------------------------------
def shipped_cats_layers(role: str | None = None) -> list[int]:
    """Layers ℓ with a shipped ``cats@ℓ`` adapter (``engines.drafters.trained.available``), optionally only
    those whose card names the ``role`` (``"draft"`` or ``"shallow_verifier"``; a card without a role
    serves both). Listed afresh on every call: adapters appear while training runs."""
    layers = []
    for name in available():
        match = re.fullmatch(r"cats@(\d+)", name)
        if not match:
            continue
        card_role = read_card(name).get("cats_role")
        if role is None or card_role in (None, role):
            layers.append(int(match.group(1)))
    return sorted(layers)


def memory_settings(engine, resident_layers: int, flash_mb_s: float | None, stream: str = "deep") -> dict:
    """``Engine.generate``'s budget arguments that keep layers 0..``resident_layers``−1 resident."""
    return {"memory_budget_mb": weight_stream.budget_for_resident_layers(engine.target, resident_layers),
            "flash_mb_s": flash_mb_s, "stream": stream}


def kangaroo_options(dm_layer: int = 3, gamma: int = 5) -> dict:
    return {"exit_layer": dm_layer, "head": "cats", "gamma": gamma}


def _point(run, ar=None) -> dict:
    s = run.stats
    return {"tau": s.mean_accepted_length, "tokens_per_s": s.tokens_per_s, "bpt": decode_bytes_per_token(run.events),
            "bytes_streamed": s.bytes_streamed, "peak_resident_mb": s.peak_resident_bytes / MB,
            "speedup": s.tokens_per_s / ar.stats.tokens_per_s if ar is not None and ar.stats.tokens_per_s else None,
            "costs": run_costs(run.events).to_dict()}


class _Ticker:
    def __init__(self, total: int, progress: Callable[[int, int], None] | None):
        self.done, self.total, self.progress = 0, total, progress

    def __call__(self):
        self.done += 1
        if self.progress:
            self.progress(self.done, self.total)


def cats_sweep(engine, prompt, sv_layers: Sequence[int] = (5, 10, 15, 20), gammas: Sequence[int] = (3, 5, 7), *,
               dm_layer: int = 3, sv_layer: int = 15, gamma: int = 5, max_new_tokens: int = 24,
               flash_mb_s: float = 1000.0, stream: str = "deep", kangaroo: bool = False,
               progress: Callable[[int, int], None] | None = None) -> dict:
    """Greedy ``cats`` runs under memory budgets, each beside ``ar`` under the same budget:

    * along L_SV: for each ``sv_layers`` entry with a shipped shallow-verifier adapter, layers 1..L_SV
      resident (the budget grows with L_SV), ``cats(dm_layer, L_SV, gamma)`` and ``ar`` (and Kangaroo with
      ``kangaroo``); layers without an adapter are skipped and listed in ``skipped`` with the reason;
    * along γ̄: at ``sv_layer`` (its budget), ``cats`` at each of ``gammas`` (and Kangaroo at the same γ).

    Returns ``sv_points`` and ``gamma_points`` (per run: τ, tok/s, BPT, speedup over that budget's ``ar``,
    bytes, the stage costs), ``skipped``, ``notes`` and the settings. ``progress(i, n)`` after each run.
    """
    drafts = shipped_cats_layers("draft")
    if dm_layer not in drafts:
        raise ValueError(f"no shipped CATS draft adapter cats@{dm_layer}; shipped draft adapters: {drafts or 'none'}")
    verifiers = shipped_cats_layers("shallow_verifier")
    usable, skipped = [], []
    for layer in dict.fromkeys(sv_layers):
        if layer <= dm_layer:
            skipped.append({"sv_layer": layer, "reason": f"not above the draft layer L_DM = {dm_layer}"})
        elif layer not in verifiers:
            skipped.append({"sv_layer": layer, "reason": f"no shipped adapter cats@{layer} (shipped shallow "
                                                         f"verifiers: {verifiers or 'none'})"})
        else:
            usable.append(layer)
    notes = [f"L_SV = {s['sv_layer']} skipped: {s['reason']}" for s in skipped]
    gamma_leg = list(dict.fromkeys(gammas)) if sv_layer in verifiers and sv_layer > dm_layer else []
    if gammas and not gamma_leg:
        notes.append(f"γ̄ sweep skipped: no shipped shallow-verifier adapter cats@{sv_layer}")
    budgets = list(dict.fromkeys(usable + ([sv_layer] if gamma_leg else [])))
    jobs = [("ar", layer, None) for layer in budgets]  # (what, L_SV, γ̄): every run, planned first for progress
    for layer, g in [(layer, gamma) for layer in usable] + [(sv_layer, g) for g in gamma_leg]:
        for what in ("cats", "kangaroo") if kangaroo else ("cats",):
            if (what, layer, g) not in jobs:
                jobs.append((what, layer, g))
    tick = _Ticker(len(jobs), progress)
    common = {"max_new_tokens": max_new_tokens, "temperature": 0.0}
    runs = {}

    def memory(layer):
        return memory_settings(engine, layer, flash_mb_s, stream)

    for what, layer, g in jobs:
        if what == "ar":
            runs[(what, layer, g)] = engine.run(prompt, "ar", **common, **memory(layer))
        elif what == "cats":
            runs[(what, layer, g)] = engine.run(prompt, "cats", dm_layer=dm_layer, sv_layer=layer, gamma=g, **common,
                                                **memory(layer))
        else:
            runs[(what, layer, g)] = engine.run(prompt, "eesd", **kangaroo_options(dm_layer, g), **common,
                                                **memory(layer))
        tick()

    def point(layer, g):
        ar = runs[("ar", layer, None)]
        row = {"sv_layer": layer, "gamma": g, "resident_layers": layer,
               "budget_mb": memory(layer)["memory_budget_mb"], **_point(runs[("cats", layer, g)], ar),
               "ar_tokens_per_s": ar.stats.tokens_per_s, "ar_bpt": decode_bytes_per_token(ar.events)}
        if ("kangaroo", layer, g) in runs:
            k = _point(runs[("kangaroo", layer, g)], ar)
            row.update(kangaroo_tau=k["tau"], kangaroo_bpt=k["bpt"], kangaroo_speedup=k["speedup"])
        return row

    return {"sv_points": [point(layer, gamma) for layer in usable],
            "gamma_points": [point(sv_layer, g) for g in gamma_leg], "skipped": skipped, "notes": notes,
            "dm_layer": dm_layer, "sv_layer": sv_layer, "gamma": gamma, "flash_mb_s": flash_mb_s, "stream": stream,
            "max_new_tokens": max_new_tokens, "kangaroo": kangaroo}


def sweep_figure(sweep: dict, along: str = "sv_layer") -> go.Figure:
    """BPT (left) and speedup over ``ar`` under the same budget (right) against L_SV or γ̄ (``along``)."""
    if along not in ("sv_layer", "gamma"):
        raise ValueError(f"along must be 'sv_layer' or 'gamma', got {along!r}")
    points = sweep["sv_points" if along == "sv_layer" else "gamma_points"]
    axis = ("L_SV: the shallow verifier's layer (layers 1..L_SV resident)" if along == "sv_layer"
            else f"γ̄: drafting passes per cycle (L_SV = {sweep['sv_layer']})")
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "BPT: MB streamed per committed token", "speedup over ar under the same budget"))
    xs = [p[along] for p in points]
    hover = [[p["tau"], p["tokens_per_s"], p["budget_mb"]] for p in points]
    template = "τ = %{customdata[0]:.2f} · %{customdata[1]:.1f} tok/s · budget %{customdata[2]:.0f} MB<extra></extra>"
    series = [("cats", "bpt", "speedup", "tau", METHOD_COLOURS["cats"], "circle")]
    if points and all(p.get("kangaroo_speedup") is not None for p in points):
        series.append((KANGAROO, "kangaroo_bpt", "kangaroo_speedup", "kangaroo_tau", METHOD_COLOURS["kangaroo"],
                       "square"))
    for name, bpt_key, speed_key, tau_key, colour, symbol in series:
        for col, key in ((1, bpt_key), (2, speed_key)):
            scale = 1 / MB if col == 1 else 1.0
            fig.add_trace(go.Scatter(x=xs, y=[p[key] * scale for p in points], name=name,
                                     mode="lines+markers+text" if col == 2 else "lines+markers",
                                     text=[f"τ {p[tau_key]:.2f}" for p in points] if col == 2 else None,
                                     textposition="top center", textfont=dict(size=10, color=colour),
                                     legendgroup=name, showlegend=col == 1, customdata=hover,
                                     marker=dict(size=10, color=colour, symbol=symbol), line=dict(color=colour),
                                     hovertemplate=f"{name}: %{{y:.2f}} · " + template), row=1, col=col)
    fig.add_trace(go.Scatter(x=xs, y=[p["ar_bpt"] / MB for p in points], mode="lines+markers", name="ar",
                             marker=dict(size=8, color=METHOD_COLOURS["ar"], symbol="x"),
                             line=dict(color=METHOD_COLOURS["ar"], dash="dot"),
                             hovertemplate="ar: %{y:.2f} MB per token<extra></extra>"), row=1, col=1)
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"), row=1, col=2)
    note = "; ".join(sweep.get("notes", [])) if along == "sv_layer" else ""
    title = (f"CATS against {'L_SV' if along == 'sv_layer' else 'γ̄'} · flash {sweep['flash_mb_s']:g} MB/s, "
             f"{sweep['max_new_tokens']} tokens per run")
    if note:
        title += f"<br><sup>{note}</sup>"
    if not points:
        fig.add_annotation(text="nothing measured: " + ("; ".join(sweep.get("notes", [])) or "no points"),
                           xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)
    fig.update_layout(title=title, height=420, legend=dict(orientation="h", y=-0.25), margin=dict(t=90))
    fig.update_xaxes(title_text=axis, dtick=5 if along == "sv_layer" else 1)
    fig.update_yaxes(rangemode="tozero")
    speeds = [p[speed_key] for p in points for _, _, speed_key, *_ in series]
    if speeds:  # room above the highest point for its τ label
        fig.update_yaxes(range=[0, 1.2 * max(max(speeds), 1.0)], row=1, col=2)
    return fig


def bandwidth_sweep(engine, prompt, bandwidths: Sequence[float] = (500, 1000, 2000), *, resident_layers: int = 15,
                    dm_layer: int = 3, sv_layer: int = 15, gamma: int = 5, max_new_tokens: int = 16,
                    stream: str = "deep", kangaroo: bool = True,
                    progress: Callable[[int, int], None] | None = None) -> dict:
    """``ar``, Kangaroo (``eesd(exit_layer=dm_layer, head=cats)``, with ``kangaroo``) and ``cats`` under one
    memory budget (layers 1..``resident_layers`` resident) at each flash bandwidth (MB/s), greedy.

    Returns ``points`` (per run: ``method``, ``flash_mb_s``, τ, tok/s, BPT, ``speedup`` over ``ar`` at the
    same bandwidth and the run's stage ``costs``) and the settings; :func:`bandwidth_figure` draws them
    with the time model fitted to the pooled costs."""
    if not bandwidths or any(not isinstance(b, (int, float)) or isinstance(b, bool) or b <= 0 for b in bandwidths):
        raise ValueError(f"bandwidths must be positive MB/s, got {list(bandwidths)!r}")
    methods = [("ar", "ar", {})]
    if kangaroo:
        methods.append(("kangaroo", "eesd", kangaroo_options(dm_layer, gamma)))
    methods.append(("cats", "cats", {"dm_layer": dm_layer, "sv_layer": sv_layer, "gamma": gamma}))
    tick = _Ticker(len(bandwidths) * len(methods), progress)
    points = []
    for rate in bandwidths:
        memory = memory_settings(engine, resident_layers, rate, stream)
        ar = None
        for key, method, options in methods:
            run = engine.run(prompt, method, max_new_tokens=max_new_tokens, temperature=0.0, **options, **memory)
            ar = run if key == "ar" else ar
            points.append({"method": key, "flash_mb_s": rate, **_point(run, ar)})
            tick()
    return {"points": points, "resident_layers": resident_layers,
            "budget_mb": memory_settings(engine, resident_layers, None)["memory_budget_mb"], "dm_layer": dm_layer,
            "sv_layer": sv_layer, "gamma": gamma, "max_new_tokens": max_new_tokens, "stream": stream}


def sweep_models(sweep: dict) -> dict[str, TimeModel]:
    """Per method (not ar), the time model on its costs pooled over every bandwidth, against ar's."""
    by_method: dict[str, list[RunCosts]] = {}
    for p in sweep["points"]:
        by_method.setdefault(p["method"], []).append(RunCosts.from_dict(p["costs"]))
    if "ar" not in by_method:
        raise ValueError("the sweep has no ar runs to model against")
    ar = pool(by_method["ar"])
    return {m: TimeModel.from_costs(pool(c), ar) for m, c in by_method.items() if m != "ar"}


def bandwidth_figure(sweep: dict, grid: tuple[float, float] = (50.0, 5000.0), readme_mb_s: float | None = 200.0
                     ) -> go.Figure:
    """Measured speedup over ``ar`` at each bandwidth (markers) beside the §7.6 model (lines) evaluated at
    each method's measured τ, stage costs, deep compute and bytes per pass. Log bandwidth axis; as the
    bandwidth falls the model tends to τ·B_AR/B (bytes per token decide), as it grows the compute does."""
    models = sweep_models(sweep)
    lo, hi = grid
    rates = [lo * (hi / lo) ** (i / 80) for i in range(81)]
    fig = go.Figure()
    names = {"kangaroo": KANGAROO, "cats": "cats"}
    for method, model in models.items():
        colour = METHOD_COLOURS.get(method, "#1565c0")
        fig.add_trace(go.Scatter(
            x=rates, y=[model.speedup(r) for r in rates], mode="lines", line=dict(color=colour, dash="dash"),
            name=f"{names.get(method, method)}: time model (τ = {model.tau:.2f})", legendgroup=method,
            hovertemplate="%{x:.0f} MB/s: model %{y:.2f}×<extra></extra>"))
        measured = [p for p in sweep["points"] if p["method"] == method]
        fig.add_trace(go.Scatter(
            x=[p["flash_mb_s"] for p in measured], y=[p["speedup"] for p in measured], mode="markers",
            marker=dict(size=11, color=colour, symbol="circle" if method == "cats" else "square"),
            name=f"{names.get(method, method)}: measured", legendgroup=method,
            customdata=[[p["tau"], p["tokens_per_s"], p["bpt"] / MB, RunCosts.from_dict(p["costs"]).read_mb_s]
                        for p in measured],
            hovertemplate="%{x:.0f} MB/s: %{y:.2f}× · τ = %{customdata[0]:.2f} · %{customdata[1]:.1f} tok/s · "
                          "BPT %{customdata[2]:.1f} MB · reads reached %{customdata[3]:.0f} MB/s<extra></extra>"))
    fig.add_hline(y=1.0, line=dict(color=METHOD_COLOURS["ar"], dash="dot"), annotation_text="ar (same budget)",
                  annotation_position="bottom right")
    if readme_mb_s:  # on a log axis a shape takes data coordinates, an annotation their log10
        fig.add_vline(x=readme_mb_s, line=dict(color="#bdbdbd", dash="dot"))
        fig.add_annotation(x=math.log10(readme_mb_s), y=1.0, yref="paper", yanchor="bottom", showarrow=False,
                           text=f"{readme_mb_s:g} MB/s (README)", font=dict(size=10, color="#757575"))
    fig.update_layout(
        title=(f"Speedup against flash bandwidth · layers 1..{sweep['resident_layers']} resident "
               f"({sweep['budget_mb']:.0f} MB), {sweep['max_new_tokens']} tokens per run"),
        height=430, legend=dict(orientation="h", y=-0.25),
        xaxis=dict(type="log", title="emulated flash bandwidth (MB/s)", range=[math.log10(lo), math.log10(hi)]),
        yaxis=dict(title="speedup over ar under the same budget", rangemode="tozero"))
    return fig


# --- the formula, for sliders ---------------------------------------------------------------------
def cats_theory_readout(model: TimeModel, flash_mb_s: float) -> str:
    """The model's numbers at one bandwidth, as HTML: bytes, BPT, the cycle and the speedup."""
    cycle, ar = model.cycle_seconds(flash_mb_s), model.ar_token_seconds(flash_mb_s)
    io = model.deep_bytes / (flash_mb_s * MB)
    return (f"B<sub>deep</sub> = <b>{model.deep_bytes / MB:.1f} MB</b> streamed per deep pass; "
            f"BPT<sub>CATS</sub> = B/τ = <b>{model.bytes_per_token / MB:.1f} MB</b> per token "
            f"(ar: {model.ar_deep_bytes / MB:.1f} MB)<br>"
            f"T<sub>cycle</sub> = γ̄·t<sub>DM</sub> + t<sub>SV</sub> + t<sub>ref</sub> + max(B/BW, t<sub>deep</sub>) "
            f"+ t<sub>other</sub> = {model.gamma:g}·{1e3 * model.draft_step:.1f} + {1e3 * model.shallow_verify:.1f} + "
            f"{1e3 * model.reforward:.1f} + max({1e3 * io:.1f}, {1e3 * model.deep_compute:.1f}) + "
            f"{1e3 * model.other:.1f} = <b>{1e3 * cycle:.1f} ms</b><br>"
            f"T<sub>AR</sub> = <b>{1e3 * ar:.1f} ms</b> per token; speedup = τ·T<sub>AR</sub>/T<sub>cycle</sub> = "
            f"{model.tau:.2f}·{1e3 * ar:.1f}/{1e3 * cycle:.1f} = <b>{model.speedup(flash_mb_s):.2f}×</b> "
            f"(at the slowest flash: τ·B<sub>AR</sub>/B = {model.asymptote:.2f}×)")


def cats_theory_figure(model: TimeModel, flash_mb_s: float, grid: tuple[float, float] = (50.0, 5000.0)) -> go.Figure:
    """Left: speedup against bandwidth at the model's τ and costs, your bandwidth marked. Right: one
    token's time under ar and under CATS (a cycle ÷ τ), stage by stage, at your bandwidth."""
    lo, hi = grid
    rates = [lo * (hi / lo) ** (i / 80) for i in range(81)]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.12, subplot_titles=(
        "speedup over ar against flash bandwidth", f"time per token at {flash_mb_s:g} MB/s (ms)"))
    fig.add_trace(go.Scatter(x=rates, y=[model.speedup(r) for r in rates], mode="lines", name="model",
                             line=dict(color=METHOD_COLOURS["cats"]), showlegend=False,
                             hovertemplate="%{x:.0f} MB/s: %{y:.2f}×<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[flash_mb_s], y=[model.speedup(flash_mb_s)], mode="markers", showlegend=False,
                             marker=dict(size=13, color="#c62828"), hovertemplate="your bandwidth: %{y:.2f}×<extra></extra>"),
                  row=1, col=1)
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"), row=1, col=1)
    rate = flash_mb_s * MB
    ar_pass = streamed_pass_seconds(model.ar_deep_bytes, rate, model.ar_deep_compute)
    pass_ = streamed_pass_seconds(model.deep_bytes, rate, model.deep_compute)
    per_token = {"ar": {"deep pass (streamed)": ar_pass, "other": model.ar_other},
                 "CATS": {"draft": model.gamma * model.draft_step, "sv": model.shallow_verify,
                          "reforward": model.reforward, "deep pass (streamed)": pass_, "other": model.other}}
    colours = {"draft": STAGE_COLOURS["draft"], "sv": STAGE_COLOURS["sv"], "reforward": STAGE_COLOURS["reforward"],
               "deep pass (streamed)": IO_COLOUR, "other": "#bdbdbd"}
    for part, colour in colours.items():
        ys = [1e3 * per_token[m].get(part, 0.0) / (model.tau if m == "CATS" else 1.0) for m in ("ar", "CATS")]
        fig.add_trace(go.Bar(x=["ar", "CATS"], y=ys, name=part, marker_color=colour,
                             hovertemplate=f"{part}: %{{y:.1f}} ms per token<extra></extra>"), row=1, col=2)
    fig.update_layout(barmode="stack", height=380, legend=dict(orientation="h", y=-0.25), margin=dict(t=50))
    fig.update_xaxes(type="log", title_text="flash bandwidth (MB/s)", range=[math.log10(lo), math.log10(hi)],
                     row=1, col=1)
    fig.update_yaxes(rangemode="tozero", title_text="speedup", row=1, col=1)
    return fig

