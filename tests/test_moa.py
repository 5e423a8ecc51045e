"""Mixture of Attentions: the drafter's cached tree steps equal a from-scratch pass, greedy output equals
``ar`` in every form (tree, chain, client–server, each TLI, −LSA), disconnection is labelled lossy,
messages carry the bytes the link charges, and bad options are refused. Tiny random targets, except the
real-model test at the end (shipped drafters)."""

from __future__ import annotations

import gzip

import pytest
import torch

from engines import Engine
from engines.core.context import DecodeContext
from engines.core.draft_tree import DraftTreeNodes, TreeNode
from engines.core.sampling import Sampler
from engines.core.trace import LinkSend, Trace
from engines.drafters.moa_drafter import MoADrafter, VerifiedBlock
from engines.drafters.moa_head import MoAHead, moa_name
from engines.drafters.trained import save_trained
from engines.model.layers import LayerStack
from engines.network.link import decode_verdict
from tests.conftest import tiny_llama

PROMPTS = ([1, 2, 3], [4, 4, 5, 6, 7])


def random_moa(stack: LayerStack, tli: int, lsa: bool = True, seed: int = 0) -> MoAHead:
    torch.manual_seed(seed)
    head = MoAHead(stack, torch.arange(stack.config.vocab_size), tli, lsa)
    with torch.no_grad():  # random but peaky, so drafts sometimes agree and trees have several branches
        for p in head.parameters():
            if p.requires_grad and p.dim() == 2:
                p.mul_(4.0)
    return head.eval()


@pytest.fixture(scope="module")
def moa_engine(tmp_path_factory):
    """A 3-layer vocabulary-16 target with random MoA drafters for TLI 0, 1, 2 and −LSA, saved and reloaded
    through the shipped-drafter path (cards and weights)."""
    root = tmp_path_factory.mktemp("moa-drafts")
    target = tiny_llama(vocab=16, layers=3, seed=4, logit_scale=3.0)
    engine = Engine(target)
    stack = engine.target
    patch = pytest.MonkeyPatch()
    patch.setenv("SPECVIZ_DRAFTS", str(root))
    for tli, lsa in ((0, True), (1, True), (2, True), (0, False)):
        head = random_moa(stack, tli, lsa, seed=tli + 10 * lsa)
        card = {"name": moa_name(tli, lsa), "kind": "moa", "tli": tli, "lsa": lsa, "target_layers": stack.n_layers,
                "hidden_size": stack.config.hidden_size, "vocab_size": stack.config.vocab_size,
                "draft_vocab_size": stack.config.vocab_size}
        save_trained(card["name"], head, card)
    yield engine
    patch.undo()


