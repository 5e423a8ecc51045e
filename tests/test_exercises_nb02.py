"""Notebook 02's checkers compute the expected value from the reader's own rows and the shipped agreement."""

import pytest

from specviz.exercises import nb02_drafters, predictions
from specviz.theory import expected_tree_tokens, rank_probabilities

ROWS = [{"drafter": "tiny", "τ": 1.7, "draft cost c": 0.4, "speedup": 0.45},
        {"drafter": "eagle", "τ": 1.4, "draft cost c": 0.19, "speedup": 0.56},
        {"drafter": "ss", "τ": 1.54, "draft cost c": 0.2, "speedup": 0.57}]


def test_fastest_drafter_follows_the_rows_arithmetic_with_near_ties():
    assert nb02_drafters.fastest_drafter(None, ROWS) is None
    predicted = nb02_drafters.predicted_speedups(ROWS)
    best = max(predicted, key=predicted.get)
    assert best == "ss"
    assert nb02_drafters.fastest_drafter("ss", ROWS) is True
    assert nb02_drafters.fastest_drafter("eagle", ROWS) is False  # 0.70 against 0.77: no near tie
    assert nb02_drafters.fastest_drafter("tiny", ROWS) is False
    with pytest.raises(ValueError, match="draft cost c"):
        nb02_drafters.fastest_drafter("tiny", [{"drafter": "tiny", "τ": 1.0, "draft cost c": None}])


def test_highest_tau_prediction():
    predictions.forget()
    nb02_drafters.predict_highest_tau("tiny", ["tiny", "eagle", "ss"])
    assert nb02_drafters.reveal_highest_tau(ROWS) is True
    nb02_drafters.predict_highest_tau("ss", ["tiny", "eagle", "ss"])
    assert nb02_drafters.reveal_highest_tau(ROWS) is False


def test_full_tree_tau_uses_the_top_k_agreement():
    coverage = {"eagle": {1: 0.4, 2: 0.54, 4: 0.65, 8: 0.74}}
    expected = expected_tree_tokens(rank_probabilities(coverage["eagle"], 2), depth=3)
    assert nb02_drafters.full_tree_tau(None, coverage) is None
    assert nb02_drafters.full_tree_tau(expected, coverage) is True
    assert nb02_drafters.full_tree_tau(1 + 0.4 + 0.4 ** 2 + 0.4 ** 3, coverage) is False  # the chain's τ
    with pytest.raises(ValueError, match="drafter"):
        nb02_drafters.full_tree_tau(1.0, coverage, drafter="tiny")


def test_the_position_counts_exercise_is_registered():
    from specviz.exercises.engine_change import ENGINE_EXERCISES
    assert ENGINE_EXERCISES["nb02.position_counts"].target == "engines.core.stats:position_counts"
    assert nb02_drafters.check_position_counts(None) is None
