"""Notebook 01's checkers: expected values from the reader's own sweep; the residual checked by engine tests."""

import pytest

from specviz.exercises import nb01_sampling, predictions
from specviz.theory import expected_tokens_per_round

SWEEP = {"a": 0.5, "cost_ratio": 0.9, "ar_tokens_per_s": 40.0,
         "points": [{"gamma": 1, "speedup": 0.7, "tau": 1.5}, {"gamma": 2, "speedup": 0.6, "tau": 1.8},
                    {"gamma": 4, "speedup": 0.4, "tau": 1.9}]}


def test_tau_at_gamma_uses_the_sweeps_a_beyond_the_sweep(capsys):
    assert nb01_sampling.tau_at_gamma(None, SWEEP) is None
    assert nb01_sampling.tau_at_gamma(expected_tokens_per_round(0.5, 8), SWEEP) is True
    assert nb01_sampling.tau_at_gamma(expected_tokens_per_round(0.5, 4), SWEEP) is False  # the table's γ = 4
    assert nb01_sampling.tau_at_gamma(1.9 * 1.2, SWEEP) is False
    assert "(1 −" not in capsys.readouterr().out  # the hint never writes the formula
    with pytest.raises(ValueError, match="outside the sweep"):
        nb01_sampling.tau_at_gamma(1.9, SWEEP, gamma=4)  # section 5's table prints the model's τ there
    with pytest.raises(ValueError, match="'a'"):
        nb01_sampling.tau_at_gamma(1.0, {"alpha": 0.5, "points": []})


def test_the_best_gamma_prediction_is_revealed_against_the_measured_sweep():
    predictions.forget()
    nb01_sampling.predict_best_gamma(1, [1, 2, 4])
    assert nb01_sampling.reveal_best_gamma(SWEEP) is True
    nb01_sampling.predict_best_gamma(4, [1, 2, 4])
    assert nb01_sampling.reveal_best_gamma(SWEEP) is False
    with pytest.raises(ValueError, match="sweep"):
        nb01_sampling.reveal_best_gamma({"points": []})


def test_the_residual_exercise_names_the_engines_residual_and_a_statistical_test():
    """A broken residual is run against the engine's tests in tests/test_exercises.py already (the subprocess
    takes longer than this file's budget), so here only what the exercise runs."""
    from specviz.exercises.engine_change import ENGINE_EXERCISES
    exercise = ENGINE_EXERCISES["nb01.residual"]
    assert exercise.target == "engines.core.acceptance:residual_distribution"
    assert any("test_verification_rules" in node for node in exercise.tests)
    assert nb01_sampling.check_residual(None) is None
