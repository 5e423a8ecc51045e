"""Row-invariant numerics on PyTorch's path (where the native step cannot run; tests/test_native_step.py covers
it): in bf16 a verification over n tokens must give every row the bits of n one-token
steps, so that a lossless method's greedy output equals `ar`'s exactly (see engines/model/exact_numerics.py).

Unit tests run a tiny random bf16 Llama (wide enough that its matmuls take the same kernel paths as the real
model's); one integration test runs the default model in bf16 against `ar`.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from engines import Engine
from engines.model.exact_numerics import ROW_INVARIANT_ATTENTION
from engines.model.kernels import KernelPlan, stock_kernels


def bf16_llama(seed: int = 0, heads: int = 4) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=768, num_hidden_layers=3,
                         num_attention_heads=heads, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval().to(torch.bfloat16)
    model.config._attn_implementation = "sdpa"
    return model


def chunk_and_steps(engine: Engine, prefix: list[int], chunk: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of ``chunk`` verified in one forward, and the same tokens fed one at a time."""
    stack = engine.target
    with torch.inference_mode():
        together = stack.new_cache(128)
        stack.forward(prefix, together)
        chunked = stack.forward(chunk, together)
        apart = stack.new_cache(128)
        stack.forward(prefix, apart)
        stepped = torch.cat([stack.forward([token], apart) for token in chunk])
    return chunked, stepped


@pytest.fixture(scope="module")
def model():
    return bf16_llama()


def test_bf16_on_cpu_turns_it_on_and_fp32_does_not(model):
    assert Engine(model).target.row_invariant
    assert Engine(model).model.config._attn_implementation == ROW_INVARIANT_ATTENTION
    fp32 = bf16_llama().float()
    assert not Engine(fp32).target.row_invariant


def test_chunked_verification_rows_equal_one_token_steps(model):
    engine = Engine(model, row_invariant=True)
    engine.target.use_native(False)
    generator = torch.Generator().manual_seed(1)
    for n in (2, 5, 11):
        ids = torch.randint(0, 512, (40 + n,), generator=generator).tolist()
        chunked, stepped = chunk_and_steps(engine, ids[:40], ids[40:])
        assert torch.equal(chunked, stepped), f"{n} tokens: max diff {(chunked - stepped).abs().max()}"


