"""The scoreboard drawn as markdown: stored as text in the notebooks, so GitHub shows it without a kernel."""

from __future__ import annotations

from ..experiments.scoreboard import THREAD_RULE, Recorded, Scoreboard


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
    rows += ["", f"{board.new_tokens} new tokens on one prompt. **Why:** {board.why()}", "", f"*{THREAD_RULE}*"]
    if board.recorded is not None:
        rows += ["", recorded_line(board.recorded)]
    return "\n".join(rows)


def recorded_line(rec: Recorded) -> str:
    """A stored bench run's figure for the same method, under that run's own rule and named machine: it sits
    below the table and never in it, since its threads, dtype and prompts are not the table's."""
    return (f"*Recorded elsewhere, under its own rule* (`data/bench/{rec.run}`: {rec.setup}, on {rec.machine}): "
            f"`{rec.label}` reached S = {rec.speedup:.2f}× against that run's own `ar`, at τ = {rec.tau:.2f}. "
            f"It is not comparable with the table above, which follows the thread rule.")
