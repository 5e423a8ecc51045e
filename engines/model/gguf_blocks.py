"""The default model's quantized blocks, kept beside the weights they were dequantized into.

Why: a decode step reads every weight once, so on a CPU its time is the weights' bytes over the memory's read
rate. The default model is a GGUF whose layers are Q4_1 (5 bits a weight) and whose head is Q8_0 (8.5 bits);
the bf16 model holds those values rounded once to bf16, 16 bits a weight. The native step can read the blocks
instead (96 MB a step where bf16 panels take 269) and widen each panel to the bf16 panel it would otherwise
read, so every product keeps its bits. This module only finds each weight's blocks, in the model's row order;
``engines.model.native.step`` decides whether to use them, and checks, weight by weight, that they widen to
exactly the weight the model holds before it does.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

# step.c's format codes
FORMATS = {"Q4_1": 1, "Q8_0": 2}
ATTRIBUTE = "_specviz_gguf_blocks"

# a Llama layer's product weights: the GGUF's name for each, and the model's
_LAYER_WEIGHTS = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                  "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                  "ffn_down": "mlp.down_proj"}


@dataclass(frozen=True)
class GGUFBlocks:
    """One weight's blocks: ``blocks`` ``[out, in / 32 · block bytes]`` uint8, rows in the model's order."""

    format: int
    blocks: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        per_block = 20 if self.format == FORMATS["Q4_1"] else 34
        return self.blocks.shape[0], self.blocks.shape[1] // per_block * 32


# GGUF's type codes of the blocks read here, with (weights, bytes) per block
_BLOCK_TYPES = {3: ("Q4_1", 32, 20), 8: ("Q8_0", 32, 34)}
# bytes of each scalar value type of a metadata entry (8: string, 9: array are read apart)
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


@functools.lru_cache(maxsize=2)
def _tensors(path: str) -> dict[str, tuple[str, np.ndarray]]:
    """The Q4_1 and Q8_0 tensors of a GGUF file: each one's type name and blocks ``[rows, row bytes]``,
    memory-mapped. Why its own reader: ``gguf.GGUFReader`` builds an object for each of the tokenizer's ~100k
    strings and took 2.7 s; this skips them (~0.1 s). The layout is GGUF v2/v3's: a header, metadata entries,
    tensor infos, then the data at the file's alignment."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    at = 0

    def read(fmt: str) -> int:
        nonlocal at
        (value,) = struct.unpack_from("<" + fmt, data, at)
        at += struct.calcsize("<" + fmt)
        return value

    def string() -> bytes:
        nonlocal at
        length = read("Q")
        at += length
        return bytes(data[at - length:at])

    def skip_value(kind: int) -> None:
        nonlocal at
        if kind == 8:
            length = read("Q")  # read first: `at += read(…)` would add to `at` as it was before the read
            at += length
        elif kind == 9:
            item, count = read("I"), read("Q")
            if item in _SCALAR_BYTES:
                at += count * _SCALAR_BYTES[item]
            else:
                for _ in range(count):
                    skip_value(item)
        else:
            at += _SCALAR_BYTES[kind]

    if bytes(data[:4]) != b"GGUF":
        raise ValueError(f"{path} is no GGUF file")
    at = 4
    version, tensor_count, entries = read("I"), read("Q"), read("Q")
    if version < 2:
        raise ValueError(f"{path}: GGUF version {version} is not read here (2 and later are)")
    alignment = 32
    for _ in range(entries):
        key, kind = string(), read("I")
        if key == b"general.alignment" and kind == 4:
            alignment = read("I")
        else:
            skip_value(kind)
    infos = []
    for _ in range(tensor_count):
        name, dims = string().decode("utf-8"), read("I")
        shape = [read("Q") for _ in range(dims)]
        infos.append((name, shape, read("I"), read("Q")))
    start = (at + alignment - 1) // alignment * alignment
    found = {}
    for name, shape, kind, offset in infos:
        if kind not in _BLOCK_TYPES or len(shape) != 2:
            continue
        type_name, per_block, block_bytes = _BLOCK_TYPES[kind]
        cols, rows = shape  # GGUF lists the fastest-moving dimension first
        row_bytes = cols // per_block * block_bytes
        found[name] = (type_name, data[start + offset:start + offset + rows * row_bytes].reshape(rows, row_bytes))
    return found


def _unpermuted_rows(rows: int, heads: int) -> np.ndarray | None:
    """Which GGUF row each model row of q or k is: llama.cpp's converter permuted them for its rotary layout and
    transformers' GGUF loader permutes them back (``LlamaTensorProcessor._reverse_permute_weights``, applied
    here to the row numbers themselves, so the two cannot drift apart). ``None`` where this transformers has no
    such function: q and k then keep no blocks (packing's check would refuse a wrong order anyway)."""
    try:
        from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

        return np.asarray(LlamaTensorProcessor()._reverse_permute_weights(np.arange(rows), heads, heads))
    except (ImportError, AttributeError, TypeError):
        return None


