"""Compile a C source shipped with the engine into the specviz cache once per machine, and load it with ctypes.

The engine's native kernels are plain C with OpenMP (no PyTorch headers, so a build takes a second or two,
not minutes). Each is compiled on the machine that runs it, for that machine's instruction set
(``-march=native``; ``SPECVIZ_NATIVE_ISA=avx2`` builds for ``x86-64-v3`` instead — AVX2, FMA and F16C, no
AVX-512 — to measure or ship the AVX2 build on any x86-64 machine). The library's name carries a digest of
everything the build depends on: the source, the compiler (its path and version), the flags, the machine and the
CPU's identity (model name and feature flags, not its clock: :func:`~engines.model.machine.cpu_identity`), so
a cache shared between machines never loads a build made for another CPU, and a reboot never rebuilds.

Compilers are tried in turn (``CC``, else gcc or cc; then clang), each with OpenMP first; the builds with and
without OpenMP carry different names, and a single-threaded build is said once. A compiler's refusal is
remembered next to where its library would be (``.failed``, keyed like the library), so a failing compiler
costs one attempt per change, not one per process. Where no compiler builds it, :func:`load` returns
``None`` with the reason, and the caller keeps PyTorch's path (correct, slower) and says so once.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from engines.model.machine import cache_dir, cpu_flags, cpu_identity
from engines.storage import discard_damaged, staged_file, write_text_atomic

ISA_VARIABLE = "SPECVIZ_NATIVE_ISA"
ISAS = ("native", "avx2")
# extra compiler flags for experiments (e.g. -DSPECVIZ_STAGE_CLOCK, -DRM=8 -DRN=2): part of the build key, so each
# set of flags is its own cached build (scripts/stage_clock.py)
CFLAGS_VARIABLE = "SPECVIZ_NATIVE_CFLAGS"
_X86 = ("x86_64", "amd64")
_ARM = ("aarch64", "arm64")
# what -march=x86-64-v3 lets the compiler use (and the CPU must have: a build using them elsewhere dies of SIGILL)
_AVX2_FLAGS = frozenset({"avx2", "fma", "f16c", "bmi2"})

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_loaded: dict[tuple[str, str], "Loaded"] = {}
_warned: set[str] = set()


@dataclass(frozen=True)
class BuildInfo:
    """How a library was built: the compiler (path and the first line of its ``--version``), the flags, whether
    with OpenMP, and for which instruction set (``native`` or ``avx2``)."""

    compiler: str
    version: str
    flags: tuple[str, ...]
    openmp: bool
    isa: str

    def describe(self) -> str:
        threads = "OpenMP" if self.openmp else "no OpenMP (one thread)"
        return f"{self.compiler} ({self.version}), {' '.join(self.flags)}, {threads}, ISA {self.isa}"


@dataclass(frozen=True)
class Loaded:
    """A library, or why there is none (``library`` is ``None`` then)."""

    library: ctypes.CDLL | None
    why_not: str = ""
    path: Path | None = None
    info: BuildInfo | None = None
    digest: str = ""
    attempts: tuple[str, ...] = field(default=())


def isa() -> str:
    """The instruction set to build for, from ``SPECVIZ_NATIVE_ISA``: ``native`` (the default: this CPU's own,
    AVX-512 where it has it) or ``avx2`` (x86-64 only: ``-march=x86-64-v3``)."""
    value = os.environ.get(ISA_VARIABLE, "").strip().lower() or "native"
    if value not in ISAS:
        raise ValueError(f"{ISA_VARIABLE} must be one of {', '.join(ISAS)}; got {value!r}")
    if value == "avx2" and platform.machine().lower() not in _X86:
        raise ValueError(f"{ISA_VARIABLE}=avx2 builds for x86-64 only; this machine is {platform.machine()}")
    return value


def compilers() -> list[str]:
    """The compilers to try, in order: the configured one (``CC``, else gcc or cc), then clang, each once."""
    found = [os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc"), shutil.which("clang")]
    ordered: list[str] = []
    for cc in found:
        if cc and cc not in ordered:
            ordered.append(cc)
    return ordered


def compiler() -> str | None:
    """The first compiler to try (other native kernels build with it alone)."""
    found = compilers()
    return found[0] if found else None


@lru_cache(maxsize=None)
def compiler_version(cc: str) -> str:
    """The first line of ``cc --version`` (``gcc (Debian 12.2.0-14) 12.2.0``): an upgraded compiler is a new
    build. ``""`` where it does not say."""
    try:
        done = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return next((line.strip() for line in done.stdout.splitlines() if line.strip()), "")


def flags(isa_name: str | None = None) -> list[str]:
    """Optimised for this CPU (or for x86-64-v3 with ``isa_name="avx2"``), then ``SPECVIZ_NATIVE_CFLAGS``'s,
    without OpenMP's flag (added per attempt by the build)."""
    isa_name = isa_name or isa()
    base = ["-O3", "-shared", "-fPIC", "-ffp-contract=fast"]
    machine = platform.machine().lower()
    if machine in _X86:
        base.append("-march=x86-64-v3" if isa_name == "avx2" else "-march=native")
    elif machine in _ARM:
        base.append("-mcpu=native")
    if sys.platform == "darwin":
        base += ["-undefined", "dynamic_lookup"]
    return base + os.environ.get(CFLAGS_VARIABLE, "").split()


def _digest(source: str, cc: str, build_flags: list[str]) -> str:
    """What a build depends on, and nothing else: the source, the compiler and its version, the flags, the
    machine, the CPU's model and feature flags (its clock and bogomips move from boot to boot)."""
    text = "\n".join([source, cc, compiler_version(cc), " ".join(build_flags), platform.machine(), cpu_identity()])
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


