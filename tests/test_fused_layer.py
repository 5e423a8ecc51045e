"""The fused inference layer computes what the Hugging Face layer computes, and steps aside when it must.

It is the PyTorch path: where the native step runs (tests/test_native_step.py), these tests switch it off."""

from __future__ import annotations

import torch

from engines import Engine
from tests.conftest import tiny_llama
from tests.test_exact_numerics import bf16_llama


def logits_of(engine: Engine, ids: list[int]) -> torch.Tensor:
    engine.target.use_native(False)
    with torch.inference_mode():
        cache = engine.target.new_cache(128)
        engine.target.forward(ids[:-4], cache)
        return engine.target.forward(ids[-4:], cache)


def test_bf16_fused_layers_give_the_hugging_face_layers_bits():
    ids = list(range(5, 60))
    fused = logits_of(Engine(bf16_llama(), fused=True), ids)
    plain = logits_of(Engine(bf16_llama(), fused=False), ids)
    assert torch.equal(fused, plain)


def test_fp32_fused_layers_match_the_hugging_face_layers():
    ids = list(range(3, 40))
    model = tiny_llama(vocab=64, layers=2, seed=3)
    engine = Engine(model, fused=True)
    assert all(layer.specviz_fused is not None for layer in engine.target.layers)
    fused = logits_of(engine, ids)
    engine.target.use_fused_layers(False)
    assert torch.allclose(fused, logits_of(engine, ids), atol=1e-5, rtol=1e-5)


def test_fp32_one_token_steps_match_the_hugging_face_layers():
    """One token at a time the fused layer attends with two plain products (not sdpa): the same numbers."""
    ids = list(range(3, 30))
    engine = Engine(tiny_llama(vocab=64, layers=2, seed=3), fused=True)

    def steps() -> torch.Tensor:
        engine.target.use_native(False)
        with torch.inference_mode():
            cache = engine.target.new_cache(64)
            engine.target.forward(ids[:-3], cache)
            return torch.cat([engine.target.forward([token], cache) for token in ids[-3:]])

    fused = steps()
    engine.target.use_fused_layers(False)
    assert torch.allclose(fused, steps(), atol=1e-5, rtol=1e-5)


def test_training_passes_and_hooked_layers_run_the_hugging_face_layer():
    engine = Engine(tiny_llama(vocab=64, layers=2, seed=3), fused=True)
    layer = engine.target.layers[0]
    seen = []
    handle = layer.register_forward_hook(lambda *args: seen.append("hooked"))
    logits_of(engine, list(range(3, 20)))
    handle.remove()
    assert seen  # a hook (the weight streamer's, an experiment's) sees every forward
    calls = []
    layer.register_forward_pre_hook(lambda *args: calls.append(torch.is_grad_enabled()))
    hidden = engine.target.embed(list(range(3, 20))).detach().requires_grad_(True)
    engine.target.run_causal(hidden, 0, 1).sum().backward()  # gradients flow: the packed kernels have none
    assert calls == [True] and hidden.grad is not None


def test_a_memory_budget_drops_the_fused_copies_and_they_come_back_after(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    engine = Engine(tiny_llama(vocab=64, layers=4, seed=3), fused=True)
    layers = engine.target.layers
    budget_mb = (sum(p.numel() * p.element_size() for p in engine.model.parameters())
                 - sum(p.numel() * p.element_size() for p in layers[3].parameters())) / 1e6
    ran_fused = []
    for event in engine.generate([1, 2, 3], "ar", max_new_tokens=3, memory_budget_mb=budget_mb):
        ran_fused.append(any(layer.specviz_fused is not None for layer in layers))
    assert not any(ran_fused)
    assert all(layer.specviz_fused is not None for layer in layers)
