"""Compile a C source shipped with the engine into the specviz cache once per machine, and load it with ctypes.

The engine's native kernels are plain C with OpenMP (no PyTorch headers, so a build takes a second or two,
not minutes). Each is compiled on the machine that runs it, for that machine's instruction set
(``-march=native``): the library's name carries a digest of the source, the flags, the compiler and the CPU's
feature flags, so a cache shared between machines never loads a build made for another CPU. Where no C
compiler is found, or the build fails, :func:`load` returns ``None`` with the reason, and the caller keeps
PyTorch's path (correct, slower) and says so once.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from engines.model.machine import cache_dir, cpu_flags

_lock = threading.Lock()
_loaded: dict[str, "Loaded"] = {}


@dataclass(frozen=True)
class Loaded:
    """A library, or why there is none (``library`` is ``None`` then)."""

    library: ctypes.CDLL | None
    why_not: str = ""
    path: Path | None = None


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")


def flags() -> list[str]:
    """Optimised for this CPU, with OpenMP where the compiler has it (macOS's clang does not: one thread)."""
    base = ["-O3", "-shared", "-fPIC", "-ffp-contract=fast"]
    if platform.machine().lower() in ("x86_64", "amd64", "aarch64", "arm64"):
        base.append("-march=native" if platform.machine().lower() in ("x86_64", "amd64") else "-mcpu=native")
    if sys.platform == "darwin":
        base += ["-undefined", "dynamic_lookup"]
    return base


def _digest(source: str, cc: str, build_flags: list[str]) -> str:
    text = "\n".join([source, cc, " ".join(build_flags), platform.machine(), " ".join(sorted(cpu_flags()))])
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _suffix() -> str:
    return {"win32": ".dll", "darwin": ".dylib"}.get(sys.platform, ".so")


def build_error(error: Exception) -> str:
    """A build error in a few words: the compiler's first line of complaint, or the exception's own."""
    stderr = getattr(error, "stderr", None)
    if isinstance(stderr, bytes):
        stderr = stderr.decode(errors="replace")
    first = next((line.strip() for line in (stderr or "").splitlines() if "error" in line.lower()), "")
    return (first or str(error) or type(error).__name__)[:200]


def _compile(cc: str, source_path: Path, target: Path) -> None:
    """Build with OpenMP; where the compiler refuses ``-fopenmp``, build single-threaded."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specviz-native-") as folder:
        built = Path(folder) / target.name
        attempts = [[*flags(), "-fopenmp"], flags()]
        for attempt, build_flags in enumerate(attempts):
            try:
                subprocess.run([cc, *build_flags, str(source_path), "-o", str(built), "-lm"], check=True,
                               capture_output=True, timeout=300)
                break
            except subprocess.CalledProcessError:
                if attempt == len(attempts) - 1:
                    raise
        staging = target.with_name(f"{target.name}.{os.getpid()}.tmp")  # a rename within one file system
        shutil.copyfile(built, staging)
        os.replace(staging, target)  # atomic: a half-written library is never loaded


def load(source_path: Path) -> Loaded:
    """The compiled library for ``source_path`` (built into the cache on first use), once per process."""
    key = str(source_path)
    if key not in _loaded:
        with _lock:
            if key not in _loaded:
                _loaded[key] = _load(source_path)
    return _loaded[key]


def _load(source_path: Path) -> Loaded:
    cc = compiler()
    source = source_path.read_text()
    if cc is None:
        return Loaded(None, "no C compiler found (set CC, or install gcc or clang)")
    target = cache_dir() / "kernels" / f"{source_path.stem}-{_digest(source, cc, flags())}{_suffix()}"
    try:
        if not target.exists():
            _compile(cc, source_path, target)
        return Loaded(ctypes.CDLL(str(target)), path=target)
    except (OSError, subprocess.SubprocessError) as error:
        return Loaded(None, f"the native step failed to build or load ({build_error(error)})")