def attach(model: torch.nn.Module, gguf_path: Path) -> int:
    """Keep each loaded product weight's GGUF blocks on the weight tensor (``ATTRIBUTE``); weights on the meta
    device (a lane's model holds a few layers) and weights of other types are skipped. Returns how many were
    attached."""
    tensors = _tensors(str(gguf_path))
    config = model.config
    backbone = model.model
    found = 0

    def keep(weight: torch.Tensor | None, name: str, heads: int | None = None) -> None:
        nonlocal found
        if weight is None or weight.device.type == "meta" or name not in tensors:
            return
        kind, data = tensors[name]
        if kind not in FORMATS or data.ndim != 2 or data.shape[0] != weight.shape[0]:
            return
        order = _unpermuted_rows(data.shape[0], heads) if heads else None
        if heads and order is None:
            return
        blocks = data[order] if heads else data
        weight.__dict__[ATTRIBUTE] = GGUFBlocks(FORMATS[kind], blocks)
        found += 1

    for i, layer in enumerate(backbone.layers):
        for gguf_name, module_name in _LAYER_WEIGHTS.items():
            heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}.get(gguf_name)
            keep(getattr(layer.get_submodule(module_name), "weight", None), f"blk.{i}.{gguf_name}.weight", heads)
    keep(backbone.embed_tokens.weight, "token_embd.weight")
    head = getattr(model, "lm_head", None)
    if head is not None and head.weight is not backbone.embed_tokens.weight and "output.weight" not in tensors:
        keep(head.weight, "token_embd.weight")  # tied in the GGUF, and loaded as two tensors
    else:
        keep(getattr(head, "weight", None), "output.weight")
    return found


def blocks_of(weight: torch.Tensor) -> GGUFBlocks | None:
    """The blocks kept on ``weight`` if it still has the shape they were kept for."""
    kept = weight.__dict__.get(ATTRIBUTE)
    return kept if isinstance(kept, GGUFBlocks) and kept.shape == tuple(weight.shape) else None


def keep_rows(rows: torch.Tensor, blocks: GGUFBlocks, ids: np.ndarray) -> None:
    """Keep on ``rows`` (a weight's rows ``ids``, gathered: a drafter's draft-vocabulary head) those rows of the
    weight's ``blocks``. The native step reads them only where they widen to ``rows`` exactly (it checks)."""
    rows.__dict__[ATTRIBUTE] = GGUFBlocks(blocks.format, np.ascontiguousarray(blocks.blocks[ids]))


_READ = "_specviz_blocks_read"


def mark_read(weight: torch.Tensor, read: bool) -> None:
    """Record whether the native step's products read ``weight``'s blocks (it checked they widen to it)."""
    weight.__dict__[_READ] = read


def bytes_read(weight: torch.Tensor, readable: bool = False) -> int:
    """The bytes one decode step reads of ``weight``: its blocks' where the products read them, else its own.
    Before the native step has packed it (and checked its blocks), ``readable`` says whether it would read them
    (``NativeStep.reads_blocks``)."""
    blocks = blocks_of(weight)
    read = weight.__dict__.get(_READ)
    if blocks is not None and (read if read is not None else readable):
        return blocks.blocks.nbytes
    return weight.numel() * weight.element_size()


def quantize_q8_0(weight: torch.Tensor) -> GGUFBlocks:
    """``weight`` ``[out, in]`` (in a multiple of 32) quantized to Q8_0 blocks, llama.cpp's format: each block of 32
    gets d = max|w| / 127 (stored as fp16) and q = w / d rounded to nearest even, in −127..127. Why: with int8 products
    (``SPECVIZ_PRODUCTS=int8``) a weight the GGUF did not give blocks (a drafter's own layers, its head's gathered
    rows, any other model's weights) is read as these: half the bytes of bf16 and integer dot products, at the
    price of its numbers (each weight moved by at most d / 2)."""
    rows, cols = weight.shape
    if cols % 32:
        raise ValueError(f"weight's in-dimension must be a multiple of 32 for Q8_0 blocks, got {cols}")
    w = weight.detach().float().cpu().numpy().reshape(rows, cols // 32, 32)
    d = (np.abs(w).max(-1, keepdims=True) / 127).astype(np.float16)
    scale = d.astype(np.float32)
    q = np.clip(np.rint(np.divide(w, scale, out=np.zeros_like(w), where=scale != 0)), -127, 127).astype(np.int8)
    raw = np.concatenate([d.view(np.uint8), q.view(np.uint8)], axis=-1).reshape(rows, -1)
    return GGUFBlocks(FORMATS["Q8_0"], np.ascontiguousarray(raw))
