"""Notebook 02's exercises: which drafter a round's arithmetic predicts to be fastest, what a full binary tree
would commit, the drafter with the highest τ (a prediction), and the acceptance-by-position counts as an
engine change.
"""

from __future__ import annotations

from ..theory import expected_tree_tokens, rank_probabilities
from .checks import check_choice, check_number
from .engine_change import EngineExercise, check_engine_change, register
from .predictions import predict, reveal

POSITION_COUNTS = register("nb02.position_counts", EngineExercise(
    target="engines.core.stats:position_counts",
    tests=("tests/test_trace.py::test_stats_definitions",
           "tests/test_cli.py::test_bench_pools_acceptance_by_position_over_runs"),
    explanation="Section 3's bars, the benchmark's pooled profile and the per-position acceptance a all come "
                "from these two counts.",
    hint="A round's target judges its drafts left to right and stops at the first refusal: which positions did "
         "it judge, which did it accept, and can a round judge past its own depth?"))


def predicted_speedups(rows, gamma: int = 5) -> dict[str, float]:
    """τ ÷ (1 + γ·c) per drafter row of :func:`specviz.experiments.drafter_compare.compare_drafters`."""
    missing = [r.get("drafter") for r in rows if r.get("draft cost c") is None]
    if missing:
        raise ValueError(f"rows must carry a draft cost c for every drafter; none for {missing}")
    return {row["drafter"]: row["τ"] / (1 + gamma * row["draft cost c"]) for row in rows}


def fastest_drafter(answer: str | None, rows, gamma: int = 5, margin: float = 0.02) -> bool | None:
    """Exercise 1: the drafter τ ÷ (1 + γc) puts first; a drafter within ``margin`` of it counts too."""
    predicted = predicted_speedups(rows, gamma)
    best = max(predicted, key=predicted.get)
    near = [name for name, value in predicted.items() if value >= (1 - margin) * predicted[best]]
    expected = answer if answer in near else best
    measured = {row["drafter"]: row["speedup"] for row in rows}
    return check_choice(answer, expected,
                        explanation=f"Predicted S: {', '.join(f'{n} {v:.2f}×' for n, v in predicted.items())}; "
                                    f"measured: {', '.join(f'{n} {v:.2f}×' for n, v in measured.items())}.",
                        hint="A round buys τ tokens and pays γ draft steps of c each plus one verification: "
                             "look at the c column as well as τ.")


def predict_highest_tau(answer: str | None, drafters) -> None:
    """Exercise 2, before section 2 runs: which drafter will commit the most tokens per round here?"""
    predict("nb02.highest_tau", answer, choices=tuple(drafters))


def reveal_highest_tau(rows) -> bool | None:
    """Exercise 2, after the run."""
    if not rows:
        raise ValueError("rows must list at least one drafter")
    best = max(rows, key=lambda r: r["τ"])
    others = ", ".join(f"{r['drafter']} {r['τ']:.2f}" for r in rows if r is not best)
    return reveal("nb02.highest_tau", best["drafter"],
                  explanation=f"τ = {best['τ']:.2f} for {best['drafter']}; {others}.")


def full_tree_tau(answer: float | None, coverage: dict, drafter: str = "eagle", topk: int = 2,
                  depth: int = 3) -> bool | None:
    """Exercise 4: τ of a full tree of ``topk`` guesses a node, ``depth`` deep, at ``drafter``'s top-k agreement."""
    if drafter not in coverage:
        raise ValueError(f"drafter must be one of {sorted(coverage)}; got {drafter!r}")
    expected = expected_tree_tokens(rank_probabilities(coverage[drafter], topk), depth=depth)
    chain = expected_tree_tokens(rank_probabilities(coverage[drafter], 1), depth=depth)
    return check_number(answer, expected, tolerance=0.01,
                        explanation=f"The full tree commits {expected:.3f} tokens a round against the chain's "
                                    f"{chain:.3f} at top-1 = {coverage[drafter][1]:.3f}.",
                        hint=f"The tree is a chain whose every position is passed when the target's token is among "
                             f"the {topk} guesses there: which agreement plays the role of a?")


def check_position_counts(answer) -> bool | None:
    """Exercise 5: the reader's ``position_counts(rounds)`` in place of the engine's."""
    return check_engine_change("nb02.position_counts", answer)
