"""Quantized panels (engines/model/gguf_blocks.py, step.c's Q4_1 and Q8_0 panels): a bf16 model whose weights keep
the GGUF blocks they were dequantized from computes, reading the blocks, exactly the bits it computes reading its
bf16 weights. Tiny random Llamas whose weights are made from random blocks; each test well under a second."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from engines import Engine
from engines.model import gguf_blocks
from engines.model.native import step as native_step
from tests.test_native_step import odd_llama

gguf = pytest.importorskip("gguf")

pytestmark = pytest.mark.skipif(not native_step.available(), reason="the native step does not build here")


def random_blocks(rows: int, cols: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    """GGUF blocks [rows, cols / 32 · block bytes] of random weights at the scale of a trained layer's."""
    blocks = cols // 32
    d = rng.uniform(0.002, 0.03, (rows, blocks, 1)).astype(np.float16)
    if kind == "Q4_1":
        m = (-d.astype(np.float32) * rng.uniform(6, 9, (rows, blocks, 1))).astype(np.float16)
        q = rng.integers(0, 16, (rows, blocks, 32), dtype=np.uint8)
        packed = q[..., :16] | q[..., 16:] << 4
        raw = np.concatenate([d.view(np.uint8), m.view(np.uint8), packed], axis=-1)
    else:
        q = rng.integers(-127, 128, (rows, blocks, 32)).astype(np.int8)
        raw = np.concatenate([d.view(np.uint8), q.view(np.uint8)], axis=-1)
    return np.ascontiguousarray(raw.reshape(rows, -1))


def quantized_model(seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> torch.nn.Module:
    """``odd_llama`` (bf16 unless told) with every product weight whose in-dimension is a multiple of 32 made from
    random Q4_1 blocks (the head from Q8_0 ones) and keeping them, as the default model's weights keep the GGUF's: q, k,
    v, o, gate and up read blocks, down (200 wide) plain panels, in one layer."""
    model = odd_llama(dtype)
    rng = np.random.default_rng(seed)
    weights = [module.weight for name, module in model.named_modules()
               if isinstance(module, torch.nn.Linear) and module.weight.shape[1] % 32 == 0]
    assert len(weights) == 2 * 6 + 1  # two layers' q, k, v, o, gate, up, and the head
    with torch.no_grad():
        for weight in weights:
            kind = "Q8_0" if weight is model.lm_head.weight else "Q4_1"
            raw = random_blocks(*weight.shape, kind, rng)
            values = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind])
            weight.copy_(torch.from_numpy(values))  # in bf16 rounded once, as loading the default model does
            weight.__dict__[gguf_blocks.ATTRIBUTE] = gguf_blocks.GGUFBlocks(gguf_blocks.FORMATS[kind], raw)
    return model


def reads_blocks(stack) -> bool:
    return bool(stack.native is not None and stack.native._quantized)


def reading_blocks(seed: int):
    """A model made from random blocks and its stack, or a skip where this build widens no GGUF blocks."""
    model = quantized_model(seed=seed)
    stack = Engine(model).target
    if not reads_blocks(stack):
        pytest.skip("this build widens no GGUF blocks")
    return model, stack


def logits_for_every_row_count(stack, prefix: list[int], tokens: list[int]) -> list[torch.Tensor]:
    with torch.inference_mode():
        cache = stack.new_cache(96)
        stack.forward(prefix, cache)
        out = []
        for n in range(1, len(tokens) + 1):
            out.append(stack.forward(tokens[:n], cache))
            cache.crop(len(prefix))
        return out


