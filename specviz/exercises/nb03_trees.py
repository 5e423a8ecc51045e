"""Notebook 03's exercises (draft trees): each expected value is computed here from what the reader's run
measured or from the drafter's recorded coverage, never in the notebook's cell."""

from __future__ import annotations

from typing import Mapping, Sequence

from ..theory import expected_tree_tokens, full_tree_nodes, rank_probabilities
from .checks import check_choice, check_number
from .engine_change import EngineExercise, register

BEST_NODES = register("nb03.best_nodes", EngineExercise(
    target="engines.drafters.tree_growth:best_nodes",
    tests=("tests/test_trees.py::test_best_nodes_keeps_the_highest_scores_with_their_ancestors",
           "tests/test_trees.py::test_eagle_tree_greedy_equals_ar_on_tiny_model"),
    explanation="The rerank keeps the n likeliest paths; a child never scores above its parent, so they form a tree.",
    hint="Look at TreeNode.score and TreeNode.depth, and at what the verifier needs of every node it is sent."))


def small_tree_tau(answer: float | None, coverage: Mapping[int, float]) -> bool | None:
    """Exercise 1: τ of the tree with the two best guesses at depth 1 and the best guess under each of them,
    at the drafter's recorded r₁ and r₂ (which is the best 4-node tree of depth 2)."""
    probs = rank_probabilities(coverage, 2)
    expected = expected_tree_tokens(probs, depth=2, nodes=4)
    chain = expected_tree_tokens(probs[:1], depth=4)
    return check_number(answer, expected, tolerance=0.005,
                        explanation=f"A chain of the same four nodes expects only τ = {chain:.3f}.",
                        hint="Each node adds the probability that its whole path is accepted; a depth-2 node's path "
                             "has two ranks.")


def _tau_of_profile(acceptance_by_position: Sequence[float]) -> float:
    """1 + Σᵢ α₁·…·αᵢ: a round passes depth i only if it passed every depth before it."""
    reach, tau = 1.0, 1.0
    for alpha_i in acceptance_by_position:
        reach *= alpha_i
        tau += reach
    return tau


def chain_with_tree_first_depth(answer: float | None, chain_profile: Sequence[float], tree_profile: Sequence[float],
                                chain_tau: float, tree_tau: float) -> bool | None:
    """Exercise 2: τ of a chain whose first depth were accepted as often as the tree's (α₁ of ``tree_profile``),
    its deeper depths as the chain measured them (``chain_profile``): how much of the tree's τ its first depth
    buys. No run measures this chain, so its τ is printed nowhere before the answer."""
    if not chain_profile or not tree_profile:
        raise ValueError("both runs must have judged at least one draft position (acceptance_by_position non-empty)")
    expected = _tau_of_profile([tree_profile[0], *chain_profile[1:]])
    right = check_number(answer, expected, tolerance=0.02,
                         explanation="That is the chain formula with one acceptance per depth instead of one a for all.",
                         hint="What is the chance a round gets past depth 1 with the tree's α₁? Past depth 2 with the "
                              "chain's α₂ after it? Add those chances, and remember the target's own token.")
    if right:
        print(f"Measured: the chain committed τ = {chain_tau:.3f} and the tree τ = {tree_tau:.3f}; the tree's first "
              f"depth alone would take the chain to {expected:.3f}.")
    return right


def nodes_to_beat_chain(answer: int | None, coverage: Mapping[int, float], depth: int = 5,
                        topk: int = 4) -> bool | None:
    """Exercise 3: the smallest n whose best tree (depth ≤ ``depth``, top-``topk``) expects more than the chain
    of ``depth`` nodes."""
    probs = rank_probabilities(coverage, topk)
    chain = expected_tree_tokens(probs[:1], depth)
    expected = next(n for n in range(1, full_tree_nodes(topk, depth) + 1)
                    if expected_tree_tokens(probs, depth, n) > chain)
    return check_choice(answer, expected,
                        explanation=f"The best {expected}-node tree expects τ = "
                                    f"{expected_tree_tokens(probs, depth, expected):.3f} against the chain's "
                                    f"{chain:.3f}.",
                        hint="Add paths in order of their probability, likeliest first, and compare the running "
                             "total with the chain's at every step.")


def fastest_size(points: Sequence[Mapping]) -> int | str:
    """The fixed tree size (``total_tokens``) whose run made the most tokens per second: what the prediction
    before section 5 is compared with."""
    fixed = [p for p in points if p["total_tokens"] != "auto"]
    if not fixed:
        raise ValueError("points must hold at least one run at a fixed total_tokens")
    return max(fixed, key=lambda p: p["tokens_per_s"])["total_tokens"]
