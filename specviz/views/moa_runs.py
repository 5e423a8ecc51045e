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
* :mod:`specviz.views.moa_messages` (:func:`message_size_figure`, :func:`measured_message_sizes`) — the paper's Table 7 bytes per message for
  MoA, EAGLE and an independent draft, with the measured mean message of real runs beside them.
* :mod:`specviz.views.moa_bench_results` — τ by drafter and tokens/s by link profile, from ``specviz bench`` results,
  and the disconnection experiment (lossy).

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
from typing import Sequence

import plotly.graph_objects as go

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
from engines.network.link import Link

from .verdict_metrics import _tokens_per_s

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
        return "eagle" if str(draft).startswith("eagle") else "tiny"  # eagle, eagle-matched, eagle3: hidden states
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


# --- one cycle's tree -------------------------------------------------------------------------------
def showcase_round(events: Sequence[Event]) -> int | None:
    """The verified round with the longest accepted path (latest on ties): the tree worth drawing."""
    verifications = _of(events, Verification)
    trees = {t.round for t in _of(events, DraftTree)}
    chosen = [v for v in verifications if v.round in trees]
    if not chosen:
        return None
    return max(chosen, key=lambda v: (len(v.accepted), v.round)).round
