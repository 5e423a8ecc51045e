"""Draft trees: the tree-masked forward equals each path run alone, the walks, cache compaction and
EAGLE-2's builder. The multi-candidate sampling rule's exactness is in ``test_verification_rules.py``."""

import pytest
import torch

from engines import Engine
from engines.core.acceptance import judge
from engines.core.draft_tree import DraftTreeNodes, TreeNode, keep_path
from engines.core.sampling import Sampler
from engines.drafters.tree_growth import TreeSizer, best_nodes
from engines.model.layers import LayerStack
from tests.conftest import tiny_llama


def small_tree() -> DraftTreeNodes:
    """root ─ a(0) ─ c(2) ─ e(4)        tokens: a=5 b=6 c=7 d=8 e=9
             └ b(1) ─ d(3)"""
    tree = DraftTreeNodes()
    tree.add(TreeNode(5, -1, 1, rank=0))
    tree.add(TreeNode(6, -1, 1, rank=1))
    tree.add(TreeNode(7, 0, 2))
    tree.add(TreeNode(8, 1, 2))
    tree.add(TreeNode(9, 2, 3))
    return tree


def leaf_paths(tree: DraftTreeNodes) -> list[list[int]]:
    parents = set(tree.parents)
    return [tree.path_to(i) for i in range(len(tree)) if i not in parents]


def assert_tree_forward_equals_paths(stack: LayerStack, prefix: list[int], root: int, tree: DraftTreeNodes, atol):
    with torch.inference_mode():
        cache = stack.new_cache(64)
        stack.forward(prefix, cache)
        tree_logits = stack.forward([root] + tree.tokens, cache, tree.verify_parents())
        for path in leaf_paths(tree):
            alone = stack.new_cache(64)
            stack.forward(prefix, alone)
            path_logits = stack.forward([root] + [tree.nodes[i].token for i in path], alone)
            rows = [0] + [i + 1 for i in path]
            assert (tree_logits[rows] - path_logits).abs().max() < atol


def test_tree_forward_equals_each_path_alone_tiny_model():
    stack = LayerStack(tiny_llama(vocab=16, layers=3))
    assert_tree_forward_equals_paths(stack, [1, 2, 3, 4], 3, small_tree(), atol=1e-5)


def test_tree_forward_equals_each_path_alone_real_model(real_engine):
    tree = DraftTreeNodes()
    for token, parent in [(563, -1), (3202, -1), (314, 0), (1092, 0), (28, 1), (2593, 2), (30, 5)]:
        tree.add(TreeNode(token, parent, 1 if parent < 0 else tree.nodes[parent].depth + 1))
    prefix = real_engine.encode("Name three colours.")
    assert_tree_forward_equals_paths(real_engine.target, prefix, 504, tree, atol=2e-3)


def one_hot_rows(tokens, vocab=12):
    logits = torch.full((len(tokens), vocab), -10.0)
    logits[torch.arange(len(tokens)), torch.tensor(tokens)] = 10.0
    return logits


def test_greedy_tree_walks_the_matching_branch():
    tree = small_tree()
    # rows: after the root, then after each node. Target: b(6) after root, d(8) after b, 3 after d
    verdict = judge(tree, one_hot_rows([6, 0, 8, 0, 3, 0]), Sampler(0.0))
    assert verdict.path == [1, 3]
    assert (verdict.next_token, verdict.next_fate) == (3, "bonus")
    assert verdict.outcomes == ["rejected", "accepted", "unreached", "accepted", "unreached"]
    verdict = judge(tree, one_hot_rows([5, 7, 0, 9, 0, 4]), Sampler(0.0))
    assert verdict.path == [0, 2, 4] and (verdict.next_token, verdict.next_fate) == (4, "bonus")
    verdict = judge(tree, one_hot_rows([5, 11, 0, 0, 0, 0]), Sampler(0.0))
    assert verdict.path == [0] and (verdict.next_token, verdict.next_fate) == (11, "correction")


def test_keep_path_compacts_the_accepted_rows():
    stack = LayerStack(tiny_llama(vocab=16))
    cache = stack.new_cache(32)
    tree = small_tree()
    with torch.inference_mode():
        stack.forward([1, 2, 3], cache)
        stack.forward([4] + tree.tokens, cache, tree.verify_parents())
        expected = [cache.keys[0][:, :, 3 + r].clone() for r in (0, 1, 3, 5)]  # root, a, c, e
        keep_path(cache, 3, [0, 2, 4])
    assert cache.length() == 7
    for slot, key in enumerate(expected):
        assert torch.equal(cache.keys[0][:, :, 3 + slot], key)


