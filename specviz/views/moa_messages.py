"""MoA's messages and cycle time (paper 001; docs/moa.md): the paper's Table 7 bytes per message for MoA, EAGLE
and an independent draft (:func:`message_size_figure`), the measured messages of real runs beside them
(:func:`measured_message_sizes`: Table 7 + the wire format's header and float16 scales, to the byte), and one
client–server cycle's time on each link profile (:func:`cycle_time_figure`).
"""

from __future__ import annotations

from statistics import mean
from typing import Mapping, Sequence

import plotly.graph_objects as go

from engines.core.trace import Event, LinkSend, Verification
from engines.network.link import PROFILES, table7_bytes, transfer_seconds

from ..theory import moa_break_even_tli, moa_cycle_seconds
from .moa_runs import DOWN_COLOUR, LSA_COLOUR, UP_COLOUR, _of, family, is_lossy, run_name, run_tli, verification_rounds

# --- (3) message sizes: Table 7 and what crossed the link ----------------------------------------------
HEADER_BYTES = 4  # engines.network.link's header: kind, count, width
SCALE_BYTES = 2  # one float16 scale per activation row


def activation_width(kind: str, hidden: int, kv_width: int, tli: int) -> int:
    """Values per accepted token in the downlink message: MoA 2·E_kv·(TLI+1); −LSA E + 2·E_kv·TLI; EAGLE E; tiny 0."""
    return {"moa": 2 * kv_width * (tli + 1), "moa-nolsa": hidden + 2 * kv_width * tli, "eagle": hidden,
            "tiny": 0}[kind]


def wire_bytes(kind: str, direction: str, n: int, *, hidden: int, kv_width: int, tli: int = 0) -> int:
    """The exact size of one message on this project's wire (8-bit activations): up 4 + 4n; down 4 + 3A + A·(W + 2)
    with W = :func:`activation_width` (no rows for an independent draft)."""
    if direction == "up":
        return HEADER_BYTES + 4 * n
    width = activation_width(kind, hidden, kv_width, tli)
    return HEADER_BYTES + 3 * n + (n * (width + SCALE_BYTES) if width else 0)


def message_rows(events: Sequence[Event], hidden: int = 576, kv_width: int = 192) -> list[dict]:
    """Every cycle's message with its n (nodes, up) or A (tokens, down), measured bytes and the exact wire size
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
    wire size at the run's own mean n and A: ``{label, family, tli, lossless, nodes, accepted, up, down,
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
    """Table 7's bytes per message, up (4n: 3-byte id + 1-byte tree position per node) and down (MoA 3A +
    2A·E_kv·(TLI+1)·b, EAGLE 3A + A·E·b, an independent draft 3A), for A accepted tokens and n nodes.
    ``measured``: runs (label → events) whose mean message each way is drawn over their drafter's bars, with
    the formula at the run's own mean n and mean A in the hover (the wire adds a 4-byte header and 2 bytes per row)."""
    sizes = table7_rows(accepted, nodes, tli, hidden, kv_width, bytes_per_value)
    names = {"moa": f"moa (TLI={tli})", "eagle": "eagle", "tiny": "tiny (independent)"}
    x = [names[k] for k in sizes]
    fig = go.Figure()
    for direction, colour, label in (("up", UP_COLOUR, "up: client → server (4n)"),
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
                           f"(mean {'n' if direction == 'up' else 'A'} = {n:.2f}, TLI {m['tli']}) · Table 7 at these: "
                           f"{m[f'table7_{direction}']:,.1f} B · + header and scales: "
                           f"{m[f'predicted_{direction}']:,.1f} B"], hoverinfo="text"))
    even = moa_break_even_tli(hidden, kv_width)
    note = (f"τ = {accepted} tokens per cycle (A + 1 ids: the accepted drafts and the server's token), n = {nodes} nodes, E = {hidden} (hidden size), E_kv = {kv_width}, {bytes_per_value:g} byte(s) "
            f"per value · MoA's down message exceeds EAGLE's from TLI = {even} on (2·E_kv·(TLI+1) > E)")
    title = "Bytes per message (Table 7)" + (" — LOSSY runs among the measured" if lossy else "")
    fig.update_layout(title=dict(text=f"{title}<br><sup>{note}</sup>"), barmode="group", scattermode="group", height=400,
                      margin=dict(t=80, b=40), yaxis=dict(title="bytes per message", rangemode="tozero"),
                      legend=dict(orientation="h", x=0, y=-0.15, xanchor="left", yanchor="top"))
    return fig


def cycle_time_rows(t_draft: float, t_verify: float, t_lsa: float, accepted: int, nodes: int, tli: int = 0,
                    hidden: int = 576, kv_width: int = 192, bytes_per_value: float = 1.0,
                    profiles: Sequence[str] = ("base", "5g", "4g")) -> list[dict]:
    """The [derived] cycle time T = T_draft + RTT + (bytes up + down)/B + T_verify + T_LSA (B in bytes/s; docs/moa.md) for
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
                                ("transfer", DOWN_COLOUR, "8·bytes/B"), ("verify", "#455a64", "T_verify (server)"),
                                ("lsa", LSA_COLOUR, "T_LSA (server, MoA)")):
        fig.add_trace(go.Bar(x=x, y=[1e3 * r[part] for r in rows], name=label, marker_color=colour,
                             hovertemplate=f"{label}: %{{y:.2f}} ms<extra>%{{x}}</extra>"))
    if tau:
        fig.add_trace(go.Scatter(x=x, y=[1e3 * r["total"] for r in rows], mode="text", showlegend=False,
                                 text=[f"{tau / r['total']:.0f} tok/s" for r in rows], textposition="top center"))
    fig.update_layout(title=dict(text="One client–server cycle: T_draft + RTT + (bytes up + bytes down)/B + T_verify + T_LSA"
                                      f"<br><sup>τ = {accepted} tokens per cycle, n = {nodes} nodes, TLI = {tli}, mean RTT, no loss"
                                      + (f", {tau:g} tokens per cycle" if tau and tau != accepted else "") + " · [derived], docs/moa.md</sup>"),
                      barmode="stack", height=400, margin=dict(t=80, b=40), yaxis=dict(title="ms per cycle"),
                      legend=dict(orientation="h", x=0, y=-0.2, xanchor="left", yanchor="top"))
    return fig
