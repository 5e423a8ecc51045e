"""Facts about the machine the engine runs on, and the cache where what was measured on it is kept.

Everything measured once per machine (the dequantized weights, the native step's build, the dtype choice,
the verify-cost curve, the compiled fp32 kernel) is written under :func:`cache_dir`, by the rule of
:mod:`engines.storage` (whole or not at all); the CPU's flags decide only what needs a flag to build.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def cache_dir() -> Path:
    """Where dequantized weights live; ``SPECVIZ_CACHE`` overrides the XDG default."""
    root = os.environ.get("SPECVIZ_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "specviz"
    )
    return Path(root)


def cpuinfo_text() -> str:
    """``/proc/cpuinfo`` as text, or ``""`` where it cannot be read (macOS, Windows, a sandbox)."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``/proc/cpuinfo``); empty where that cannot be read (macOS, Windows, a
    sandbox), which only turns off what needs a flag: bf16 as the CPU default, the compiled fp32 kernel."""
    return frozenset(cpuinfo_text().split())


def cpu_identity() -> str:
    """What a build for ``-march=native`` depends on, and nothing that moves from boot to boot: on Linux the
    first CPU's ``flags`` line (``Features`` on Arm) and ``model name`` — not ``cpu MHz`` or ``bogomips``,
    which would make every boot look like a new machine and rebuild; on macOS the brand string; elsewhere
    :func:`platform.processor`."""
    fields: dict[str, str] = {}
    for line in cpuinfo_text().splitlines():
        name, colon, value = line.partition(":")
        if colon:
            fields.setdefault(name.strip().lower(), value.strip())
    if fields:
        flags = " ".join(sorted((fields.get("flags") or fields.get("features", "")).split()))
        return f"{fields.get('model name', '')}|{flags}"
    return os_cpu_name()


def os_cpu_name() -> str:
    """Where there is no ``/proc/cpuinfo``: ``sysctl -n machdep.cpu.brand_string`` on macOS ("Apple M2",
    "Intel(R) Core(TM) i7-…"); :func:`platform.processor` elsewhere (Windows names family, model and stepping
    there). Empty if neither says."""
    if platform.system() == "Darwin":
        try:
            found = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                   timeout=5, check=False)
            if found.returncode == 0 and found.stdout.strip():
                return found.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor()


def cpu_supports_bf16() -> bool:
    """Whether the CPU has native bf16 dot products (AVX-512 BF16 or AMX): training's mixed precision asks. The
    decoding default is measured instead (:mod:`engines.model.step_choice`)."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
