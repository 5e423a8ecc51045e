import pytest

from specviz.exercises import check_choice, check_number, check_passes


def test_unanswered_exercises_print_what_to_do_and_do_not_fail(capsys):
    assert check_number(None, 1.0, tolerance=0.1) is None
    assert check_choice(None, "pld") is None
    assert "replace None" in capsys.readouterr().out


def test_check_number_absolute_and_relative(capsys):
    assert check_number(1.04, 1.0, tolerance=0.05, explanation="why") is True
    assert "✓" in capsys.readouterr().out
    assert check_number(1.2, 1.0, tolerance=0.05, hint="look again") is False
    out = capsys.readouterr().out
    assert "✗" in out and "look again" in out and "1.0" not in out.split("Not quite")[1].replace("1.2", "")
    assert check_number(105, 100, tolerance=0.1, relative=True) is True
    assert check_number(120, 100, tolerance=0.1, relative=True) is False
    assert check_number("abc", 1.0, tolerance=0.1) is False
    assert check_number(float("nan"), 1.0, tolerance=0.1) is False


def test_check_number_rejects_negative_tolerance():
    with pytest.raises(ValueError, match="tolerance"):
        check_number(1.0, 1.0, tolerance=-1)


def test_check_choice():
    assert check_choice("pld", "pld") is True
    assert check_choice(3, 5) is False


def test_check_passes_reports_failures_and_todo(capsys):
    def good():
        assert 1 + 1 == 2

    def bad():
        assert False, "residual sums to 0.7"

    def todo():
        raise NotImplementedError

    assert check_passes(good) is True
    assert check_passes(bad) is False
    assert "residual sums to 0.7" in capsys.readouterr().out
    assert check_passes(todo) is False


# --- predictions, diagnosis, engine changes ------------------------------------------------------------------

def test_a_prediction_is_recorded_before_and_compared_after(capsys):
    from specviz.exercises import predictions
    predictions.forget()
    assert predictions.reveal("gamma", 4) is None
    predictions.predict("gamma", None)
    assert "replace None" in capsys.readouterr().out
    predictions.predict("gamma", 3)
    assert predictions.reveal("gamma", 4) is False
    assert predictions.reveal("gamma", 4, holds=lambda said, got: abs(said - got) <= 1) is True
    with pytest.raises(ValueError, match="one of"):
        predictions.predict("method", "xyz", choices=("ar", "pld"))


def _board(**terms):
    from specviz.experiments.scoreboard import Scoreboard
    values = dict(method="sps", label="sps", new_tokens=32, tokens_per_s=10.0, ar_tokens_per_s=12.0, speedup=10 / 12,
                  tau=1.5, alpha=0.2, drafted_per_round=4.0, max_depth=4, lanes=1, equal_to_ar=True,
                  round_cost=1.8, verify=1.1, draft=0.6, other=0.1)
    return Scoreboard(**{**values, **terms})


def test_the_diagnosis_names_the_term_whose_ideal_gains_most(capsys):
    from specviz.exercises import diagnose_speedup
    board = _board()  # acceptance: 5/1.8 = 2.8× beats drafting 1.5/1.2, verification 1.5/1.7, overhead 1.5/1.7
    assert board.costliest_term() == "acceptance"
    assert diagnose_speedup(None, board) is None
    assert diagnose_speedup("drafting", board) is False
    assert "acceptance" not in capsys.readouterr().out.split("Not quite")[1]
    assert diagnose_speedup("acceptance", board) is True
    assert diagnose_speedup("luck", board) is False
    costly_draft = _board(tau=1.9, drafted_per_round=1.0, max_depth=1, round_cost=3.0, verify=1.0, draft=1.9,
                          other=0.1)
    assert costly_draft.costliest_term() == "drafting"


def test_the_diagnosis_shows_a_runs_terms_without_naming_the_answer():
    from specviz.exercises import round_terms_markdown
    from specviz.experiments.scoreboard import TERMS
    board = _board()
    shown = round_terms_markdown(board)
    assert "R = 1.80" in shown and "V = 1.10" in shown and "D = 0.60" in shown and "O = 0.10" in shown
    assert "τ = 5.00" in shown and "τ = 1.50" in shown  # every draft accepted: 1 + 4 drafts
    assert not any(term in shown for term in TERMS), "the terms' names and their counterfactuals are the answer"
    assert f"{board.counterfactuals()['acceptance']:.2f}" not in shown
    with pytest.raises(ValueError, match="no round terms"):
        round_terms_markdown(_board(terms_measured=False))


def test_the_scoreboard_shows_a_recorded_row_apart_under_its_own_rule():
    from specviz.experiments.scoreboard import Recorded
    from specviz.views.scoreboard import scoreboard_markdown
    recorded = Recorded(run="bf16/x", label="sps", speedup=0.93, tau=1.75, machine="Some CPU",
                        setup="6 prompts × 128 tokens, bfloat16, 2 threads")
    shown = scoreboard_markdown(_board(recorded=recorded))
    table = [line for line in shown.splitlines() if line.startswith("|")]
    assert len(table) == 4 and not any("0.93" in line or "recorded" in line for line in table)
    apart = shown.splitlines()[-1]
    assert "0.93×" in apart and "Some CPU" in apart and "2 threads" in apart and "not comparable" in apart


def test_an_engine_change_is_checked_by_the_engines_own_tests(capsys):
    """A broken residual fails tests/test_units.py::test_residual_distribution; the engine's own passes."""
    from specviz.exercises import engine_change
    engine_change.register("test.residual", engine_change.EngineExercise(
        target="engines.core.acceptance:residual_distribution", tests=("tests/test_units.py::test_residual_distribution",)))
    try:
        assert engine_change.check_engine_change("test.residual", None) is None

        def residual_distribution(p, q, token=None):  # forgets to take q away
            return p

        assert engine_change.check_engine_change("test.residual", residual_distribution) is False
        from engines.core.acceptance import residual_distribution as engines_own
        assert engine_change.check_engine_change("test.residual", engines_own) is True
    finally:
        engine_change.ENGINE_EXERCISES.pop("test.residual")
    with pytest.raises(ValueError, match="name must be one of"):
        engine_change.check_engine_change("no.such", None)


def test_every_registered_engine_exercise_names_a_real_function_and_real_tests():
    from specviz.exercises import engine_change
    for name, exercise in engine_change.load_all().items():
        assert callable(engine_change.resolve(exercise.target)), name
        for node in exercise.tests:
            path, _, test = node.partition("::")
            source = (engine_change.ROOT / path).read_text()
            assert f"def {test.split('[')[0]}(" in source, f"{name}: {node} does not exist"


def test_the_diagnosis_can_ask_about_the_rounds_costs_only():
    from specviz.exercises import diagnose_speedup
    from specviz.experiments.scoreboard import COST_TERMS
    board = _board()
    assert board.costliest_term(COST_TERMS) == "drafting"  # 1.5/1.2 beats verification 1.5/1.7, overhead 1.5/1.7
    assert diagnose_speedup("drafting", board, among=COST_TERMS) is True
    assert diagnose_speedup("acceptance", board, among=COST_TERMS) is False
    with pytest.raises(ValueError, match="among"):
        board.costliest_term(("luck",))
