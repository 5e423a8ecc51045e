"""τ against draft-tree size on the real engine: ``eagle`` at several ``total_tokens`` beside ``ar``
(:func:`tree_size_sweep`); drawn by :func:`specviz.views.tree_budget.tau_vs_tree_size`.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..views.draft_trees import mean_tree_size
from ..views.tree_budget import predicted_tau


def tree_size_sweep(engine, prompt, sizes: Sequence[int | str], max_new_tokens: int = 48, depth: int = 5,
                    topk: int = 4, draft: str = "eagle", predict_from: int | None = None, baseline: bool = True,
                    progress: Callable[[int, int], None] | None = None) -> dict:
    """Greedy ``eagle`` runs at every size in ``sizes`` (ints, or ``"auto"``) plus, unless it is among them,
    one at ``predict_from`` (default: the largest size) whose trees give the predicted curve.

    Returns ``points`` (per run: ``total_tokens``, mean ``tree_size``, ``tau``, ``tokens_per_s``,
    ``speedup`` over ``ar`` when ``baseline``), ``predicted`` (τ at m = 1 … ``predict_from``), and the
    settings. ``progress(i, n)`` is called after each of the n runs (the ``ar`` baseline included).
    """
    fixed = [s for s in sizes if s != "auto"]
    if not sizes or any(isinstance(s, bool) or not isinstance(s, int) for s in fixed):
        raise ValueError(f"sizes must list integers or 'auto', got {list(sizes)!r}")
    predict_from = predict_from or max(fixed, default=None)
    if predict_from is None:
        raise ValueError("give predict_from, or at least one fixed size to predict from")
    extra = [] if predict_from in fixed else [predict_from]
    for size in [*sizes, *extra]:  # every run's limits, before the first
        engine.check(prompt, "eagle", depth=depth, topk=topk, total_tokens=size, draft=draft,
                     max_new_tokens=max_new_tokens, temperature=0.0)
    total = len(sizes) + len(extra) + bool(baseline)
    done = 0

    def tick():
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    options = {"max_new_tokens": max_new_tokens, "temperature": 0.0}
    ar_speed = None
    if baseline:
        ar_speed = engine.run(prompt, "ar", **options).stats.tokens_per_s
        tick()
    points, predict_events = [], None
    for size in [*sizes, *extra]:
        run = engine.run(prompt, "eagle", depth=depth, topk=topk, total_tokens=size, draft=draft, **options)
        if size == predict_from:
            predict_events = run.events
        if size in sizes:
            points.append({"total_tokens": size, "tree_size": mean_tree_size(run.events),
                           "tau": run.stats.mean_accepted_length, "tokens_per_s": run.stats.tokens_per_s,
                           "speedup": run.stats.tokens_per_s / ar_speed if ar_speed else None})
        tick()
    return {"points": points, "predicted": predicted_tau(predict_events, range(1, predict_from + 1)),
            "predict_from": predict_from, "ar_tokens_per_s": ar_speed, "max_new_tokens": max_new_tokens,
            "depth": depth, "topk": topk, "draft": draft}
