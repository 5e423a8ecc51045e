"""The engine's decode step in C (``step.c``): Llama layers and the LM head, every inference forward on a CPU.

Why it exists, measured on a 2-core AMD EPYC (Zen 4, bf16): PyTorch's path spent ~16.6 ms of a 29.6 ms step
in matrix products and ~13 ms in some 1,500 small operations (norms in pieces, RoPE, residual adds, SiLU·mul,
casts, cache writes) of a few µs each, while llama.cpp ran the whole step in 11.9. ``step.c`` runs a range of
layers in one call and one OpenMP parallel region: the products stream their weights (AVX-512 BF16 dot
products where the CPU has them, AMX tiles on a Xeon that has those: :func:`amx`), and the small operations are
folded into the products' loops.

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

import contextlib
import ctypes
import logging
import os
import weakref
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from engines.model import gguf_blocks
from engines.model.fused_layer import FusedLlamaLayer
from engines.model.kv_cache import KVCache
from engines.model.native import library
from engines.model.native.huge_pages import PageArena

SOURCE = Path(__file__).with_name("step.c")
# "0": products read plain panels even where a weight's GGUF blocks could serve (the A/B switch)
QUANTIZED_VARIABLE = "SPECVIZ_QUANTIZED_PANELS"
# "int8": products of weights that keep GGUF blocks take their inputs quantized to int8 (llama.cpp's numerics:
# other logits than the exact products', the same for every method); "exact" (the default): the model's own numbers
PRODUCTS_VARIABLE = "SPECVIZ_PRODUCTS"
PRODUCTS = ("exact", "int8")
# "0": a bf16 model's products stay on the vector dot products where the CPU has AMX tiles (the A/B switch);
# "1" (the default): tiles wherever the CPU and OS allow them
AMX_VARIABLE = "SPECVIZ_AMX"
_log = logging.getLogger(__name__)
_warned: set[str] = set()


class Shape(ctypes.Structure):
    _fields_ = [("d", ctypes.c_int64), ("heads", ctypes.c_int64), ("kv_heads", ctypes.c_int64),
                ("head_dim", ctypes.c_int64), ("inter", ctypes.c_int64), ("capacity", ctypes.c_int64),
                ("eps", ctypes.c_float), ("scaling", ctypes.c_float), ("rope_scaling", ctypes.c_float),
                ("bf16", ctypes.c_int)]


class LayerPointers(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in
                ("q", "k", "v", "o", "gate_up", "down", "norm1", "norm2", "keys", "values")] + [
        ("formats", ctypes.c_int), ("plain", ctypes.c_void_p * 6)]


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
                                     ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                     ctypes.c_void_p, ctypes.c_int]
        lib.specviz_head.restype = ctypes.c_int
        lib.specviz_linear.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int,
                                       ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        lib.specviz_linear.restype = ctypes.c_int
        lib.specviz_work_floats.argtypes = [ctypes.POINTER(Shape), ctypes.c_int64, ctypes.c_int]
        lib.specviz_work_floats.restype = ctypes.c_int64
        lib.specviz_packed_elems.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
        lib.specviz_packed_elems.restype = ctypes.c_int64
        lib.specviz_pack.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p]
        lib.specviz_pack.restype = ctypes.c_int
        lib.specviz_panel_layout.argtypes = [ctypes.c_int]
        lib.specviz_panel_layout.restype = ctypes.c_int
        lib.specviz_panel_elems.argtypes = [ctypes.c_int64, ctypes.c_int]
        lib.specviz_panel_elems.restype = ctypes.c_int64
        lib.specviz_quantized_formats.argtypes = [ctypes.c_int]
        lib.specviz_quantized_formats.restype = ctypes.c_int
        lib.specviz_quantized_bytes.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
        lib.specviz_quantized_bytes.restype = ctypes.c_int64
        lib.specviz_pack_quantized.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                               ctypes.c_void_p]
        lib.specviz_pack_quantized.restype = ctypes.c_int
        lib.specviz_unpack_quantized.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                                 ctypes.c_int, ctypes.c_void_p]
        lib.specviz_unpack_quantized.restype = ctypes.c_int
        lib.specviz_int8_vector.argtypes = []
        lib.specviz_int8_vector.restype = ctypes.c_int
        lib.specviz_use_amx.argtypes = [ctypes.c_int]
        lib.specviz_use_amx.restype = ctypes.c_int
        lib._specviz_typed = True
        lib.specviz_use_amx(int(amx_wanted()))
    return lib


# what step.c's entry points return when they refuse an argument (its enum of the same names)
_REFUSALS = {-1: "a size of the model's shape out of range (head_dim 2..512 and even, heads a multiple of kv_heads)",
             -2: "no rows", -3: "a thread count outside 1..1024", -4: "a missing (NULL) tensor",
             -5: "a cache index past the cache's capacity, or negative", -6: "a negative position",
             -7: "no memory for the product's input",
             -8: "a weight's format this build cannot read (quantized panels need K a multiple of 32)"}


def _checked(code: int, call: str) -> None:
    """Raise where a C entry point refused its arguments (it returns before touching any buffer)."""
    if code:
        raise ValueError(f"native step ({call}) refused its arguments: {_REFUSALS.get(code, f'error {code}')}")


def _warn_int8_once(why: str) -> None:
    if why not in _warned:
        _warned.add(why)
        _log.warning("specviz: %s=int8 asked for, but %s; the products stay exact", PRODUCTS_VARIABLE, why)


def _warn_once(why: str) -> None:
    if why not in _warned:
        _warned.add(why)
        _log.warning("specviz: %s; the decode step runs PyTorch's path instead (correct, slower)", why)


def available() -> bool:
    """Whether the native step can run here (it is built on first use)."""
    return _library() is not None


def build_id() -> str:
    """Which build of ``step.c`` runs here (a digest of its source, flags, compiler and CPU, then its ISA:
    ``native`` or ``avx2``, and ``-noomp`` for a single-threaded build), or ``""`` where none does:
    measurements cached with it (the verify-cost curve, the default dtype) are retaken after a change, and
    those of the AVX2 build never mix with the native build's."""
    loaded = library.load(SOURCE)
    if loaded.info is None:
        return ""
    return f"{loaded.digest}-{loaded.info.isa}" + ("" if loaded.info.openmp else "-noomp")