def test_cached_tree_steps_equal_one_pass_over_the_path(moa_engine):
    """A node's logits, grown step by step under the tree mask with SA/TLI caches, equal a fresh root step
    over committed + path: the caches, positions and masks add nothing and lose nothing."""
    engine = moa_engine
    stack = engine.target
    for name in ("moa-tli0", "moa-tli2", "moa-tli0-nolsa"):
        head = engine.trained_drafter(name)
        committed = [3, 1, 4, 1, 5]
        path = [9, 2, 6]

        def fresh():
            ctx = DecodeContext(stack, committed, 16, Sampler(0.0), Trace(), frozenset(), str)
            cache = stack.new_cache(64)
            seen = {stack.n_layers: stack.run(stack.embed(committed[:-1]), 0, stack.n_layers, cache)}
            drafter = MoADrafter(head, name)
            drafter.start(ctx, cache)
            drafter.observe(seen, len(committed) - 1)
            return drafter

        grower = fresh()
        tree = DraftTreeNodes()
        grower.root(committed)
        tree.add(TreeNode(7, -1, 1))  # a sibling branch the path must not see
        parent = -1
        for depth, token in enumerate(path, start=1):
            parent = tree.add(TreeNode(token, parent, depth))
            logits, _ = grower.expand(tree, [parent] if depth > 1 else [0, parent])
        grown = logits[-1]
        grower.finish()
        alone, _ = fresh().root(committed + path)
        torch.testing.assert_close(grown.float(), alone.float(), atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("options", [
    {"tli": 0}, {"tli": 1}, {"tli": 2, "depth": 3, "topk": 3, "total_tokens": 8}, {"tli": 0, "lsa": False},
    {"tli": 1, "tree": False, "gamma": 3}, {"tli": 2, "network": "5g"}, {"tli": 0, "network": "4g", "tree": False},
])
def test_greedy_equals_ar(moa_engine, options):
    for prompt in PROMPTS:
        expected = moa_engine.run(prompt, "ar", max_new_tokens=14).token_ids
        result = moa_engine.run(prompt, "moa", max_new_tokens=14, **options)
        assert result.token_ids == expected, options
        assert result.events[0].lossless


def test_client_server_charges_the_real_message_bytes(moa_engine):
    result = moa_engine.run(PROMPTS[1], "moa", max_new_tokens=12, tli=1, network="4g")
    sends = [e for e in result.events if isinstance(e, LinkSend)]
    assert sends[0].direction == "down" and "gzip" in sends[0].content
    assert {e.direction for e in sends[1:]} == {"up", "down"}
    ups = [e for e in sends if e.direction == "up"]
    assert len(ups) == result.stats.rounds == result.stats.target_calls - 1
    stats = result.stats
    assert stats.link_bytes == sum(e.bytes for e in sends) and stats.link_messages == len(sends)
    assert stats.link_seconds == pytest.approx(sum(e.seconds for e in sends))
    assert stats.link_seconds > 0.02 * len(sends) / 2  # 4G: ≥ 4.5 ms base + N(21, 19) ms clipped, per message
    assert result.events[0].clock == "wall+link"
    assert stats.decode_seconds > stats.link_seconds - sends[0].seconds  # link time is on the run's clock


def test_activations_survive_the_wire_to_8_bits():
    rows = torch.randn(5, 40)
    block = VerifiedBlock.from_activations(rows, 16, 1)
    assert block.memory.shape == (5, 16) and block.tli_kv.shape == (1, 2, 5, 12)
    torch.testing.assert_close(block.activations(), rows)
    from engines.network.link import encode_verdict
    ids, decoded = decode_verdict(encode_verdict([1, 2, 3, 4, 5], rows))
    assert ids == [1, 2, 3, 4, 5]
    assert (decoded - rows).abs().max() <= rows.abs().max() / 127


def test_first_message_is_gzipped_and_smaller(moa_engine):
    from engines.network.link import encode_verdict
    rows = torch.randn(30, 64).round()
    assert len(encode_verdict([1], rows, compress=True)) < len(encode_verdict([1], rows))
    assert gzip  # the stdlib codec the wire format uses


def test_disconnection_is_lossy_and_labelled(moa_engine):
    prompt = PROMPTS[0]
    connected = moa_engine.run(prompt, "moa", max_new_tokens=16, tli=1, network="local")
    alone = moa_engine.run(prompt, "moa", max_new_tokens=16, tli=1, network="local", disconnect_after=4)
    assert not alone.events[0].lossless
    fates = [f for e in alone.events if getattr(e, "kind", "") == "commit" for f in e.fates]
    switch = fates.index("client")  # the server leaves at the first cycle boundary at or after B tokens
    assert 4 <= switch < 4 + 4 + 1 and fates[switch:] == ["client"] * (16 - switch)
    assert alone.token_ids[:switch] == connected.token_ids[:switch]
    assert alone.stats.target_calls < connected.stats.target_calls


@pytest.mark.parametrize("options, message", [
    ({"tli": 3}, "tli must be in [0, 2]"),
    ({"tli": -1}, "tli must be in [0, 2]"),
    ({"network": "6g"}, "network must be one of"),
    ({"network": "5g", "packet_loss": 1.0}, "packet_loss must be in [0, 1)"),
    ({"network": "5g", "packet_loss": -0.1}, "packet_loss must be in [0, 1)"),
    ({"network": "5g", "disconnect_after": 0}, "disconnect_after must be"),
    ({"disconnect_after": 5}, "disconnect_after needs a client–server network"),
    ({"drafter": "moa-tli9"}, "no trained drafter 'moa-tli9'"),
])
def test_bad_options_are_refused(moa_engine, options, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        moa_engine.run(PROMPTS[0], "moa", max_new_tokens=4, **options)


def test_shipped_drafters_are_lossless_on_the_real_model(real_engine, monkeypatch):
    """fp32 greedy with the shipped MoA drafters equals ``ar``: single device (tree and chain, TLI 0 and 3,
    −LSA) and client–server with 8-bit activations over 4G."""
    monkeypatch.delenv("SPECVIZ_DRAFTS", raising=False)  # the tiny fixture's drafters are not the shipped ones
    prompt = [{"role": "user", "content": "Explain in two sentences why the sky is blue."}]
    expected = real_engine.run(prompt, "ar", max_new_tokens=32).token_ids
    for options in ({"tli": 0}, {"tli": 3, "tree": False}, {"tli": 0, "lsa": False},
                    {"tli": 1, "network": "4g"}):
        result = real_engine.run(prompt, "moa", max_new_tokens=32, **options)
        assert result.token_ids == expected, options
        assert result.stats.mean_accepted_length > 1.0, options  # the trained drafter is right some of the time
