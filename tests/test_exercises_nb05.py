"""Notebook 05's checkers (specviz/exercises/nb05_ppsd.py): fast, no model. (A broken tick scheduler failing
the engine's tests takes a fresh process, over 10 s here, so it is not run in this suite.)"""

import pytest

from specviz.exercises import nb05_ppsd as ex

LANES = {"position_acceptance": 0.4, "stages": 2, "tick_seconds": 0.025, "message_seconds": 0.0005,
         "tokens_per_s": 25.0, "stage_seconds": {"cpu0": 0.022, "cpu1": 0.024}}
SERIAL = {"stage_seconds": {"cpu0/stage1": 0.016, "cpu0/stage2": 0.017}}


def test_when_ppsd_loses_solves_eq6_for_one():
    assert ex.when_ppsd_loses(None) is None
    assert ex.when_ppsd_loses((4 - 30 / 8) / 3) is True
    assert ex.when_ppsd_loses(0.25) is False
    assert ex.break_even_acceptance(30, 15) == 0.0
    with pytest.raises(ValueError, match="exit_layer"):
        ex.break_even_acceptance(30, 30)


def test_lanes_tokens_per_s_alone_uses_the_slowest_stage_alone_and_the_message():
    tick = 0.017 + 0.0005
    assert ex.lanes_tokens_per_s_alone(1 / (tick * (0.4 + 0.6 * 2)), LANES, SERIAL, ar_tokens_per_s=23.0) is True
    assert ex.lanes_tokens_per_s_alone(1 / (0.025 * (0.4 + 0.6 * 2)), LANES, SERIAL, ar_tokens_per_s=23.0) is False


def test_the_pipeline_diagnosis_names_the_costlier_of_acceptance_and_tick(capsys):
    # ar at 23 tok/s: an ideal tick (15 of 30 layers) is 21.7 ms; all accepted: 1/25 ms = 40 tok/s (1.74×)
    gains = ex.pipeline_counterfactuals(LANES, 23.0, exit_layer=15, n_layers=30)
    assert gains["acceptance"] > gains["tick"]
    assert ex.diagnose_pipeline(None, LANES, 23.0, 15, 30) is None
    assert ex.diagnose_pipeline("tick", LANES, 23.0, 15, 30) is False
    assert ex.diagnose_pipeline("luck", LANES, 23.0, 15, 30) is False
    assert ex.diagnose_pipeline("acceptance", LANES, 23.0, 15, 30) is True
    accepting = {**LANES, "position_acceptance": 0.95, "tick_seconds": 0.060}
    assert ex.diagnose_pipeline("tick", accepting, 23.0, 15, 30) is True

