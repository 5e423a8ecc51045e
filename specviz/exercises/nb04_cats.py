"""Notebook 04's exercises (CATS under a memory budget): the time model's answers computed here from the
costs the reader's runs measured."""

from __future__ import annotations

from ..theory import cats_cycle_seconds, cats_speedup, streamed_pass_seconds
from .checks import check_number
from .engine_change import EngineExercise, register

MB = 1e6

CORRECTION_TREE = register("nb04.correction_tree", EngineExercise(
    target="engines.methods.cats:correction_tree",
    tests=("tests/test_cats.py::test_correction_tree_adds_a_sibling_where_the_verifier_disagrees",
           "tests/test_cats.py::test_cats_greedy_equals_ar_on_tiny_model"),
    explanation="Every correction sits under the same parent as the draft it would replace, after the chain, so "
                "the walk tries the draft first and the correction second.",
    hint="Which node is the parent of draft i? A correction at position i must see exactly what draft i sees."))


def ar_seconds_per_token(costs, bandwidth_mb_s: float) -> float:
    """The time model's ``ar`` step at ``bandwidth_mb_s``: the rest of the step plus one streamed pass."""
    return costs.other_per_cycle + streamed_pass_seconds(costs.deep_bytes_per_pass, bandwidth_mb_s * MB,
                                                         costs.deep_compute_per_pass)


def cats_cycle(costs, bandwidth_mb_s: float) -> float:
    """The time model's CATS cycle at ``bandwidth_mb_s``."""
    return cats_cycle_seconds(costs.gamma, costs.draft_step, costs.sv_per_cycle, costs.reforward_per_cycle,
                              costs.deep_bytes_per_pass, bandwidth_mb_s * MB, costs.deep_compute_per_pass) \
        + costs.other_per_cycle


def model_speedup(cats_costs, ar_costs, bandwidth_mb_s: float) -> float:
    """S of CATS over ``ar`` that the time model gives at ``bandwidth_mb_s`` from the measured costs."""
    return cats_speedup(cats_costs.tau, cats_cycle(cats_costs, bandwidth_mb_s), ar_seconds_per_token(ar_costs,
                                                                                                    bandwidth_mb_s))


def ar_ms_per_token(answer: float | None, ar_costs, bandwidth_mb_s: float = 400) -> bool | None:
    """Exercise 1: ``ar``'s milliseconds per token at ``bandwidth_mb_s`` by the time model."""
    expected = 1e3 * ar_seconds_per_token(ar_costs, bandwidth_mb_s)
    read = 1e3 * ar_costs.deep_bytes_per_pass / (bandwidth_mb_s * MB)
    decides = "the bytes decide" if read > 1e3 * ar_costs.deep_compute_per_pass else "the compute decides"
    return check_number(answer, expected, tolerance=0.03, relative=True,
                        explanation=f"The read takes {read:.0f} ms and the compute {1e3 * ar_costs.deep_compute_per_pass:.0f}"
                                    f" ms: at this bandwidth {decides}.",
                        hint="Which is slower at this bandwidth, reading the streamed layers or computing them? "
                             "Mind the units: MB, MB/s, ms.")


def cats_speedup_at(answer: float | None, cats_costs, ar_costs, bandwidth_mb_s: float = 400) -> bool | None:
    """Exercise 2: CATS's S over ``ar`` at ``bandwidth_mb_s`` by the time model."""
    expected = model_speedup(cats_costs, ar_costs, bandwidth_mb_s)
    return check_number(answer, expected, tolerance=0.03, relative=True,
                        explanation=f"A cycle takes {1e3 * cats_cycle(cats_costs, bandwidth_mb_s):.0f} ms for "
                                    f"τ = {cats_costs.tau:.2f} tokens, against "
                                    f"{1e3 * ar_seconds_per_token(ar_costs, bandwidth_mb_s):.0f} ms per token for ar.",
                        hint="Add up one cycle's stages (each draft step counts γ times) in one unit, then compare "
                             "τ tokens' worth of ar steps with it.")
