"""The target model by layer: embed → layers [a, b) → final norm + LM head.

Every method in the papers needs the model in pieces (an early exit at layer ℓ, a range of layers on
another worker, hidden states for feature-level drafters), so the engine never calls the model's own
``forward``. It calls the model's embedding, decoder-layer modules, rotary embedding, norm and head
directly, with its own :class:`~engines.model.kv_cache.KVCache` and explicit positions and 4-D masks.
"""

from __future__ import annotations

import inspect
import os

import torch
from torch import nn

from engines.model.exact_numerics import default_row_invariant, use_row_invariant_attention
from engines.model.fused_layer import FusedLlamaLayer, LazyFusedLayer, Projection, rms_norm
from engines.model.kernels import KernelPlan, install
from engines.model.kv_cache import KVCache
from engines.model.native.step import NativeStep, native_pass


def chain_parents(n: int) -> list[int]:
    """Parents of a plain causal chunk: node i hangs off node i-1, node 0 off the committed prefix."""
    return list(range(-1, n - 1))


def tree_depths(parents: list[int]) -> list[int]:
    depths: list[int] = []
    for parent in parents:
        if parent >= len(depths):
            raise ValueError("tree nodes must be listed parents-first")
        depths.append(0 if parent < 0 else depths[parent] + 1)
    return depths


def tree_mask(prefix_len: int, parents: list[int], dtype: torch.dtype, device) -> torch.Tensor:
    """Additive mask ``[1, 1, n, prefix_len + n]``: a node sees the prefix, itself and its ancestors."""
    lineage: list[list[int]] = []  # each node's ancestors and itself
    for i, parent in enumerate(parents):
        if parent >= i:
            raise ValueError("tree nodes must be listed parents-first")
        lineage.append((lineage[parent] if parent >= 0 else []) + [i])
    return visibility_mask(prefix_len, len(parents), lineage, dtype, device)


def visibility_mask(prefix: int, width: int, seen: list[list[int]], dtype: torch.dtype, device) -> torch.Tensor:
    """Additive mask ``[1, 1, n, prefix + width]`` for n rows: row i sees the prefix and the columns ``prefix + j``
    for j in ``seen[i]``. Every tree mask is one (the verifier's, a drafter's growing tree): built on the CPU in
    one index operation, not one per row."""
    allowed = torch.zeros(len(seen), prefix + width, dtype=torch.bool)
    allowed[:, :prefix] = True
    allowed[[i for i, row in enumerate(seen) for _ in row], [prefix + j for row in seen for j in row]] = True
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None].to(device)


_CACHE_KEYWORDS: dict[type, str] = {}


def cache_keyword(module: nn.Module) -> str:
    """The name a Hugging Face layer or attention takes its KV cache by: ``cache`` from transformers 5.2x on,
    ``past_key_values`` before (the old name still works there, with a FutureWarning on every call)."""
    kind = type(module)
    if kind not in _CACHE_KEYWORDS:
        parameters = inspect.signature(module.forward).parameters
        _CACHE_KEYWORDS[kind] = "cache" if "cache" in parameters else "past_key_values"
    return _CACHE_KEYWORDS[kind]


def native_for(layers: list[nn.Module], hidden: torch.Tensor, cache) -> NativeStep | None:
    """The native step that holds every one of ``layers`` and can take this forward, else ``None``."""
    native = getattr(layers[0], "specviz_native", None) if layers else None
    if native is None or not native.runs(hidden, cache):
        return None
    return native if all(getattr(layer, "specviz_native", None) is native for layer in layers) else None


def decoder_pass(layers, hidden: torch.Tensor, positions: torch.Tensor, rotary: tuple, mask: torch.Tensor | None = None,
                 cache=None) -> torch.Tensor:
    """Hugging Face decoder layers in sequence, called the one way every part of the engine calls them.

    ``positions`` ``[1, n]`` and ``rotary`` (the rotary embedding's cos/sin for them) are shared by all
    layers; ``mask`` is an additive 4-D mask or ``None`` (a single token, or causal whole sequences).
    Layers the native step holds run there (:mod:`engines.model.native.step`), when it can take this forward.
    """
    layers = list(layers)
    native = native_for(layers, hidden, cache)
    if native is not None:
        return native_pass(native, layers, hidden, positions, mask, cache)
    for layer in layers:
        fused = getattr(layer, "specviz_fused", None)
        if fused is not None and not torch.is_grad_enabled() and not (layer._forward_hooks or layer._forward_pre_hooks):
            hidden = fused(hidden, positions, rotary, mask, cache)  # same math, fewer and faster products
            continue
        hidden = layer(hidden, attention_mask=mask, position_ids=positions, position_embeddings=rotary,
                       **{cache_keyword(layer): cache})
        if isinstance(hidden, tuple):  # transformers < 5 returns (hidden, ...)
            hidden = hidden[0]
    return hidden


