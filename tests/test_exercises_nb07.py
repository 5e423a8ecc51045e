"""Notebook 07's checkers (specviz/exercises/nb07_ssd.py); no model is loaded."""

import pytest

from specviz.exercises import engine_change, nb07_ssd


def test_round_time_follows_the_law():
    # max(30, 40) + 1 + (1 − 0.5)·12 = 47 ms
    assert nb07_ssd.round_time_ms(None, 0.030, 0.001, 0.5, 0.012, 0.040) is None
    assert nb07_ssd.round_time_ms(47.0, 0.030, 0.001, 0.5, 0.012, 0.040) is True
    assert nb07_ssd.round_time_ms(37.0, 0.030, 0.001, 0.5, 0.012, 0.040) is False
    with pytest.raises(ValueError, match="hit_rate"):
        nb07_ssd.round_time_ms(1.0, 0.03, 0.0, 1.5, 0.01, 0.0)


def test_hit_rate_for_a_speedup(capsys):
    assert nb07_ssd.hit_rate_for(7 / 12, 1.2, 0.012, 0.030, 0.012) is True
    capsys.readouterr()
    assert nb07_ssd.hit_rate_for(0.5, 1.2, 0.012, 0.030, 0.012) is False
    assert "0.583" not in capsys.readouterr().out
    with pytest.raises(ValueError, match="speedup"):
        nb07_ssd.hit_rate_for(0.5, 2.0, 0.012, 0.030, 0.012)  # beyond the bound 1.4×



def test_the_engine_exercise_is_registered():
    assert engine_change.ENGINE_EXERCISES["nb07.geometric_fanout"] is nb07_ssd.GEOMETRIC_FANOUT
