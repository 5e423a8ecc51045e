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
