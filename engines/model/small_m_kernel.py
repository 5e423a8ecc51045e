"""An fp32 matrix product for a few rows (decoding and verification), compiled on this machine at first use.

Why it exists: decoding reads every weight once per step, so a step can run no faster than the weights
stream from memory, and on CPUs without native bf16 the default model runs in fp32 (538 MB a token).
Measured on a 2-core AMD EPYC (Zen 3, AVX2, no AVX-512) through all of the model's 121 products in turn,
one row: oneDNN with packed weights streams them at ~10 GB/s and ``F.linear`` (MKL) at ~6.5, while a plain
sum over the same tensors reads ~17–20 GB/s. A product of a few rows is a stream of dot products, so this
kernel is written as one: each thread walks whole weight rows front to back (one stream per thread) and
multiplies each weight row, loaded once, by up to eight input rows at a time (one AVX2 accumulator each).
All 121 products for one row: 24–30 ms against oneDNN's 41–58 (the machine's bandwidth drifts; `docs/verify-cost.md`).

A second gain comes free: every output element is summed in one fixed order — one eight-lane accumulator
over k ascending, then its lanes in a fixed order — whatever the number of rows, so a row's bits never depend
on how many rows share the call. A chunk of n tokens verified in one forward gets the products n one-token
steps would get (the row invariance that :mod:`engines.model.exact_numerics` buys in bf16 by other means).

Built with the system's C compiler (``cc -O3 -mavx2 -mfma -fopenmp``, about a second) into the specviz
cache and loaded with ctypes; the OpenMP runtime is the one PyTorch already loaded, and each call passes
PyTorch's thread count. Where anything is missing (not x86-64 Linux, no AVX2/FMA, no compiler) or
``SPECVIZ_SMALL_M_KERNEL=0``, :func:`kernel` returns ``None`` and callers keep their oneDNN/BLAS path.
A missing compiler or a failed build is worth fixing, so it is said once per process, as one logged warning
(stderr, shown by a terminal and a notebook alike) naming the path that runs instead; a platform or CPU the
kernel was never written for stays silent.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import torch

from engines.model.machine import cache_dir, cpu_flags
from engines.model.native.library import build_error
from engines.model.native.library import compiler as find_compiler
from engines.storage import discard_damaged, staged_file

MAX_ROWS = 16  # up to here the kernel beats oneDNN on the machine above; a prefill goes to oneDNN
K_MULTIPLE = 8  # an accumulator covers 8 floats of a row per step
# Below this many weights one thread does the product: waking a second costs more than it saves (a 64×32
# weight: 5 µs on one thread, 6–35 µs on two, milliseconds while the other core is busy). The default model's
# smallest weight (576×576) is five times larger.
PARALLEL_MIN_WEIGHTS = 1 << 16

SOURCE = r"""
#include <immintrin.h>
#include <stdint.h>

/* The eight lanes of an accumulator, added in the one order every output uses. */
static inline float reduce(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 h = _mm_movehdup_ps(s);
    s = _mm_add_ps(s, h);
    h = _mm_movehl_ps(h, s);
    return _mm_cvtss_f32(_mm_add_ss(s, h));
}

/* Input rows m..m+G-1 against weight row n: one accumulator each, k ascending, the weight loaded once. */
#define ROWS(G)                                                                         \
    for (; m + G <= M; m += G) {                                                        \
        __m256 acc[G];                                                                  \
        for (int j = 0; j < G; j++) acc[j] = _mm256_setzero_ps();                       \
        const float *xm = x + m * K;                                                    \
        for (int64_t k = 0; k < K; k += 8) {                                            \
            __m256 wk = _mm256_loadu_ps(wn + k);                                        \
            for (int j = 0; j < G; j++)                                                 \
                acc[j] = _mm256_fmadd_ps(wk, _mm256_loadu_ps(xm + j * K + k), acc[j]);  \
        }                                                                               \
        for (int j = 0; j < G; j++) y[(m + j) * N + n] = reduce(acc[j]);                \
    }

