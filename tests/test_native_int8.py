"""Int8 products (``SPECVIZ_PRODUCTS=int8``, step.c's Q4_1_I8 and Q8_0_I8): a model whose weights keep GGUF blocks
computes with its inputs quantized to int8, block by block (llama.cpp's numerics). Its logits are not the exact
products' but are the same for every row count and thread count, so every method's greedy output equals `ar`'s
under them. Tiny random Llamas (head_dim 32) whose weights are made from random blocks; each test about a second."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from engines import Engine
from engines.model import gguf_blocks
from engines.model.native import step as native_step
from tests.test_native_quantized import logits_for_every_row_count, one_row_steps_on_one_thread, random_blocks

gguf = pytest.importorskip("gguf")

pytestmark = pytest.mark.skipif(not native_step.available(), reason="the native step does not build here")


def int8_model(seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> torch.nn.Module:
    """A 2-layer Llama (d 128, 4 heads of 32, 2 kv heads, MLP 224, vocabulary 200) whose every product weight is
    made from random Q4_1 blocks (the head from Q8_0 ones) and keeps them, as the default model's weights do."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=200, hidden_size=128, intermediate_size=224, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval().to(dtype)
    model.config._attn_implementation = "sdpa"
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                kind = "Q8_0" if module is model.lm_head else "Q4_1"
                raw = random_blocks(*module.weight.shape, kind, rng)
                values = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind])
                module.weight.copy_(torch.from_numpy(values))
                module.weight.__dict__[gguf_blocks.ATTRIBUTE] = gguf_blocks.GGUFBlocks(gguf_blocks.FORMATS[kind], raw)
    return model


def int8_stack(monkeypatch, dtype: torch.dtype = torch.bfloat16, seed: int = 0):
    monkeypatch.setenv(native_step.PRODUCTS_VARIABLE, "int8")
    model = int8_model(seed, dtype)
    stack = Engine(model).target
    assert stack.native is not None and stack.native.int8_products
    return model, stack


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_int8_products_give_every_row_count_the_bits_of_one_row_steps_on_one_thread(monkeypatch, dtype):
    """Rows 1–20 (past the tile's 8 rows, so more than one tile a panel) against one-row steps on one thread."""
    model, stack = int8_stack(monkeypatch, dtype)
    prefix, tokens = list(range(3, 12)), [(13 * i + 7) % 200 for i in range(20)]
    read = logits_for_every_row_count(stack, prefix, tokens)
    stepped = one_row_steps_on_one_thread(stack, prefix, tokens)
    for n, logits in enumerate(read, 1):
        assert torch.equal(logits, stepped[:n]), f"{n} rows: not the bits of one-row steps"
    checked = model.model.layers[0].__dict__["_specviz_weights"]
    assert checked.formats == 0x333333  # every product from Q4_1 blocks, laid out for int8 products
    assert all(address is None for address in checked.plain)  # no plain panels: no row count may read them


def test_int8_products_are_not_the_exact_ones_and_stay_near_them(monkeypatch):
    """The switch changes the numbers (quantized inputs), by about what 8-bit inputs allow."""
    _, stack = int8_stack(monkeypatch)
    monkeypatch.setenv(native_step.PRODUCTS_VARIABLE, "exact")
    exact = Engine(int8_model()).target
    assert not exact.native.int8_products
    tokens = [(13 * i + 7) % 200 for i in range(12)]
    with torch.inference_mode():
        a, b = stack.forward(tokens, stack.new_cache(32)), exact.forward(tokens, exact.new_cache(32))
    assert not torch.equal(a, b)
    assert (a - b).abs().max() < 0.05 * b.abs().max()


def blocked_weight(rows: int, cols: int, kind: str, rng: np.random.Generator, dtype=torch.float32) -> torch.Tensor:
    """A weight made from random GGUF blocks of ``kind`` that keeps them."""
    raw = random_blocks(rows, cols, kind, rng)
    weight = torch.from_numpy(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind])).to(dtype)
    weight.__dict__[gguf_blocks.ATTRIBUTE] = gguf_blocks.GGUFBlocks(gguf_blocks.FORMATS[kind], raw)
    return weight


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_the_vector_int8_product_is_the_scalar_one_bit_for_bit(monkeypatch, kind):
    """Where the build has AVX-512 VNNI, the tile and the scalar form (every other build's) give the same bits, for
    1–17 rows (each tile shape, and two tiles a panel). Inputs of one sign make the blocks' integer sums large
    enough that their products with the scales round: there, a float step taken in another order changes bits."""
    _, stack = int8_stack(monkeypatch, torch.float32)
    lib = stack.native.lib
    if not lib.specviz_int8_vector():
        pytest.skip("this build runs the int8 products in their scalar form only")
    rng = np.random.default_rng(5)
    weight = blocked_weight(144, 96, kind, rng)
    scalar = ctypes.c_int.in_dll(lib, "specviz_int8_scalar")
    try:
        for rows in range(1, 18):
            x = torch.from_numpy(rng.uniform(0.5, 1.0, (rows, 96)).astype(np.float32))
            out = []
            for force in (0, 1):
                scalar.value = force
                out.append(stack.native.linear(x, weight))
            assert torch.equal(out[0], out[1]), f"{kind}, {rows} rows: the vector form's bits differ"
    finally:
        scalar.value = 0
    assert stack.native.packed(weight).__dict__["_specviz_format"] == gguf_blocks.FORMATS[kind] + 2


