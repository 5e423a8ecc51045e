"""Notebook 09's checkers on hand-built terms (no model)."""

from test_regime import HERE, _terms, chain

from specviz.exercises import predictions
from specviz.exercises.nb09_regime import LEVERS, check_lever, lever, phone_winner, reveal_phone_winner
from specviz.regime.hardware import GPU, PHONE


def test_phone_winner_is_the_best_projection_there():
    terms = _terms(chain(tau=1.2, label="weak"), chain(tau=3.0, label="strong"))
    assert phone_winner(terms, [HERE, PHONE], PHONE.name)[0] == "strong"
    predictions.forget()
    predictions.predict("phone winner", "weak")
    assert reveal_phone_winner(terms, [HERE, PHONE], PHONE.name) is False
    predictions.forget()


def test_lever_is_one_of_the_levers_and_the_check_follows_it(capsys):
    terms = _terms(chain(tau=2.5, c=0.1, rows=5, draft=0.3, label="eagle"))
    right = lever(terms, GPU, "eagle")
    assert right in LEVERS
    assert check_lever(None, terms, GPU, "eagle") is None
    assert check_lever(right, terms, GPU, "eagle") is True
    wrong = next(x for x in LEVERS if x != right)
    assert check_lever(wrong, terms, GPU, "eagle") is False
    assert check_lever("magic", terms, GPU, "eagle") is False