def one_row_steps_on_one_thread(stack, prefix: list[int], tokens: list[int]) -> torch.Tensor:
    """The logits of ``tokens`` fed one at a time after ``prefix``, on one thread: what every row count must give."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            cache = stack.new_cache(96)
            stack.forward(prefix, cache)
            return torch.cat([stack.forward([token], cache) for token in tokens])
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_reading_the_blocks_gives_every_row_count_the_bits_of_the_plain_panels(monkeypatch, dtype):
    """Rows 1–20: the widening tile, and past BLOCK_ROWS the plain panels kept beside the blocks; each row
    count's logits equal those of the same model on plain panels, and of one-row steps on one thread. (fp32
    reads blocks in the AVX2 build only: `SPECVIZ_NATIVE_ISA=avx2`.)"""
    model = quantized_model(dtype=dtype)
    quantized = Engine(model).target
    if not reads_blocks(quantized):
        pytest.skip(f"this build widens no GGUF blocks for {dtype}: every weight reads plain panels")
    monkeypatch.setenv(native_step.QUANTIZED_VARIABLE, "0")
    plain = Engine(quantized_model(dtype=dtype)).target  # the same weights (a model's layers serve one step)
    assert not reads_blocks(plain)
    prefix, tokens = list(range(3, 12)), [(13 * i + 7) % 200 for i in range(20)]
    read = logits_for_every_row_count(quantized, prefix, tokens)
    reference = logits_for_every_row_count(plain, prefix, tokens)
    for n, (a, b) in enumerate(zip(read, reference), 1):
        assert torch.equal(a, b), f"{n} rows: reading the blocks changed the logits"
    stepped = one_row_steps_on_one_thread(quantized, prefix, tokens)
    assert torch.equal(read[-1], stepped)
    checked = model.model.layers[0].__dict__["_specviz_weights"]
    assert checked.formats == 0x011111  # q, k, v, o, gate ‖ up from Q4_1 blocks; down (200 wide) plain


def test_blocks_that_no_longer_match_their_weight_are_left_for_the_weight(caplog):
    """A weight changed after its blocks were kept is read from plain panels (with a warning), so the
    changed weight is what computes."""
    model, _ = reading_blocks(seed=1)
    q = model.model.layers[1].self_attn.q_proj.weight
    with torch.no_grad():
        q[0, 0] += 0.5
    with caplog.at_level(logging.WARNING):
        stack = Engine(model).target
        logits = logits_for_every_row_count(stack, list(range(3, 12)), [5, 6, 7])
    assert "do not widen to the weight the model holds" in caplog.text
    assert model.model.layers[1].__dict__["_specviz_weights"].formats & 0xF == 0  # q plain, the rest blocks
    gguf_blocks_kept = q.__dict__.pop(gguf_blocks.ATTRIBUTE)
    assert gguf_blocks_kept is not None
    plain = Engine(model).target  # its layers now serve this step, which finds no blocks on q
    for n, expected in enumerate(logits_for_every_row_count(plain, list(range(3, 12)), [5, 6, 7]), 1):
        assert torch.equal(logits[n - 1], expected)


def test_the_scalar_widening_is_the_vector_one_and_both_are_numpys():
    """step.c's reference widening (every build has it) and its AVX-512 one give the bf16 of numpy's
    dequantization, weight by weight, in both formats; rows past N pad with zeros."""
    lib = native_step._library()
    rng = np.random.default_rng(4)
    for kind, fmt in gguf_blocks.FORMATS.items():
        rows, cols = 70, 96  # a panel and a few rows more
        raw = random_blocks(rows, cols, kind, rng)
        expected = torch.from_numpy(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind])).to(torch.bfloat16)
        packed = torch.empty(lib.specviz_quantized_bytes(rows, cols, fmt), dtype=torch.uint8)
        assert lib.specviz_pack_quantized(raw.ctypes.data, fmt, rows, cols, packed.data_ptr()) == 0
        plain = torch.empty(lib.specviz_packed_elems(rows, cols, 1), dtype=torch.bfloat16)
        assert lib.specviz_pack(expected.data_ptr(), rows, cols, 1, plain.data_ptr()) == 0
        widened = torch.empty_like(plain)
        assert lib.specviz_unpack_quantized(packed.data_ptr(), fmt, rows, cols, 1, widened.data_ptr()) == 0
        assert torch.equal(widened.view(torch.int16), plain.view(torch.int16)), kind
        as_fp32 = torch.empty(lib.specviz_packed_elems(rows, cols, 0), dtype=torch.float32)
        assert lib.specviz_unpack_quantized(packed.data_ptr(), fmt, rows, cols, 0, as_fp32.data_ptr()) == 0
        exact = torch.from_numpy(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind]))
        fp32_plain = torch.empty_like(as_fp32)
        assert lib.specviz_pack(exact.data_ptr(), rows, cols, 0, fp32_plain.data_ptr()) == 0
        assert torch.equal(as_fp32, fp32_plain), f"{kind}: the scalar widening in fp32"


def test_the_boundary_refuses_a_format_it_cannot_read():
    """A K that is no multiple of 32, or an unknown format code, is refused with an error code, never read."""
    lib = native_step._library()
    raw = np.zeros((4, 40), dtype=np.uint8)
    out = torch.empty(4096, dtype=torch.uint8)
    assert lib.specviz_quantized_bytes(4, 48, 1) == 0
    assert lib.specviz_pack_quantized(raw.ctypes.data, 1, 4, 48, out.data_ptr()) == -8
    assert lib.specviz_pack_quantized(raw.ctypes.data, 7, 4, 64, out.data_ptr()) == -8
    with pytest.raises(ValueError, match="format this build cannot read"):
        native_step._checked(-8, "layers")


def test_a_linear_map_on_blocks_widens_panels_for_many_rows_and_keeps_the_bits():
    """``NativeStep.linear`` on a weight that keeps blocks (a drafter's map on the target's weights): 1–40 rows,
    through the widening tile and, past its rows, through a panel widened once into scratch (with AMX tiles: one
    tile, two, then pieces), equal bit for bit to the same map on plain panels."""
    model, stack = reading_blocks(seed=2)
    native = stack.native
    weight = model.model.layers[0].mlp.up_proj.weight
    plain_weight = weight.detach().clone()  # the same values, no blocks
    x = torch.randn(40, weight.shape[1]).to(torch.bfloat16)
    for rows in (1, 5, 12, 13, 20, 32, 40):
        assert torch.equal(native.linear(x[:rows], weight), native.linear(x[:rows], plain_weight)), rows
    assert native_step._format(native.packed(weight)) == gguf_blocks.FORMATS["Q4_1"]


def test_a_drafters_head_rows_read_the_targets_blocks_and_keep_the_bits():
    """A drafter's draft-vocabulary head (``SharedHead``: rows gathered from the target's head) keeps those rows of
    the target head's Q8_0 blocks, and the native step reads them: its logits, through the norm and head or the
    bare linear map, equal bit for bit those of the same rows on plain panels, at 1 row and at many."""
    from engines.drafters.heads import SharedHead

    model, stack = reading_blocks(seed=4)
    vocab = torch.tensor([7, 3, 150, 41, 0, 199, 88, 120, 5, 64, 33, 140, 17, 99, 160, 101])
    shared = SharedHead(stack, vocab)
    rows = shared.rows(torch.bfloat16)
    kept = gguf_blocks.blocks_of(rows)
    assert kept is not None and np.array_equal(kept.blocks, gguf_blocks.blocks_of(model.lm_head.weight).blocks[vocab])
    plain = rows.clone()  # the same values, no blocks
    native, norm = stack.native, stack.backbone.norm
    for n in (1, 3, 12, 20):
        hidden = torch.randn(1, n, rows.shape[1]).to(torch.bfloat16)
        with torch.inference_mode():  # as the engine drafts: with gradients on, the head keeps PyTorch's path
            assert torch.equal(shared.logits(hidden), native.linear(hidden, plain)), n
            assert torch.equal(shared.logits(hidden, norm), native.head(hidden, norm, plain).view(1, n, -1)), n
    assert native_step._format(native.packed(rows)) == gguf_blocks.FORMATS["Q8_0"]


def test_a_step_counts_the_bytes_it_reads():
    """The bytes one step reads (the ceiling's numerator): a weight read as blocks counts their bytes, before
    packing where the step would read them and after it where the check let it; a weight whose blocks failed
    the check counts its own."""
    from engines.model.verify_cost import weight_bytes

    model, stack = reading_blocks(seed=3)
    q = model.model.layers[0].self_attn.q_proj.weight
    blocks = gguf_blocks.blocks_of(q).blocks.nbytes
    assert stack.native.reads_blocks(q) and gguf_blocks.bytes_read(q, True) == blocks < q.numel() * 2
    with torch.no_grad():
        q[0, 0] += 0.5  # fails the check at packing
    own = sum(p.numel() * p.element_size() for p in model.parameters())
    logits_for_every_row_count(stack, [1, 2, 3], [4])
    assert gguf_blocks.bytes_read(q) == q.numel() * 2  # its own bytes, whatever readable says
    read = weight_bytes(model)
    saved = sum(p.numel() * 2 - gguf_blocks.blocks_of(p).blocks.nbytes for p in model.parameters()
                if gguf_blocks.blocks_of(p) is not None and p is not q)
    assert read == own - saved


def test_the_tensor_table_reader_finds_what_ggufs_own_reader_finds():
    """`gguf_blocks`' own reader of the default model's file (metadata skipped, strings and arrays included):
    the same Q4_1 and Q8_0 tensors, byte for byte, as `gguf.GGUFReader`, which takes ~2.7 s to parse it."""
    from engines.model import loading

    path = str(loading._gguf_path())
    ours = gguf_blocks._tensors(path)
    theirs = {t.name: (t.tensor_type.name, t.data) for t in gguf.GGUFReader(path).tensors
              if t.tensor_type.name in gguf_blocks.FORMATS}
    assert ours.keys() == theirs.keys() and len(ours) == 30 * 7 + 1
    for name, (kind, data) in theirs.items():
        assert ours[name][0] == kind and np.array_equal(ours[name][1], data), name
