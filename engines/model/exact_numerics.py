"""Row-invariant numerics: a forward over n tokens computes every row bit for bit as a one-token step would.

Why it exists: in bf16 the greedy output of a method that verifies chunks or trees drifted from `ar`'s in
more than half the benchmark's turns, although the methods are lossless. Bisected on the default model
(2-core AMD EPYC, Zen 5), two operations round a row differently depending on how many rows share the call:

- a one-row bf16 matmul takes a gemv path, a many-row one a gemm path; every product of two rows or more
  gives each row the same bits, whatever the row count, but one row alone does not;
- PyTorch's fused attention (``sdpa``) reduces one query differently from n queries under a mask.

Once one element differs by an ulp, the next near-tie between two tokens (bf16 logits are 0.125 apart near
20) decides differently. The fix here: a one-row product runs as two identical rows (free where two rows
cost what one does: bf16 on this CPU; see :class:`engines.model.kernels.KernelPlan`), and attention over a few
query rows is computed in float64, where a different summation order cannot change any value after rounding
back to bf16 (products of bf16 numbers are exact in float64, and the rest rounds ~1e-16 relative). Long
query blocks (prefill, training passes) keep ``sdpa``: every method prefills the same way.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

ROW_INVARIANT_ATTENTION = "specviz_row_invariant"
# query rows at most for the float64 path: every verification validation lets through (the root and
# engines.core.context.DRAFT_MARGIN drafted tokens: a chain of γ = 64, CATS's 32 drafts and 32 corrections); never a prefill
MAX_EXACT_ROWS = 65


def row_invariant_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0, **kwargs):
    """Hugging Face's attention interface: ``query`` ``[B, H, q, d]``, ``key``/``value`` ``[B, Hkv, L, d]``,
    an additive ``attention_mask`` ``[B, 1, q, ≥L]`` or ``None`` (one token seeing everything cached)."""
    rows = query.shape[2]
    if rows > MAX_EXACT_ROWS or (attention_mask is None and rows > 1) or module.training:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                      dropout=dropout, **kwargs)
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    # grouped-query attention without copying keys: the heads sharing a kv head become extra query rows
    grouped = query.double().reshape(batch, kv_heads, groups * rows, dim)
    scores = torch.matmul(grouped, key.double().transpose(-1, -2)) * scaling
    if attention_mask is not None:
        mask = attention_mask[:, :, :, : key.shape[-2]].double()
        scores = scores + mask.repeat(1, 1, groups, 1)
    out = torch.matmul(torch.softmax(scores, dim=-1), value.double())
    out = out.reshape(batch, heads, rows, dim).to(query.dtype)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ROW_INVARIANT_ATTENTION, row_invariant_attention)


def default_row_invariant(dtype: torch.dtype, device: torch.device) -> bool:
    """On where it is measured to be needed and to cost nothing: 16-bit dtypes on the CPU. (In fp32 the
    drift is rare and one-row fp32 products are much cheaper through other kernels; on a GPU it is
    untested.)"""
    return dtype in (torch.bfloat16, torch.float16) and device.type == "cpu"


def use_row_invariant_attention(model: torch.nn.Module, enabled: bool) -> None:
    model.config._attn_implementation = ROW_INVARIANT_ATTENTION if enabled else "sdpa"


@contextmanager
def stock_attention(model: torch.nn.Module):
    """PyTorch's own fused attention inside the block (Hugging Face's ``generate`` as its users run it)."""
    before = model.config._attn_implementation
    model.config._attn_implementation = "sdpa"
    try:
        yield model
    finally:
        model.config._attn_implementation = before