def reference_int8_linear(x: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """y = x W^T as the int8 products define it, in float64: each 32-block of a row of x scaled by max|x| / 127
    and rounded to int8 (to nearest even), times the Q4_1 block's d·q + m."""
    rows, k = x.shape
    blocks = raw.reshape(raw.shape[0], k // 32, 20)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
    q = np.concatenate([blocks[..., 4:] & 15, blocks[..., 4:] >> 4], axis=-1).astype(np.float64)  # [N, B, 32]
    xb = x.reshape(rows, k // 32, 32).astype(np.float32)
    scale = np.abs(xb).max(-1) / np.float32(127)
    inverse = np.where(scale != 0, np.float32(1) / np.where(scale != 0, scale, 1), 0).astype(np.float32)
    qx = np.clip(np.rint(xb * inverse[..., None]), -127, 127)
    dot = np.einsum("rbk,nbk->rnb", qx, q)
    return np.einsum("rnb,rb->rn", dot * d[None] + m[None] * qx.sum(-1)[:, None], scale.astype(np.float64))


def test_an_int8_linear_map_computes_the_quantized_products_numpy_computes(monkeypatch):
    _, stack = int8_stack(monkeypatch, torch.float32)
    rng = np.random.default_rng(3)
    weight = blocked_weight(80, 96, "Q4_1", rng)
    x = torch.from_numpy(rng.normal(0, 1, (5, 96)).astype(np.float32))
    y = stack.native.linear(x, weight)
    reference = reference_int8_linear(x.numpy(), gguf_blocks.blocks_of(weight).blocks)
    assert np.allclose(y.numpy(), reference, rtol=1e-5, atol=1e-5 * np.abs(reference).max())
    assert not torch.allclose(y, x @ weight.T, rtol=1e-6, atol=1e-6)  # the inputs were quantized


@pytest.mark.parametrize("method,options", [("sps", {"gamma": 3, "draft_layers": 1}), ("eesd", {"gamma": 2, "exit_layer": 1}),
                                            ("pld", {"gamma": "auto"})])
def test_every_methods_greedy_output_equals_ars_under_int8_products(monkeypatch, method, options):
    monkeypatch.setenv(native_step.PRODUCTS_VARIABLE, "int8")
    engine = Engine(int8_model(seed=1))
    assert engine.target.native.int8_products
    prompt = [5, 6, 7, 5, 6, 7, 5, 6]
    reference = engine.run(prompt, "ar", max_new_tokens=24)
    assert engine.run(prompt, method, max_new_tokens=24, **options).token_ids == reference.token_ids


def test_an_unknown_products_setting_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(native_step.PRODUCTS_VARIABLE, "int4")
    with pytest.raises(ValueError, match="SPECVIZ_PRODUCTS must be one of"):
        native_step.products()


def test_int8_products_need_heads_of_whole_blocks(monkeypatch, caplog):
    """head_dim 24 (odd_llama's): attention's output cannot be quantized head by head, so the products stay exact."""
    from tests.test_native_quantized import quantized_model

    monkeypatch.setenv(native_step.PRODUCTS_VARIABLE, "int8")
    stack = Engine(quantized_model()).target
    assert stack.native is not None and not stack.native.int8_products


def test_a_weight_without_blocks_reads_q8_0_blocks_made_from_it(monkeypatch):
    """A drafter's own weights (no GGUF blocks) read Q8_0 blocks made at packing: within half a step d of the
    weight, and the product is what those blocks' int8 product gives."""
    _, stack = int8_stack(monkeypatch, torch.float32)
    rng = np.random.default_rng(7)
    weight = torch.from_numpy(rng.normal(0, 0.05, (80, 96)).astype(np.float32))
    made = gguf_blocks.quantize_q8_0(weight)
    values = torch.from_numpy(gguf.quants.dequantize(made.blocks, gguf.GGMLQuantizationType.Q8_0))
    step = values.reshape(80, 3, 32).abs().amax(-1, keepdim=True) / 127
    assert ((values - weight).reshape(80, 3, 32).abs() <= step * 0.5 + 1e-6).all()
    x = torch.from_numpy(rng.normal(0, 1, (4, 96)).astype(np.float32))
    y = stack.native.linear(x, weight)
    assert stack.native.packed(weight).__dict__["_specviz_format"] == gguf_blocks.FORMATS["Q8_0"] + 2
    assert torch.allclose(y, x @ values.T, rtol=0.02, atol=0.02 * (x @ values.T).abs().max())
    assert not torch.equal(y, x @ weight.T)


@pytest.mark.parametrize("products", ["exact", "int8"])
def test_the_vector_input_is_the_column_by_column_one_bit_for_bit(monkeypatch, products):
    """step.c writes a bf16 model's product inputs 32 columns at a time (rounded in vectors, scattered k-major,
    quantized from registers) where it can; the column-by-column form is the reference: the same logits."""
    monkeypatch.setenv(native_step.PRODUCTS_VARIABLE, products)
    stack = Engine(int8_model()).target
    scalar = ctypes.c_int.in_dll(stack.native.lib, "specviz_input_scalar")
    tokens = [(13 * i + 7) % 200 for i in range(7)]  # up to 8 rows, where exact products take the vector form
    try:
        out = []
        for force in (0, 1):
            scalar.value = force
            with torch.inference_mode():
                out.append(stack.forward(tokens, stack.new_cache(32)))
    finally:
        scalar.value = 0
    assert torch.equal(out[0], out[1])