def products() -> str:
    """The products' numerics asked for by ``SPECVIZ_PRODUCTS``: ``"exact"`` (unset or empty) or ``"int8"``."""
    value = os.environ.get(PRODUCTS_VARIABLE, "").strip().lower() or "exact"
    if value not in PRODUCTS:
        raise ValueError(f"{PRODUCTS_VARIABLE} must be one of {PRODUCTS}, got {value!r}")
    return value


def amx_wanted() -> bool:
    """Whether ``SPECVIZ_AMX`` lets a bf16 model's products use AMX tiles (unset, empty or ``1``: yes; ``0``: no)."""
    value = os.environ.get(AMX_VARIABLE, "").strip() or "1"
    if value not in ("0", "1"):
        raise ValueError(f"{AMX_VARIABLE} must be 0 or 1, got {value!r}")
    return value == "1"


def amx() -> bool:
    """Whether the bf16 products run on AMX tiles in this process: built for a CPU that has them (a Xeon since
    Sapphire Rapids), allowed by the OS, and not switched off (``SPECVIZ_AMX=0``, read as it stands now and applied
    to the library, which read it when first loaded). Their bits are not the vector products' (another order of
    the same sums), so measurements cached with one never stand for the other (:func:`panels_id`)."""
    lib = _library()
    return bool(lib is not None and lib.specviz_use_amx(int(amx_wanted())))


def plain_panels() -> bool:
    """Whether the products are told to read plain panels even where GGUF blocks could serve
    (``SPECVIZ_QUANTIZED_PANELS=0``, the A/B switch)."""
    return os.environ.get(QUANTIZED_VARIABLE, "1").strip() == "0"


def panels_id() -> str:
    """``"-plain-panels"`` where the products are told to read plain panels even where GGUF blocks could serve
    (``SPECVIZ_QUANTIZED_PANELS=0``), ``"-int8-products"`` where they read blocks against int8 inputs
    (``SPECVIZ_PRODUCTS=int8``), either followed by ``"-no-amx"`` where AMX tiles are switched off
    (``SPECVIZ_AMX=0``), else ``""``: part of what cached measurements are keyed by, beside :func:`build_id`
    (whose CPU digest already parts a machine with tiles from one without), since the step's cost (and for int8
    and the tiles its numbers) differs."""
    tiles = "-no-amx" if not amx_wanted() else ""
    if plain_panels():
        return "-plain-panels" + tiles
    return ("-int8-products" if products() == "int8" else "") + tiles


def build_info() -> library.BuildInfo | None:
    """How the native step running here was built (compiler, flags, OpenMP, ISA), or ``None`` where none runs."""
    return library.load(SOURCE).info


def build_description() -> str:
    """One line on the build: what :func:`build_info` says, or why there is none."""
    loaded = library.load(SOURCE)
    return loaded.info.describe() if loaded.info is not None else f"none ({loaded.why_not})"


# --- the boundary: what every tensor handed to step.c must be -------------------------------------------------
# step.c trusts its pointers: a tensor of the wrong dtype, shape or layout is read (or written) past its end, or
# read as other numbers. So every argument is checked here first and refused with a ValueError naming it. The
# weights and the cache are checked once and remembered by what would change if they did (data pointer, shape,
# dtype, layout), so the checks cost a few µs a step; the memory budget's weight streamer swaps weights in and
# out, and a swapped weight has a new pointer, so it is checked again.

_FORMAT = "_specviz_format"  # kept on a packed tensor: step.c's format code of its panels (absent: plain)


_PLAIN = "_specviz_plain"  # kept on a quantized packed tensor: the same weight's plain panels


def _format(packed: torch.Tensor) -> int:
    return packed.__dict__.get(_FORMAT, 0)


def _plain(packed: torch.Tensor) -> torch.Tensor | None:
    return packed.__dict__.get(_PLAIN)


