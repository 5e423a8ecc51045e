"""Checking option values, shared by method configs and drafter configs (drafters sit below methods, so the
check lives here rather than in :mod:`engines.methods.base`, which re-exports it)."""

from __future__ import annotations


def require_int(name: str, value, low: int, high: int | None = None) -> None:
    """``ValueError`` naming ``name`` and its allowed range unless ``value`` is an integer in it."""
    allowed = f"[{low}, {high}]" if high is not None else f">= {low}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer {allowed}, got {value!r}")
    if high is not None and high < low:  # a bound from the model's layers, on a model too shallow for it
        raise ValueError(f"{name} must be in {allowed}, and no value is: this model has too few layers for it")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be in {allowed}, got {value}")


def require_choice(name: str, value, choices: tuple) -> None:
    """``ValueError`` naming ``name`` and the allowed values unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
