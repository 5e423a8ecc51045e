"""Notebook 00's exercises: a speedup predicted from a round's arithmetic, the best γ for prompt lookup
(a prediction), and prompt lookup's n-gram search as an engine change.

The expected values come from the tables the reader's own run produced, so the answer differs a little from
machine to machine and never sits in the notebook's cell.
"""

from __future__ import annotations

from .checks import check_number
from .engine_change import EngineExercise, check_engine_change, register
from .predictions import predict, reveal

SELF_DRAFT_ROW = "sps, 26-layer self-draft, γ=3"
PLD_GAMMAS = (1, 2, 4, 8, 16)

LOOKUP = register("nb00.lookup", EngineExercise(
    target="engines.drafters.prompt_lookup:lookup",
    tests=("tests/test_units.py::test_prompt_lookup_prefers_longest_latest_match",),
    explanation="Your search is the one `pld` drafts with: the longest suffix first, its latest earlier match.",
    hint="Try the longest n-gram first, and among its earlier occurrences the most recent one; a match whose "
         "continuation is empty proposes nothing."))


def _column(table, row: str, column: str) -> float:
    if row not in table.index or column not in table.columns:
        raise ValueError(f"table must have row {row!r} and column {column!r} (section 4's summary_table)")
    return float(table.loc[row, column])


def self_draft_speedup(answer: float | None, summary_table, gamma: int = 5) -> bool | None:
    """Exercise 1: the 26-layer self-draft's S at a longer draft (γ = 5, a run the notebook has not made yet) from
    Leviathan's model at its measured per-position acceptance a and draft cost c: τ(a, γ) ÷ (γc + 1)."""
    from ..theory import expected_speedup, expected_tokens_per_round

    a, cost = _column(summary_table, SELF_DRAFT_ROW, "a (per-position)"), _column(summary_table, SELF_DRAFT_ROW, "c")
    expected = expected_speedup(a, gamma, cost)
    return check_number(answer, expected, tolerance=0.03, relative=True,
                        explanation=f"At a = {a:.2f} a round of γ = {gamma} drafts commits τ = "
                                    f"{expected_tokens_per_round(a, gamma):.2f} tokens on average, and costs {gamma} draft "
                                    f"steps at c = {cost:.2f} plus one verification step. The next cell measures it.",
                        hint="Section 2 gives τ from a and γ, and what one round costs in ar steps (every draft "
                             "step costs c of one); S is tokens per ar step.")


def predict_pld_gamma(answer: int | None) -> None:
    """Exercise 2, before the sweep runs: which γ makes `pld` fastest on the summary?"""
    predict("nb00.pld_gamma", answer, choices=PLD_GAMMAS)


def reveal_pld_gamma(pld_sweep, margin: float = 0.05) -> bool | None:
    """Exercise 2, after the sweep: a γ whose measured S is within ``margin`` of the best measured S holds."""
    if "measured S" not in pld_sweep.columns or pld_sweep.empty:
        raise ValueError("pld_sweep must be the sweep table with a 'measured S' column and one row per γ")
    measured = pld_sweep["measured S"]
    best = int(measured.idxmax())
    near = [int(g) for g in measured.index if measured[g] >= (1 - margin) * measured[best]]
    return reveal("nb00.pld_gamma", best, holds=lambda said, _best: said in near,
                  explanation=f"Within {margin:.0%} of the best measured S ({measured[best]:.2f}× at γ = {best}): "
                              f"γ ∈ {near}. Compare τ with the drafted tokens per round in the table.")


def check_lookup(answer) -> bool | None:
    """Exercise 3: the reader's ``lookup(ids, max_ngram, min_ngram, gamma)`` in place of the engine's."""
    return check_engine_change("nb00.lookup", answer)
