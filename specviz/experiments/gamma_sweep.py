"""Measured sweeps for theory-vs-measurement plots: run a method at several γ on the real engine."""

from __future__ import annotations

from typing import Callable, Sequence

from engines import Engine

from ..views.chain import draft_seconds


def gamma_sweep(engine: Engine, prompt, gammas: Sequence[int], method: str = "sps", max_new_tokens: int = 64,
                progress: Callable[[int, int], None] | None = None, temperature: float = 0.0, top_p: float = 1.0,
                seed: int | None = 0, **options) -> dict:
    """Speedup of ``method`` at each γ over an AR run of the same prompt and sampling settings, plus the two
    parameters Leviathan's model needs: ``a``, the per-position acceptance pooled over the sweep
    (accepted ÷ draft positions the target judged: the estimate of the per-token acceptance probability a,
    the paper's α, never this project's α), and the cost ratio c. Each point's ``alpha`` is that run's
    acceptance rate α, accepted ÷ drafted."""
    if not gammas:
        raise ValueError("gammas must list at least one γ")
    sampling = {"temperature": temperature, "top_p": top_p, "seed": seed}
    for gamma in gammas:  # every point's limits, before the first run
        engine.check(prompt, method, max_new_tokens=max_new_tokens, gamma=gamma, **sampling, **options)
    ar = engine.run(prompt, "ar", max_new_tokens=max_new_tokens, **sampling)
    ar_step = ar.stats.decode_seconds / max(ar.stats.new_tokens, 1)
    points, accepted, reached, drafted, seconds = [], 0, 0, 0, 0.0
    for i, gamma in enumerate(gammas):
        run = engine.run(prompt, method, max_new_tokens=max_new_tokens, gamma=gamma, **sampling, **options)
        s = run.stats
        points.append({"gamma": gamma, "speedup": s.tokens_per_s / ar.stats.tokens_per_s, "tau": s.mean_accepted_length,
                       "alpha": s.acceptance_rate, "tokens_per_s": s.tokens_per_s, "events": run.events})
        accepted += s.accepted
        reached += s.positions_tested
        drafted += s.drafted
        seconds += draft_seconds(run.events)
        if progress:
            progress(i + 1, len(gammas))
    a = accepted / reached if reached else 0.0  # per-position acceptance: the model's a
    cost_ratio = (seconds / drafted) / ar_step if drafted else 0.0
    return {"ar_tokens_per_s": ar.stats.tokens_per_s, "a": a, "cost_ratio": cost_ratio, "points": points}
