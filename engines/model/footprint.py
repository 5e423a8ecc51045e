"""What an engine holds in memory, and what this machine has: checked before a model loads, so a model the
machine cannot hold is refused with the numbers instead of the process being killed halfway through a load.

An engine holds its weights, the copy of them the native step (or the fused layers) packs on first use, and
run-time buffers. Measured as the growth of a process's resident memory over ``Engine.load`` and a first
run of the default model (SmolLM2-135M, 134.5M parameters, on a Zen 4 CPU): float32 +1,245 MB for 538 MB of
weights, bfloat16 +650 MB for 269 MB — about 2.4 times the weights' bytes in both.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

ENGINE_BYTES_PER_WEIGHT_BYTE = 2.4  # weights + their packed copy + run-time buffers (measured, above)
BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}
GB = 1e9


def machine_memory() -> tuple[int, int] | None:
    """``(total, available)`` bytes of this machine's memory, from psutil where it is installed, else
    ``/proc/meminfo`` (Linux); ``None`` where neither can tell (then nothing is checked)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        memory = psutil.virtual_memory()
        return int(memory.total), int(memory.available)
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        return int(fields["MemTotal"].split()[0]) * 1024, int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def parameter_count(model: torch.nn.Module) -> int:
    """Parameters of a loaded model (a tied head counted once)."""
    return sum(p.numel() for p in model.parameters())


def stored_parameter_count(folder: str | Path) -> int | None:
    """Parameters in a model folder's safetensors files, read from their headers (no weight is read);
    ``None`` where the folder holds none (a hub id, another format)."""
    files = sorted(Path(folder).glob("*.safetensors")) if Path(folder).is_dir() else []
    if not files:
        return None
    from safetensors import SafetensorError, safe_open

    count = 0
    try:
        for file in files:
            with safe_open(str(file), "pt") as handle:
                for name in handle.keys():
                    shape = handle.get_slice(name).get_shape()
                    count += int(torch.Size(shape).numel())
    except (SafetensorError, OSError):
        return None
    return count


def engine_bytes(parameters: int, dtype: str) -> int:
    """About what an engine of ``parameters`` parameters holds in ``dtype`` once it has run."""
    return round(parameters * BYTES_PER_ELEMENT.get(dtype, 4) * ENGINE_BYTES_PER_WEIGHT_BYTE)


def gb(n_bytes: float) -> str:
    return f"{n_bytes / GB:.2f} GB" if n_bytes < 10 * GB else f"{n_bytes / GB:.1f} GB"


def check_fits(name: str, dtype: str, parameters: int | None, memory: tuple[int, int] | None = None) -> None:
    """``ValueError`` when an engine of ``parameters`` in ``dtype`` needs more memory than this machine has
    available, naming both and what would fit (the other dtype, where it does). ``memory``: ``(total,
    available)``, measured when not given; unknown parameters or memory check nothing."""
    memory = machine_memory() if memory is None else memory
    if parameters is None or memory is None:
        return
    total, available = memory
    need = engine_bytes(parameters, dtype)
    if need <= available:
        return
    others = [d for d in ("bfloat16", "float32") if d != dtype and engine_bytes(parameters, d) <= available]
    hint = (f"; {others[0]} needs about {gb(engine_bytes(parameters, others[0]))}, which fits" if others
            else "; no dtype fits: close other programs or use a machine with more memory")
    raise ValueError(f"loading {name} in {dtype} needs about {gb(need)} of memory ({parameters / 1e6:,.1f}M "
                     f"parameters: the weights, the copy the native step packs, run-time buffers), and this machine "
                     f"has {gb(available)} available of {gb(total)}{hint}")


def check_load(name: str, source: str | Path | None, dtype: str, device: str) -> None:
    """Before loading ``name`` from ``source`` (a folder) on ``device``: the check above, on the CPU only (a GPU's
    memory is its own; ``SPECVIZ_SKIP_MEMORY_CHECK=1`` turns it off)."""
    if device != "cpu" or source is None or os.environ.get("SPECVIZ_SKIP_MEMORY_CHECK") == "1":
        return
    check_fits(name, dtype, stored_parameter_count(source))