/* y[m, n] = sum_k x[m, k] * w[n, k] for w [N, K], x [M, K], y [M, N], all contiguous; K % 8 == 0. */
void specviz_small_m_product(const float *w, const float *x, float *y, int64_t M, int64_t N, int64_t K,
                             int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t n = 0; n < N; n++) {
        const float *wn = w + n * K;
        int64_t m = 0;
        ROWS(8) ROWS(4) ROWS(2) ROWS(1)
    }
}
"""
FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC"]

INSTEAD = ("fp32 products of a few rows run on PyTorch's oneDNN/BLAS path (F.linear) instead: correct, "
           "but ~1.3-1.5x as long and without row-invariant bits (docs/verify-cost.md)")

_lock = threading.Lock()
_loaded: dict[str, object] = {}
_warned = False
_log = logging.getLogger(__name__)


def supported_here() -> bool:
    """x86-64 Linux with AVX2 and FMA, and not switched off: where the kernel can run (building it also needs
    a C compiler; :func:`kernel` says so once if there is none)."""
    if os.environ.get("SPECVIZ_SMALL_M_KERNEL", "1") == "0":
        return False
    return _platform_fits() and {"avx2", "fma"} <= cpu_flags()


def _platform_fits() -> bool:
    """The kernel is written for x86-64 Linux: GCC's flags and OpenMP, AVX2 intrinsics, a ``.so``."""
    return sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


_compiler = find_compiler  # a module attribute, so a test can take the compiler away


def _warn_once(why: str) -> None:
    """One line per process, the first time the kernel cannot be had: why, and what runs instead."""
    global _warned
    if not _warned:
        _warned = True
        _log.warning("specviz: %s; %s", why, INSTEAD)


def library_path() -> Path:
    digest = hashlib.sha1((SOURCE + " ".join(FLAGS) + platform.machine()).encode()).hexdigest()[:12]
    return cache_dir() / "kernels" / f"small_m_product-{digest}.so"


def _build(path: Path, compiler: str) -> None:
    """Compile into ``path``, whole or not at all (:func:`engines.storage.staged_file`): a half-written library
    is never loaded."""
    with tempfile.TemporaryDirectory(prefix="specviz-kernel-") as folder, staged_file(path) as staging:
        source = Path(folder) / "small_m_product.c"
        source.write_text(SOURCE)
        subprocess.run([compiler, *FLAGS, str(source), "-o", str(staging)], check=True, capture_output=True,
                       timeout=300)


class _NoCompiler(Exception):
    """No compiler to build the kernel with."""


class _Damaged(Exception):
    """A library in the cache that was built before and no longer loads."""


def _built_library(path: Path) -> ctypes.CDLL:
    """The library at ``path``, built first if it is not there (a library built earlier needs no compiler)."""
    if path.exists():
        try:
            return ctypes.CDLL(str(path))
        except OSError as error:
            raise _Damaged(f"it does not load: {build_error(error)}") from None
    compiler = _compiler()
    if compiler is None:
        raise _NoCompiler
    _build(path, compiler)
    return ctypes.CDLL(str(path))


def kernel():
    """The compiled product (a ctypes function), or ``None`` where it cannot run here."""
    if "kernel" not in _loaded:
        with _lock:
            if "kernel" not in _loaded:
                _loaded["kernel"] = _load()
    return _loaded["kernel"]


def _load():
    """The kernel's function, or ``None`` where it cannot be had here (said once, with why)."""
    if not supported_here():
        return None
    path = library_path()
    try:
        try:
            function = _built_library(path).specviz_small_m_product
        except _Damaged as damaged:  # a library that no longer loads is set aside and built again, once
            discard_damaged(path, "the small-M kernel", str(damaged), then="it will be built again")
            function = _built_library(path).specviz_small_m_product
    except _NoCompiler:
        _warn_once("no C compiler found to build the small-M kernel (set CC, or install gcc or cc)")
        return None
    except (OSError, subprocess.SubprocessError, AttributeError) as error:
        _warn_once(f"the small-M kernel failed to build or load ({build_error(error)})")
        return None
    function.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3 + [ctypes.c_int]
    function.restype = None
    return function



def applies(weight: torch.Tensor) -> bool:
    """Whether products with ``weight`` (``[N, K]``) run here: fp32, contiguous, on the CPU, K a multiple of 8."""
    return (weight.dtype == torch.float32 and weight.device.type == "cpu" and weight.dim() == 2
            and weight.shape[1] % K_MULTIPLE == 0 and weight.is_contiguous() and kernel() is not None)


def product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weightᵀ`` for ``x`` ``[..., K]`` with at most :data:`MAX_ROWS` rows; ``weight`` contiguous ``[N, K]``."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty(rows.shape[0], weight.shape[0], dtype=torch.float32)
    threads = torch.get_num_threads() if weight.numel() >= PARALLEL_MIN_WEIGHTS else 1
    kernel()(weight.data_ptr(), rows.data_ptr(), out.data_ptr(), rows.shape[0], weight.shape[0], weight.shape[1],
             threads)
    return out.reshape(*x.shape[:-1], weight.shape[0])
