"""The decoder layer the engine runs at inference: Llama's math written out, with fused, packed projections.

Decoding this model is some 200 small matrix products per token against weights that do not fit the
caches, so what each product costs decides the speed. Measured on a 2-core AMD EPYC (Zen 5, bf16):
``F.linear`` reads a 576×576 weight at ~27 GB/s and the 49k-row head at ~29 GB/s; oneDNN with the weight
packed once into its own blocked layout reads them at 44 and 49 GB/s, and a 3072×576 one (gate and up
fused) at ~99 GB/s, where ``F.linear`` reaches 51. So each layer here runs four products instead of seven
(q‖k‖v and gate‖up concatenated once at load time), each through the packed kernel, and gives every row
the same bits whatever the row count (see :mod:`engines.model.exact_numerics`): packed oneDNN products of two
rows or more agree row by row with each other and with ``F.linear``, and one row runs as two. In fp32 on a
CPU with AVX2 (a Zen 3 EPYC, where oneDNN reads weights at ~10 GB/s of ~19), up to 16 rows go through
:mod:`engines.model.small_m_kernel` instead, which streams at close to a plain read and is row-invariant by
construction; fp32 layers also normalise with one `F.rms_norm` call.

The Hugging Face layer stays the reference and the fallback: training passes (which need gradients), a
model whose layers stream from flash under a memory budget, and any layer this module does not recognise
run through it unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import eager_attention_forward, rotate_half

from engines.model import small_m_kernel


def packing_available(device: torch.device) -> bool:
    return (device.type == "cpu" and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


class Projection:
    """``x @ Wᵀ``: a few fp32 rows through :mod:`engines.model.small_m_kernel` where it runs, else oneDNN with ``W``
    packed once (on the CPU), else ``F.linear``."""

    def __init__(self, weight: torch.Tensor, row_invariant: bool):
        self.weight = weight.detach().contiguous()
        self.out_features = weight.shape[0]
        self.row_invariant = row_invariant
        self.small_m = small_m_kernel.applies(self.weight)
        self.packed = None
        if packing_available(weight.device) and weight.dtype in (torch.bfloat16, torch.float32):
            try:
                self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight, 2)
            except RuntimeError:  # oneDNN packs bf16 only on CPUs with AVX-512 or AVX-NE-CONVERT: F.linear then
                self.packed = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if self.small_m and rows <= small_m_kernel.MAX_ROWS:  # row-invariant by construction: no padding
            return small_m_kernel.product(x, self.weight)
        if rows == 1 and self.row_invariant:  # a one-row product rounds unlike a many-row one
            pair = x.reshape(1, -1).expand(2, -1).contiguous()
            return self._product(pair)[:1].reshape(*x.shape[:-1], self.out_features)
        return self._product(x)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            return F.linear(x, self.weight)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")


def rms_norm(module: nn.Module):
    """Llama's RMSNorm as one call: fp32 weights run ``F.rms_norm`` (16 µs a call on a Zen 3 EPYC where Hugging
    Face's module of six operations takes 35, 61 norms a token); 16-bit weights keep the module, whose upcast
    and rounding order the bf16 bits of every method depend on."""
    weight, eps = module.weight, getattr(module, "variance_epsilon", None)
    if weight.dtype != torch.float32 or eps is None:
        return module
    shape = (weight.shape[0],)
    return lambda hidden: F.rms_norm(hidden, shape, weight, eps)


class FusedLlamaLayer:
    """One Llama decoder layer's forward, reading the weights of the Hugging Face layer it was built from."""

    def __init__(self, layer: nn.Module, row_invariant: bool):
        attention, mlp = layer.self_attn, layer.mlp
        self.layer = layer
        self.attention = attention
        self.config = attention.config
        self.layer_idx = attention.layer_idx
        self.head_dim = attention.head_dim
        self.q_size = attention.q_proj.out_features
        self.kv_size = attention.k_proj.out_features
        self.intermediate = mlp.gate_proj.out_features
        self.heads, self.heads_kv = self.q_size // self.head_dim, self.kv_size // self.head_dim
        self.input_norm = rms_norm(layer.input_layernorm)
        self.post_attention_norm = rms_norm(layer.post_attention_layernorm)
        self.qkv = Projection(torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]),
                              row_invariant)
        self.o = Projection(attention.o_proj.weight, row_invariant)
        self.gate_up = Projection(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), row_invariant)
        self.down = Projection(mlp.down_proj.weight, row_invariant)

    @staticmethod
    def supports_attention(attention: nn.Module | None) -> bool:
        """Llama's attention projections, without biases (also CATS's attention-only block's)."""
        names = ("q_proj", "k_proj", "v_proj", "o_proj")
        return (attention is not None and all(hasattr(attention, n) for n in names)
                and all(getattr(attention, n).bias is None for n in names))

    @staticmethod
    def supports(layer: nn.Module) -> bool:
        """A Llama-shaped layer without biases (SmolLM2 and the tiny test models)."""
        mlp = getattr(layer, "mlp", None)
        return (FusedLlamaLayer.supports_attention(getattr(layer, "self_attn", None)) and mlp is not None
                and all(getattr(mlp, n, None) is not None and getattr(mlp, n).bias is None
                        for n in ("gate_proj", "up_proj", "down_proj"))
                and getattr(mlp.act_fn, "__class__", None).__name__ in ("SiLU", "SiLUActivation"))

    def __call__(self, hidden: torch.Tensor, positions: torch.Tensor, rotary: tuple, mask: torch.Tensor | None,
                 cache) -> torch.Tensor:
        batch, n, _ = hidden.shape
        qkv = self.qkv(self.input_norm(hidden))
        rotated = self.q_size + self.kv_size
        # q and k rotate as one block of heads: Llama's rotary formula, per element as it is, in half the calls
        qk = qkv[..., :rotated].view(batch, n, -1, self.head_dim).transpose(1, 2)
        cos, sin = (part.unsqueeze(1) for part in rotary)
        q, k = (qk * cos + rotate_half(qk) * sin).split([self.heads, self.heads_kv], dim=1)
        v = qkv[..., rotated:].view(batch, n, -1, self.head_dim).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        attended, _ = attend(self.attention, q, k, v, mask, scaling=self.attention.scaling, dropout=0.0)
        hidden = hidden + self.o(attended.reshape(batch, n, -1))
        gate, up = self.gate_up(self.post_attention_norm(hidden)).split(self.intermediate, dim=-1)
        return hidden + self.down(F.silu(gate) * up)


class LazyFusedLayer:
    """A :class:`FusedLlamaLayer` built on its first use. Where the native step runs (:mod:`engines.model.native.step`)
    it takes every inference forward of batch 1, so the packed copies of the weights (as large as the layers)
    would cost load time and memory for nothing; a batched pass, or a run with the native step off, builds them."""

    def __init__(self, layer: nn.Module, row_invariant: bool):
        self._args = (layer, row_invariant)
        self._built: FusedLlamaLayer | None = None

    def _layer(self) -> FusedLlamaLayer:
        if self._built is None:
            self._built = FusedLlamaLayer(*self._args)
        return self._built

    def __call__(self, *args) -> torch.Tensor:
        return self._layer()(*args)

    def __getattr__(self, name: str):
        return getattr(self._layer(), name)
