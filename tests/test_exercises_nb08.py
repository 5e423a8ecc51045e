"""Notebook 08's checkers (specviz/exercises/nb08_moa.py); no model is loaded."""

import pytest

from specviz.exercises import engine_change, nb08_moa

RUNS = {"moa": {"new_tokens": 49, "tau": 1.5}, "tiny": {"new_tokens": 49, "tau": 2.0}}


def test_server_calls_are_counted_with_the_prefill(capsys):
    assert nb08_moa.server_calls(None, RUNS) == {"moa": None, "tiny": None}
    assert nb08_moa.server_calls({"moa": 33, "tiny": 25}, RUNS) == {"moa": True, "tiny": True}
    assert nb08_moa.server_calls({"moa": 49, "tiny": 25}, RUNS) == {"moa": False, "tiny": True}
    with pytest.raises(ValueError, match="runs"):
        nb08_moa.server_calls(None, {})


def test_link_seconds_pay_one_round_trip_per_cycle():
    assert nb08_moa.link_seconds({"moa": 32 * 0.05, "tiny": 24 * 0.05}, RUNS, 0.05) == {"moa": True, "tiny": True}
    assert nb08_moa.link_seconds({"moa": 33 * 0.05, "tiny": None}, RUNS, 0.05)["moa"] is False
    with pytest.raises(ValueError, match="rtt"):
        nb08_moa.link_seconds(None, RUNS, 0)


def test_a_longer_answer_is_predicted_from_each_runs_tau():
    """97 new tokens at τ = 1.5 and 2.0: 1 + 96/τ calls, one round trip for each but the prefill."""
    assert nb08_moa.server_calls({"moa": 65, "tiny": 49}, RUNS, new_tokens=97) == {"moa": True, "tiny": True}
    assert nb08_moa.server_calls({"moa": 33, "tiny": 25}, RUNS, new_tokens=97) == {"moa": False, "tiny": False}
    assert nb08_moa.link_seconds({"moa": 64 * 0.05, "tiny": 48 * 0.05}, RUNS, 0.05, new_tokens=97) == \
        {"moa": True, "tiny": True}
    assert nb08_moa.link_seconds({"moa": 32 * 0.05, "tiny": None}, RUNS, 0.05, new_tokens=97)["moa"] is False
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="new_tokens"):
            nb08_moa.server_calls(None, RUNS, new_tokens=bad)


def test_the_engine_exercise_is_registered():
    assert engine_change.ENGINE_EXERCISES["nb08.quantize_rows"] is nb08_moa.QUANTIZE_ROWS
