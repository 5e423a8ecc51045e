"""Small trained modules that turn the target's own hidden states into draft tokens.

All heads end in the target's (tied, frozen) output embedding restricted to a *draft vocabulary*:
the few thousand tokens the target actually produces most. On SmolLM2 the 49k-token head costs a
fifth of a whole forward, so a full-vocabulary head would make every drafter expensive; restricting
it cuts that ~6× and loses only the rare tokens, which a draft could seldom guess anyway. Logits are
mapped back to the full vocabulary (−inf outside the draft vocabulary), so verification — and with
it losslessness — is unchanged: q simply puts no mass on tokens the drafter cannot propose.

- :class:`ExitNormHead` — early exit at layer ℓ: a residual linear map, RMSNorm, the shared head.
- :class:`ExitLayerHead` — early exit at layer ℓ through one extra decoder layer (PPSD's "transformer head").
- :class:`AdapterHead` — Kangaroo's and CATS's adapter at layer ℓ: two norms around one attention
  layer (no MLP), the shared head; CATS trains one at its draft boundary and one at its shallow verifier.
- :class:`EagleHead` — EAGLE: fuse the next token's embedding with the target's last feature, one
  decoder layer predicts the next feature, the shared head reads a token from it.
"""

from __future__ import annotations

import ctypes

import torch
from torch import nn

from engines.model import gguf_blocks
from engines.model.kernels import KernelPlan
from engines.model.kv_cache import KVCache
from engines.model.layers import LayerStack, cache_keyword, decoder_pass
from engines.model.native.step import NativeStep, computes


def native_for_draft(stack: LayerStack, hidden: torch.Tensor, *weights: torch.Tensor) -> NativeStep | None:
    """The target's native step when a drafter's inference call can take it: the stack has one, no gradients
    (training keeps PyTorch's autograd path), batch 1 in the model's dtype, and every weight in that dtype (the
    step reads raw pointers). A drafted token on PyTorch's path costs 0.2–0.45 of a target step on a CPU, for a
    head that holds ~7% of the target's weights: per-call overheads, which the step does not have."""
    native = stack.native
    if native is None or not native.runs(hidden, None) or any(w.dtype != native.dtype for w in weights):
        return None
    return native


def runs_native(layer: nn.Module) -> bool:
    """A decoder layer the native step computes (Llama, no biases, its RMSNorms; or CATS's attention-only
    block), decided once per layer."""
    known = layer.__dict__.get("_specviz_llama")
    if known is None:
        known = computes(layer)
        layer.__dict__["_specviz_llama"] = known
    return known


def same_eps(norm: nn.Module, native: NativeStep) -> bool:
    """The step normalises with the model's epsilon: a norm with another one stays on PyTorch's path. Compared as
    the C float the step reads: this model's config holds 1e-5 rounded to float32, MoA's norms 1e-5 itself."""
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    return eps is not None and ctypes.c_float(float(eps)).value == ctypes.c_float(native.eps).value


class SharedHead(nn.Module):
    """The target's output embedding, frozen, restricted to ``vocab_ids``; not part of the state dict."""

    def __init__(self, stack: LayerStack, vocab_ids: torch.Tensor):
        super().__init__()
        self.__dict__["_rows"] = {}  # before the buffer: assigning vocab_ids clears this cache
        self.vocab_size = stack.config.vocab_size
        self.register_buffer("vocab_ids", vocab_ids.long(), persistent=False)
        self._stack = [stack]  # whose native step reads the rows out (a list: not a submodule)
        self._weight = [stack.model.lm_head.weight]  # a list hides it from parameters() and state_dict()
        # the matmul kernels tuned for this machine (engines.model.kernels), as the stack's own head runs them
        self.kernel_plan = getattr(stack.model.lm_head, "plan", None) or KernelPlan()

    def __setattr__(self, name, value):
        if name == "vocab_ids":
            self._rows.clear()
        super().__setattr__(name, value)

    def _apply(self, fn, *args, **kwargs):
        self._rows.clear()  # .to(), .float(), .cuda() replace the vocabulary buffer
        return super()._apply(fn, *args, **kwargs)

    def rows(self, dtype: torch.dtype) -> torch.Tensor:
        """The draft vocabulary's rows of the frozen head, gathered once per dtype rather than at every
        draft step (the gather alone cost 4× the matmul: 1.5 ms of a 40 ms target step on SmolLM2)."""
        if dtype not in self._rows:
            weight = self._weight[0]
            rows = weight.detach()[self.vocab_ids].to(dtype)
            blocks = gguf_blocks.blocks_of(weight)
            if blocks is not None and self.vocab_ids.device.type == "cpu":
                # the same rows of the target head's GGUF blocks (Q8_0 for the default model: 8.5 bits a weight),
                # which the native step reads where they widen, bit for bit, to these rows (it checks): the same
                # logits from 5 MB instead of 9 (bf16) or 19 (fp32) for 8,192 rows. A drafted token of EAGLE, MoA,
                # CATS or an exit head took 0.73-0.87 of its time so in fp32 (the AVX2 build's choice, a Zen 3's)
                # and a median 0.96 in bf16 on AMX tiles (2-core Xeon; docs/verify-cost.md).
                gguf_blocks.keep_rows(rows, blocks, self.vocab_ids.numpy())
            self._rows[dtype] = rows
        return self._rows[dtype]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.logits(hidden)

    def logits(self, hidden: torch.Tensor, norm: nn.Module | None = None) -> torch.Tensor:
        """Draft-vocabulary logits ``[1, n, V']`` of ``hidden`` ``[1, n, d]`` (after ``norm``, if given): at inference
        on the target's native step (norm and head in one call, fp32 out), else PyTorch's path in the input's
        dtype (training, a batch, no step)."""
        rows = self.rows(hidden.dtype)
        native = native_for_draft(self._stack[0], hidden, rows, *([norm.weight] if norm is not None else []))
        if native is not None and (norm is None or same_eps(norm, native)):
            if norm is None:
                return native.linear(hidden, rows)
            return native.head(hidden, norm, rows).view(1, hidden.shape[1], -1)
        return self.kernel_plan.linear(norm(hidden) if norm is not None else hidden, rows, None)

    def to_full(self, logits: torch.Tensor) -> torch.Tensor:
        full = torch.full((*logits.shape[:-1], self.vocab_size), float("-inf"), dtype=torch.float32,
                          device=logits.device)
        full[..., self.vocab_ids] = logits.float()
        return full


