"""Facts about the machine the engine runs on, and the cache where what was measured on it is kept.

Everything measured once per machine (the dequantized weights, the native step's build, the dtype choice,
the verify-cost curve, the compiled fp32 kernel) is written under :func:`cache_dir`; the CPU's flags decide
only what needs a flag to build.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where dequantized weights live; ``SPECVIZ_CACHE`` overrides the XDG default."""
    root = os.environ.get("SPECVIZ_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "specviz"
    )
    return Path(root)


def write_cache_file(path: Path, text: str) -> None:
    """Write a cache file so that no reader ever sees half of it: several processes share the cache (the
    dashboard, a notebook, parallel test workers), and one may read while another writes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    staging.write_text(text)
    os.replace(staging, path)


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``/proc/cpuinfo``); empty where that cannot be read (macOS, Windows, a
    sandbox), which only turns off what needs a flag: bf16 as the CPU default, the compiled fp32 kernel."""
    try:
        return frozenset(Path("/proc/cpuinfo").read_text().split())
    except (OSError, UnicodeDecodeError):
        return frozenset()


def cpu_supports_bf16() -> bool:
    """Whether the CPU has native bf16 dot products (AVX-512 BF16 or AMX): training's mixed precision asks. The
    decoding default is measured instead (:mod:`engines.model.step_choice`)."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
