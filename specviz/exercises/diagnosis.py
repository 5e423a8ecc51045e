""""Which term cost the speedup?": a diagnosis checked against the terms the scoreboard measured.

The notebook never computes the answer in the cell: the scoreboard carries the measured round
(specviz.experiments.scoreboard) and this check asks it which term, set to its ideal, would have gained the
most. A wrong answer gets the gain of the term the reader named, which is a clue and not the answer.
"""

from __future__ import annotations

from ..experiments.scoreboard import TERMS, Scoreboard
from .checks import UNANSWERED


def diagnose_speedup(answer: str | None, board: Scoreboard, among: tuple[str, ...] = TERMS) -> bool | None:
    """``answer``: one of ``among`` (by default every term: acceptance, drafting, verification, overhead;
    ``COST_TERMS`` leaves acceptance out and asks what the round spent)."""
    if answer is None:
        print(f"{UNANSWERED} Choose one of: {', '.join(among)}.")
        return None
    if answer not in among:
        print(f"✗ {answer!r} is not one of the terms: {', '.join(among)}.")
        return False
    gains = board.counterfactuals()
    worst = board.costliest_term(among)
    if worst is None:
        raise ValueError(f"board: {board.label}'s run recorded no round terms to diagnose; use a method whose "
                         "target lane records spans, or a method-specific diagnosis")
    if answer == worst:
        print(f"✓ Correct: with {answer} at its ideal this run would reach {gains[answer]:.2f}× "
              f"(measured {board.speedup:.2f}×). {board.why()}")
        return True
    print(f"✗ Not quite: with {answer} at its ideal the run would reach only {gains[answer]:.2f}× "
          f"(measured {board.speedup:.2f}×). Another term costs more: compare the round's terms in `ar` steps.")
    return False
