"""Mixture of Attentions (MoA, Zimmer et al. 2024): a drafter that reads the target's whole state.

EAGLE's head sees one vector per token, the target's last hidden state. MoA's drafter sees the target's
keys and values at *every* layer, through three attentions (the MoA paper, §3; sizes scaled to SmolLM2 in
``docs/moa.md``, "The drafter"):

- **LSA** (Layer Self-Attention), run once per verified token: the token's 30 per-layer (K, V) vectors,
  plus a learned layer-position embedding, go through one bidirectional transformer block over the
  *layer* axis; their mean is the token's row of the CA memory. It is the server's half in
  client–server mode: the server sends LSA rows, not 30 layers of KV.
- **SA** (Self-Attention): a causal block over the token embeddings, drafted tokens included, with its
  own KV cache. It produces the queries.
- **CA** (Cross-Attention): queries from SA, keys/values from the memory. Memory exists only for
  verified tokens, so a drafted token at depth d still reads the memory of the last verified one; the
  training mask (blocks of K ~ U[5, 15] that see only memory before the block) teaches exactly that.
  A learned null row keeps a query with no memory (a block at the start) well defined.
- **TLI** (Target Layer Inference) > 0: CA predicts the residual stream *before* the target's last TLI
  layers, and those frozen layers finish the job, reading the target's own keys/values for verified
  positions and draft-local ones (ĥ) for the rest, which are discarded after verification.

``lsa=False`` is the paper's −LSA ablation: the memory is the target's normed last hidden state per
token (what EAGLE reads), so the two differ only in what the drafter is allowed to see.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from engines.drafters.heads import SharedHead, _norm_like, same_eps, native_for_draft
from engines.model.kv_cache import KVCache
from engines.model.layers import LayerStack, decoder_pass

LSA_HEADS, LSA_MLP, SA_MLP, CA_MLP = 4, 1152, 256, 1008  # the scaled recipe: docs/moa.md, "The drafter"


def moa_name(tli: int, lsa: bool = True) -> str:
    """``moa-tli0``, ``moa-tli1``, ``moa-tli3``; the −LSA ablation adds ``-nolsa``."""
    return f"moa-tli{tli}" + ("" if lsa else "-nolsa")


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding on ``[B, H, T, D]`` with the target's own cos/sin ``[B, T, D]``."""
    return x * cos[:, None] + _rotate_half(x) * sin[:, None]


