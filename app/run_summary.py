"""How a run reads on the Run, Compare, Draft-trees and CATS pages, Streamlit-free: the status line above its token
stream, its headline numbers with their help texts, and the key under which its ``ar`` baseline is cached.
"""

from __future__ import annotations

import html
import re

from engines.core.trace import Commit, Event


def baseline_key(prompt: str, settings: dict, dtype: str) -> tuple:
    """What an ``ar`` run depends on: the same key means the cached baseline can be reused."""
    return (prompt, dtype, *(settings[k] for k in sorted(settings)))


STOPPED_BADGE = ('<span style="background:#c62828;color:white;padding:0 6px;border-radius:3px">'
                 "⏹ stopped</span> ")


def live_status(events: list[Event], method: str, stopped: bool = False) -> str:
    """The grey line above a token stream; a run the Stop button ended is marked so."""
    commits = [e for e in events if isinstance(e, Commit)]
    tokens = sum(len(c.tokens) for c in commits)
    rounds = sum(1 for c in commits if c.round > 0)
    seconds = events[-1].t if events else 0.0
    return (f'<div style="color:#777;font-size:0.85em;margin-bottom:4px">{STOPPED_BADGE if stopped else ""}'
            f"{html.escape(method)} · {tokens} tokens · {rounds} verification rounds · {seconds:.1f} s</div>")


def metric_values(stats: dict, ar_stats: dict | None) -> dict[str, str]:
    """The five headline numbers, formatted; α is '—' where nothing was drafted (ar)."""
    speedup = stats["tokens_per_s"] / ar_stats["tokens_per_s"] if ar_stats and ar_stats["tokens_per_s"] else None
    return {
        "tok/s": f"{stats['tokens_per_s']:.1f}",
        "τ (mean accepted length)": f"{stats['mean_accepted_length']:.2f}",
        "α (acceptance rate)": f"{stats['acceptance_rate']:.2f}" if stats["drafted"] else "—",
        "target calls": str(stats["target_calls"]),
        "speedup vs ar": "—" if speedup is None else f"{speedup:.2f}×",
    }


METRIC_HELP = {
    "tok/s": "Generated tokens per second of decoding (prefill excluded, model load excluded).",
    "τ (mean accepted length)": "Tokens committed per target verification call, the bonus/correction token "
                                "included; autoregressive decoding has τ = 1.",
    "α (acceptance rate)": "Accepted draft tokens ÷ drafted tokens.",
    "target calls": "Forward passes of the full target model: the prefill plus one per round.",
    "speedup vs ar": "tok/s of this run ÷ tok/s of autoregressive decoding of the same prompt with the same "
                     "settings on the same engine (measured in this session).",
}


def strip_html(markup: str) -> str:
    """Visible text of the token-stream HTML (for tests and plain-text export)."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup)).replace("↵", "")
