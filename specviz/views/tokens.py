"""The token stream coloured by fate, as HTML (notebooks, dashboard) and ANSI (terminal).

Fates: ``target`` — produced by the target alone (prefill, autoregressive steps); ``accepted`` — a
draft token the target agreed with; ``correction`` — the target's token where it rejected a draft;
``bonus`` — the free extra token after every draft was accepted.
"""

from __future__ import annotations

import html
from typing import Iterable

from engines.core.trace import Commit, Event

FATE_COLOURS = {"target": "#9e9e9e", "accepted": "#2e7d32", "correction": "#c62828", "bonus": "#1565c0"}
FATE_LABELS = {"target": "target only", "accepted": "accepted draft", "correction": "correction",
               "bonus": "bonus"}
_ANSI = {"target": "", "accepted": "\033[32m", "correction": "\033[31m", "bonus": "\033[34m"}


def fated_pieces(events: Iterable[Event]) -> list[tuple[str, str, int]]:
    """(text piece, fate, round) for every committed token, in order."""
    return [(piece, fate, e.round) for e in events if isinstance(e, Commit)
            for piece, fate in zip(e.pieces, e.fates)]


def ansi(piece: str, fate: str) -> str:
    colour = _ANSI.get(fate, "")
    return f"{colour}{piece}\033[0m" if colour else piece


def legend_html() -> str:
    return " ".join(f'<span style="background:{c};color:white;padding:1px 6px;border-radius:3px">'
                    f"{FATE_LABELS[f]}</span>" for f, c in FATE_COLOURS.items())


def token_stream_html(events: Iterable[Event]) -> str:
    spans = []
    for piece, fate, round_ in fated_pieces(events):
        colour = FATE_COLOURS.get(fate, "#000")
        text = html.escape(piece).replace("\n", "↵<br>")
        spans.append(f'<span title="round {round_}: {fate}" style="color:{colour};'
                     f'border-bottom:2px solid {colour}">{text}</span>')
    return ('<div style="font-family:monospace;line-height:1.7;white-space:pre-wrap">'
            + "".join(spans) + "</div>")