class SwiGLU(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class GroupedAttention(nn.Module):
    """Multi-head attention with fewer key/value heads than query heads (as the target's own layers)."""

    def __init__(self, query_width: int, memory_width: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q = nn.Linear(query_width, heads * head_dim, bias=False)
        self.k = nn.Linear(memory_width, kv_heads * head_dim, bias=False)
        self.v = nn.Linear(memory_width, kv_heads * head_dim, bias=False)
        self.o = nn.Linear(heads * head_dim, query_width, bias=False)

    def split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        return x.view(*x.shape[:-1], heads, self.head_dim).transpose(1, 2)  # [B, H, T, D]

    def keys_values(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split(self.k(memory), self.kv_heads), self.split(self.v(memory), self.kv_heads)

    def attend(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None,
               causal: bool = False) -> torch.Tensor:
        """``queries`` ``[B, H, T, D]``; keys/values ``[B, H_kv, S, D]``; ``mask`` additive or boolean."""
        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, is_causal=causal and mask is None,
                                             enable_gqa=True)
        return self.o(out.transpose(1, 2).reshape(*queries.shape[:1], queries.shape[2], -1))


def llama_view(norm1: nn.Module, attention: GroupedAttention, norm2: nn.Module, mlp: SwiGLU,
               cross: bool = False) -> nn.Module:
    """One of MoA's blocks under a Llama layer's names, sharing its modules, for the native step: SA is a Llama
    layer with a narrower MLP; CA (``cross``) one whose keys and values are the memory's, so its view has no
    ``k_proj`` or ``v_proj``. Kept out of the head's state dict (see :meth:`MoAHead.native_blocks`)."""
    view, attn, feed_forward = nn.Module(), nn.Module(), nn.Module()
    attn.q_proj, attn.o_proj = attention.q, attention.o
    if not cross:
        attn.k_proj, attn.v_proj = attention.k, attention.v
    attn.layer_idx = 0  # SA's own one-layer cache
    feed_forward.gate_proj, feed_forward.up_proj, feed_forward.down_proj = mlp.gate, mlp.up, mlp.down
    view.self_attn, view.mlp, view.input_layernorm, view.post_attention_layernorm = attn, feed_forward, norm1, norm2
    return view


class LayerSelfAttention(nn.Module):
    """One transformer block over the layer axis of a token's per-layer (K, V), then the mean over layers."""

    def __init__(self, n_layers: int, width: int, heads: int = LSA_HEADS, mlp: int = LSA_MLP):
        super().__init__()
        self.heads = heads
        self.input_norm = nn.RMSNorm(width, eps=1e-5)
        self.layer_position = nn.Parameter(torch.randn(n_layers, width) * 0.02)
        self.attn_norm = nn.RMSNorm(width, eps=1e-5)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.mlp_norm = nn.RMSNorm(width, eps=1e-5)
        self.mlp = SwiGLU(width, mlp)

    def forward(self, layer_kv: torch.Tensor) -> torch.Tensor:
        """``[..., L, 2·E_kv]`` → ``[..., 2·E_kv]``."""
        lead, (n_layers, width) = layer_kv.shape[:-2], layer_kv.shape[-2:]
        x = self.input_norm(layer_kv.reshape(-1, n_layers, width)) + self.layer_position
        q, k, v = self.qkv(self.attn_norm(x)).view(len(x), n_layers, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v)  # bidirectional: every layer sees every layer
        x = x + self.out(attended.transpose(1, 2).reshape(len(x), n_layers, width))
        x = x + self.mlp(self.mlp_norm(x))
        return x.mean(dim=1).view(*lead, width)


class MoAHead(nn.Module):
    """LSA + SA + CA (+ the target's last ``tli`` layers) + the target's frozen norm and head.

    The target's layers, embeddings and head are shared, never copied into the state dict."""

    kind = "moa"

    def __init__(self, stack: LayerStack, vocab_ids: torch.Tensor, tli: int = 0, lsa: bool = True):
        super().__init__()
        if not isinstance(tli, int) or not 0 <= tli < stack.n_layers:
            raise ValueError(f"tli must be an integer in [0, {stack.n_layers - 1}], got {tli!r}")
        config = stack.config
        d, heads, kv_heads = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or d // heads
        self.tli, self.uses_lsa = tli, lsa
        self.kv_width = kv_heads * head_dim
        self.memory_width = 2 * self.kv_width if lsa else d
        self._stack = [stack]
        self.head = SharedHead(stack, vocab_ids)
        self.lsa = LayerSelfAttention(stack.n_layers, 2 * self.kv_width) if lsa else None
        self.sa_norm = nn.RMSNorm(d, eps=1e-5)
        self.sa = GroupedAttention(d, d, heads, kv_heads, head_dim)
        self.sa_mlp_norm = nn.RMSNorm(d, eps=1e-5)
        self.sa_mlp = SwiGLU(d, SA_MLP)
        self.ca_norm = nn.RMSNorm(d, eps=1e-5)
        self.memory_norm = nn.RMSNorm(self.memory_width, eps=1e-5)
        self.null_memory = nn.Parameter(torch.randn(self.memory_width) * 0.02)
        self.ca = GroupedAttention(d, self.memory_width, heads, kv_heads, head_dim)
        self.ca_mlp_norm = nn.RMSNorm(d, eps=1e-5)
        self.ca_mlp = SwiGLU(d, CA_MLP)
        self.final_norm = _norm_like(stack).requires_grad_(False)

    @property
    def stack(self) -> LayerStack:
        return self._stack[0]

    @property
    def tli_layers(self) -> range:
        n = self.stack.n_layers
        return range(n - self.tli, n)

    # --- server half: the memory rows of verified tokens --------------------------------------------
    def memory_rows(self, layer_kv: torch.Tensor | None = None, feature: torch.Tensor | None = None) -> torch.Tensor:
        """LSA over ``layer_kv`` ``[..., L, 2·E_kv]``, or (−LSA) the normed last feature ``[..., E]`` as is."""
        if self.lsa is None:
            return feature
        return self.lsa(layer_kv)

    # --- client half -----------------------------------------------------------------------------
    def native_blocks(self) -> tuple[nn.Module, nn.Module]:
        """SA and CA as the native step takes them (:func:`llama_view`), made once and kept outside the module
        tree, so that neither the state dict nor ``parameters()`` sees them twice."""
        found = self.__dict__.get("_specviz_blocks")
        if found is None:
            found = (llama_view(self.sa_norm, self.sa, self.sa_mlp_norm, self.sa_mlp),
                     llama_view(self.ca_norm, self.ca, self.ca_mlp_norm, self.ca_mlp, cross=True))
            self.__dict__["_specviz_blocks"] = found
        return found

    def _native_for(self, hidden: torch.Tensor, attention: GroupedAttention, norms: tuple, mlp: SwiGLU):
        """The target's native step, widened to this block's MLP, when this drafting call can take it (inference,
        the model's dtype, the model's epsilon in both norms: as :func:`native_for_draft`); else ``None``.
        Why: SA and CA on PyTorch's path took 1.9 ms of a 2.8 ms drafting call (2-core AMD EPYC Zen 4, bf16),
        for 3.7M weights a step reads in a tenth of that (``docs/moa.md``)."""
        native = native_for_draft(self.stack, hidden, attention.q.weight, mlp.down.weight)
        if native is None or not all(same_eps(norm, native) for norm in norms):
            return None
        return native.with_inter(mlp.gate.out_features)

    def self_attend(self, embeddings: torch.Tensor, positions: torch.Tensor, cache: KVCache | None = None,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
        """SA over token embeddings: causal on whole sequences (``cache=None``), else appended to ``cache`` (on
        the native step at inference)."""
        if isinstance(cache, KVCache):
            native = self._native_for(embeddings, self.sa, (self.sa_norm, self.sa_mlp_norm), self.sa_mlp)
            if native is not None:
                return native.layers([self.native_blocks()[0]], embeddings, positions, mask, cache)
        cos, sin = self.stack.backbone.rotary_emb(embeddings, positions)
        x = self.sa_norm(embeddings)
        q = rotate(self.sa.split(self.sa.q(x), self.sa.heads), cos, sin)
        k = rotate(self.sa.split(self.sa.k(x), self.sa.kv_heads), cos, sin)
        v = self.sa.split(self.sa.v(x), self.sa.kv_heads)
        if cache is not None:
            k, v = cache.update(k, v, 0)
        h = embeddings + self.sa.attend(q, k, v, mask, causal=cache is None)
        return h + self.sa_mlp(self.sa_mlp_norm(h))

    def memory_keys_values(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """CA keys/values of memory rows ``[B, S, W]``, computed once per row and kept by the drafter."""
        return self.ca.keys_values(self.memory_norm(memory))

    def null_keys_values(self, batch: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        return self.memory_keys_values(self.null_memory.expand(batch, 1, -1))

    def cross_attend(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                     mask: torch.Tensor | None = None) -> torch.Tensor:
        """CA + MLP: ``ô``, the drafter's estimate of the residual stream before the last TLI layers (on the native
        step at inference, where no mask limits the memory: drafting)."""
        if mask is None:
            native = self._native_for(queries, self.ca, (self.ca_norm, self.ca_mlp_norm), self.ca_mlp)
            if native is not None:
                return native.attend_memory(self.native_blocks()[1], queries, keys.contiguous(), values.contiguous())
        q = self.ca.split(self.ca.q(self.ca_norm(queries)), self.ca.heads)
        h = queries + self.ca.attend(q, keys, values, mask)
        return h + self.ca_mlp(self.ca_mlp_norm(h))

    def finish_layers(self, hidden: torch.Tensor, cache: KVCache, positions: torch.Tensor,
                      mask: torch.Tensor | None) -> torch.Tensor:
        """The target's last TLI layers on ``ô`` (drafting), appending draft-local keys/values to ``cache``."""
        if not self.tli:
            return hidden
        layers = self.stack.layers[self.tli_layers.start:]
        rotary = self.stack.backbone.rotary_emb(hidden, positions)
        return decoder_pass(layers, hidden.to(self.stack.dtype), positions, rotary, mask, cache).to(hidden.dtype)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits from the residual stream after the last layer (norm and head on the native
        step at inference)."""
        return self.head.logits(hidden, self.final_norm)


def layer_kv_rows(keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """One layer's keys and values ``[B, H_kv, T, D]`` each → LSA input rows ``[B, T, 2·H_kv·D]``.

    Training (a whole-sequence capture) and drafting (the target's cache) both go through here, so
    the drafter reads the layout it was trained on: per head, its key then its value."""
    return torch.cat([keys, values], dim=-1).transpose(1, 2).flatten(2)


def block_starts(length: int, generator: torch.Generator, low: int = 5, high: int = 15) -> torch.Tensor:
    """Start of the training block each position falls in, blocks of K ~ U[low, high] (paper §3.3)."""
    starts = torch.empty(length, dtype=torch.long)
    at = 0
    while at < length:
        k = int(torch.randint(low, high + 1, (1,), generator=generator))
        starts[at: at + k] = at
        at += k
    return starts


def block_memory_mask(starts: torch.Tensor, device) -> torch.Tensor:
    """Boolean CA mask ``[B, 1, T, 1 + T]``: slot 0 is the null row; position j sees memory rows < its block's start."""
    length = starts.shape[-1]
    allowed = torch.arange(length, device=device)[None, None, :] < starts.to(device)[..., None]
    null = torch.ones(*allowed.shape[:-1], 1, dtype=torch.bool, device=device)
    return torch.cat([null, allowed], dim=-1)[:, None]


def mixed_attention_layer(layer: nn.Module, hidden: torch.Tensor, teacher_k: torch.Tensor, teacher_v: torch.Tensor,
                          rotary: tuple) -> torch.Tensor:
    """One frozen target decoder layer in training, each position reading the *teacher's* keys/values for
    the positions before it and its own (ĥ) at itself — the simplification in ``docs/moa.md``, "Training"
    (exactly, earlier positions in the same block would be draft-local too)."""
    attn = layer.self_attn
    x = layer.input_layernorm(hidden)
    shape = (*x.shape[:-1], -1, attn.head_dim)
    q = rotate(attn.q_proj(x).view(shape).transpose(1, 2), *rotary)
    k = rotate(attn.k_proj(x).view(shape).transpose(1, 2), *rotary)
    v = attn.v_proj(x).view(shape).transpose(1, 2)
    groups = q.shape[1] // k.shape[1]
    tk, tv = teacher_k.repeat_interleave(groups, 1), teacher_v.repeat_interleave(groups, 1)
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scale = 1 / math.sqrt(attn.head_dim)
    length = q.shape[2]
    earlier = torch.ones(length, length, dtype=torch.bool, device=q.device).tril(-1)
    scores = (q @ tk.transpose(-1, -2) * scale).masked_fill(~earlier, float("-inf"))
    own = (q * k).sum(-1, keepdim=True) * scale
    weights = torch.softmax(torch.cat([scores, own], dim=-1), dim=-1)
    out = weights[..., :length] @ tv + weights[..., length:] * v
    h = hidden + attn.o_proj(out.transpose(1, 2).reshape(*hidden.shape[:-1], -1))
    return h + layer.mlp(layer.post_attention_layernorm(h))
