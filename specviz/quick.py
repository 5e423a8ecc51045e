"""Quick mode for the teaching notebooks: the same cells at smaller sizes.

``make test`` executes every notebook under nbmake, and on a slow 2-core machine the full notebooks take
minutes each (sweeps, benchmarks, flash reads throttled to a few hundred MB/s). CI needs to know that
every cell still runs, not the measurements themselves, so ``make test`` sets ``SPECVIZ_QUICK=1`` and
each notebook takes its sizes from :func:`pick`: fewer new tokens, one sweep point instead of many,
fewer repeats, a fast emulated flash. Quick mode changes sizes only; it never skips a cell.

Without the variable (or with ``SPECVIZ_QUICK=0``) a notebook computes exactly what its stored outputs
show: ``make notebook-outputs`` (scripts/store_notebook_outputs.py) always runs in full mode.

    from specviz.quick import pick, quick_mode
    QUICK = quick_mode()
    N_TOKENS = pick(128, 24)   # 128 in a full run, 24 under SPECVIZ_QUICK=1
"""

from __future__ import annotations

import os
from typing import TypeVar

ENV_VAR = "SPECVIZ_QUICK"
_TRUE = {"1", "true", "yes", "on"}

T = TypeVar("T")


def quick_mode() -> bool:
    """True when ``SPECVIZ_QUICK`` is set to 1/true/yes/on (any case); false when unset or anything else."""
    return os.environ.get(ENV_VAR, "").strip().lower() in _TRUE


def pick(full: T, quick: T) -> T:
    """``full`` in a normal run, ``quick`` when quick mode is on (read each call, so tests can toggle it)."""
    return quick if quick_mode() else full


def banner(shrinks: str) -> str | None:
    """The one line a notebook prints in quick mode (``None`` in full mode): that it is on and what it shrinks."""
    return f"quick mode ({ENV_VAR}=1): {shrinks}; the stored outputs come from a full run" if quick_mode() else None


def announce(shrinks: str) -> None:
    """Print :func:`banner` in quick mode; print nothing in full mode (so stored full-run outputs are unchanged)."""
    line = banner(shrinks)
    if line:
        print(line)
