"""Every method run again and again in one process: what the process holds after warm-up and at the end.

A leak shows only over many runs, and only against a baseline taken once the one-off costs are paid (the
first run of a method loads its drafter, packs its weights, measures a curve, starts its lanes). So each
method runs ``warmup`` times, is sampled, runs the rest, and is sampled again; every fourth run samples at a
temperature (with a seed), so both the greedy and the sampling paths are exercised.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Callable

from engines import Engine
from engines.methods import METHODS

from .resources import Holdings, sample

PROMPTS = (
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle stays upright, step by step.",
    "List five uses of a paperclip and say why each works.",
)
# the long run decodes through end-of-text (stop_at_eos=False): every one of its tokens is produced
LONG_PROMPT = "Count from 1 to 5000, one number per line."


@dataclass
class SoakRow:
    """One method's (or one long run's) holdings after warm-up and at the end, and what its runs produced."""

    name: str
    runs: int
    tokens: int
    seconds: float
    warm: Holdings
    end: Holdings

    @property
    def growth_mb(self) -> float:
        return (self.end.rss_mb + self.end.children_rss_mb) - (self.warm.rss_mb + self.warm.children_rss_mb)

    @classmethod
    def from_dict(cls, row: dict) -> "SoakRow":
        return cls(row["name"], row["runs"], row["tokens"], row["seconds"], Holdings(**row["warm"]),
                   Holdings(**row["end"]))

    def as_dict(self) -> dict:
        return {"name": self.name, "runs": self.runs, "tokens": self.tokens, "seconds": round(self.seconds, 1),
                "warm": self.warm.as_dict(), "end": self.end.as_dict(), "growth_mb": round(self.growth_mb, 1)}


def settled_sample() -> Holdings:
    """A sample once garbage is collected and finished lane workers are reaped: a leak is what survives that."""
    gc.collect()
    time.sleep(0.2)
    return sample()


def soak_method(engine: Engine, method: str, runs: int, max_new_tokens: int, warmup: int,
                progress: Callable[[str, int, int], None] | None = None) -> SoakRow:
    """Run ``method`` ``runs`` times on rotating prompts; sample after ``warmup`` runs and at the end."""
    tokens, warm = 0, None
    samples = can_sample(engine, method)
    start = time.perf_counter()
    for index in range(runs):
        sampling = samples and index % 4 == 3
        result = engine.run(PROMPTS[index % len(PROMPTS)], method, max_new_tokens=max_new_tokens,
                            temperature=0.8 if sampling else 0.0, seed=index if sampling else None,
                            stop_at_eos=False)
        tokens += result.stats.new_tokens
        del result  # the sample must not count the last run's events as held
        if index + 1 == warmup:
            warm = settled_sample()
        if progress is not None:
            progress(method, index + 1, runs)
    return SoakRow(method, runs, tokens, time.perf_counter() - start, warm or settled_sample(), settled_sample())


def can_sample(engine: Engine, method: str) -> bool:
    """Whether the method's default configuration runs at a temperature (CATS's default greedy acceptance
    refuses one): asked of the engine's own validation (:meth:`Engine.check`), which runs nothing."""
    try:
        engine.check(PROMPTS[0], method, max_new_tokens=1, temperature=0.8, seed=0)
    except ValueError:
        return False
    return True


def soak_long_run(engine: Engine, max_new_tokens: int, method: str = "ar") -> SoakRow:
    """One run of ``max_new_tokens`` (thousands): the KV cache and the event list at their longest. The
    warm-up sample is taken after a short run of the same method, so the row shows what the long run kept."""
    engine.run(PROMPTS[0], method, max_new_tokens=16)
    warm = settled_sample()
    start = time.perf_counter()
    tokens = engine.run(LONG_PROMPT, method, max_new_tokens=max_new_tokens, stop_at_eos=False).stats.new_tokens
    seconds = time.perf_counter() - start
    return SoakRow(f"{method} × {max_new_tokens:,} tokens", 1, tokens, seconds, warm, settled_sample())


def all_methods() -> list[str]:
    return list(METHODS)