def test_the_largest_verification_validation_allows_is_row_invariant(model):
    """γ = 64 (sps, pld, eesd, moa) and CATS's γ = 32 with as many corrections verify 1 + 64 rows: they
    must stay on the row-invariant path, not fall back to ``sdpa`` (65 rows drifted at MAX_EXACT_ROWS = 64)."""
    from engines.core.context import DRAFT_MARGIN
    from engines.methods.cats import CatsConfig
    from engines.methods.sps import SpsConfig
    from engines.model.exact_numerics import MAX_EXACT_ROWS

    assert MAX_EXACT_ROWS >= 1 + DRAFT_MARGIN
    for config in (SpsConfig(gamma=DRAFT_MARGIN + 1), CatsConfig(gamma=DRAFT_MARGIN // 2 + 1)):
        with pytest.raises(ValueError, match="gamma"):
            config.validate(30)
    engine = Engine(model, row_invariant=True)
    engine.target.use_native(False)
    ids = torch.randint(0, 512, (40 + 1 + DRAFT_MARGIN,), generator=torch.Generator().manual_seed(2)).tolist()
    chunked, stepped = chunk_and_steps(engine, ids[:40], ids[40:])
    assert torch.equal(chunked, stepped), f"max diff {(chunked - stepped).abs().max()}"


def test_bf16_greedy_at_the_largest_gamma_validation_allows_equals_ar(model):
    """A self-draft of one layer at γ = 64 (each round verifies all 1 + 64 rows) writes what ``ar`` writes on
    PyTorch's path (at MAX_EXACT_ROWS = 64 it parted from ``ar`` here). The native step is row-invariant for
    any number of rows by construction (``tests/test_native_step.py``)."""
    from engines.core.context import DRAFT_MARGIN

    engine = Engine(model, row_invariant=True)
    engine.target.use_native(False)
    prompt = torch.randint(0, 512, (24,), generator=torch.Generator().manual_seed(3)).tolist()
    tokens = 80  # the prefill's token, a round of 64 drafts and its own token, then the rest
    reference = engine.run(prompt, "ar", max_new_tokens=tokens).token_ids
    run = engine.run(prompt, "sps", max_new_tokens=tokens, gamma=DRAFT_MARGIN, draft_layers=1)
    assert run.token_ids == reference
    assert max(e.drafted for e in run.events if e.kind == "commit") == DRAFT_MARGIN


def test_tree_rows_equal_the_steps_along_their_path(model):
    engine = Engine(model, row_invariant=True)
    engine.target.use_native(False)
    stack = engine.target
    prefix = list(range(3, 43))
    tokens, parents = [7, 8, 9, 10, 11], [-1, 0, 0, 1, 3]  # two branches: 7→8→10→11 and 7→9
    with torch.inference_mode():
        cache = stack.new_cache(128)
        stack.forward(prefix, cache)
        tree_logits = stack.forward(tokens, cache, parents)
    for node, path in ((4, [7, 8, 10, 11]), (2, [7, 9])):
        _, stepped = chunk_and_steps(engine, prefix, path)
        assert torch.equal(tree_logits[node], stepped[-1])


def test_a_one_row_product_gets_the_bits_of_a_many_row_one():
    torch.manual_seed(0)
    weight = (torch.randn(576, 1536) * 0.03).bfloat16()
    rows = (torch.randn(16, 1536) * 20).bfloat16()
    plan = KernelPlan(row_invariant=True)
    together = plan.linear(rows, weight, None)
    assert all(torch.equal(plan.linear(rows[i], weight, None), together[i]) for i in range(16))
    assert plan.linear(rows[0][None, None], weight, None).shape == (1, 1, 576)


def test_stock_kernels_run_sdpa_and_give_the_row_invariant_attention_back(model):
    engine = Engine(model, row_invariant=True)
    with stock_kernels(engine.model):
        assert engine.model.config._attn_implementation == "sdpa"
    assert engine.model.config._attn_implementation == ROW_INVARIANT_ATTENTION


def test_long_causal_passes_match_sdpa(model):
    """Prefill and training passes (many rows, no mask) keep PyTorch's fused attention: same output."""
    ids = torch.arange(100)[None] % 512
    engine = Engine(model, row_invariant=True)
    engine.target.use_native(False)
    with torch.inference_mode():
        with stock_kernels(model):
            reference = model(ids).logits
        states = engine.target.causal_states(ids, [])
        logits = engine.target.logits(states[engine.target.n_layers])
    assert torch.equal(logits, reference[0].float())


@pytest.fixture(scope="module")
def bf16_engine():
    return Engine.load(dtype="bfloat16")


@pytest.mark.parametrize("method,options", [("pld", {}), ("eagle", {}), ("sps", {"draft": "eagle"})])
def test_default_model_in_bf16_equals_ar(bf16_engine, method, options):
    engine = bf16_engine
    prompt = "Summarize in two sentences: the river rose after three days of rain, flooding the low fields " \
             "by the mill, and the villagers moved their animals to the hill above the church."
    reference = engine.run(prompt, "ar", max_new_tokens=64).token_ids
    assert engine.run(prompt, method, max_new_tokens=64, **options).token_ids == reference


def test_the_default_models_bf16_step_reads_its_gguf_blocks(bf16_engine):
    """The default model keeps its 211 product weights' GGUF blocks (30 layers × 7, and the tied head), and on a
    build that widens them every one passes packing's bit-for-bit check and is what a step reads (the tests
    above then compare those steps with `ar`)."""
    from engines.model import gguf_blocks

    kept = [p for p in bf16_engine.model.parameters() if gguf_blocks.blocks_of(p) is not None]
    assert len(kept) == 30 * 7 + 1
    native = bf16_engine.target.native
    if native is None or not native._quantized:
        pytest.skip("this build widens no GGUF blocks for bf16")
    bf16_engine.run("Name a colour.", "ar", max_new_tokens=2)
    assert all(gguf_blocks.bytes_read(p) == gguf_blocks.blocks_of(p).blocks.nbytes for p in kept)
