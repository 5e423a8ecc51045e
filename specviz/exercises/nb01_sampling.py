"""Notebook 01's exercises: the residual as an engine change, the best γ of the self-draft (a prediction), and
τ at one γ from the sweep's measured per-position acceptance a.
"""

from __future__ import annotations

from ..theory import expected_tokens_per_round
from .checks import check_number
from .engine_change import EngineExercise, check_engine_change, register
from .predictions import predict, reveal

RESIDUAL = register("nb01.residual", EngineExercise(
    target="engines.core.acceptance:residual_distribution",
    tests=("tests/test_units.py::test_residual_distribution",
           "tests/test_verification_rules.py::test_rule_keeps_the_target_distribution[chain (residual)]"),
    explanation="Every sampled chain, tree and token-by-token round corrects a refusal with your function, and "
                "the chain's output still follows the target's distribution (a χ² test over whole sequences).",
    hint="Look at which tokens the draft under-proposed (p above q) and how much probability each is missing; "
         "then make it a distribution. What should a draft identical to p leave?"))


def check_residual(answer) -> bool | None:
    """Exercise 1: the reader's ``residual_distribution(p, q, token=None)`` in place of the engine's."""
    return check_engine_change("nb01.residual", answer)


def predict_best_gamma(answer: int | None, gammas) -> None:
    """Exercise 2, before the γ sweep: which γ gives the 26-layer self-draft its highest S?"""
    predict("nb01.best_gamma", answer, choices=tuple(gammas))


def reveal_best_gamma(sweep: dict) -> bool | None:
    """Exercise 2, after the sweep: the γ with the highest measured S."""
    points = sweep.get("points") or []
    if not points:
        raise ValueError("sweep must be gamma_sweep's result, with at least one point")
    best = max(points, key=lambda p: p["speedup"])
    return reveal("nb01.best_gamma", best["gamma"],
                  explanation=f"Measured: S = {best['speedup']:.2f}× at γ = {best['gamma']}, with c = "
                              f"{sweep['cost_ratio']:.2f}. Every extra draft step costs c whether or not it is kept.")


def tau_at_gamma(answer: float | None, sweep: dict, gamma: int = 8) -> bool | None:
    """Exercise 3: τ at ``gamma`` in Leviathan's model at the sweep's measured a. ``gamma`` lies beyond the sweep:
    section 5's table prints the model's τ at every swept γ, so a swept γ would put the answer on the page."""
    if "a" not in sweep:
        raise ValueError("sweep must be gamma_sweep's result (it carries the measured per-position acceptance 'a')")
    swept = sorted(p["gamma"] for p in sweep["points"])
    if gamma in swept:
        raise ValueError(f"gamma must lie outside the sweep {swept}: its table already prints τ at {gamma}")
    a = sweep["a"]
    expected = expected_tokens_per_round(a, gamma)
    return check_number(answer, expected, tolerance=0.01, relative=True,
                        explanation=f"At a = {a:.2f}, each position i ≤ {gamma} is reached and kept with probability "
                                    f"a^i, and the target adds its own token.",
                        hint="A round always commits the target's own token; the i-th draft adds a token only if "
                             "it and every draft before it were accepted. Add up those chances.")
