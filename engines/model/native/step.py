"""The engine's decode step in C (``step.c``): Llama layers and the LM head, every inference forward on a CPU.

Why it exists, measured on a 2-core AMD EPYC (Zen 4, bf16): PyTorch's path spent ~16.6 ms of a 29.6 ms step
in matrix products and ~13 ms in some 1,500 small operations (norms in pieces, RoPE, residual adds, SiLU·mul,
casts, cache writes) of a few µs each, while llama.cpp ran the whole step in 11.9. ``step.c`` runs a range of
layers in one call and one OpenMP parallel region: the products stream their weights (AVX-512 BF16 dot
products where the CPU has them), and the small operations are folded into the products' loops.

It is row-invariant by construction in every dtype (each output summed in one fixed order, attention visiting
a query's visible keys in cache order), so verifying n tokens in one forward gives each row the bits a
one-token step gives it: greedy output of every method equals ``ar``'s in fp32 as in bf16.

What runs here: inference (no gradients) on the CPU, batch 1, Llama layers without biases, a cache that is the
engine's :class:`~engines.model.kv_cache.KVCache` (or none), any number of rows — prefills too. PyTorch's path gives a
long prefill different bits with a different thread count (measured on a 2-core Xeon: 2 threads against 1 on a
292-token prompt), and lane workers run one thread each, so a prefill there must take the step every process
computes alike: this one (at a price: 600 ms for those 292 tokens where oneDNN took 127). Anything else — a
training pass, a batch, an unknown layer — runs the PyTorch path (:mod:`engines.model.fused_layer`). A layer with hooks (the memory budget's weight
streamer) runs here too, one layer per call, with its hooks fired around it, so a method under a budget
computes the bits it computes without one.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

import torch
from torch import nn

from engines.model.fused_layer import FusedLlamaLayer
from engines.model.kv_cache import KVCache
from engines.model.native import library

SOURCE = Path(__file__).with_name("step.c")
_log = logging.getLogger(__name__)
_warned: set[str] = set()


class Shape(ctypes.Structure):
    _fields_ = [("d", ctypes.c_int64), ("heads", ctypes.c_int64), ("kv_heads", ctypes.c_int64),
                ("head_dim", ctypes.c_int64), ("inter", ctypes.c_int64), ("capacity", ctypes.c_int64),
                ("eps", ctypes.c_float), ("scaling", ctypes.c_float), ("rope_scaling", ctypes.c_float),
                ("bf16", ctypes.c_int)]


class LayerPointers(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in
                ("q", "k", "v", "o", "gate", "up", "down", "norm1", "norm2", "keys", "values")]


def _library():
    loaded = library.load(SOURCE)
    if loaded.library is None:
        _warn_once(loaded.why_not)
        return None
    lib = loaded.library
    if not getattr(lib, "_specviz_typed", False):
        lib.specviz_layers.argtypes = [ctypes.POINTER(Shape), ctypes.POINTER(LayerPointers), ctypes.c_int,
                                       ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        lib.specviz_layers.restype = ctypes.c_int
        lib.specviz_head.argtypes = [ctypes.POINTER(Shape), ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                     ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        lib.specviz_head.restype = ctypes.c_int
        lib.specviz_linear.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                                       ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        lib.specviz_linear.restype = ctypes.c_int
        lib.specviz_work_floats.argtypes = [ctypes.POINTER(Shape), ctypes.c_int64, ctypes.c_int]
        lib.specviz_work_floats.restype = ctypes.c_int64
        lib.specviz_packed_elems.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
        lib.specviz_packed_elems.restype = ctypes.c_int64
        lib.specviz_pack.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p]
        lib.specviz_pack.restype = ctypes.c_int
        lib.specviz_panel_layout.argtypes = [ctypes.c_int]
        lib.specviz_panel_layout.restype = ctypes.c_int
        lib._specviz_typed = True
    return lib


# what step.c's entry points return when they refuse an argument (its enum of the same names)
_REFUSALS = {-1: "a size of the model's shape out of range (head_dim 2..512 and even, heads a multiple of kv_heads)",
             -2: "no rows", -3: "a thread count outside 1..1024", -4: "a missing (NULL) tensor",
             -5: "a cache index past the cache's capacity, or negative", -6: "a negative position",
             -7: "no memory for the product's input"}


def _checked(code: int, call: str) -> None:
    """Raise where a C entry point refused its arguments (it returns before touching any buffer)."""
    if code:
        raise ValueError(f"native step ({call}) refused its arguments: {_REFUSALS.get(code, f'error {code}')}")


def _warn_once(why: str) -> None:
    if why not in _warned:
        _warned.add(why)
        _log.warning("specviz: %s; the decode step runs PyTorch's path instead (correct, slower)", why)


def available() -> bool:
    """Whether the native step can run here (it is built on first use)."""
    return _library() is not None


def build_id() -> str:
    """Which build of ``step.c`` runs here (a digest of its source, flags, compiler and CPU), or ``""`` where none
    does: measurements cached with it (the verify-cost curve, the default dtype) are retaken after a change."""
    path = library.load(SOURCE).path
    return path.stem.rsplit("-", 1)[-1] if path is not None else ""


def _is_llama(layer: nn.Module) -> bool:
    """The layers the native step computes: the fused layer's (Llama without biases, SiLU) with RMSNorms."""
    return (FusedLlamaLayer.supports(layer) and hasattr(layer, "input_layernorm")
            and hasattr(layer, "post_attention_layernorm"))