def test_best_nodes_keeps_the_highest_scores_with_their_ancestors():
    tree = DraftTreeNodes()
    for token, parent, score in [(1, -1, -0.1), (2, -1, -2.0), (3, 0, -0.5), (4, 0, -3.0), (5, 2, -0.6), (6, 1, -2.1)]:
        tree.add(TreeNode(token, parent, 1 if parent < 0 else tree.nodes[parent].depth + 1, score=score))
    assert best_nodes(tree, 3) == [0, 2, 4]
    assert best_nodes(tree, 5) == [0, 1, 2, 4, 5]
    assert tree.subset([0, 2, 4]).parents == [-1, 0, 1]
    with pytest.raises(ValueError, match="without its parent"):
        tree.subset([2])


def test_tree_sizer_grows_when_verification_is_nearly_free():
    tree = DraftTreeNodes()
    for i in range(20):
        tree.add(TreeNode(i, -1, 1, score=-0.5 - 0.2 * i, rank=i))
    free = TreeSizer(lambda n: 1.0, max_nodes=60)
    costly = TreeSizer(lambda n: float(n), max_nodes=60)
    assert free.choose(tree, 0.0) == 20
    assert costly.choose(tree, 0.0) < 5
    alone = costly.choose(tree, 0.0)
    costly.link_took(40.0)  # a round that waits on a slow link is worth more nodes
    assert costly.choose(tree, 0.0) > alone
    free.update(tree, [0])  # node 0 (token 0) hit, every other missed
    assert free.seen[free._bin(-0.5)] >= 1 and free.hits[free._bin(-0.5)] == 1


def test_tree_sizer_grows_a_level_only_when_it_is_expected_to_pay():
    tree = DraftTreeNodes()
    frontier = [tree.add(TreeNode(t, -1, 1, score=s, rank=r)) for r, (t, s) in enumerate([(5, -0.1), (6, -2.5)])]
    free = TreeSizer(lambda n: 1.0, max_nodes=60)  # verification costs the same at every size
    steep = TreeSizer(lambda n: float(n), max_nodes=60)  # each more row costs a whole step
    assert free.deeper(tree, frontier, topk=2, draft_seconds=0.01)
    assert not steep.deeper(tree, frontier, topk=2, draft_seconds=0.01)
    free.level_took(5.0)  # a drafter call that costs five steps is not worth its children
    assert not free.deeper(tree, frontier, topk=2, draft_seconds=0.01)
    # learned: an accepted parent's children are never accepted, so a level is not worth a tenth of a step
    learner = TreeSizer(lambda n: 1.0, max_nodes=60)
    learner.level_took(0.1)
    assert learner.deeper(tree, frontier, topk=2, draft_seconds=0.01), "the prior alone tries the level"
    for _ in range(50):
        grown = DraftTreeNodes()
        root = grown.add(TreeNode(5, -1, 1, score=-0.1))
        for rank in range(2):
            grown.add(TreeNode(7 + rank, root, 2, score=-1.0, rank=rank))
        learner.update(grown, [5, 9])  # the root's token committed, then one neither child drafted
    assert learner.continuation(2, 0) < 0.05
    assert not learner.deeper(tree, frontier, topk=2, draft_seconds=0.01)


@pytest.fixture(scope="module")
def tiny_tree_engine():
    target = tiny_llama(vocab=8, layers=2, seed=1, logit_scale=4.0)
    engine = Engine(target)
    engine.add_draft("other", tiny_llama(vocab=8, layers=1, seed=2, logit_scale=4.0))
    return engine


def test_eagle_tree_greedy_equals_ar_on_tiny_model(tiny_tree_engine):
    engine = tiny_tree_engine
    for prompt in ([1, 2, 3], [4, 4, 5, 6]):
        expected = engine.run(prompt, "ar", max_new_tokens=12).token_ids
        for options in ({"depth": 3, "topk": 2, "total_tokens": 5}, {"depth": 4, "topk": 3, "total_tokens": "auto"},
                        {"depth": "auto", "topk": 2, "total_tokens": "auto"}, {"depth": "auto", "total_tokens": 4}):
            result = engine.run(prompt, "eagle", max_new_tokens=12, draft="other", **options)
            assert result.token_ids == expected
