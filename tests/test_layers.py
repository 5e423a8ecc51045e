"""The layer stack and KV cache must reproduce the model's own forward (fp32)."""

import pytest
import torch

from engines.model.layers import LayerStack, tree_mask

PROMPT = "The quick brown fox jumps over the lazy dog because"


def reference_logits(model, ids):
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0].float()


def test_plain_and_chunked_match_model_forward(real_engine):
    stack, model = real_engine.target, real_engine.model
    ids = real_engine.tokenizer.encode(PROMPT)
    expected = reference_logits(model, ids)
    with torch.inference_mode():
        cache = stack.new_cache(64)
        whole = stack.forward(ids, cache)
        cache = stack.new_cache(64)
        chunks = [stack.forward(ids[:4], cache), stack.forward(ids[4:5], cache), stack.forward(ids[5:], cache)]
    assert (whole - expected).abs().max() < 1e-3
    assert (torch.cat(chunks) - expected).abs().max() < 1e-3


def test_tree_masked_input_matches_each_path(real_engine):
    """Each tree node's logits equal a plain forward over prefix + the node's ancestors + the node."""
    stack, model = real_engine.target, real_engine.model
    prefix = real_engine.tokenizer.encode(PROMPT)
    tokens = [11, 22, 33, 44, 55, 66]
    parents = [-1, 0, 0, 1, 2, -1]  # two branches under node 0, plus a second root
    with torch.inference_mode():
        cache = stack.new_cache(64)
        stack.forward(prefix, cache)
        tree_logits = stack.forward(tokens, cache, parents)
    for node in range(len(tokens)):
        path, i = [], node
        while i >= 0:
            path.insert(0, tokens[i])
            i = parents[i]
        expected = reference_logits(model, prefix + path)[-1]
        assert (tree_logits[node] - expected).abs().max() < 1e-3, f"node {node}"


def test_tree_mask_shape_and_visibility():
    mask = tree_mask(2, [-1, 0, 0, 1], torch.float32, "cpu")[0, 0]
    visible = (mask == 0).int().tolist()
    assert visible == [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 1, 0], [1, 1, 1, 1, 0, 1]]


def test_tree_masks_let_each_node_see_exactly_the_prefix_its_ancestors_and_itself():
    """Both tree masks on random trees, against the ancestor relation walked parent by parent."""
    import random

    from engines.core.draft_tree import tree_mask_over

    rng = random.Random(0)
    for _ in range(20):
        n, prefix = rng.randint(1, 30), rng.randint(0, 5)
        parents = [-1] + [rng.randint(-1, i - 1) for i in range(1, n)]
        visible = (tree_mask(prefix, parents, torch.bfloat16, "cpu")[0, 0] == 0).tolist()
        for i in range(n):
            line, j = {i}, parents[i]
            while j >= 0:
                line.add(j)
                j = parents[j]
            assert visible[i] == [True] * prefix + [j in line for j in range(n)]
        slots = rng.randint(0, 6)
        ancestors = [sorted(rng.sample(range(slots), rng.randint(0, slots))) for _ in range(rng.randint(1, 5))]
        seen = (tree_mask_over(prefix, slots, ancestors, torch.float32, "cpu")[0, 0] == 0).tolist()
        for i, row in enumerate(ancestors):
            assert seen[i] == ([True] * prefix + [s in row for s in range(slots)]
                               + [j == i for j in range(len(ancestors))])
    with pytest.raises(ValueError, match="parents-first"):
        tree_mask(0, [-1, 2, 0], torch.float32, "cpu")


def test_cache_keep_compacts_accepted_path(tiny_engine):
    """After keeping a tree's accepted path, decoding continues exactly as if only the path was fed."""
    stack: LayerStack = tiny_engine.target
    prefix, tokens, parents = [1, 2, 3], [4, 5, 6, 7], [-1, 0, 0, 2]
    with torch.inference_mode():
        cache = stack.new_cache(32)
        stack.forward(prefix, cache)
        stack.forward(tokens, cache, parents)
        cache.keep(len(prefix), [0, 2, 3])  # path 4 → 6 → 7
        continued = stack.forward([9], cache)
        plain = stack.new_cache(32)
        expected = stack.forward(prefix + [4, 6, 7, 9], plain)[-1:]
    assert cache.length() == len(prefix) + 4
    assert torch.allclose(continued, expected, atol=1e-5)


def test_cache_crop_and_fork_are_independent(tiny_engine):
    stack = tiny_engine.target
    with torch.inference_mode():
        cache = stack.new_cache(32)
        stack.forward([1, 2, 3, 4], cache)
        branch = cache.fork()
        stack.forward([5, 6], branch)
        cache.crop(2)
        after_crop = stack.forward([3], cache)
        fresh = stack.new_cache(32)
        expected = stack.forward([1, 2, 3], fresh)[-1:]
    assert branch.length() == 6 and cache.length() == 3
    assert torch.allclose(after_crop, expected, atol=1e-5)
