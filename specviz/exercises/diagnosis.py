""""Which term cost the speedup?": a diagnosis checked against the terms the scoreboard measured.

The notebook never computes the answer in the cell: the scoreboard carries the measured round
(specviz.experiments.scoreboard) and this check asks it which term, set to its ideal, would have gained the
most. A wrong answer gets the gain of the term the reader named, which is a clue and not the answer.

A scoreboard's **Why** line names its costliest term, so a notebook asks the question about a second run the
reader makes with a changed setting, and shows that run's terms with :func:`round_terms_markdown`: the
measured parts of the round, never the counterfactuals or the term they name.
"""

from __future__ import annotations

from ..experiments.scoreboard import TERMS, Scoreboard
from .checks import UNANSWERED


def check_costliest(answer: str | None, gains: dict[str, float], measured: float, *, explanation: str = "",
                    hint: str = "") -> bool | None:
    """Is ``answer`` the term whose ideal gains most? ``gains``: term → the speedup with that term at its
    ideal (the others as measured); ``measured``: the run's speedup."""
    terms = tuple(gains)
    if answer is None:
        print(f"{UNANSWERED} Choose one of: {', '.join(terms)}.")
        return None
    if answer not in gains:
        print(f"✗ {answer!r} is not one of the terms: {', '.join(terms)}.")
        return False
    worst = max(terms, key=gains.__getitem__)
    if answer == worst:
        print(f"✓ Correct: with {answer} at its ideal this run would reach {gains[answer]:.2f}× "
              f"(measured {measured:.2f}×). {explanation}".rstrip())
        return True
    print(f"✗ Not quite: with {answer} at its ideal the run would reach only {gains[answer]:.2f}× "
          f"(measured {measured:.2f}×). Another term costs more: {hint}".rstrip())
    return False


def round_terms_markdown(board: Scoreboard) -> str:
    """A run's round in `ar` steps for the diagnosis exercise: τ and the longest τ its drafts allowed, R and its
    parts V, D and O, and S, without the counterfactual speedups or the term they name (the reader's answer)."""
    if not board.terms_measured:
        raise ValueError(f"board: {board.label}'s run recorded no round terms (its target lane has no spans)")
    return (f"`{board.label}`, {board.new_tokens} new tokens: S = {board.speedup:.2f}× at τ = {board.tau:.2f} tokens per "
            f"round, where every draft accepted would give τ = {board.ideal_tau:.2f}; a round costs R = "
            f"{board.round_cost:.2f} `ar` steps: V = {board.verify:.2f} in the target's checking forwards, D = "
            f"{board.draft:.2f} waiting for drafts, O = {board.other:.2f} the rest.")


def diagnose_speedup(answer: str | None, board: Scoreboard, among: tuple[str, ...] = TERMS) -> bool | None:
    """``answer``: one of ``among`` (by default every term: acceptance, drafting, verification, overhead;
    ``COST_TERMS`` leaves acceptance out and asks what the round spent)."""
    if board.costliest_term(among) is None:
        raise ValueError(f"board: {board.label}'s run recorded no round terms to diagnose; use a method whose "
                         "target lane records spans, or a method-specific diagnosis")
    gains = board.counterfactuals()
    return check_costliest(answer, {term: gains[term] for term in among}, board.speedup, explanation=board.why(),
                           hint="compare the round's terms in `ar` steps.")
