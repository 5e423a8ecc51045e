"""Predictions asked before a run: the reader commits to an answer, the run then says whether it held.

A prediction made after seeing the figure teaches nothing, so the notebook asks first (``predict``), runs,
and only then compares (``reveal``) against what the run measured. Predictions live in this kernel only.
"""

from __future__ import annotations

from typing import Callable

from .checks import UNANSWERED

_made: dict[str, object] = {}


def predict(name: str, answer: object | None, *, choices: tuple | None = None) -> None:
    """Record the reader's prediction ``name`` before the run cell (``answer=None``: not made yet)."""
    if choices is not None and answer is not None and answer not in choices:
        raise ValueError(f"answer for {name!r} must be one of {choices}, got {answer!r}")
    if answer is None:
        print(f"Prediction '{name}': {UNANSWERED}")
        return
    _made[name] = answer
    print(f"Prediction '{name}' recorded: {answer!r}. Run the next cells, then see how it held.")


def reveal(name: str, measured: object, *, holds: Callable[[object, object], bool] | None = None,
           explanation: str = "") -> bool | None:
    """Compare the recorded prediction ``name`` with what the run ``measured`` (equality unless ``holds``)."""
    if name not in _made:
        print(f"No prediction '{name}' was made; the run measured {measured!r}. {explanation}".rstrip())
        return None
    answer = _made[name]
    right = holds(answer, measured) if holds is not None else answer == measured
    mark = "✓ Your prediction held" if right else "✗ Your prediction did not hold"
    print(f"{mark}: you said {answer!r}, the run measured {measured!r}. {explanation}".rstrip())
    return right


def forget() -> None:
    """Drop every recorded prediction (tests; a reader starting over)."""
    _made.clear()