def _run_compiler(command: list[str]) -> None:
    """One compiler run (a module function, so a test can stand in for the compiler)."""
    subprocess.run(command, check=True, capture_output=True, timeout=300)


def _compile(cc: str, build_flags: list[str], source_path: Path, target: Path) -> None:
    """Build ``target`` with exactly ``build_flags``; it appears whole or not at all (the compiler writes beside
    it, :func:`engines.storage.staged_file`, and a half-written library is never loaded)."""
    with staged_file(target) as staging:
        _run_compiler([cc, *build_flags, str(source_path), "-o", str(staging), "-lm"])


def _built(cc: str, build_flags: list[str], source_path: Path, target: Path) -> str | None:
    """Make sure ``target`` exists: ``None`` once it does, else why the compiler refused it. A refusal is kept
    beside the target (same key), so the next process does not pay for the same failed build."""
    if target.exists():
        return None
    refused = target.with_name(target.name + ".failed")
    if refused.exists():
        return refused.read_text(errors="replace").strip() or "failed before"
    try:
        _compile(cc, build_flags, source_path, target)
        return None
    except subprocess.CalledProcessError as error:  # the compiler said no: the same key will fail the same way
        why = build_error(error)
        write_text_atomic(refused, why + "\n")
        return why
    except (OSError, subprocess.SubprocessError) as error:  # a missing program, a timeout: worth trying again
        return build_error(error)


def _cpu_refuses(isa_name: str) -> str:
    """Why this CPU cannot run a build for ``isa_name`` (an AVX2 build on a CPU without AVX2 dies of SIGILL),
    or ``""``. Where the CPU's flags cannot be read, nothing is assumed."""
    known = cpu_flags()
    missing = sorted(_AVX2_FLAGS - known) if isa_name == "avx2" and known else []
    return f"{ISA_VARIABLE}=avx2, but this CPU lacks {', '.join(missing)}" if missing else ""


def load(source_path: Path) -> Loaded:
    """The compiled library for ``source_path`` (built into the cache on first use), once per process and ISA."""
    key = (str(source_path), isa())
    if key not in _loaded:
        with _lock:
            if key not in _loaded:
                _loaded[key] = _load(source_path, key[1])
    return _loaded[key]


def _load(source_path: Path, isa_name: str) -> Loaded:
    candidates = compilers()
    if not candidates:
        return Loaded(None, "no C compiler found (set CC, or install gcc or clang)")
    refused = _cpu_refuses(isa_name)
    if refused:
        return Loaded(None, refused)
    source = source_path.read_text()
    attempts: list[str] = []
    # every compiler with OpenMP before any without: a multi-threaded build from the second compiler beats a
    # single-threaded one from the first
    for openmp in (True, False):
        for cc in candidates:
            build_flags = [*flags(isa_name), "-fopenmp"] if openmp else flags(isa_name)
            digest = _digest(source, cc, build_flags)
            name = f"{source_path.stem}-{digest}-{isa_name}-{'omp' if openmp else 'noomp'}{_suffix()}"
            target = cache_dir() / "kernels" / name
            built_before = target.exists()
            why = _built(cc, build_flags, source_path, target)
            if why is not None:
                attempts.append(f"{Path(cc).name}{'' if openmp else ' without OpenMP'}: {why}")
                continue
            library, why = _open(cc, build_flags, source_path, target, built_before)
            if library is None:
                attempts.append(f"{Path(cc).name}: {why}")
                continue
            info = BuildInfo(cc, compiler_version(cc), tuple(build_flags), openmp, isa_name)
            if not openmp:
                _warn_once(str(target), f"specviz: {source_path.name} built without OpenMP: the step runs on one "
                           f"thread ({attempts[0] if attempts else 'no OpenMP'})")
            return Loaded(library, path=target, info=info, digest=digest, attempts=tuple(attempts))
    return Loaded(None, f"the native step failed to build or load ({'; '.join(attempts)})", attempts=tuple(attempts))


def _open(cc: str, build_flags: list[str], source_path: Path, target: Path,
          built_before: bool) -> tuple[ctypes.CDLL | None, str]:
    """The library at ``target``, or why it cannot be had. One built before that no longer loads (damaged since:
    a copy cut short, a disk error) is reported once by name, set aside and built again, once. A fresh build that
    does not load is this compiler's failure (a runtime library missing, say): remembered as a refusal, so later
    processes go straight to the next compiler instead of rebuilding."""
    try:
        return ctypes.CDLL(str(target)), ""
    except OSError as error:
        if not built_before:
            return None, _refuse_loading(target, error)
        discard_damaged(target, "the native build", f"it does not load: {build_error(error)}",
                        then="it will be built again")
    why = _built(cc, build_flags, source_path, target)
    if why is not None:
        return None, why
    try:
        return ctypes.CDLL(str(target)), ""
    except OSError as error:
        return None, _refuse_loading(target, error)


def _refuse_loading(target: Path, error: OSError) -> str:
    """Remember that ``target`` builds but does not load (its ``.failed``, as a compiler's refusal is); why."""
    why = f"builds but cannot load {target.name} ({build_error(error)})"
    write_text_atomic(target.with_name(target.name + ".failed"), why + "\n")
    target.unlink(missing_ok=True)
    return why


def _warn_once(key: str, message: str) -> None:
    """Log ``message`` once per process for ``key`` (a library: every load of it after the first is silent)."""
    if key not in _warned:
        _warned.add(key)
        _log.warning(message)