def _holds_q_minus_128(raw: np.ndarray, k: int) -> bool:
    """Whether Q8_0 blocks (``[rows, k / 32 · 34]`` bytes: an fp16 d, then 32 int8 q) hold a q of −128."""
    return bool((np.asarray(raw).reshape(-1, k // 32, 34)[..., 2:] == 0x80).any())


def _interleaved(two: list[torch.Tensor], panel: int, arena: PageArena) -> torch.Tensor:
    """Two packed weights' panels (``panel`` elements each) interleaved: first's 0, second's 0, first's 1, …"""
    out = arena.empty(two[0].numel() * 2, two[0].dtype)
    torch.stack([two[0].view(-1, panel), two[1].view(-1, panel)], 1, out=out.view(-1, 2, panel))
    return out


class CacheError(ValueError, RuntimeError):
    """A cache the native step refuses: a ``ValueError`` like every refusal here, and a ``RuntimeError`` like
    :meth:`KVCache.update`'s on PyTorch's path (capacity exceeded), so a caller catches both paths alike."""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _describe(value) -> str:
    """What a value handed to the step is, in the words its refusal uses: ``float32 [3, 128, 64] contiguous on cpu``."""
    if not isinstance(value, torch.Tensor):
        return f"a {type(value).__name__}"
    strided = value.layout == torch.strided
    layout = ("contiguous" if value.is_contiguous() else "non-contiguous") if strided else str(value.layout)
    return f"{_dtype_name(value.dtype)} {list(value.shape)} {layout} on {value.device}"


def _fits(tensor: torch.Tensor) -> bool:
    """Whether the tensor's storage holds every element its shape names (a storage can be shrunk under it); a
    tensor without a plain storage (a wrapper subclass, a fake tensor) does not fit."""
    try:
        needed = (tensor.storage_offset() + tensor.numel()) * tensor.element_size()
        return tensor.untyped_storage().nbytes() >= needed and (tensor.numel() == 0 or tensor.data_ptr() != 0)
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def require(name: str, tensor, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    """Refuse ``tensor`` unless it is exactly what step.c reads: ``dtype``, ``shape``, contiguous, on the CPU."""
    if not (isinstance(tensor, torch.Tensor) and tensor.layout == torch.strided and tensor.device.type == "cpu"
            and tensor.dtype == dtype and tuple(tensor.shape) == tuple(shape) and tensor.is_contiguous()
            and _fits(tensor)):
        got = _describe(tensor)
        if isinstance(tensor, torch.Tensor) and tensor.layout == torch.strided and not _fits(tensor):
            got += " whose storage does not hold it"
        wanted = "[" + ", ".join(str(size) for size in shape) + "]"
        raise ValueError(f"{name} must be {_dtype_name(dtype)} {wanted} contiguous on cpu, got {got}")


def _key(tensors) -> tuple | None:
    """What would change if a checked tensor changed: its data pointer, shape, dtype and contiguity (``None``
    for what is no plain tensor: it is checked, and refused, every time)."""
    try:  # an absent weight (None: an attention-only block's MLP, a cross layer's k and v) stays None
        return tuple([None if t is None else (t.data_ptr(), t.shape, t.dtype, t.is_contiguous()) for t in tensors])
    except (AttributeError, RuntimeError, TypeError, NotImplementedError):
        return None


# a layer's weights as step.c takes them (its Layer struct's order), with the names refusals use
WEIGHT_NAMES = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                "input_layernorm.weight", "post_attention_layernorm.weight")


def _weight(module: nn.Module) -> torch.Tensor:
    """``module.weight``, read from its parameters where it is one: ``nn.Module.__getattr__`` costs ~0.5 µs a
    call, and a step reads 9 weights a layer (a parametrized or plain-tensor weight takes the slow way)."""
    weight = module._parameters.get("weight")
    return weight if weight is not None else module.weight


def _version(tensor: torch.Tensor) -> int:
    """The tensor's in-place version, or -1 for an inference tensor (made under ``torch.inference_mode``: it keeps
    no version, and nothing changes the weights made that way, such as a drafter's gathered head rows)."""
    if tensor.is_inference():  # asked first: the RuntimeError an inference tensor raises costs ~30 µs
        return -1
    return tensor._version


def _weights(layer: nn.Module) -> tuple:
    """The layer's weights in ``WEIGHT_NAMES``' order, looked up anew every call (a replaced module is seen);
    an attention-only block (no ``mlp``, no ``post_attention_layernorm``) has ``None`` for the four of its MLP,
    a cross-attention layer (``self_attn`` without ``k_proj`` and ``v_proj``) for its key and value maps."""
    modules = layer._modules
    attention = modules["self_attn"]._modules
    cross = "k_proj" not in attention and "v_proj" not in attention
    attended = (_weight(attention["q_proj"]), None if cross else _weight(attention["k_proj"]),
                None if cross else _weight(attention["v_proj"]), _weight(attention["o_proj"]))
    if "mlp" not in modules and "post_attention_layernorm" not in modules:
        return (*attended, None, None, None, _weight(modules["input_layernorm"]), None)
    mlp = modules["mlp"]._modules
    return (*attended, _weight(mlp["gate_proj"]), _weight(mlp["up_proj"]), _weight(mlp["down_proj"]),
            _weight(modules["input_layernorm"]), _weight(modules["post_attention_layernorm"]))


def _is_llama(layer: nn.Module) -> bool:
    """The layers the native step computes: the fused layer's (Llama without biases, SiLU) with RMSNorms."""
    return (FusedLlamaLayer.supports(layer) and hasattr(layer, "input_layernorm")
            and hasattr(layer, "post_attention_layernorm"))


def is_attention_block(layer: nn.Module) -> bool:
    """``h + attention(input_layernorm(h))`` with Llama's attention and no MLP (CATS's adapter): the step runs it
    as a layer whose MLP stages are skipped."""
    modules = layer._modules
    return (FusedLlamaLayer.supports_attention(modules.get("self_attn")) and "input_layernorm" in modules
            and "mlp" not in modules and "post_attention_layernorm" not in modules)


def computes(layer: nn.Module) -> bool:
    """Whether the native step computes this layer: a Llama layer or an attention-only block."""
    return _is_llama(layer) or is_attention_block(layer)


class CheckedLayer(NamedTuple):
    """What ``NativeStep._weight_pointers`` remembers of a layer it checked (kept on the layer)."""

    weights: tuple  # the nine weight tensors, in WEIGHT_NAMES' order
    key: tuple | None  # their pointers, shapes, dtypes and layouts, and two versions: a change means check again
    addresses: tuple[int, ...]  # what reaches C: the packed products' and the norms' addresses
    formats: int  # step.c's Layer.formats: each product weight's panel format, 4 bits each
    plain: tuple  # step.c's Layer.plain: a quantized weight's plain panels' address (else None), in q…down order
    run: object | None  # the run that checked it (NativeStep.trusted_during), None outside one
    held: tuple  # what the addresses point into, kept alive while they may be reused


class PreparedCall(NamedTuple):
    """One call of ``NativeStep.layers`` as a run repeats it step after step (the same layers on the same cache),
    everything but the rows made ready once in the run. Why: building the 30 layers' pointers and checking the
    cache's 60 tensors took ~0.5 ms of Python a step on caches the step had just flushed (docs/verify-cost.md)."""

    run: object  # the run that prepared it: reused only inside that run's trust
    layers: tuple  # the layer modules, by identity
    tensors: tuple  # the cache's keys and values tensors as checked, by identity, in slot order
    capacity: int
    indices: list[int]
    slots: list[int]
    pointers: ctypes.Array  # LayerPointers, one per layer
    shape: Shape
    held: tuple  # what the pointers point into: the layers' CheckedLayer memos and the cache tensors' storages


class PreparedHead(NamedTuple):
    """``NativeStep.head``'s checked norm and head, kept for a trusted run's next steps (as :class:`PreparedCall`)."""

    run: object
    norm_weight: torch.Tensor  # by identity
    head: torch.Tensor  # by identity
    norm_address: int
    head_address: int  # the packed head's
    head_format: int  # its panels' format (0 plain, else GGUF blocks)
    head_plain: int | None  # a quantized head's plain panels' address, for many rows
    vocab: int
    held: tuple  # what the addresses point into: the norm's storage and the packed head


class NativeStep:
    """A model's layers and head through ``step.c``: built once per :class:`~engines.model.layers.LayerStack`."""

    def __init__(self, config, rotary: nn.Module, dtype: torch.dtype, device: torch.device, lib,
                 inter: int | None = None):
        """``inter``: the MLP's width where a block's differs from the model's (:meth:`with_inter`)."""
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.lib = lib
        self.dtype = dtype
        self.d = config.hidden_size
        self.heads, self.kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, head_dim
        self.inter = config.intermediate_size if inter is None else inter
        self.eps = float(config.rms_norm_eps)
        self.scaling = head_dim ** -0.5
        self.inv_freq = rotary.inv_freq.detach().float().contiguous()
        self.rope_scaling = float(getattr(rotary, "attention_scaling", 1.0))
        self._work = torch.empty(0, dtype=torch.float32)
        self._arena = PageArena()  # packed weights on 2 MiB pages where the OS gives them (huge_pages)
        q, kv = self.heads * head_dim, self.kv_heads * head_dim
        d, inter = self.d, self.inter
        self.weight_shapes = ((q, d), (kv, d), (kv, d), (d, q), (inter, d), (inter, d), (d, inter), (d,), (d,))
        # what was checked, by what would change if it did (see _key): layers by id, caches weakly
        self._checked_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # cache → {layers' key: PreparedCall}
        self._checked_heads: set[tuple] = set()
        self._prepared_heads: dict[tuple, PreparedHead] = {}  # by (id(norm weight), id(head)), in one trusted run
        self._run: object | None = None  # the decode run whose engine work is under way (trusted_during)
        self._head_shape = self.shape(1)  # the head reads no cache
        self._layouts: dict[bool, int] = {}  # bf16 → the build's panel layout (_packing_key)
        # GGUF formats whose blocks the products read where a weight has them: those this build widens with
        # vector instructions for this dtype, unless switched off
        plain = plain_panels()
        # int8 products: every weight with Q4_1 or Q8_0 blocks, in any dtype and build (the scalar form where the
        # build has no VNNI), where attention's heads split into whole blocks of 32 (their output is quantized head
        # by head)
        self._int8 = not plain and products() == "int8"
        if self._int8 and head_dim % 32:
            _warn_int8_once(f"head_dim {head_dim} is no multiple of 32")
            self._int8 = False
        every_format = sum(1 << code for code in gguf_blocks.FORMATS.values())
        self._quantized = 0 if plain else (
            every_format if self._int8 else lib.specviz_quantized_formats(int(dtype == torch.bfloat16)))
        self._config, self._rotary = config, rotary
        self._variants: dict[int, NativeStep] = {}  # MLP width → this step for blocks of that width (with_inter)

    @property
    def int8_products(self) -> bool:
        """Whether this step's products take int8 inputs (``SPECVIZ_PRODUCTS=int8``, where the model allows)."""
        return self._int8

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

    def with_inter(self, inter: int) -> "NativeStep":
        """This step for blocks whose MLP is ``inter`` wide and whose attention is the model's (MoA's SA and CA
        blocks: 256 and 1008 where the target's is 1536), made once; a trusted run covers it with this one."""
        if inter == self.inter:
            return self
        found = self._variants.get(inter)
        if found is None:
            if not (isinstance(inter, int) and inter >= 1):
                raise ValueError(f"inter must be a positive int (an MLP's width), got {inter!r}")
            found = NativeStep(self._config, self._rotary, self.dtype, torch.device("cpu"), self.lib, inter)
            found._layouts = self._layouts
            found._quantized, found._int8 = self._quantized, self._int8
            found._arena = self._arena
            self._variants[inter] = found
        return found

    def shape(self, capacity: int) -> Shape:
        return Shape(self.d, self.heads, self.kv_heads, self.head_dim, self.inter, capacity, self.eps, self.scaling,
                     self.rope_scaling, int(self.dtype == torch.bfloat16))

    def _work_for(self, shape: Shape, rows: int, threads: int) -> torch.Tensor:
        floats = self.lib.specviz_work_floats(ctypes.byref(shape), rows, threads)
        if self._work.numel() < floats:
            self._work = torch.empty(floats, dtype=torch.float32)
        return self._work

    def packed(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight`` ``[out, in]`` in the step's panels (``specviz_pack``): made on first use and kept on the
        tensor itself, so it lives and dies with it (a streamed layer's weights are packed each time they are
        streamed in), and made again when the tensor changes in place (training bumps its version). Costs one more
        copy of the weights: 269 MB for SmolLM2-135M in bf16, 538 MB in fp32. A weight that keeps the GGUF blocks
        it was dequantized from (:mod:`engines.model.gguf_blocks`) is packed from those too where this build reads
        them (:meth:`_pack_quantized`): 97 MB more for the default model, which few-row products read instead."""
        layout, key = self._packing_key(weight)
        kept = weight.__dict__.setdefault("_specviz_packed", {})  # layout → (key, packed): one per build loaded
        if layout not in kept or kept[layout][0] != key:
            quantized = self._pack_quantized(weight)
            kept[layout] = (key, quantized if quantized is not None else self._pack(weight))
        return kept[layout][1]

    def packed_pair(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        """Two weights of one shape packed with their panels interleaved (first's panel 0, second's 0, first's 1,
        …), kept on ``first`` while both stay as they were; the two are not also kept apart, so the pair costs
        one copy. Why: stage D reads gate and up panel by panel together, and two streams read at once came in
        at two thirds of one stream's speed on a 2-core Zen 4."""
        key = (self._packing_key(first), self._packing_key(second))
        kept = first.__dict__.get("_specviz_pair")
        if kept is None or kept[0] != key:
            with self._arena.paused():  # the halves are copied into the pair, which alone goes on huge pages
                both = [self._pack_quantized(first), self._pack_quantized(second)]
            bf16 = int(first.dtype == torch.bfloat16)
            panel = self.lib.specviz_panel_elems(first.shape[1], bf16)
            fmt = _format(both[0]) if all(q is not None for q in both) else 0
            if fmt and fmt == _format(both[1]):  # blocks for the pair only where both read them, of one format
                pair = _interleaved(both, self.lib.specviz_quantized_bytes(1, first.shape[1], fmt), self._arena)
                pair.__dict__[_FORMAT] = fmt
                if all(_plain(q) is not None for q in both):  # int8 products keep none: their bits are their own
                    pair.__dict__[_PLAIN] = _interleaved([_plain(q) for q in both], panel, self._arena)
            else:
                with self._arena.paused():
                    plain = [self._pack(w) if q is None or _plain(q) is None else _plain(q)
                             for w, q in zip((first, second), both)]
                pair = _interleaved(plain, panel, self._arena)
                for weight in (first, second):
                    gguf_blocks.mark_read(weight, False)
            kept = (key, pair)
            first.__dict__["_specviz_pair"] = kept
        return kept[1]

    def _packing_key(self, weight: torch.Tensor) -> tuple:
        """The build's panel layout and the GGUF formats read, and what would change if the weight did."""
        bf16 = weight.dtype == torch.bfloat16
        if bf16 not in self._layouts:  # the build's, fixed for the process: asked of C once per dtype
            self._layouts[bf16] = self.lib.specviz_panel_layout(int(bf16))
        return ((self._layouts[bf16], self._quantized, self._int8),
                (weight.data_ptr(), _version(weight), tuple(weight.shape), weight.dtype))

    def reads_blocks(self, weight: torch.Tensor) -> bool:
        """Whether this step's products would read ``weight``'s GGUF blocks (before packing has checked them)."""
        blocks = gguf_blocks.blocks_of(weight)
        return bool(blocks is not None and (self._quantized >> blocks.format) & 1 and weight.dtype == self.dtype
                    and self.lib.specviz_quantized_bytes(*weight.shape, blocks.format))

    def _pack_quantized(self, weight: torch.Tensor) -> torch.Tensor | None:
        """``weight``'s GGUF blocks in quantized panels, or ``None`` where it has none, this build does not read
        their format, or they do not widen, bit for bit, to the panels :meth:`_pack` makes of the weight itself
        (a weight changed since it was loaded; a conversion this build rounds otherwise): checked here once per
        weight, because the products' bits rest on it. With int8 products the blocks are laid out for integer dot
        products (step.c's Q4_1_I8, Q8_0_I8: the format's code + 2) once the format's own layout has passed the
        same check (its widening is the vectorised one; the int8 layout's is weight by weight, 0.7 s a load), and
        no plain panels are kept: those products' numbers are their own, so no row count may read the plain ones.
        A weight without blocks (a drafter's layers and head rows, another model's weights) then reads Q8_0
        blocks made from it (:func:`~engines.model.gguf_blocks.quantize_q8_0`): its products' numbers are
        those blocks'."""
        n, k = weight.shape
        if not self.reads_blocks(weight):
            if not (self._int8 and weight.dtype == self.dtype and weight.dim() == 2 and k % 32 == 0):
                return None
            # a weight the GGUF gave no blocks: its Q8_0 blocks, made here from it, so nothing to check
            return self._pack_blocks(gguf_blocks.quantize_q8_0(weight).blocks, gguf_blocks.FORMATS["Q8_0"] + 2, n, k)
        blocks = gguf_blocks.blocks_of(weight)
        source = np.ascontiguousarray(blocks.blocks)
        if self._int8 and blocks.format == gguf_blocks.FORMATS["Q8_0"] and _holds_q_minus_128(source, k):
            _log.warning("specviz: a %s×%s weight's Q8_0 blocks hold q = -128, which the AVX2 int8 products cannot "
                         "negate; its products stay exact, on plain panels", n, k)
            gguf_blocks.mark_read(weight, False)
            return None
        with self._arena.paused() if self._int8 else contextlib.nullcontext():  # int8 keeps neither: made to check
            out = self._pack_blocks(source, blocks.format, n, k)
            plain = self._pack(weight)
        bf16 = int(weight.dtype == torch.bfloat16)
        widened = torch.empty(self.lib.specviz_packed_elems(n, k, bf16), dtype=weight.dtype)
        _checked(self.lib.specviz_unpack_quantized(out.data_ptr(), blocks.format, n, k, bf16, widened.data_ptr()),
                 "unpack_quantized")
        bits = torch.int16 if bf16 else torch.int32
        if not torch.equal(widened.view(bits), plain.view(bits)):
            _log.warning("specviz: a %s×%s weight's GGUF blocks do not widen to the weight the model holds (changed "
                         "since loading?); its products read plain panels", n, k)
            gguf_blocks.mark_read(weight, False)
            return None
        gguf_blocks.mark_read(weight, True)
        if self._int8:
            return self._pack_blocks(source, blocks.format + 2, n, k)
        out.__dict__[_PLAIN] = plain  # step.c reads these past BLOCK_ROWS rows, where widening costs more
        return out

    def _pack_blocks(self, blocks: np.ndarray, fmt: int, n: int, k: int) -> torch.Tensor:
        """GGUF blocks ``[n, k / 32 · block bytes]`` in step.c's quantized panels of format ``fmt``."""
        out = self._arena.empty(self.lib.specviz_quantized_bytes(n, k, fmt), torch.uint8)
        _checked(self.lib.specviz_pack_quantized(blocks.ctypes.data, fmt, n, k, out.data_ptr()), "pack_quantized")
        out.__dict__[_FORMAT] = fmt
        return out

    def _pack(self, weight: torch.Tensor) -> torch.Tensor:
        rows = weight.detach().contiguous()
        bf16 = int(rows.dtype == torch.bfloat16)
        out = self._arena.empty(self.lib.specviz_packed_elems(rows.shape[0], rows.shape[1], bf16), rows.dtype)
        _checked(self.lib.specviz_pack(rows.data_ptr(), rows.shape[0], rows.shape[1], bf16, out.data_ptr()), "pack")
        return out

    def trusted_during(self, run: object) -> "TrustedRun":
        """The engine's own work of one decode run (``Engine._run_events`` wraps each of its steps): a layer
        checked once in ``run`` keeps its addresses for the rest of it, unchecked. Why: the check reads nine
        weights a layer, 270 tensors, and on the caches a step has just flushed by streaming its weights that
        took about 1 ms of a 13 ms step (docs/verify-cost.md); nothing else can reach a run's weights while its
        engine works, and a `param.data = …` leaves no cheaper trace (no version, no hook, the same pointer for
        a view). Between events the consumer's code runs untrusted: a forward it makes is checked in full (and
        the run's next step checks again); a weight it swaps without one is seen by the next run at the latest,
        this one going on with the weights it checked. Never a crash: the addresses a run reuses belong to
        tensors its memo holds (``_weight_pointers``)."""
        return TrustedRun(self, run)

    def _weight_pointers(self, layer: nn.Module, index: int, trusted: bool = False) -> CheckedLayer:
        """The packed products' and the norms' addresses for one layer, its weights checked against the model's
        shapes whenever they change (q ``[heads·head_dim, d]``, k and v ``[kv_heads·head_dim, d]``, o ``[d,
        heads·head_dim]``, gate and up ``[inter, d]``, down ``[d, inter]``, the norms ``[d]``; the step's dtype,
        contiguous, on the CPU). Why kept: looking up nine weights through nn.Module attributes and their packed
        copies took ~2.5 ms of a 13 ms step for 30 layers. The addresses are reused while the layer holds the same
        weight tensors (a streamed layer gets new ones each time), each keeps its pointer, shape, dtype and
        layout, and the first and last product weights keep their versions (training and loading a state dict
        change them all in place). Only the packed copies, which the step owns, and the norms reach C.
        ``trusted``: inside :meth:`trusted_during`, a layer already checked in that run is not checked again;
        its memo holds the packed copies and the norms' storage, so its addresses stay valid whatever happens
        to the weights meanwhile."""
        found: CheckedLayer | None = layer.__dict__.get("_specviz_weights")
        if trusted and found is not None and self._run is not None and found.run is self._run:
            return found
        try:
            weights = _weights(layer)  # looked up every call: a replaced module is seen
        except (KeyError, AttributeError) as missing:
            raise ValueError(f"layer {index} is no Llama layer the native step computes (it lacks {missing})") from None
        key = _key(weights)  # every weight's pointer, shape, dtype and layout: a weight changed under the
        last = weights[6] if weights[6] is not None else weights[3]  # layer, or a step that reads other panel
        # formats, checks it again
        now = None if key is None else (key, _version(weights[0]), _version(last), self._quantized, self._int8)
        run = self._run if trusted else None
        if (found is None or now is None or now != found.key
                or any(new is not old for new, old in zip(weights, found.weights))):
            mlp = weights[6] is not None  # else an attention-only block: step.c skips its MLP stages
            own_kv = weights[1] is not None  # else a cross-attention layer: step.c projects no keys or values
            for name, weight, shape in zip(WEIGHT_NAMES, weights, self.weight_shapes):
                if weight is not None:  # _weights gives None only for a block's absent MLP or key and value maps
                    require(f"{name} of layer {index}", weight, self.dtype, shape)
            q, o = self.packed(weights[0]), self.packed(weights[3])
            k, v = (self.packed(weights[1]), self.packed(weights[2])) if own_kv else (None, None)
            gate_up, down = (self.packed_pair(weights[4], weights[5]), self.packed(weights[6])) if mlp else (None, None)
            # None reaches C as NULL: an attention-only block's MLP and second norm
            addresses = tuple(None if t is None else t.data_ptr() for t in (q, k, v, o, gate_up, down, *weights[7:]))
            products = (q, k, v, o, gate_up, down)
            formats = sum(_format(t) << 4 * i for i, t in enumerate(products) if t is not None)
            plain = tuple(None if t is None or _plain(t) is None else _plain(t).data_ptr() for t in products)
            # what the addresses point into, held here: a weight repacked or a norm's .data swapped meanwhile
            # frees nothing a trusted call still reads
            held = (q, k, v, o, gate_up, down, *(w.untyped_storage() for w in weights[7:] if w is not None))
            found = CheckedLayer(weights, now, addresses, formats, plain, run, held)
            layer.__dict__["_specviz_weights"] = found
        elif found.run is not run:
            found = found._replace(run=run)
            layer.__dict__["_specviz_weights"] = found
        return found

    def runs(self, hidden: torch.Tensor, cache) -> bool:
        """Whether a forward of ``hidden`` with ``cache`` runs here."""
        return (hidden.dim() == 3 and hidden.shape[0] == 1 and hidden.shape[1] > 0
                and hidden.dtype == self.dtype and hidden.device.type == "cpu" and not torch.is_grad_enabled()
                and (cache is None or isinstance(cache, KVCache)))

    def layers(self, layers: list[nn.Module], hidden: torch.Tensor, positions: torch.Tensor,
               mask: torch.Tensor | None, cache: KVCache | None, trusted: bool = True) -> torch.Tensor:
        """Layers in sequence on ``hidden`` ``[1, n, d]``; their keys and values are appended to ``cache``.
        Every argument is checked first (:func:`require`): a wrong one raises ``ValueError`` naming it; the
        weights of a layer already checked in the run under way only where ``trusted`` (:meth:`trusted_during`;
        a streamed layer's weights change within a run, so ``native_pass`` passes ``False`` for it)."""
        n = self._rows(hidden)
        if not layers:
            raise ValueError("layers must name at least one layer")
        if cache is None:  # a pass without a cache attends within itself: a scratch cache of n entries
            cache = KVCache(max(layer.self_attn.layer_idx for layer in layers) + 1, self.kv_heads, self.head_dim,
                            n, self.dtype)
            prepared = self._prepare(layers, cache, trusted, keep=False)
        else:
            prepared = ((self._prepared_call(layers, cache) if trusted else None)
                        or self._prepare(layers, cache, trusted, keep=trusted))
        indices, slots = prepared.indices, prepared.slots
        lengths = cache.lengths
        prefix = lengths[slots[0]]
        if not (isinstance(prefix, int) and 0 <= prefix) or any(lengths[i] != prefix for i in slots):
            raise CacheError("the layers of one native call must hold caches of the same length, got "
                             f"{[lengths[i] for i in slots]} for layers {indices}")
        if prefix + n > prepared.capacity:
            raise CacheError(f"KV cache capacity {prepared.capacity} exceeded at layer {indices[0]}: "
                             f"{prefix} cached + {n} new")
        positions = self._positions(positions, n)
        allowed = self._allowed(mask, n, prefix + n)
        pointers, shape = prepared.pointers, prepared.shape
        out = hidden.reshape(n, self.d).clone(memory_format=torch.contiguous_format)
        threads = torch.get_num_threads()
        work = self._work_for(shape, n, threads)
        _checked(self.lib.specviz_layers(ctypes.byref(shape), pointers, len(layers), out.data_ptr(), n,
                                         positions.data_ptr(), prefix,
                                         allowed.data_ptr() if allowed is not None else None,
                                         self.inv_freq.data_ptr(), work.data_ptr(), threads), "layers")
        for i in slots:
            lengths[i] = prefix + n
        return out.view(1, n, self.d)

    def attend_memory(self, layer: nn.Module, hidden: torch.Tensor, keys: torch.Tensor,
                      values: torch.Tensor) -> torch.Tensor:
        """A cross-attention layer (``self_attn`` with ``q_proj`` and ``o_proj`` only) on ``hidden`` ``[1, n, d]``:
        every row attends to all of ``keys`` and ``values`` ``[1, kv_heads, S, head_dim]`` (S ≥ 1), a memory
        computed elsewhere (MoA's CA block over its memory rows): no RoPE, nothing written, no mask."""
        n = self._rows(hidden)
        length = keys.shape[2] if isinstance(keys, torch.Tensor) and keys.dim() == 4 and keys.shape[2] else "S ≥ 1"
        wanted = (1, self.kv_heads, length, self.head_dim)
        require("the memory's keys", keys, self.dtype, wanted)
        require("the memory's values", values, self.dtype, wanted)
        checked = self._weight_pointers(layer, 0, trusted=True)
        if checked.addresses[1] is not None:
            raise ValueError("attend_memory's layer must be a cross-attention layer (no k_proj, no v_proj)")
        pointers = (LayerPointers * 1)(LayerPointers(*checked.addresses, keys.data_ptr(), values.data_ptr(),
                                                     checked.formats, (ctypes.c_void_p * 6)(*checked.plain)))
        shape = self.shape(length)
        positions = torch.zeros(n, dtype=torch.int64)  # read by no rotation: a cross layer's q is not rotated
        out = hidden.reshape(n, self.d).clone(memory_format=torch.contiguous_format)
        threads = torch.get_num_threads()
        work = self._work_for(shape, n, threads)
        _checked(self.lib.specviz_layers(ctypes.byref(shape), pointers, 1, out.data_ptr(), n, positions.data_ptr(),
                                         length, None, self.inv_freq.data_ptr(), work.data_ptr(), threads),
                 "attend_memory")
        return out.view(1, n, self.d)

    def _prepared_call(self, layers: list[nn.Module], cache) -> PreparedCall | None:
        """The call this run prepared for these layers on this cache, while the run is trusted and nothing it
        checked was replaced (a layer, the cache's capacity, any of its keys or values tensors); else ``None``."""
        if self._run is None or not isinstance(cache, KVCache):
            return None
        found = self._prepared.get(cache, {}).get((len(layers), id(layers[0])))
        if (found is None or found.run is not self._run or found.capacity != cache.capacity
                or any(a is not b for a, b in zip(layers, found.layers))):
            return None
        keys, values, tensors, held = cache.keys, cache.values, found.tensors, len(cache.keys)
        if len(values) != held or len(cache.lengths) != held:
            return None
        for j, i in enumerate(found.slots):
            if i >= held or keys[i] is not tensors[2 * j] or values[i] is not tensors[2 * j + 1]:
                return None
        return found

    def _prepare(self, layers: list[nn.Module], cache, trusted: bool, keep: bool) -> PreparedCall:
        """Check the layers' weights and the cache, and lay out the pointers step.c reads. Kept (``keep``) inside
        a trusted run for the run's next steps (:meth:`_prepared_call`); it holds the layers' checked memos and
        the cache tensors' storages, so its pointers stay valid even if a consumer swaps a tensor's ``.data``
        between steps (the run then goes on with what it checked, as for weights)."""
        indices = [layer.self_attn.layer_idx for layer in layers]
        slots = self._check_cache(cache, indices)
        pointers = (LayerPointers * len(layers))()
        memos = []
        for slot, (layer, index, i) in enumerate(zip(layers, indices, slots)):
            checked = self._weight_pointers(layer, index, trusted)
            memos.append(checked)
            pointers[slot] = LayerPointers(*checked.addresses, cache.keys[i].data_ptr(), cache.values[i].data_ptr(),
                                           checked.formats, (ctypes.c_void_p * 6)(*checked.plain))
        tensors = tuple(t for i in slots for t in (cache.keys[i], cache.values[i]))
        held = (tuple(memos), tuple(t.untyped_storage() for t in tensors))
        call = PreparedCall(self._run if trusted else None, tuple(layers), tensors, cache.capacity, indices, slots,
                            pointers, self.shape(cache.capacity), held)
        if keep and self._run is not None:
            self._prepared.setdefault(cache, {})[(len(layers), id(layers[0]))] = call
        return call

    def head(self, hidden: torch.Tensor, norm: nn.Module, head: torch.Tensor) -> torch.Tensor:
        """Final norm and LM head: fp32 logits ``[n, vocab]`` for ``hidden`` ``[1, n, d]``."""
        n = self._rows(hidden)
        weight = getattr(norm, "weight", None)
        found = self._prepared_heads.get((id(weight), id(head))) if self._run is not None else None
        if found is None or found.run is not self._run or found.norm_weight is not weight or found.head is not head:
            key = _key((weight, head))
            if key is None or key not in self._checked_heads:
                require("the final norm's weight", weight, self.dtype, (self.d,))
                vocab = head.shape[0] if isinstance(head, torch.Tensor) and head.dim() == 2 and head.shape[0] else "vocab"
                require("the LM head", head, self.dtype, (vocab, self.d))
                if len(self._checked_heads) >= 64:  # the target's head and a few drafters' row sets; stale ones go
                    self._checked_heads.clear()
                self._checked_heads.add(key)
            packed = self.packed(head)
            # in a trusted run, kept for its next steps with what the addresses point into (as for layers)
            twin = _plain(packed)
            found = PreparedHead(self._run, weight, head, weight.data_ptr(), packed.data_ptr(), _format(packed),
                                 None if twin is None else twin.data_ptr(), head.shape[0],
                                 (weight.untyped_storage(), packed))
            if self._run is not None:
                if len(self._prepared_heads) >= 16 or any(kept.run is not self._run
                                                          for kept in self._prepared_heads.values()):
                    self._prepared_heads.clear()
                self._prepared_heads[(id(weight), id(head))] = found
        rows = hidden.reshape(n, self.d).contiguous()
        logits = torch.empty(n, found.vocab, dtype=torch.float32)
        threads = torch.get_num_threads()
        shape = self._head_shape
        work = self._work_for(shape, n, threads)
        _checked(self.lib.specviz_head(ctypes.byref(shape), rows.data_ptr(), n, found.norm_address,
                                       found.head_address, found.head_format, found.head_plain, found.vocab,
                                       logits.data_ptr(), work.data_ptr(), threads),
                 "head")
        return logits

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ weight.T (+ bias)`` as fp32 ``[..., N]``, summed as the step sums (row-invariant): a drafter's
        own maps (EAGLE's fc, an exit head's projection) at the step's speed rather than PyTorch's per call.
        ``x``, ``weight`` and ``bias`` are in the step's dtype, on the CPU (any layout: copied contiguous)."""
        dtype = _dtype_name(self.dtype)
        if not (isinstance(weight, torch.Tensor) and weight.dim() == 2 and weight.shape[0] >= 1
                and weight.shape[1] >= 1 and weight.dtype == self.dtype and weight.device.type == "cpu"
                and weight.layout == torch.strided):
            raise ValueError(f"linear's weight must be {dtype} [N, K] (N, K ≥ 1) on cpu, got {_describe(weight)}")
        out_features, in_features = weight.shape
        if not (isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[-1] == in_features
                and x.dtype == self.dtype and x.device.type == "cpu" and x.layout == torch.strided):
            raise ValueError(f"linear's x must be {dtype} [..., {in_features}] on cpu (the weight's in-dim), "
                             f"got {_describe(x)}")
        if bias is not None and not (isinstance(bias, torch.Tensor) and tuple(bias.shape) == (out_features,)
                                     and bias.dtype == self.dtype and bias.device.type == "cpu"
                                     and bias.layout == torch.strided):
            raise ValueError(f"linear's bias must be {dtype} [{out_features}] on cpu or None, got {_describe(bias)}")
        rows = x.reshape(-1, in_features).contiguous()
        if rows.shape[0] == 0:  # no rows: nothing to compute (step.c refuses M < 1)
            return torch.empty(*x.shape[:-1], out_features, dtype=torch.float32)
        bias = bias.contiguous() if bias is not None else None  # the weight reaches C packed (contiguous)
        out = torch.empty(rows.shape[0], out_features, dtype=torch.float32)
        packed = self.packed(weight)
        _checked(self.lib.specviz_linear(rows.data_ptr(), rows.shape[0], in_features, packed.data_ptr(),
                                         _format(packed), out_features, bias.data_ptr() if bias is not None else None,
                                         int(self.dtype == torch.bfloat16), out.data_ptr(),
                                         torch.get_num_threads()), "linear")
        return out.view(*x.shape[:-1], out_features)

    # --- the checks ---------------------------------------------------------------------------------------------
    def _rows(self, hidden) -> int:
        """``n`` for hidden states ``[1, n, d]`` in the step's dtype on the CPU (any layout: they are copied)."""
        if not (isinstance(hidden, torch.Tensor) and hidden.dim() == 3 and hidden.shape[0] == 1
                and hidden.shape[1] >= 1 and hidden.shape[2] == self.d and hidden.dtype == self.dtype
                and hidden.device.type == "cpu" and hidden.layout == torch.strided):
            raise ValueError(f"hidden must be {_dtype_name(self.dtype)} [1, n, {self.d}] (n ≥ 1) on cpu, "
                             f"got {_describe(hidden)}")
        return hidden.shape[1]

    def _positions(self, positions, n: int) -> torch.Tensor:
        """``positions`` as ``n`` non-negative int64s, contiguous (a copy where they were not)."""
        if not (isinstance(positions, torch.Tensor) and positions.device.type == "cpu"
                and positions.layout == torch.strided and not positions.dtype.is_floating_point
                and not positions.dtype.is_complex and positions.dtype != torch.bool and positions.numel() == n):
            raise ValueError(f"positions must be {n} integers on cpu (one per row of hidden), got "
                             f"{_describe(positions)}")
        flat = positions.reshape(-1).to(torch.int64).contiguous()
        lowest = int(flat.min())
        if lowest < 0:
            raise ValueError(f"positions must be non-negative, got {lowest}")
        return flat

    def _allowed(self, mask, n: int, length: int) -> torch.Tensor | None:
        """The additive mask ``[1, 1, n, ≥ length]`` as the bytes step.c reads (1: row may see entry), or ``None``."""
        if mask is None:
            return None
        if not (isinstance(mask, torch.Tensor) and mask.dim() == 4 and mask.device.type == "cpu"
                and mask.dtype.is_floating_point and mask.layout == torch.strided and mask.shape[0] >= 1
                and mask.shape[1] >= 1):
            raise ValueError(f"mask must be an additive float mask [1, 1, {n}, {length}] on cpu, got {_describe(mask)}")
        allowed = (mask[0, 0, :, :length] > torch.finfo(mask.dtype).min / 2).to(torch.uint8).contiguous()
        if allowed.shape != (n, length):
            raise ValueError(f"mask must cover {n} rows and {length} cached entries, got {tuple(mask.shape)}")
        return allowed

    def _check_cache(self, cache, indices: list[int]) -> list[int]:
        """The cache's slots for ``indices``, once each is checked: a :class:`KVCache` holding those layers, each's
        keys and values ``[1, kv_heads, capacity, head_dim]`` in the step's dtype, contiguous on the CPU."""
        if not isinstance(cache, KVCache):
            raise ValueError(f"cache must be a KVCache or None, got {_describe(cache)}")
        capacity, held, first = cache.capacity, len(cache.keys), cache.first_layer
        if not (isinstance(capacity, int) and capacity >= 1 and len(cache.values) == held == len(cache.lengths)):
            raise CacheError(f"cache must hold keys, values and lengths for each of its layers and a capacity ≥ 1, "
                             f"got capacity {capacity!r}, {held} keys, {len(cache.values)} values, "
                             f"{len(cache.lengths)} lengths")
        checked = self._checked_caches.setdefault(cache, {})
        shape = (1, self.kv_heads, capacity, self.head_dim)
        slots = []
        for index in indices:
            i = index - first if isinstance(index, int) else -1
            if not 0 <= i < held:
                raise CacheError(f"cache index of layer {index!r} out of range: the cache holds layers "
                                 f"{first}..{first + held - 1}")
            keys, values = cache.keys[i], cache.values[i]
            tensors = _key((keys, values))
            key = (capacity, tensors)
            if tensors is None or checked.get(i) != key:
                require(f"keys of layer {index}", keys, self.dtype, shape)
                require(f"values of layer {index}", values, self.dtype, shape)
                checked[i] = key
            length = cache.lengths[i]
            if not (isinstance(length, int) and 0 <= length <= capacity):
                raise CacheError(f"cache length of layer {index} must be in 0..{capacity}, got {length!r}")
            slots.append(i)
        return slots


class TrustedRun:
    """A context, entered anew around each of a run's steps, in which ``native``'s layers checked in ``run`` are
    not checked again (:meth:`NativeStep.trusted_during`)."""

    def __init__(self, native: NativeStep, run: object):
        self.native, self.run, self._previous = native, run, []

    def __enter__(self) -> "TrustedRun":
        self._previous.append(self.native._run)
        for step in (self.native, *self.native._variants.values()):
            step._run = self.run
        return self

    def __exit__(self, *_exc) -> None:
        previous = self._previous.pop()
        for step in (self.native, *self.native._variants.values()):
            step._run = previous


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
            with native._arena.paused():  # its weights are packed each time they stream in: freed with them
                output = native.layers([layer], hidden, positions, mask, cache, trusted=False)
            for hook in list(layer._forward_hooks.values()):
                hook(layer, (hidden,), output)
            hidden = output
        else:
            group.append(layer)
    return native.layers(group, hidden, positions, mask, cache) if group else hidden
