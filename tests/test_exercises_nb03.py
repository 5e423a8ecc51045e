"""Notebook 03's checkers (specviz/exercises/nb03_trees.py): fast, no model."""


import pytest

from specviz.exercises import nb03_trees as ex
from specviz.theory import expected_tree_tokens, rank_probabilities

COVERAGE = {1: 0.41, 2: 0.54, 4: 0.65, 8: 0.74}


def test_small_tree_tau_is_the_best_four_node_tree(capsys):
    r1, r2 = rank_probabilities(COVERAGE, 2)
    assert ex.small_tree_tau(None, COVERAGE) is None
    assert ex.small_tree_tau(1 + r1 + r2 + r1 * r1 + r2 * r1, COVERAGE) is True
    assert ex.small_tree_tau(1 + r1 + r1 ** 2 + r1 ** 3 + r1 ** 4, COVERAGE) is False  # the chain's
    assert "Not quite" in capsys.readouterr().out


def test_the_chain_with_the_trees_first_depth_multiplies_along_the_depths(capsys):
    chain, tree = [0.4, 0.5, 0.2], [0.6, 0.5]
    expected = 1 + 0.6 + 0.6 * 0.5 + 0.6 * 0.5 * 0.2  # the tree's α₁, then the chain's α₂, α₃
    assert ex.chain_with_tree_first_depth(None, chain, tree, chain_tau=1.6, tree_tau=2.1) is None
    assert ex.chain_with_tree_first_depth(expected, chain, tree, chain_tau=1.6, tree_tau=2.1) is True
    assert "1.600" in capsys.readouterr().out  # the measured τ are shown once answered
    assert ex.chain_with_tree_first_depth(1 + 0.4 + 0.4 * 0.5 + 0.4 * 0.5 * 0.2, chain, tree, 1.6, 2.1) is False  # the chain's own
    assert ex.chain_with_tree_first_depth(1 + 0.6 + 0.3, chain, tree, 1.6, 2.1) is False  # the tree's own profile
    assert "1.600" not in capsys.readouterr().out  # a wrong answer gets a hint, not the measured values
    with pytest.raises(ValueError, match="non-empty"):
        ex.chain_with_tree_first_depth(1.0, [], tree, 1.0, 2.1)


def test_nodes_to_beat_chain_is_the_smallest_such_n():
    probs = rank_probabilities(COVERAGE, 4)
    chain = expected_tree_tokens(probs[:1], 5)
    n = next(n for n in range(1, 50) if expected_tree_tokens(probs, 5, n) > chain)
    assert ex.nodes_to_beat_chain(n, COVERAGE) is True
    assert ex.nodes_to_beat_chain(n + 1, COVERAGE) is False


def test_fastest_size_ignores_auto():
    points = [{"total_tokens": 2, "tokens_per_s": 30.0}, {"total_tokens": 4, "tokens_per_s": 31.0},
              {"total_tokens": "auto", "tokens_per_s": 40.0}]
    assert ex.fastest_size(points) == 4
    with pytest.raises(ValueError, match="points"):
        ex.fastest_size([{"total_tokens": "auto", "tokens_per_s": 1.0}])


def test_the_engine_exercise_is_registered():
    from specviz.exercises.engine_change import ENGINE_EXERCISES
    assert ENGINE_EXERCISES["nb03.best_nodes"].target == "engines.drafters.tree_growth:best_nodes"
