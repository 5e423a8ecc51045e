"""The scoreboard drawn as markdown: stored as text in the notebooks, so GitHub shows it without a kernel."""

from __future__ import annotations

from ..experiments.scoreboard import THREAD_RULE, Scoreboard


def scoreboard_markdown(board: Scoreboard) -> str:
    equal = {True: "yes", False: "**no**", None: "— (sampling)"}[board.equal_to_ar]
    lanes = f"{board.lanes} lanes" if board.lanes > 1 else "1 lane"
    rows = [
        f"### Scoreboard: `{board.label}` against `ar`",
        "",
        "| | tokens/s | S | τ | α | output = ar |",
        "|---|---|---|---|---|---|",
        f"| `ar` (this notebook, 1 lane) | {board.ar_tokens_per_s:.1f} | 1.00× | 1.00 | — | — |",
        f"| `{board.label}` (this notebook, {lanes}) | {board.tokens_per_s:.1f} | **{board.speedup:.2f}×** | "
        f"{board.tau:.2f} | {board.alpha:.2f} | {equal} |",
    ]
    if board.recorded is not None:
        rec = board.recorded
        rows.append(f"| `{rec.label}` recorded (`data/bench/{rec.run}`: {rec.setup}, {rec.machine}) | — | "
                    f"{rec.speedup:.2f}× | {rec.tau:.2f} | — | — |")
    rows += ["", f"{board.new_tokens} new tokens on one prompt. **Why:** {board.why()}", "", f"*{THREAD_RULE}*"]
    return "\n".join(rows)