class NativeStep:
    """A model's layers and head through ``step.c``: built once per :class:`~engines.model.layers.LayerStack`."""

    def __init__(self, config, rotary: nn.Module, dtype: torch.dtype, device: torch.device, lib):
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.lib = lib
        self.dtype = dtype
        self.d = config.hidden_size
        self.heads, self.kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, head_dim
        self.inter = config.intermediate_size
        self.eps = float(config.rms_norm_eps)
        self.scaling = head_dim ** -0.5
        self.inv_freq = rotary.inv_freq.detach().float().contiguous()
        self.rope_scaling = float(getattr(rotary, "attention_scaling", 1.0))
        self._work = torch.empty(0, dtype=torch.float32)

    @classmethod
    def for_stack(cls, stack) -> "NativeStep | None":
        """The native step for a stack it can run (CPU, bf16 or fp32, Llama layers), else ``None``."""
        config = stack.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        if (stack.device.type != "cpu" or stack.dtype not in (torch.bfloat16, torch.float32)
                or head_dim % 2 or head_dim > 512 or config.num_attention_heads % config.num_key_value_heads
                or getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False)
                or not hasattr(stack.backbone.rotary_emb, "inv_freq")
                or not all(_is_llama(layer) for layer in stack.layers)):
            return None
        lib = _library()
        return None if lib is None else cls(config, stack.backbone.rotary_emb, stack.dtype, stack.device, lib)

    def shape(self, capacity: int) -> Shape:
        return Shape(self.d, self.heads, self.kv_heads, self.head_dim, self.inter, capacity, self.eps, self.scaling,
                     self.rope_scaling, int(self.dtype == torch.bfloat16))

    def _work_for(self, shape: Shape, rows: int, threads: int) -> torch.Tensor:
        floats = self.lib.specviz_work_floats(ctypes.byref(shape), rows, threads)
        if self._work.numel() < floats:
            self._work = torch.empty(floats, dtype=torch.float32)
        return self._work

    def packed(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight`` ``[out, in]`` in the step's panels (``specviz_pack``): made on first use and kept on the tensor
        itself, so it lives and dies with it (a streamed layer's weights are packed each time they are streamed in),
        and made again when the tensor changes in place (training bumps its version). Costs one more copy of the
        weights: 269 MB for SmolLM2-135M in bf16, 538 MB in fp32."""
        bf16 = int(weight.dtype == torch.bfloat16)
        layout = self.lib.specviz_panel_layout(bf16)
        key = (weight.data_ptr(), weight._version, tuple(weight.shape), weight.dtype)
        kept = weight.__dict__.setdefault("_specviz_packed", {})  # layout → (key, packed): one per build loaded
        if layout in kept and kept[layout][0] == key:
            return kept[layout][1]
        rows = weight.detach().contiguous()
        out = torch.empty(self.lib.specviz_packed_elems(rows.shape[0], rows.shape[1], bf16), dtype=rows.dtype)
        _checked(self.lib.specviz_pack(rows.data_ptr(), rows.shape[0], rows.shape[1], bf16, out.data_ptr()), "pack")
        kept[layout] = (key, out)
        return out

    def _weight_pointers(self, layer: nn.Module) -> tuple[int, ...]:
        """The packed products' and the norms' addresses for one layer. Why kept: looking up nine weights through
        nn.Module attributes and their packed copies took ~2.5 ms of a 13 ms step for 30 layers; a layer's
        weights are found once (a streamed layer, which gets new tensors each time, every time) and their
        addresses reused while the first and last product weights keep their addresses and versions (training and
        loading a state dict change them all in place; a streamed layer is looked up every time)."""
        found = layer.__dict__.get("_specviz_weights")
        streamed = bool(layer._forward_hooks or layer._forward_pre_hooks)
        if found is None or streamed:
            attention, mlp = layer.self_attn, layer.mlp
            found = [linear.weight for linear in (attention.q_proj, attention.k_proj, attention.v_proj,
                                                  attention.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)]
            found += [layer.input_layernorm.weight, layer.post_attention_layernorm.weight]
            layer.__dict__["_specviz_weights"] = found = (found, None, None)
        weights, stamp, addresses = found
        first, last = weights[0], weights[6]  # an optimizer step or a state dict load bumps every version
        now = (first.data_ptr(), first._version, last.data_ptr(), last._version)
        if now != stamp:
            addresses = tuple([self.packed(w).data_ptr() for w in weights[:7]] + [w.data_ptr() for w in weights[7:]])
            layer.__dict__["_specviz_weights"] = (weights, now, addresses)
        return addresses

    def runs(self, hidden: torch.Tensor, cache) -> bool:
        """Whether a forward of ``hidden`` with ``cache`` runs here."""
        return (hidden.dim() == 3 and hidden.shape[0] == 1 and hidden.shape[1] > 0
                and hidden.dtype == self.dtype and hidden.device.type == "cpu" and not torch.is_grad_enabled()
                and (cache is None or isinstance(cache, KVCache)))

    def layers(self, layers: list[nn.Module], hidden: torch.Tensor, positions: torch.Tensor,
               mask: torch.Tensor | None, cache: KVCache | None) -> torch.Tensor:
        """Layers in sequence on ``hidden`` ``[1, n, d]``; their keys and values are appended to ``cache``."""
        n = hidden.shape[1]
        indices = [layer.self_attn.layer_idx for layer in layers]
        if cache is None:  # a pass without a cache attends within itself: a scratch cache of n entries
            cache = KVCache(max(indices) + 1, self.kv_heads, self.head_dim, n, self.dtype)
        prefix = cache.length(indices[0])
        if any(cache.length(i) != prefix for i in indices):
            raise RuntimeError("the layers of one native call must hold caches of the same length")
        if prefix + n > cache.capacity:
            raise RuntimeError(f"KV cache capacity {cache.capacity} exceeded at layer {indices[0]}")
        allowed = None
        if mask is not None:
            length = prefix + n
            allowed = (mask[0, 0, :, :length] > torch.finfo(mask.dtype).min / 2).to(torch.uint8).contiguous()
            if allowed.shape != (n, length):
                raise ValueError(f"mask must cover {n} rows and {length} cached entries, got {tuple(mask.shape)}")
        pointers = (LayerPointers * len(layers))()
        for slot, (layer, index) in enumerate(zip(layers, indices)):
            i = index - cache.first_layer
            pointers[slot] = LayerPointers(*self._weight_pointers(layer), cache.keys[i].data_ptr(),
                                           cache.values[i].data_ptr())
        out = hidden.reshape(n, self.d).clone()
        positions = positions.reshape(-1).to(torch.int64).contiguous()
        threads = torch.get_num_threads()
        shape = self.shape(cache.capacity)
        work = self._work_for(shape, n, threads)
        _checked(self.lib.specviz_layers(ctypes.byref(shape), pointers, len(layers), out.data_ptr(), n,
                                         positions.data_ptr(), prefix,
                                         allowed.data_ptr() if allowed is not None else None,
                                         self.inv_freq.data_ptr(), work.data_ptr(), threads), "layers")
        for index in indices:
            cache.lengths[index - cache.first_layer] = prefix + n
        return out.view(1, n, self.d)

    def head(self, hidden: torch.Tensor, norm: nn.Module, head: torch.Tensor) -> torch.Tensor:
        """Final norm and LM head: fp32 logits ``[n, vocab]`` for ``hidden`` ``[1, n, d]``."""
        n = hidden.shape[1]
        rows = hidden.reshape(n, self.d).contiguous()
        logits = torch.empty(n, head.shape[0], dtype=torch.float32)
        threads = torch.get_num_threads()
        shape = self.shape(1)
        work = self._work_for(shape, n, threads)
        _checked(self.lib.specviz_head(ctypes.byref(shape), rows.data_ptr(), n, norm.weight.data_ptr(),
                                       self.packed(head).data_ptr(), head.shape[0], logits.data_ptr(), work.data_ptr(), threads),
                 "head")
        return logits

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ weight.T (+ bias)`` as fp32 ``[..., N]``, summed as the step sums (row-invariant): a drafter's
        own maps (EAGLE's fc, an exit head's projection) at the step's speed rather than PyTorch's per call."""
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        weight = weight.contiguous()
        bias = bias.contiguous() if bias is not None else None
        out = torch.empty(rows.shape[0], weight.shape[0], dtype=torch.float32)
        _checked(self.lib.specviz_linear(rows.data_ptr(), rows.shape[0], rows.shape[1], self.packed(weight).data_ptr(),
                                         weight.shape[0], bias.data_ptr() if bias is not None else None,
                                         int(self.dtype == torch.bfloat16), out.data_ptr(),
                                         torch.get_num_threads()), "linear")
        return out.view(*x.shape[:-1], weight.shape[0])


def native_pass(native: NativeStep, layers, hidden: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor | None, cache) -> torch.Tensor:
    """``layers`` through the native step: unhooked neighbours in one call, a hooked layer (weights streamed in
    by its pre-hook, dropped by its post-hook) alone, with its hooks fired around the call."""
    group: list[nn.Module] = []
    for layer in layers:
        if layer._forward_hooks or layer._forward_pre_hooks:
            if group:
                hidden, group = native.layers(group, hidden, positions, mask, cache), []
            for hook in list(layer._forward_pre_hooks.values()):
                hook(layer, (hidden,))
            output = native.layers([layer], hidden, positions, mask, cache)
            for hook in list(layer._forward_hooks.values()):
                hook(layer, (hidden,), output)
            hidden = output
        else:
            group.append(layer)
    return native.layers(group, hidden, positions, mask, cache) if group else hidden
