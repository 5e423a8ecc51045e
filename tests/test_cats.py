"""CATS (paper 004): the cascade is lossless (greedy here; sampling: its correction rule in
``test_verification_rules.py``, its routing in ``test_draft_routing.py``), typical acceptance is labelled
lossy, and the cycle's events say what the shallow verifier and the walk did."""

import pytest
import torch

from engines import Engine
from engines.drafters.heads import AdapterHead
from engines.methods.cats import correction_tree
from engines.model.layers import LayerStack
from tests.conftest import tiny_llama


def with_random_adapters(engine: Engine, layers: tuple[int, ...], seed: int = 7) -> Engine:
    """Untrained CATS adapters for a tiny model, built from *another* random model of the same shape so
    their q differs from the target's p: drafts are often rejected and corrections often needed, which
    is where a wrong residual would show."""
    other = LayerStack(tiny_llama(vocab=engine.model.config.vocab_size, layers=engine.target.n_layers, seed=seed,
                                  logit_scale=4.0))
    vocab = torch.arange(engine.model.config.vocab_size)
    for layer in layers:
        engine._trained[f"cats@{layer}"] = AdapterHead(other, vocab, layer).eval()
    return engine


@pytest.fixture(scope="module")
def tiny_cats():
    target = tiny_llama(vocab=8, layers=3, seed=1, logit_scale=4.0)
    return with_random_adapters(Engine(target), (1, 2))


def test_correction_tree_adds_a_sibling_where_the_verifier_disagrees():
    tree, mismatches = correction_tree([5, 6, 7], None, [-0.1, -0.2, -0.3], [5, 9, 4], "dm")
    assert mismatches == [1, 2]
    assert tree.tokens == [5, 6, 7, 9, 4]
    assert tree.parents == [-1, 0, 1, 0, 1]  # ĉ_1 beside d_1 (under d_0), ĉ_2 beside d_2
    assert [n.source for n in tree.nodes] == ["draft"] * 3 + ["correction"] * 2
    assert all(n.q is None for n in tree.nodes[3:])  # corrections are point masses
    assert tree.children()[0] == [1, 3]  # the draft is tried before its correction


def test_cats_greedy_equals_ar_on_tiny_model(tiny_cats):
    engine = tiny_cats
    for prompt in ([1, 2, 3], [4, 4, 5, 6]):
        expected = engine.run(prompt, "ar", max_new_tokens=16).token_ids
        for gamma in (1, 3, 5):
            result = engine.run(prompt, "cats", max_new_tokens=16, dm_layer=1, sv_layer=2, gamma=gamma)
            assert result.token_ids == expected


def test_cats_events_and_lossy_label(tiny_cats):
    engine = tiny_cats
    events = engine.run([1, 2, 3], "cats", max_new_tokens=12, dm_layer=1, sv_layer=2, gamma=4).events
    kinds = {e.kind for e in events}
    assert {"sv_pass", "draft_tree", "verification", "kv_rollback"} <= kinds
    assert {s.stage for s in events if s.kind == "stage_span"} == {"draft", "sv", "reforward", "verify"}
    sv = next(e for e in events if e.kind == "sv_pass")
    tree = next(e for e in events if e.kind == "draft_tree" and e.round == sv.round)
    assert len(tree.nodes) == len(sv.drafts) + len(sv.mismatches)
    assert events[0].lossless
    typical = engine.run([1, 2, 3], "cats", max_new_tokens=8, dm_layer=1, sv_layer=2, acceptance="typical",
                         temperature=0.7)
    assert typical.events[0].lossless is False


@pytest.mark.parametrize("options,message", [
    ({"dm_layer": 15, "sv_layer": 15}, "dm_layer must be below sv_layer"),
    ({"sv_layer": 30}, r"sv_layer must be in \[2, 29\]"),
    ({"dm_layer": 0}, r"dm_layer must be in \[1, 28\]"),
    ({"acceptance": "relaxed"}, "acceptance must be one of"),
    ({"gamma": 0}, "gamma"),
])
def test_cats_bad_options(real_engine, options, message):
    with pytest.raises(ValueError, match=message):
        real_engine.generate("Hello", "cats", **options)


def test_cats_greedy_acceptance_refuses_sampling(real_engine):
    with pytest.raises(ValueError, match="acceptance='greedy' needs temperature 0"):
        real_engine.generate("Hello", "cats", temperature=0.8)


def test_cats_drafts_no_more_than_the_tokens_left(tiny_cats):
    """A cycle drafts min(γ̄, tokens left − 1) (at least one): no deep pass is spent on drafts the budget cuts."""
    events = tiny_cats.run([1, 2, 3], "cats", max_new_tokens=4, dm_layer=1, sv_layer=2, gamma=5).events
    left = 4 - 1  # the prefill commits the first token
    for event in events:
        if event.kind == "sv_pass":
            assert len(event.drafts) <= max(1, left - 1), (event.round, event.drafts, left)
        if event.kind == "commit" and event.round > 0:
            left -= len(event.tokens)