def _norm_like(stack: LayerStack) -> nn.Module:
    norm = type(stack.backbone.norm)(stack.config.hidden_size, eps=stack.config.rms_norm_eps)
    norm.load_state_dict(stack.backbone.norm.state_dict())
    return norm


def _layer_like(stack: LayerStack, source_layer: int) -> nn.Module:
    """A fresh decoder layer (cache slot 0) initialised from one of the target's layers."""
    layer = type(stack.layers[0])(stack.config, layer_idx=0)
    layer.load_state_dict(stack.layers[source_layer].state_dict())
    return layer


class DraftHead(nn.Module):
    """Common plumbing: the shared head, dtype/device, single-layer cache and rotary positions."""

    kind = ""
    has_cache = False

    def __init__(self, stack: LayerStack, vocab_ids: torch.Tensor):
        super().__init__()
        self.head = SharedHead(stack, vocab_ids)
        self._stack = [stack]

    @property
    def stack(self) -> LayerStack:
        return self._stack[0]

    def new_cache(self, capacity: int) -> KVCache:
        s = self.stack
        head_dim = s.config.hidden_size // s.config.num_attention_heads
        p = next(self.parameters())
        return KVCache(1, s.config.num_key_value_heads, head_dim, capacity, p.dtype, p.device)

    def _run_layer(self, layer: nn.Module, hidden: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        """The head's decoder layer, with a cache (drafting) or over whole sequences (training)."""
        if cache is None:
            positions = torch.arange(hidden.shape[1], device=hidden.device)[None]
        else:
            start = cache.length()
            positions = torch.arange(start, start + hidden.shape[1], device=hidden.device)[None]
        causal = cache is not None and hidden.shape[1] > 1
        return self._run_layer_at(layer, hidden, cache, positions, None, causal=causal)

    def _run_layer_at(self, layer: nn.Module, hidden: torch.Tensor, cache: KVCache | None, positions: torch.Tensor,
                      mask: torch.Tensor | None, causal: bool = False) -> torch.Tensor:
        """The head's layer at explicit positions under an explicit mask (draft trees): on the target's native
        step at inference (the head's 1-layer cache, layer index 0, is one the step takes), else PyTorch's.
        ``causal``: the rows are a causal chunk after the cache, which the native step reads from no mask (as
        :meth:`LayerStack.run_at`); PyTorch's path is given one."""
        native = native_for_draft(self.stack, hidden, layer.self_attn.q_proj.weight) if runs_native(layer) else None
        if native is not None and (cache is None or isinstance(cache, KVCache)):
            return native.layers([layer], hidden, positions, mask, cache)
        if causal:
            mask = LayerStack.causal_mask(cache.length(), hidden.shape[1], hidden.dtype, hidden.device)
        return decoder_pass([layer], hidden, positions, self.stack.backbone.rotary_emb(hidden, positions), mask, cache)

    def linear(self, module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """One of the head's own linear maps: on the native step at inference, rounded back to the model's dtype
        (what the following layer or norm reads, as PyTorch's bf16 linear would hand it), else PyTorch's."""
        weights = [module.weight] + ([module.bias] if module.bias is not None else [])
        native = native_for_draft(self.stack, x, *weights)
        if native is None:
            return module(x)
        return native.linear(x, module.weight, module.bias).to(x.dtype)


class ExitNormHead(DraftHead):
    kind = "exit_norm"

    def __init__(self, stack: LayerStack, vocab_ids: torch.Tensor):
        super().__init__(stack, vocab_ids)
        d = stack.config.hidden_size
        self.proj = nn.Linear(d, d, bias=False)
        nn.init.zeros_(self.proj.weight)  # starts as the model's own norm + head (the untrained exit)
        self.norm = _norm_like(stack)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits from layer-ℓ hidden states ``[..., d]``."""
        return self.head.logits(hidden + self.linear(self.proj, hidden), self.norm)


class ExitLayerHead(DraftHead):
    kind = "exit_layer"
    has_cache = True

    def __init__(self, stack: LayerStack, vocab_ids: torch.Tensor, exit_layer: int):
        super().__init__(stack, vocab_ids)
        self.layer = self._block(stack, exit_layer)  # initialised from the layer that would have come next
        self.norm = _norm_like(stack)

    @staticmethod
    def _block(stack: LayerStack, exit_layer: int) -> nn.Module:
        return _layer_like(stack, exit_layer)

    def forward(self, hidden: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        return self.head.logits(self._run_layer(self.layer, hidden, cache), self.norm)


class AttentionBlock(nn.Module):
    """A decoder layer without its MLP: ``h + attention(norm(h))``, called like a decoder layer."""

    def __init__(self, stack: LayerStack, source_layer: int):
        super().__init__()
        source = stack.layers[source_layer]
        self.input_layernorm = _norm_like(stack)
        self.input_layernorm.load_state_dict(source.input_layernorm.state_dict())
        self.self_attn = type(source.self_attn)(stack.config, layer_idx=0)
        self.self_attn.load_state_dict(source.self_attn.state_dict())

    def forward(self, hidden: torch.Tensor, attention_mask=None, position_ids=None, past_key_values=None,
                position_embeddings=None) -> torch.Tensor:
        attended, _ = self.self_attn(self.input_layernorm(hidden), position_embeddings=position_embeddings,
                                     attention_mask=attention_mask,
                                     **{cache_keyword(self.self_attn): past_key_values})
        return hidden + attended


class AdapterHead(ExitLayerHead):
    """Kangaroo/CATS adapter: cheaper than :class:`ExitLayerHead` (attention only, no MLP), yet unlike a
    norm head it still sees the context."""

    kind = "cats_adapter"

    @staticmethod
    def _block(stack: LayerStack, exit_layer: int) -> nn.Module:
        return AttentionBlock(stack, exit_layer)


class EagleHead(DraftHead):
    kind = "eagle"
    has_cache = True

    def __init__(self, stack: LayerStack, vocab_ids: torch.Tensor):
        super().__init__(stack, vocab_ids)
        d = stack.config.hidden_size
        self.fc = nn.Linear(2 * d, d, bias=True)
        with torch.no_grad():  # start by passing the feature through unchanged
            self.fc.weight.zero_()
            self.fc.weight[:, d:] = torch.eye(d)
            self.fc.bias.zero_()
        self.layer = _layer_like(stack, stack.n_layers - 1)

    architecture = "eagle1"  # the card's ``architecture`` (absent in cards written before EAGLE-3 heads existed)

    def features(self, token_embeddings: torch.Tensor, features: torch.Tensor,
                 cache: KVCache | None = None) -> torch.Tensor:
        """Predicted next features from (embedding of token t+1, feature f_t) pairs ``[B, T, d]`` each."""
        return self.output_feature(self._run_layer(self.layer, self.fuse(token_embeddings, features), cache))

    def features_at(self, token_embeddings: torch.Tensor, features: torch.Tensor, cache: KVCache | None,
                    positions: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """:meth:`features` at explicit positions under an explicit mask (draft trees)."""
        fused = self.fuse(token_embeddings, features)
        return self.output_feature(self._run_layer_at(self.layer, fused, cache, positions, mask))

    def output_feature(self, hidden: torch.Tensor) -> torch.Tensor:
        """The decoder layer's output as the feature the head reads out and feeds itself next: here the layer is
        trained to write the target's normed last feature directly (EAGLE), so it is used as it is."""
        return hidden

    @property
    def observe_layers(self) -> tuple[int, ...]:
        """The target layers whose outputs the head reads: the last one (EAGLE)."""
        return (self.stack.n_layers,)

    def observed_rows(self, seen: dict, n_valid: int) -> torch.Tensor:
        """What the head takes from one target pass, ``[1, n, ·]``: the normed last hidden state (what a server
        sends a client that drafts; ``E`` values a token)."""
        return self.stack.backbone.norm(seen[self.stack.n_layers][:, :n_valid])

    def target_feature(self, rows: torch.Tensor) -> torch.Tensor:
        """The feature f_t the head pairs with the next token's embedding, from :meth:`observed_rows`."""
        return rows.to(next(self.parameters()).dtype)

    def fuse(self, token_embeddings: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """``fc`` over (embedding, feature) pairs: the decoder layer's input, in the model's dtype."""
        return self.linear(self.fc, torch.cat([token_embeddings, features], dim=-1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Features are trained to match the target's *normed* last hidden state, which the head reads directly."""
        return self.head.logits(features)