class LayerStack:
    """A Hugging Face decoder-only model seen as a stack of layers the engine can run piecewise."""

    @staticmethod
    def causal_mask(prefix_len: int, n: int, dtype: torch.dtype, device) -> torch.Tensor:
        return tree_mask(prefix_len, chain_parents(n), dtype, device)

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.config = model.config
        self.backbone = model.model
        self.layers = self.backbone.layers
        self.n_layers = len(self.layers)
        # a lane's partial model keeps the weights it does not need on the meta device: look past them
        real = [p for p in model.parameters() if p.device.type != "meta"] or list(model.parameters())
        self.dtype = real[0].dtype
        self.device = real[0].device
        self.fp32_head: torch.nn.Module | None = None
        self.row_invariant = False
        self.fused = False
        self.packed_head: Projection | None = None
        self.native: NativeStep | None = None
        self._native_step: NativeStep | None = None
        self.final_norm = self.backbone.norm

    def prepare_inference(self, row_invariant: bool | None = None, fused: bool = True) -> None:
        """How the engine runs a target (its own, or a lane's share of one): row-invariant numerics where
        they are needed, fused layers, and a kernel plan that pads one-row products (until a verify-cost
        curve installs the plan tuned for this machine)."""
        self.use_row_invariant(row_invariant)
        self.use_fused_layers(fused)
        self.use_native(fused)
        plan = KernelPlan(row_invariant=self.row_invariant)
        for module in (self.model, self.fp32_head):
            if module is not None:
                install(module, plan)

    def use_row_invariant(self, enabled: bool | None = None) -> None:
        """Compute each row of a many-token forward bit for bit as a one-token step would (see
        :mod:`engines.model.exact_numerics`): ``None`` turns it on where it is needed and free (16-bit, CPU).
        The linear layers follow through the kernel plan the engine installs (``Engine.use_kernels``)."""
        self.row_invariant = default_row_invariant(self.dtype, self.device) if enabled is None else enabled
        use_row_invariant_attention(self.model, self.row_invariant)
        if self.fused:
            self.use_fused_layers()

    def use_fused_layers(self, enabled: bool = True) -> None:
        """Run inference through :class:`~engines.model.fused_layer.FusedLlamaLayer` (q‖k‖v and gate‖up fused, weights
        packed for the CPU's matmul library), which keeps its own copy of each layer's weights, made at its first
        forward (most runs go through the native step and never make it); layers it
        does not recognise, or that are not loaded here (a lane's partial model), keep the Hugging Face path.
        Off while a memory budget streams the layers (the copies would defeat it)."""
        self.fused = enabled
        head = self.model.lm_head
        self.packed_head = (Projection(head.weight, self.row_invariant)
                            if enabled and head.bias is None and head.weight.device.type != "meta" else None)
        self.final_norm = rms_norm(self.backbone.norm) if self.packed_head is not None else self.backbone.norm
        for layer in self.layers:
            real = all(p.device.type != "meta" and p.numel() for p in layer.parameters())
            layer.specviz_fused = (LazyFusedLayer(layer, self.row_invariant)
                                   if enabled and real and FusedLlamaLayer.supports(layer) else None)

    def use_native(self, enabled: bool = True) -> None:
        """Run inference forwards (batch 1, any number of rows) through the native step (:mod:`engines.model.native.step`)
        where it builds and the model fits it; it reads the layers' own weights (no copies), so it stays on under a
        memory budget. Off: the fused PyTorch layers or Hugging Face's (``SPECVIZ_NATIVE_STEP=0`` turns it off
        everywhere)."""
        enabled = enabled and os.environ.get("SPECVIZ_NATIVE_STEP", "1") != "0"  # inherited by lane workers
        if enabled and self._native_step is None:
            self._native_step = NativeStep.for_stack(self)  # built once: switching back costs nothing
        self.native = self._native_step if enabled else None
        for layer in self.layers:
            real = all(p.device.type != "meta" and p.numel() for p in layer.parameters())
            layer.specviz_native = self.native if real or self._streamed(layer) else None

    def _streamed(self, layer: nn.Module) -> bool:
        """A layer whose weights a memory budget streams in (its hooks fill them before each forward)."""
        return bool(layer._forward_pre_hooks) and all(p.device.type != "meta" for p in layer.parameters())

    def use_fp32_head(self, enabled: bool = True) -> None:
        """Final norm and LM head in fp32 while the layers stay in a 16-bit dtype.

        bf16 logits are spaced 0.125 apart near 20, so a near-tie between the top two tokens is decided by
        rounding, and a many-token verification rounds differently from a one-token step: greedy output
        drifted from ``ar``'s in half the benchmark's turns. An fp32 head keeps every logit's own
        precision at the cost of reading the head's weights in fp32. Measured in docs/benchmarks.md ("bf16
        drift and an fp32 head"), it did not make greedy output equal ``ar``'s; the fix was row-invariant
        numerics (docs/exactness.md).
        """
        if not enabled or self.dtype == torch.float32:
            self.fp32_head = None
            return
        norm = type(self.backbone.norm)(self.config.hidden_size, eps=self.config.rms_norm_eps)
        norm.load_state_dict({k: v.float() for k, v in self.backbone.norm.state_dict().items()})
        weight = self.model.lm_head.weight
        head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=self.device, dtype=torch.float32)
        with torch.no_grad():
            head.weight.copy_(weight.float())
        self.fp32_head = torch.nn.Sequential(norm.to(self.device), head).requires_grad_(False)

    def new_cache(self, capacity: int, layers: range | None = None) -> KVCache:
        return KVCache.for_model(self.config, capacity, self.dtype, self.device, layers)

    def embed(self, ids: list[int] | torch.Tensor) -> torch.Tensor:
        """``[n]`` ids → ``[1, n, d]``; a ``[B, T]`` batch keeps its shape."""
        ids = torch.as_tensor(ids, device=self.device)
        return self.backbone.embed_tokens(ids if ids.dim() == 2 else ids.view(1, -1))

    def run(self, hidden: torch.Tensor, start: int, stop: int, cache: KVCache,
            parents: list[int] | None = None) -> torch.Tensor:
        """Run layers [start, stop) on ``hidden`` (``[1, n, d]``), appending their keys/values to ``cache``.

        ``parents`` describes a draft tree (see :func:`tree_mask`); ``None`` means a causal chunk.
        """
        if start == stop:
            return hidden
        n = hidden.shape[1]
        prefix = cache.length(start)
        if any(cache.length(layer) != prefix for layer in range(start, stop)):
            raise RuntimeError(f"layers [{start}, {stop}) hold caches of different lengths")
        if parents is None:  # a causal chunk (a round's chain, a prefill): its mask is built where it is read
            positions = torch.arange(prefix, prefix + n, device=self.device).view(1, -1)
            return self.run_at(hidden, start, stop, cache, positions, None, causal=n > 1)
        positions = (prefix + torch.tensor(tree_depths(parents), device=self.device)).view(1, -1)
        # a single new token may attend to everything cached: no mask needed (and sdpa is faster)
        mask = None if n == 1 else tree_mask(prefix, parents, self.dtype, self.device)
        return self.run_at(hidden, start, stop, cache, positions, mask)

    def run_at(self, hidden: torch.Tensor, start: int, stop: int, cache: KVCache, positions: torch.Tensor,
               mask: torch.Tensor | None, causal: bool = False) -> torch.Tensor:
        """Layers [start, stop) with explicit positions ``[1, n]`` and mask (draft trees grown step by step).
        ``causal``: no mask is given and the rows are a causal chunk after the cache. The native step reads no mask
        as that, so none is built for it (a float mask turned back into bytes cost a round's chain two calls on
        flushed caches, docs/verify-cost.md); PyTorch's path is given one."""
        layers = list(self.layers._modules.values())[start:stop]  # slicing the ModuleList builds a new one
        native = native_for(layers, hidden, cache)
        if native is not None:  # checked here too: the native step needs no rotary tables
            return native_pass(native, layers, hidden, positions, mask, cache)
        if causal:
            mask = self.causal_mask(cache.length(start), hidden.shape[1], self.dtype, self.device)
        return decoder_pass(layers, hidden, positions, self.backbone.rotary_emb(hidden, positions),
                            mask, cache)

    def run_causal(self, hidden: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """Layers [start, stop) on a batch ``[B, T, d]`` of whole sequences, no cache (training passes).

        Right padding needs no mask: under causal attention real tokens never see the pads after them.
        """
        positions = torch.arange(hidden.shape[1], device=hidden.device)[None]
        return decoder_pass(self.layers[start:stop], hidden, positions, self.backbone.rotary_emb(hidden, positions))

    def causal_states(self, ids: list[int] | torch.Tensor, layers) -> dict[int, torch.Tensor]:
        """Hidden states after each layer in ``layers`` and after the last one, for whole sequences
        (no cache): one pass serves every exit a trainer or a measurement looks at."""
        hidden, start, states = self.embed(ids), 0, {}
        for stop in sorted(set(layers) | {self.n_layers}):
            hidden = self.run_causal(hidden, start, stop)
            states[stop], start = hidden, stop
        return states

    def logits(self, hidden: torch.Tensor, head: torch.nn.Module | None = None) -> torch.Tensor:
        """Final norm + LM head (or a trained exit head), as fp32 ``[n, vocab]``."""
        if head is not None:
            return head(hidden)[0].float()
        if self.fp32_head is not None:
            return self.fp32_head(hidden.float())[0]
        if self.native is not None and self.native.runs(hidden, None) and self.model.lm_head.bias is None:
            return self.native.head(hidden, self.backbone.norm, self.model.lm_head.weight)
        if self.packed_head is not None and not torch.is_grad_enabled():
            return self.packed_head(self.final_norm(hidden))[0].float()
        return self.model.lm_head(self.backbone.norm(hidden))[0].float()

    def forward(self, ids: list[int], cache: KVCache, parents: list[int] | None = None) -> torch.Tensor:
        """All layers: token ids in, fp32 logits ``[n, vocab]`` out."""
        return self.logits(self.run(self.embed(ids), 0, self.n_layers, cache, parents))
