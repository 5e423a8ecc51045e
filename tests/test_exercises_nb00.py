"""Notebook 00's checkers compute the expected value from the reader's own tables (no model loaded here)."""

import pandas as pd
import pytest

from specviz.exercises import nb00_intro, predictions


def _summary_table():
    return pd.DataFrame({"τ": [1.0, 3.0, 1.66], "a (per-position)": [None, 0.7, 0.42], "c": [None, 0.0, 0.9],
                         "speedup": [1.0, 1.7, 0.45]}, index=["ar", "pld, γ=10", nb00_intro.SELF_DRAFT_ROW])


def test_self_draft_speedup_is_leviathans_model_at_the_tables_a_and_c_for_a_longer_draft(capsys):
    table = _summary_table()
    assert nb00_intro.self_draft_speedup(None, table) is None
    expected = (1 - 0.42 ** 6) / (1 - 0.42) / (5 * 0.9 + 1)  # γ = 5: the run the notebook makes after the question
    assert nb00_intro.self_draft_speedup(expected, table) is True
    assert nb00_intro.self_draft_speedup(1.66 / (3 * 0.9 + 1), table) is False  # γ = 3's round, already measured
    assert nb00_intro.self_draft_speedup(0.45, table) is False  # the measured S at γ = 3
    assert "1 − a" not in capsys.readouterr().out  # the hint points at section 2, it does not give the formula
    with pytest.raises(ValueError, match="summary_table"):
        nb00_intro.self_draft_speedup(1.0, table.drop(index=nb00_intro.SELF_DRAFT_ROW))


def test_the_pld_gamma_prediction_holds_within_five_percent_of_the_best_measured():
    predictions.forget()
    sweep = pd.DataFrame({"measured S": [1.2, 1.5, 1.7, 1.68, 1.4]}, index=pd.Index([1, 2, 4, 8, 16], name="γ"))
    assert nb00_intro.reveal_pld_gamma(sweep) is None  # no prediction made
    nb00_intro.predict_pld_gamma(8)
    assert nb00_intro.reveal_pld_gamma(sweep) is True
    nb00_intro.predict_pld_gamma(1)
    assert nb00_intro.reveal_pld_gamma(sweep) is False
    with pytest.raises(ValueError, match="one of"):
        nb00_intro.predict_pld_gamma(3)
    with pytest.raises(ValueError, match="measured S"):
        nb00_intro.reveal_pld_gamma(pd.DataFrame({"S": [1.0]}))


def test_the_lookup_exercise_is_registered_and_unanswered_runs_nothing():
    from specviz.exercises.engine_change import ENGINE_EXERCISES
    assert ENGINE_EXERCISES["nb00.lookup"].target == "engines.drafters.prompt_lookup:lookup"
    assert nb00_intro.check_lookup(None) is None
