"""Drafters run on the target's native step at inference (``engines.drafters.heads``): the same drafts as PyTorch's
path on an fp32 model, and greedy drafting never widens a row to the full vocabulary."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engines.core.sampling import Sampler
from engines.drafters.eagle import EagleDrafter
from engines.drafters.early_exit import EarlyExitDrafter
from engines.drafters.heads import AdapterHead, EagleHead, ExitLayerHead, ExitNormHead, SharedHead
from engines.drafters.model_draft import ModelDrafter
from engines.model.layers import LayerStack
from tests.conftest import tiny_llama

PROMPT = [1, 4, 9, 3, 12, 7]
VOCAB = torch.tensor([0, 2, 3, 5, 7, 9, 11, 12, 14])  # the heads' draft vocabulary: 9 of the 16 tokens


def target() -> LayerStack:
    stack = LayerStack(tiny_llama(vocab=16, layers=3, seed=3, logit_scale=4.0))
    stack.prepare_inference()
    if stack.native is None:
        pytest.skip("the native step does not build here")
    return stack


def randomised(head: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Weights moved off their initialisation (identity fc, zero projection), so every part matters."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return head.eval().requires_grad_(False)


def drafts(stack: LayerStack, make, native: bool, rounds: int = 2) -> list:
    """Greedy chains of two rounds by the drafter ``make(stack)`` builds, on the native step or PyTorch's path."""
    stack.use_native(native)
    drafter = make(stack)
    cache = stack.new_cache(64)
    with torch.no_grad():
        exit_layer = getattr(drafter, "exit_layer", stack.n_layers)
        low = stack.run(stack.embed(PROMPT), 0, exit_layer, cache)
        top = stack.run(low, exit_layer, stack.n_layers, cache)
        committed = PROMPT + [int(stack.logits(top[:, -1:])[-1].argmax())]
        drafter.start(SimpleNamespace(capacity=64, target=stack), cache)
        if getattr(drafter, "observe_layers", ()):
            drafter.observe({exit_layer: low, stack.n_layers: top}, len(PROMPT))
        out = []
        for _ in range(rounds):
            draft = drafter.propose(committed, 4, Sampler())
            out.append((draft.tokens, draft.logprobs))
            if isinstance(drafter, EarlyExitDrafter):  # the drafts' layer-ℓ entries stand in for verification
                cache.crop(len(committed) - 1, range(0, drafter.exit_layer))
                committed = committed + draft.tokens[:1]
                hidden = stack.run(stack.embed(committed[-2:-1]), 0, drafter.exit_layer, cache)
                if drafter.observe_layers:
                    drafter.observe({drafter.exit_layer: hidden}, 1)
            else:
                committed = committed + draft.tokens[:1]
                if isinstance(drafter, EagleDrafter):
                    drafter.features.append(stack.backbone.norm(top[:, -1:]))
    stack.use_native(True)
    return out


DRAFTERS = {
    "eagle": lambda s: EagleDrafter(randomised(EagleHead(s, VOCAB), 1)),
    "exit-norm": lambda s: EarlyExitDrafter(s, 1, randomised(ExitNormHead(s, VOCAB), 2)),
    "exit-layer": lambda s: EarlyExitDrafter(s, 1, randomised(ExitLayerHead(s, VOCAB, 1), 3)),
    "cats-adapter": lambda s: EarlyExitDrafter(s, 2, randomised(AdapterHead(s, VOCAB, 2), 4)),
    "model": lambda s: ModelDrafter(tiny := LayerStack(tiny_llama(vocab=16, layers=1, seed=5, logit_scale=4.0)),
                                    head=SharedHead(tiny, VOCAB)),
}


@pytest.mark.parametrize("name", DRAFTERS)
def test_native_drafts_equal_pytorchs_on_an_fp32_model(name):
    stack = target()
    native, reference = drafts(stack, DRAFTERS[name], True), drafts(stack, DRAFTERS[name], False)
    for (tokens, logprobs), (ref_tokens, ref_logprobs) in zip(native, reference):
        assert tokens == ref_tokens
        assert all(t in VOCAB.tolist() for t in tokens)
        assert logprobs == pytest.approx(ref_logprobs, abs=1e-4)


def test_native_head_logits_are_pytorchs_within_fp32_rounding():
    stack = target()
    head = randomised(ExitNormHead(stack, VOCAB), 7)
    hidden = torch.randn(1, 3, stack.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        native = head(hidden)
        stack.use_native(False)
        reference = head(hidden)
    assert native.dtype == torch.float32 and native.shape == reference.shape == (1, 3, len(VOCAB))
    torch.testing.assert_close(native, reference.float(), atol=1e-4, rtol=1e-4)


def test_training_keeps_pytorchs_autograd_path():
    stack = target()
    head = ExitNormHead(stack, VOCAB)
    hidden = torch.randn(1, 3, stack.config.hidden_size)
    head(hidden).sum().backward()  # grad enabled: the native step (which has no backward) is not taken
    assert head.proj.weight.grad is not None


@pytest.mark.parametrize("name", ["eagle", "exit-layer", "model"])
def test_greedy_drafting_builds_no_full_vocabulary_row(name, monkeypatch):
    import engines.drafters.base as base

    def refuse(self, logits):
        raise AssertionError("a drafted token's logits were scattered into the full vocabulary")

    widths = []
    original = base.draft_token

    def recording(logits, columns, *args, **kwargs):
        widths.append(logits.shape[-1])
        return original(logits, columns, *args, **kwargs)

    monkeypatch.setattr(SharedHead, "to_full", refuse)
    for module in ("eagle", "early_exit", "model_draft"):
        monkeypatch.setattr(f"engines.drafters.{module}.draft_token", recording)
    drafts(target(), DRAFTERS[name], True, rounds=1)
    assert widths and set(widths) == {len(VOCAB)}


def test_the_cats_adapters_attention_block_runs_on_the_native_step(monkeypatch):
    """The adapter's block (attention, no MLP) no longer takes PyTorch's path at inference."""
    import engines.drafters.heads as heads

    def refuse(*args, **kwargs):
        raise AssertionError("the adapter's attention block ran PyTorch's path")

    monkeypatch.setattr(heads, "decoder_pass", refuse)
    assert drafts(target(), DRAFTERS["cats-adapter"], True, rounds=1)
