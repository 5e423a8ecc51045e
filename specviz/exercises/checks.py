"""The generic checks behind the notebooks' "your turn" exercises: a number, a choice, a piece of code.

Every exercise cell starts with ``answer = None`` so the notebook runs top to bottom (and under nbmake)
before anyone has answered: an unanswered exercise prints what to do and returns ``None`` rather than
failing. A wrong answer prints a hint, never the solution; the solution sits folded away in a markdown
``<details>`` block under the exercise, where GitHub and Jupyter both render it closed.
"""

from __future__ import annotations

import math
from typing import Callable

UNANSWERED = "Fill in your answer above (replace None), then run this cell again."


def check_number(answer: float | None, expected: float, *, tolerance: float, explanation: str = "",
                 hint: str = "", relative: bool = False) -> bool | None:
    """Print whether ``answer`` is within ``tolerance`` of ``expected`` (a fraction of it when
    ``relative``): True / False, or None while unanswered."""
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    if answer is None:
        print(UNANSWERED)
        return None
    try:
        value = float(answer)
    except (TypeError, ValueError):
        print(f"✗ {answer!r} is not a number. {hint}".rstrip())
        return False
    allowed = tolerance * abs(expected) if relative else tolerance
    if math.isfinite(value) and abs(value - expected) <= allowed:
        print(f"✓ Correct: {value:.4g} (expected {expected:.4g}). {explanation}".rstrip())
        return True
    print(f"✗ Not quite: {value:.4g}. {hint}".rstrip())
    return False


def check_choice(answer: object | None, expected: object, *, explanation: str = "", hint: str = "") -> bool | None:
    """Print whether a categorical ``answer`` (a method name, a γ, a drafter) equals ``expected``."""
    if answer is None:
        print(UNANSWERED)
        return None
    if answer == expected:
        print(f"✓ Correct: {answer!r}. {explanation}".rstrip())
        return True
    print(f"✗ Not quite: {answer!r}. {hint}".rstrip())
    return False


def check_passes(test: Callable[[], object], *, explanation: str = "", hint: str = "") -> bool:
    """Run ``test`` (which raises ``AssertionError`` on a wrong implementation) and print the verdict: for
    exercises whose answer is code, such as a residual step that must pass a distribution test."""
    try:
        test()
    except NotImplementedError:
        print("Write your function above (it still raises NotImplementedError), then run this cell again.")
        return False
    except AssertionError as failure:
        print(f"✗ Not yet: {failure}. {hint}".rstrip())
        return False
    print(f"✓ Passes. {explanation}".rstrip())
    return True
