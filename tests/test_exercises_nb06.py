"""Notebook 06's checkers (specviz/exercises/nb06_mirror.py): expected values from the given costs, hints
without the answer; no model is loaded."""

import pytest

from specviz.exercises import engine_change, nb06_mirror
from specviz.theory import mirror_speedup_vs_sd


def test_step_time_takes_the_longer_branch(capsys):
    assert nb06_mirror.step_time_ms(None, 0.020, 0.030, 0.050, 0.001) is None
    assert nb06_mirror.step_time_ms(71.0, 0.020, 0.030, 0.050, 0.001) is True  # 20 + 1 + max(30, 50)
    assert nb06_mirror.step_time_ms(101.0, 0.020, 0.030, 0.050, 0.001) is False  # the sum: no overlap
    assert "71" not in capsys.readouterr().out.split("Not quite")[-1]
    with pytest.raises(ValueError, match="t_gen"):
        nb06_mirror.step_time_ms(1.0, 0.02, 0.03, -1.0, 0.001)


def test_best_speedup_is_reached_where_the_draft_just_fits():
    best_s = mirror_speedup_vs_sd(0.020, 0.030, 0.030, 0.001)
    ok, where = nb06_mirror.best_speedup_over_sd(best_s, 0.020, 0.030, 0.001)
    assert ok is True and where == pytest.approx(0.030)
    assert nb06_mirror.best_speedup_over_sd(1.0, 0.020, 0.030, 0.001)[0] is False


def test_the_engine_exercise_is_registered():
    assert engine_change.ENGINE_EXERCISES["nb06.mirror_roots"] is nb06_mirror.MIRROR_ROOTS
