"""The native step's packed weights on 2 MiB pages, where the operating system gives them.

Why: a decode step streams ~97 MB of packed weights (the default model, bf16) through caches of 32 MB. On
Linux without huge pages each 4 KiB page of them costs a TLB walk, and the hardware prefetchers stop at every
page's end. A read of 100 MB on two threads ran at 32 GB/s from 4 KiB pages and 40 GB/s from 2 MiB pages on a
2-core AMD EPYC Zen 4, and a step 0.4-14% faster (``docs/verify-cost.md``, "Packed weights on 2 MiB pages").
Linux's transparent huge pages are usually set to ``madvise``, and PyTorch's allocator asks for them only for
single tensors of 2 MiB or more (and only with ``THP_MEM_ALLOC_ENABLE=1``), while most packed weights are
0.1–3 MB each. So they are carved out of large anonymous mappings advised ``MADV_HUGEPAGE``: :class:`PageArena`.

Elsewhere (macOS, Windows, a Linux whose huge pages are ``never``) :meth:`PageArena.empty` is ``torch.empty``.
``SPECVIZ_HUGE_PAGES=0`` asks for that everywhere (the switch the A/B measurement flips).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path

import torch

HUGE_PAGE = 2 << 20
CHUNK_BYTES = 32 << 20  # one mapping holds many small weights; a larger weight gets a mapping of its own
ALIGN = 64  # what torch.empty gives a CPU tensor, and what the step's aligned vector loads need
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_pages_available() -> bool:
    """Whether advised mappings can get 2 MiB pages here: Linux with transparent huge pages not ``never``."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        return "[never]" not in THP_SETTING.read_text()
    except OSError:
        return False


def huge_pages_wanted() -> bool:
    """Whether packed weights go on huge pages: where available, unless ``SPECVIZ_HUGE_PAGES`` is ``0``."""
    switch = os.environ.get("SPECVIZ_HUGE_PAGES", "").strip()
    if switch not in ("", "0", "1"):
        raise ValueError(f"SPECVIZ_HUGE_PAGES must be 0 or 1 (or unset), got {switch!r}")
    return switch != "0" and huge_pages_available()


def _advised_mapping(nbytes: int) -> torch.Tensor:
    """``nbytes`` bytes starting on a 2 MiB boundary, in a fresh anonymous mapping advised ``MADV_HUGEPAGE``
    before any page of it is touched. The tensor holds the mapping: it is unmapped when the last view of it dies."""
    # private: a shared anonymous mapping is shared memory, whose huge pages follow another setting (shmem_enabled)
    mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # a kernel that refuses the advice: the mapping still serves, on small pages
        pass
    whole = torch.frombuffer(mapping, dtype=torch.uint8)
    start = -whole.data_ptr() % HUGE_PAGE
    return whole[start:start + nbytes]


class PageArena:
    """Bump allocation of packed weights from advised mappings (see the module's docstring).

    A mapping is returned to the system once every tensor carved from it has died and a new one has taken its
    place, so a weight packed again (a streamed layer, a weight trained in place) costs at most one chunk more
    than :func:`torch.empty` would hold."""

    def __init__(self, enabled: bool | None = None):
        self.enabled = huge_pages_wanted() if enabled is None else enabled
        self._chunk: torch.Tensor | None = None
        self._used = 0
        self._paused = 0

    @contextlib.contextmanager
    def paused(self):
        """Plain ``torch.empty`` meanwhile: for what is packed only to be copied (a pair's two halves), which would
        otherwise hold its chunk's space for as long as the copy lives."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def empty(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised 1-D tensor of ``numel`` elements, 64-byte aligned, on huge pages where enabled."""
        if not self.enabled or self._paused:
            return torch.empty(numel, dtype=dtype)
        nbytes = numel * dtype.itemsize
        if nbytes * 2 > CHUNK_BYTES:
            return _advised_mapping(nbytes).view(dtype)
        if self._chunk is None or self._used + nbytes > self._chunk.numel():
            self._chunk, self._used = _advised_mapping(CHUNK_BYTES), 0
        piece = self._chunk[self._used:self._used + nbytes]
        self._used += -(-nbytes // ALIGN) * ALIGN
        return piece.view(dtype)
