"""Mixture of Attentions (MoA, paper 001; docs/moa.md) drawn from one run's events, or from benchmark results.

MoA's drafter reads every layer of the target: the server turns the newly verified tokens' keys/values at
all layers into cross-attention memory (**LSA**, once per cycle), and the client drafts with a causal
self-attention over its own tokens (**SA**), a cross-attention into that memory (**CA**), optionally the
target's last TLI layers (**TLI**) and the LM head. In client–server mode the two halves talk over a
simulated link (:mod:`engines.network.link`): the client sends its draft tree up, the server sends the verdict
and the new memory rows down. Every view here answers one question about that split, from the trace
schema 5 events of :mod:`engines.core.trace` (``lsa``, ``draft_step``, ``link_send``):

* :func:`moa_metrics` — the numbers: τ, server calls, LSA and draft-part seconds, bytes and seconds on the
  link each way, resends, tokens/s on the run's clock (``wall+link`` in client–server mode).
* :func:`draft_split_figure` — per round, where the client's drafting time went (SA / CA / TLI / head)
  beside the server's LSA.
* :func:`client_server_gantt` — client, link and server rows on the run's clock; the link's seconds are
  simulated (added to the measured compute), and the title says so.
* :func:`message_size_figure` / :func:`measured_message_sizes` — the paper's Table 7 bytes per message for
  MoA, EAGLE and an independent draft, with the measured mean message of real runs beside them.
* :func:`tau_by_drafter_figure`, :func:`network_figure` — from ``specviz bench`` results.
* :func:`disconnection_points` / :func:`disconnection_curve` — the disconnection experiment (lossy).

Decisions:

- A lossy run (``RunStart.lossless`` False: the client wrote tokens alone after ``disconnect_after``) says
  LOSSY in every title that shows it (design rule); so does any figure fed a benchmark row with
  ``disconnect_after`` in its label, and the disconnection curve always.
- The server's verify span in a client–server run *includes* its LSA (the server computes the client's
  memory rows before it answers), so the Gantt draws LSA as the last part of that span, not after it. The
  prompt's LSA (round 0) follows the prefill.
- Mean message sizes leave out the first downlink message: it carries the whole prompt's activations,
  gzipped (paper §4.3), and is no cycle's message.
- The wire format (:mod:`engines.network.link`) adds a 4-byte header to every message and a 2-byte float16
  scale to every activation row; :func:`measured_message_sizes` predicts the measured bytes exactly as
  Table 7 + that overhead, so "measured vs formula" can be checked to the byte.
- Functions take the events of ONE run and are safe on a partial list (a dashboard redraws while a run
  streams): what has not happened yet is missing, never an error. Figures show milliseconds and bytes.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from statistics import mean
from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engines.core.trace import (
    Commit,
    DraftStep,
    DraftTree,
    Event,
    LinkSend,
    Lsa,
    Prefill,
    RunEnd,
    RunStart,
    StageSpan,
    Verification,
)
from engines.network.link import PROFILES, Link, table7_bytes, transfer_seconds

from .theory import moa_break_even_tli, moa_cycle_seconds
from .verdict_views import _tokens_per_s

PARTS = ("sa", "ca", "tli", "head")
PART_LABELS = {"sa": "SA: self-attention over the drafted tokens", "ca": "CA: cross-attention into the LSA memory",
               "tli": "TLI: the target's last TLI layers", "head": "head: final norm + LM head"}
PART_NAMES = {"sa": "SA", "ca": "CA", "tli": "TLI", "head": "head"}
PART_COLOURS = {"sa": "#1565c0", "ca": "#2e7d32", "tli": "#ef6c00", "head": "#78909c"}
LSA_COLOUR = "#6a1b9a"
UP_COLOUR, DOWN_COLOUR, RESEND_RED = "#0288d1", "#f9a825", "#c62828"
CLIENT_Y, LINK_Y, SERVER_Y = 2.0, 1.0, 0.0
LOSSY = "LOSSY"
INF_KEYS = ("inf", "∞", None, math.inf)


# --- reading a run --------------------------------------------------------------------------------
def _first(events: Sequence[Event], cls):
    return next((e for e in events if isinstance(e, cls)), None)


def _last(events: Sequence[Event], cls):
    return next((e for e in reversed(events) if isinstance(e, cls)), None)


def _of(events: Sequence[Event], cls) -> list:
    return [e for e in events if isinstance(e, cls)]


def is_lossy(events: Sequence[Event]) -> bool:
    start = _first(events, RunStart)
    return start is not None and not start.lossless


def lossy_tag(events: Sequence[Event]) -> str:
    """`` — LOSSY (…)`` for a lossy run, else empty: appended to every title that shows the run."""
    return f" — {LOSSY} (disconnected: the client wrote alone)" if is_lossy(events) else ""


def run_clock(events: Sequence[Event]) -> str:
    start = _first(events, RunStart)
    return start.clock if start is not None else "wall"


def run_name(events: Sequence[Event]) -> str:
    """``moa(tli=1, network=5g)``: the method with the options that change what a run is."""
    start = _first(events, RunStart)
    if start is None:
        return "run"
    config = start.config or {}
    keep = ("tli", "lsa", "drafter", "tree", "draft", "network", "packet_loss", "disconnect_after")
    shown = {k: config[k] for k in keep if k in config and config[k] not in (None, "", "none")
             and not (k == "lsa" and config[k] is True) and not (k == "tree" and config[k] is True)}
    inner = ", ".join(f"{k}={v}" for k, v in shown.items())
    return f"{start.method}({inner})" if inner else start.method


def family(events: Sequence[Event]) -> str:
    """What the server sends the client, by Table 7's rows: ``moa``, ``moa-nolsa`` (−LSA: last hidden states as
    memory), ``eagle`` (last hidden states) or ``tiny`` (an independent draft: ids only)."""
    start = _first(events, RunStart)
    config = (start.config or {}) if start is not None else {}
    method = start.method if start is not None else ""
    if method == "moa":
        name = config.get("drafter") or ""
        return "moa-nolsa" if config.get("lsa") is False or name.endswith("-nolsa") else "moa"
    if method == "eagle":
        draft = config.get("draft", "eagle")
        return "eagle" if draft == "eagle" or str(draft).startswith("eagle-") else "tiny"
    return method or "run"


def run_tli(events: Sequence[Event]) -> int:
    start = _first(events, RunStart)
    config = (start.config or {}) if start is not None else {}
    name = config.get("drafter") or ""
    match = re.match(r"moa-tli(\d+)", name)
    return int(match.group(1)) if match else int(config.get("tli", 0) or 0)


def verification_rounds(events: Sequence[Event]) -> list[Commit]:
    """Commits of rounds the server verified (round ≥ 1, no token the client wrote alone)."""
    return [c for c in _of(events, Commit) if c.round >= 1 and "client" not in c.fates]


def moa_metrics(events: Sequence[Event]) -> dict:
    """One run's numbers, all from its events (any method; client–server and MoA fields are 0 where absent).

    * ``tau``: tokens committed per server verification (bonus included; tokens the disconnected client wrote
      alone are not counted); ``rounds``: verifications; ``server_calls``: the prefill + one per round
      (the engine's ``target_calls``); ``client_tokens``: tokens written alone after a disconnection.
    * ``lsa_seconds`` / ``lsa_tokens``: the server's LSA over all cycles, prompt included.
    * ``draft_seconds``: ``{sa, ca, tli, head}`` summed over ``draft_step`` events; ``draft_total_s`` their sum;
      ``draft_steps``: drafter calls.
    * ``link_bytes_up/down``, ``link_seconds_up/down``, ``link_messages``, ``link_resends`` (attempts − 1);
      ``link_bytes`` / ``link_seconds`` both directions.
    * ``tokens_per_s`` on the run's ``clock`` (``wall+link``: compute measured, link seconds simulated and
      added); ``link_share``: link seconds over the decode seconds.
    """
    start = _first(events, RunStart)
    end = _last(events, RunEnd)
    rounds = verification_rounds(events)
    commits = _of(events, Commit)
    sends = _of(events, LinkSend)
    lsa = _of(events, Lsa)
    steps = _of(events, DraftStep)
    draft = {part: sum(getattr(s, part) for s in steps) for part in PARTS}
    link = {}
    for direction in ("up", "down"):
        chosen = [s for s in sends if s.direction == direction]
        link[f"link_bytes_{direction}"] = sum(s.bytes for s in chosen)
        link[f"link_seconds_{direction}"] = sum(s.seconds for s in chosen)
        link[f"link_messages_{direction}"] = len(chosen)
    decode = end.stats.get("decode_seconds") if end is not None else None
    link_seconds = link["link_seconds_up"] + link["link_seconds_down"]
    return dict(
        method=start.method if start is not None else None, run=run_name(events), family=family(events),
        clock=run_clock(events), lossless=not is_lossy(events),
        network=(start.config or {}).get("network", "none") if start is not None else None,
        new_tokens=sum(len(c.tokens) for c in commits),
        rounds=len(rounds), server_calls=len(rounds) + (1 if commits else 0),
        client_tokens=sum(1 for c in commits for f in c.fates if f == "client"),
        tau=sum(len(c.tokens) for c in rounds) / len(rounds) if rounds else None,
        drafted=sum(c.drafted for c in rounds), accepted=sum(c.accepted for c in rounds),
        lsa_seconds=sum(e.seconds for e in lsa), lsa_tokens=sum(e.n_tokens for e in lsa), lsa_passes=len(lsa),
        draft_seconds=draft, draft_total_s=sum(draft.values()), draft_steps=sum(s.steps for s in steps),
        **link, link_bytes=link["link_bytes_up"] + link["link_bytes_down"], link_seconds=link_seconds,
        link_messages=len(sends), link_resends=sum(s.attempts - 1 for s in sends),
        tokens_per_s=_tokens_per_s(events), decode_seconds=decode,
        link_share=link_seconds / decode if decode else None,
    )


def _title(text: str, events: Sequence[Event], note: str = "") -> dict:
    text = text + lossy_tag(events)
    return dict(text=f"{text}<br><sup>{note}</sup>" if note else text)


def _empty(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=message, height=200, xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig


# --- (1) where drafting time goes ----------------------------------------------------------------------
def draft_split_rows(events: Sequence[Event]) -> list[dict]:
    """Per round: ``{round, sa, ca, tli, head, steps, lsa, lsa_tokens}`` in seconds (``lsa``: the server's LSA
    that round; round 0 holds the prompt's LSA and no drafting)."""
    rows: dict[int, dict] = {}

    def row(r: int) -> dict:
        return rows.setdefault(r, dict(round=r, **dict.fromkeys(PARTS, 0.0), steps=0, lsa=0.0, lsa_tokens=0))

    for step in _of(events, DraftStep):
        entry = row(step.round)
        for part in PARTS:
            entry[part] += getattr(step, part)
        entry["steps"] += step.steps
    for lsa in _of(events, Lsa):
        entry = row(lsa.round)
        entry["lsa"] += lsa.seconds
        entry["lsa_tokens"] += lsa.n_tokens
    return [rows[r] for r in sorted(rows)]


def draft_split_figure(events: Sequence[Event], include_prompt: bool = False) -> go.Figure:
    """Per round, the client's drafting time stacked by part (SA, CA, TLI, head) and the server's LSA beside
    it, in ms. ``include_prompt`` also shows round 0, the LSA over the whole prompt (it dwarfs the rest)."""
    rows = [r for r in draft_split_rows(events) if include_prompt or r["round"] > 0]
    if not any(r["steps"] for r in rows):
        return _empty("No draft_step events: instrumented MoA runs emit them" + lossy_tag(events))
    fig = go.Figure()
    for part in PARTS:
        if part == "tli" and not any(r["tli"] for r in rows):
            continue
        fig.add_trace(go.Bar(x=[r["round"] - 0.2 for r in rows], y=[1e3 * r[part] for r in rows], width=0.38,
                             name=PART_LABELS[part], marker_color=PART_COLOURS[part], legendgroup="client",
                             customdata=[[r["round"], r["steps"]] for r in rows],
                             hovertemplate=f"round %{{customdata[0]}} · {PART_NAMES[part]} %{{y:.2f}} ms "
                                           "(%{customdata[1]} drafter calls)<extra></extra>"))
    if any(r["lsa"] for r in rows):
        fig.add_trace(go.Bar(x=[r["round"] + 0.2 for r in rows], y=[1e3 * r["lsa"] for r in rows], width=0.38,
                             name="LSA (server, beside)", marker_color=LSA_COLOUR, legendgroup="server",
                             customdata=[[r["round"], r["lsa_tokens"]] for r in rows],
                             hovertemplate="round %{customdata[0]} · LSA %{y:.2f} ms over %{customdata[1]} "
                                           "verified tokens<extra></extra>"))
    totals = {part: sum(r[part] for r in rows) for part in PARTS}
    drafting = sum(totals.values())
    share = " · ".join(f"{PART_NAMES[p]} {totals[p] / drafting:.0%}" for p in PARTS
                       if drafting and (p != "tli" or totals[p]))
    lsa = sum(r["lsa"] for r in rows)
    note = f"client drafting {1e3 * drafting:.0f} ms ({share}); server LSA {1e3 * lsa:.0f} ms"
    fig.update_layout(title=_title(f"{run_name(events)}: drafting time per round (client) and LSA (server)", events,
                                   note),
                      barmode="stack", height=380, margin=dict(t=80, b=40),
                      xaxis=dict(title="round (left bar: client SA/CA/TLI/head · right bar: server LSA)", dtick=1),
                      yaxis=dict(title="ms", rangemode="tozero"),
                      legend=dict(orientation="h", x=0, y=-0.2, xanchor="left", yanchor="top"))
    return fig


# --- (2) client · link · server Gantt ------------------------------------------------------------------
def gantt_bars(events: Sequence[Event]) -> list[dict]:
    """The bars :func:`client_server_gantt` draws: ``{row: client|link|server, kind, round, start, end, label,
    resent}``. Kinds: ``draft``, ``alone`` (client, disconnected), ``up``, ``down`` (link), ``prefill``,
    ``verify``, ``lsa`` (server)."""
    rounds_alone = {c.round for c in _of(events, Commit) if "client" in c.fates}
    bars = [dict(row="server", kind="prefill", round=0, start=p.t - p.seconds, end=p.t, resent=False,
                 label=f"prefill · {p.n_tokens} prompt tokens") for p in _of(events, Prefill)]
    verify_end: dict[int, float] = {}
    for s in _of(events, StageSpan):
        if s.stage == "draft":
            alone = s.round in rounds_alone
            bars.append(dict(row="client", kind="alone" if alone else "draft", round=s.round, start=s.start, end=s.end,
                             resent=False, label=f"{'client alone (no server)' if alone else 'draft'} · round {s.round}"))
        elif s.stage == "verify":
            verify_end[s.round] = s.end
            bars.append(dict(row="server", kind="verify", round=s.round, start=s.start, end=s.end, resent=False,
                             label=f"verify (+ LSA at its end) · round {s.round}"))
    for lsa in _of(events, Lsa):
        end = verify_end.get(lsa.round, lsa.t)
        bars.append(dict(row="server", kind="lsa", round=lsa.round, start=end - lsa.seconds, end=end, resent=False,
                         label=f"LSA · round {lsa.round} · {lsa.n_tokens} tokens"))
    for m in _of(events, LinkSend):
        resent = m.attempts > 1
        bars.append(dict(row="link", kind=m.direction, round=m.round, start=m.start, end=m.start + m.seconds,
                         resent=resent, label=(f"{m.direction} · round {m.round} · {m.bytes:,} B in {m.packets} "
                                               f"packet(s) · {m.content}"
                                               + (f" · LOST, resent {m.attempts - 1}× (+{m.attempts - 1}×"
                                                  f"{1e3 * Link.RTO_S:.0f} ms timeout)" if resent else ""))))
    return sorted(bars, key=lambda b: b["start"])


KIND_STYLE = {"prefill": ("#1565c0", "server: prefill"), "verify": ("#455a64", "server: verify"),
              "lsa": (LSA_COLOUR, "server: LSA (end of verify)"), "draft": ("#2e7d32", "client: draft tree"),
              "alone": ("#c62828", "client alone: no server (LOSSY)"), "up": (UP_COLOUR, "link up: draft tree"),
              "down": (DOWN_COLOUR, "link down: verdict + activations")}
ROW_Y = {"client": CLIENT_Y, "link": LINK_Y, "server": SERVER_Y}


def client_server_gantt(events: Sequence[Event], rounds: tuple[int, int] | None = None,
                        title: str | None = None) -> go.Figure:
    """Client, link and server rows on the run's clock (``wall+link``: compute measured on this machine, the
    link's seconds simulated and added). Client: the draft spans; link: each message from when it was sent
    for its simulated seconds, coloured by direction, a lost-and-resent one outlined red with its resend
    count; server: the prefill, the verify spans and the LSA at their end. ``rounds=(first, last)`` keeps only
    those rounds (round 0 is the prefill and the prompt's message)."""
    bars = gantt_bars(events)
    if rounds is not None:
        bars = [b for b in bars if rounds[0] <= b["round"] <= rounds[1]]
    fig = go.Figure()
    groups: dict[tuple[str, bool], list[dict]] = defaultdict(list)
    for bar in bars:
        groups[(bar["kind"], bar["resent"])].append(bar)
    for (kind, resent), group in sorted(groups.items(), key=lambda kv: (list(KIND_STYLE).index(kv[0][0]), kv[0][1])):
        colour, label = KIND_STYLE[kind]
        marker: dict = dict(color=colour, line=dict(width=0.5, color="#ffffff"))
        width = 0.3 if kind == "lsa" else 0.6
        if resent:
            label += " — lost and resent"
            marker.update(line=dict(width=2.5, color=RESEND_RED), pattern=dict(shape="x", fgcolor=RESEND_RED,
                                                                                solidity=0.25))
        fig.add_trace(go.Bar(orientation="h", base=[b["start"] for b in group],
                             x=[max(b["end"] - b["start"], 1e-6) for b in group],
                             y=[ROW_Y[b["row"]] for b in group], width=width, marker=marker, name=label,
                             hovertext=[f"{b['label']}<br>{1e3 * b['start']:.1f} → {1e3 * b['end']:.1f} ms "
                                        f"({1e3 * (b['end'] - b['start']):.2f} ms)" for b in group],
                             hoverinfo="text"))
    resent = [b for b in bars if b["resent"]]
    if resent:
        fig.add_trace(go.Scatter(x=[b["start"] for b in resent], y=[LINK_Y + 0.42] * len(resent), mode="markers+text",
                                 text=["resent"] * len(resent), textposition="top center",
                                 marker=dict(symbol="x", size=10, color=RESEND_RED), name="lost packet → resend",
                                 hoverinfo="skip"))
    metrics = moa_metrics(events)
    start = _first(events, RunStart)
    network = metrics["network"] or "none"
    simulated = network != "none"
    note = (f"clock {metrics['clock']}: compute measured, the {network} link simulated (its seconds added, not "
            f"waited) · link {1e3 * metrics['link_seconds']:.0f} ms, {metrics['link_bytes']:,} B, "
            f"{metrics['link_resends']} resend(s)" if simulated else "single device: no link (network=none)")
    name = title or (f"{run_name(events)}: client · link · server"
                     + (" — the link is SIMULATED" if simulated else ""))
    xaxis: dict = dict(title=f"seconds since the run started (clock {metrics['clock']})", rangemode="tozero")
    if rounds is not None and bars:  # a window: zoom to its bars
        lo, hi = min(b["start"] for b in bars), max(b["end"] for b in bars)
        pad = 0.03 * (hi - lo)
        xaxis["range"] = [max(lo - pad, 0.0), hi + pad]
    fig.update_layout(
        title=_title(name, events, note), barmode="overlay", height=380, margin=dict(t=80, b=40), xaxis=xaxis,
        yaxis=dict(tickvals=[CLIENT_Y, LINK_Y, SERVER_Y],
                   ticktext=[f"client · {(start.lanes or {}).get('draft', 'drafter') if start else 'drafter'}",
                             f"link · {network}" + (" (simulated)" if simulated else ""),
                             f"server · {(start.lanes or {}).get('target', 'target') if start else 'target'}"],
                   range=[-0.6, 2.7], automargin=True),
        legend=dict(orientation="h", x=0, y=-0.25, xanchor="left", yanchor="top"))
    return fig


# --- (3) message sizes: Table 7 and what crossed the link ----------------------------------------------
HEADER_BYTES = 4  # engines.network.link's header: kind, count, width
SCALE_BYTES = 2  # one float16 scale per activation row


def activation_width(kind: str, hidden: int, kv_width: int, tli: int) -> int:
    """Values per accepted token in the downlink message: MoA 2·E_kv·(TLI+1); −LSA E + 2·E_kv·TLI; EAGLE E; tiny 0."""
    return {"moa": 2 * kv_width * (tli + 1), "moa-nolsa": hidden + 2 * kv_width * tli, "eagle": hidden,
            "tiny": 0}[kind]


def wire_bytes(kind: str, direction: str, n: int, *, hidden: int, kv_width: int, tli: int = 0) -> int:
    """The exact size of one message on this project's wire (8-bit activations): up 4 + 4M; down 4 + 3A + A·(W + 2)
    with W = :func:`activation_width` (no rows for an independent draft)."""
    if direction == "up":
        return HEADER_BYTES + 4 * n
    width = activation_width(kind, hidden, kv_width, tli)
    return HEADER_BYTES + 3 * n + (n * (width + SCALE_BYTES) if width else 0)


def message_rows(events: Sequence[Event], hidden: int = 576, kv_width: int = 192) -> list[dict]:
    """Every cycle's message with its M (nodes, up) or A (tokens, down), measured bytes and the exact wire size
    predicted from Table 7 + header and scales. Skips the gzipped prompt message (round 0)."""
    kind, tli = family(events), run_tli(events)
    by_round = {c.round: c for c in verification_rounds(events)}
    # A = the ids the verdict carries (accepted path + the server's token); the last commit may be cut short
    # at max_new_tokens or EOS, the message is not, so the verification's count is preferred
    sent = {v.round: len(v.accepted) + 1 for v in _of(events, Verification)}
    rows = []
    for m in _of(events, LinkSend):
        commit = by_round.get(m.round)
        if m.round == 0 or commit is None:
            continue
        n = commit.drafted if m.direction == "up" else sent.get(m.round, len(commit.tokens))
        table7 = table7_bytes("eagle" if kind == "moa-nolsa" else kind, nodes=n if m.direction == "up" else 0,
                              accepted=n if m.direction == "down" else 0, hidden=hidden, kv_width=kv_width, tli=tli)
        rows.append(dict(round=m.round, direction=m.direction, n=n, bytes=m.bytes, table7=table7[m.direction],
                         predicted=wire_bytes(kind, m.direction, n, hidden=hidden, kv_width=kv_width, tli=tli)))
    return rows


def measured_message_sizes(events: Sequence[Event], hidden: int = 576, kv_width: int = 192) -> dict:
    """A run's mean message each way over its cycles (the prompt message left out), with Table 7 and the exact
    wire size at the run's own mean M and A: ``{label, family, tli, lossless, nodes, accepted, up, down,
    table7_up, table7_down, predicted_up, predicted_down, prompt_bytes}`` (``None`` where no cycle ran)."""
    rows = message_rows(events, hidden, kv_width)
    kind, tli = family(events), run_tli(events)
    out: dict = dict(label=run_name(events), family=kind, tli=tli, lossless=not is_lossy(events))
    for direction, n_key in (("up", "nodes"), ("down", "accepted")):
        chosen = [r for r in rows if r["direction"] == direction]
        out[n_key] = mean(r["n"] for r in chosen) if chosen else None
        out[direction] = mean(r["bytes"] for r in chosen) if chosen else None
        out[f"table7_{direction}"] = mean(r["table7"] for r in chosen) if chosen else None
        out[f"predicted_{direction}"] = mean(r["predicted"] for r in chosen) if chosen else None
    prompt = [m for m in _of(events, LinkSend) if m.round == 0]
    out["prompt_bytes"] = prompt[0].bytes if prompt else None
    return out


def table7_rows(accepted: int, nodes: int, tli: int = 0, hidden: int = 576, kv_width: int = 192,
                bytes_per_value: float = 1.0) -> dict[str, dict]:
    """``{moa, eagle, tiny: {"up", "down"}}`` bytes per message by Table 7 (:func:`engines.network.link.table7_bytes`)."""
    return {kind: table7_bytes(kind, nodes=nodes, accepted=accepted, hidden=hidden, kv_width=kv_width, tli=tli,
                               bytes_per_value=bytes_per_value) for kind in ("moa", "eagle", "tiny")}


def message_size_figure(accepted: int = 4, nodes: int = 16, tli: int = 0, hidden: int = 576, kv_width: int = 192,
                        bytes_per_value: float = 1.0,
                        measured: Mapping[str, Sequence[Event]] | None = None) -> go.Figure:
    """Table 7's bytes per message, up (4M: 3-byte id + 1-byte tree position per node) and down (MoA 3A +
    2A·E_kv·(TLI+1)·b, EAGLE 3A + A·E·b, an independent draft 3A), for A accepted tokens and M nodes.
    ``measured``: runs (label → events) whose mean message each way is drawn over their drafter's bars, with
    the formula at the run's own M̄ and Ā in the hover (the wire adds a 4-byte header and 2 bytes per row)."""
    sizes = table7_rows(accepted, nodes, tli, hidden, kv_width, bytes_per_value)
    names = {"moa": f"moa (TLI={tli})", "eagle": "eagle", "tiny": "tiny (independent)"}
    x = [names[k] for k in sizes]
    fig = go.Figure()
    for direction, colour, label in (("up", UP_COLOUR, "up: client → server (4M)"),
                                     ("down", DOWN_COLOUR, "down: server → client")):
        fig.add_trace(go.Bar(x=x, y=[sizes[k][direction] for k in sizes], name=f"Table 7 {label}",
                             marker_color=colour, offsetgroup=direction, text=[f"{sizes[k][direction]:,.0f}"
                                                                              for k in sizes],
                             textposition="outside"))
    lossy = False
    marks = ("#212121", "#c62828", "#6a1b9a", "#00838f", "#5d4037")
    for i, (label, events) in enumerate((measured or {}).items()):
        m = measured_message_sizes(events, hidden, kv_width)
        lossy |= not m["lossless"]
        where = names["moa"] if m["family"].startswith("moa") else names.get(m["family"], m["family"])
        tag = f"measured: {label}" + (" (LOSSY)" if not m["lossless"] else "")
        for direction, symbol in (("up", "triangle-up"), ("down", "triangle-down")):
            if m[direction] is None:
                continue
            n = m["nodes"] if direction == "up" else m["accepted"]
            fig.add_trace(go.Scatter(
                x=[where], y=[m[direction]], mode="markers", name=f"{tag} · {direction}", offsetgroup=direction,
                marker=dict(symbol=symbol, size=14, color=marks[i % len(marks)], line=dict(width=1.5, color="white")),
                hovertext=[f"{label}: mean {direction} message {m[direction]:,.1f} B over its cycles "
                           f"({'M' if direction == 'up' else 'A'}̄ = {n:.2f}, TLI {m['tli']}) · Table 7 at these: "
                           f"{m[f'table7_{direction}']:,.1f} B · + header and scales: "
                           f"{m[f'predicted_{direction}']:,.1f} B"], hoverinfo="text"))
    even = moa_break_even_tli(hidden, kv_width)
    note = (f"A = {accepted} accepted, M = {nodes} nodes, E = {hidden}, E_kv = {kv_width}, {bytes_per_value:g} byte(s) "
            f"per value · MoA's down message exceeds EAGLE's from TLI = {even} on (2·E_kv·(TLI+1) > E)")
    title = "Bytes per message (Table 7)" + (" — LOSSY runs among the measured" if lossy else "")
    fig.update_layout(title=dict(text=f"{title}<br><sup>{note}</sup>"), barmode="group", scattermode="group", height=400,
                      margin=dict(t=80, b=40), yaxis=dict(title="bytes per message", rangemode="tozero"),
                      legend=dict(orientation="h", x=0, y=-0.15, xanchor="left", yanchor="top"))
    return fig


def cycle_time_rows(t_draft: float, t_verify: float, t_lsa: float, accepted: int, nodes: int, tli: int = 0,
                    hidden: int = 576, kv_width: int = 192, bytes_per_value: float = 1.0,
                    profiles: Sequence[str] = ("base", "5g", "4g")) -> list[dict]:
    """The [derived] cycle time T = T_draft + RTT + 8(bytes up + down)/BW + T_verify + T_LSA (docs/moa.md) for
    MoA, EAGLE and an independent draft under each profile (mean RTT: twice base delay + jitter mean; no loss):
    ``{profile, drafter, draft, rtt, transfer, verify, lsa, total}`` in seconds (LSA is MoA's only)."""
    sizes = table7_rows(accepted, nodes, tli, hidden, kv_width, bytes_per_value)
    rows = []
    for name in profiles:
        profile = PROFILES[name]
        rtt = 2 * (transfer_seconds(profile, 0))
        for kind in sizes:
            lsa = t_lsa if kind == "moa" else 0.0
            total = moa_cycle_seconds(t_draft, rtt, sizes[kind]["up"], sizes[kind]["down"], profile.bandwidth_bps,
                                      t_verify, lsa)
            transfer = total - t_draft - rtt - t_verify - lsa
            rows.append(dict(profile=name, drafter=kind, draft=t_draft, rtt=rtt, transfer=transfer, verify=t_verify,
                             lsa=lsa, total=total))
    return rows


def cycle_time_figure(t_draft: float, t_verify: float, t_lsa: float, accepted: int, nodes: int, tli: int = 0,
                      hidden: int = 576, kv_width: int = 192, bytes_per_value: float = 1.0,
                      tau: float | None = None) -> go.Figure:
    """Stacked cycle time per link profile and drafter (:func:`cycle_time_rows`), same τ and draft cost for all
    so only the link differs; with ``tau`` each bar is labelled with τ/T tokens/s."""
    rows = cycle_time_rows(t_draft, t_verify, t_lsa, accepted, nodes, tli, hidden, kv_width, bytes_per_value)
    x = [[r["profile"] for r in rows], [r["drafter"] for r in rows]]
    fig = go.Figure()
    for part, colour, label in (("draft", "#2e7d32", "T_draft (client)"), ("rtt", "#0288d1", "RTT"),
                                ("transfer", DOWN_COLOUR, "8·bytes/BW"), ("verify", "#455a64", "T_verify (server)"),
                                ("lsa", LSA_COLOUR, "T_LSA (server, MoA)")):
        fig.add_trace(go.Bar(x=x, y=[1e3 * r[part] for r in rows], name=label, marker_color=colour,
                             hovertemplate=f"{label}: %{{y:.2f}} ms<extra>%{{x}}</extra>"))
    if tau:
        fig.add_trace(go.Scatter(x=x, y=[1e3 * r["total"] for r in rows], mode="text", showlegend=False,
                                 text=[f"{tau / r['total']:.0f} tok/s" for r in rows], textposition="top center"))
    fig.update_layout(title=dict(text="One client–server cycle: T_draft + RTT + 8(B_up + B_down)/BW + T_verify + T_LSA"
                                      f"<br><sup>A = {accepted}, M = {nodes}, TLI = {tli}, mean RTT, no loss"
                                      + (f", τ = {tau:g}" if tau else "") + " · [derived], docs/moa.md</sup>"),
                      barmode="stack", height=400, margin=dict(t=80, b=40), yaxis=dict(title="ms per cycle"),
                      legend=dict(orientation="h", x=0, y=-0.2, xanchor="left", yanchor="top"))
    return fig


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
        extra += f" B={options['disconnect_after'].strip()}"
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
                                      + "<br><sup>the paper's shape: τ rises with TLI; LSA and CA each add τ; "
                                        "speed peaks at TLI 0–1</sup>"),
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
                                      + "<br><sup>compute measured on this machine, link seconds simulated and "
                                        "added (clock wall+link)</sup>"),
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
    """``specviz disconnection``'s JSON (:mod:`specviz.disconnection`) as ``{label: points}``: per B the mean
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
        x = [f"B={p['label']}" for p in points]
        kept = [p["first_divergence"] if p["first_divergence"] is not None else p["kept_after_switch"] for p in points]
        what = "tokens equal before the first difference" if points and points[0]["first_divergence"] is not None \
            else "tokens kept equal after the server left"
        fig.add_trace(go.Bar(x=x, y=kept, name=f"{label} {what}".strip(), marker_color=colour, opacity=0.75,
                             offsetgroup=str(i)), secondary_y=False)
        fig.add_trace(go.Scatter(x=x, y=[p["equal_fraction"] for p in points], mode="lines+markers",
                                 name=f"{label} share of positions equal".strip(), line=dict(color=colour, dash="dot")),
                      secondary_y=True)
    fig.update_layout(title=dict(text=f"Disconnection — {LOSSY}: the server leaves after B new tokens, the client "
                                      "writes alone<br><sup>B = ∞ is the connected (lossless) run; equal to it = what "
                                      "the target would have written</sup>"),
                      barmode="group", height=400, margin=dict(t=80, b=40), legend=dict(orientation="h", x=0, y=-0.15))
    fig.update_xaxes(title_text="budget B (new tokens before the server leaves)")
    fig.update_yaxes(title_text="tokens", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="share of positions equal", range=[0, 1.05], tickformat=".0%", dtick=0.25,
                     showgrid=False, secondary_y=True)
    return fig


# --- one cycle's tree -------------------------------------------------------------------------------
def showcase_round(events: Sequence[Event]) -> int | None:
    """The verified round with the longest accepted path (latest on ties): the tree worth drawing."""
    verifications = _of(events, Verification)
    trees = {t.round for t in _of(events, DraftTree)}
    chosen = [v for v in verifications if v.round in trees]
    if not chosen:
        return None
    return max(chosen, key=lambda v: (len(v.accepted), v.round)).round
