"""Notebook 04's checkers (specviz/exercises/nb04_cats.py): fast, no model."""

from types import SimpleNamespace

from specviz.exercises import nb04_cats as ex

AR = SimpleNamespace(tau=1.0, gamma=0, draft_step=0.0, sv_per_cycle=0.0, reforward_per_cycle=0.0,
                     deep_compute_per_pass=0.030, other_per_cycle=0.040, deep_bytes_per_pass=106e6)
CATS = SimpleNamespace(tau=3.0, gamma=5, draft_step=0.008, sv_per_cycle=0.030, reforward_per_cycle=0.028,
                       deep_compute_per_pass=0.034, other_per_cycle=0.012, deep_bytes_per_pass=106e6)


def test_ar_ms_per_token_takes_the_slower_of_read_and_compute(capsys):
    assert ex.ar_ms_per_token(None, AR) is None
    assert ex.ar_ms_per_token(40 + 265, AR) is True  # 106 MB at 400 MB/s: 265 ms, more than 30 ms of compute
    assert ex.ar_ms_per_token(40 + 30, AR) is False
    assert "bytes decide" not in capsys.readouterr().out.split("Not quite")[-1]
    assert ex.ar_ms_per_token(40 + 30, AR, bandwidth_mb_s=100_000) is True  # the read takes 1 ms: compute decides


def test_cats_speedup_tends_to_tau_as_the_flash_slows():
    t_ar = 0.040 + 0.265
    t_cycle = 5 * 0.008 + 0.030 + 0.028 + 0.265 + 0.012
    assert ex.cats_speedup_at(3.0 * t_ar / t_cycle, CATS, AR) is True
    assert ex.cats_speedup_at(3.0, CATS, AR) is False
    assert ex.model_speedup(CATS, AR, 1) > ex.model_speedup(CATS, AR, 400) > ex.model_speedup(CATS, AR, 5000)
    assert abs(ex.model_speedup(CATS, AR, 0.001) - CATS.tau) < 0.01


def test_the_engine_exercise_is_registered():
    from specviz.exercises.engine_change import ENGINE_EXERCISES
    assert ENGINE_EXERCISES["nb04.correction_tree"].target == "engines.methods.cats:correction_tree"
