"""CATS's sweeps on the real engine (paper 004; docs/trees-and-cats.md): ``ar``, Kangaroo and ``cats`` at several
shallow-verifier layers ℓ_SV, γ (:func:`cats_sweep`) and emulated flash bandwidths (:func:`bandwidth_sweep`),
each under the memory budget that keeps layers 1..ℓ_SV resident. They return the runs and their points; the
figures are :mod:`specviz.views.cats_sweep_figures`.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

from engines.drafters.trained import available, read_card
from engines.memory_budget import weight_stream

from ..views.cats_costs import run_costs
from ..views.cats_cycles import MB, decode_bytes_per_token

KANGAROO = "Kangaroo: eesd(exit_layer=3, head=cats)"


# --- the shipped adapters and budgeted runs -------------------------------------------------------
def shipped_cats_layers(role: str | None = None) -> list[int]:
    """Layers ℓ with a shipped ``cats@ℓ`` adapter (``engines.drafters.trained.available``), optionally only
    those whose card names the ``role`` (``"draft"`` or ``"shallow_verifier"``; a card without a role
    serves both). Listed afresh on every call: adapters appear while training runs."""
    layers = []
    for name in available():
        match = re.fullmatch(r"cats@(\d+)", name)
        if not match:
            continue
        card_role = read_card(name).get("cats_role")
        if role is None or card_role in (None, role):
            layers.append(int(match.group(1)))
    return sorted(layers)


def memory_settings(engine, resident_layers: int, flash_mb_s: float | None, stream: str = "deep") -> dict:
    """``Engine.generate``'s budget arguments that keep layers 0..``resident_layers``−1 resident."""
    return {"memory_budget_mb": weight_stream.budget_for_resident_layers(engine.target, resident_layers),
            "flash_mb_s": flash_mb_s, "stream": stream}


def kangaroo_options(dm_layer: int = 3, gamma: int = 5) -> dict:
    return {"exit_layer": dm_layer, "head": "cats", "gamma": gamma}


def _point(run, ar=None) -> dict:
    s = run.stats
    return {"tau": s.mean_accepted_length, "tokens_per_s": s.tokens_per_s, "bpt": decode_bytes_per_token(run.events),
            "bytes_streamed": s.bytes_streamed, "peak_resident_mb": s.peak_resident_bytes / MB,
            "speedup": s.tokens_per_s / ar.stats.tokens_per_s if ar is not None and ar.stats.tokens_per_s else None,
            "costs": run_costs(run.events).to_dict()}


class _Ticker:
    def __init__(self, total: int, progress: Callable[[int, int], None] | None):
        self.done, self.total, self.progress = 0, total, progress

    def __call__(self):
        self.done += 1
        if self.progress:
            self.progress(self.done, self.total)


def cats_sweep(engine, prompt, sv_layers: Sequence[int] = (5, 10, 15, 20), gammas: Sequence[int] = (3, 5, 7), *,
               dm_layer: int = 3, sv_layer: int = 15, gamma: int = 5, max_new_tokens: int = 24,
               flash_mb_s: float = 1000.0, stream: str = "deep", kangaroo: bool = False,
               progress: Callable[[int, int], None] | None = None) -> dict:
    """Greedy ``cats`` runs under memory budgets, each beside ``ar`` under the same budget:

    * along ℓ_SV: for each ``sv_layers`` entry with a shipped shallow-verifier adapter, layers 1..ℓ_SV
      resident (the budget grows with ℓ_SV), ``cats(dm_layer, ℓ_SV, gamma)`` and ``ar`` (and Kangaroo with
      ``kangaroo``); layers without an adapter are skipped and listed in ``skipped`` with the reason;
    * along γ: at ``sv_layer`` (its budget), ``cats`` at each of ``gammas`` (and Kangaroo at the same γ).

    Returns ``sv_points`` and ``gamma_points`` (per run: τ, tok/s, BPT, speedup over that budget's ``ar``,
    bytes, the stage costs), ``skipped``, ``notes`` and the settings. ``progress(i, n)`` after each run.
    """
    drafts = shipped_cats_layers("draft")
    if dm_layer not in drafts:
        raise ValueError(f"no shipped CATS draft adapter cats@{dm_layer}; shipped draft adapters: {drafts or 'none'}")
    verifiers = shipped_cats_layers("shallow_verifier")
    usable, skipped = [], []
    for layer in dict.fromkeys(sv_layers):
        if layer <= dm_layer:
            skipped.append({"sv_layer": layer, "reason": f"not above the draft layer ℓ_DM = {dm_layer}"})
        elif layer not in verifiers:
            skipped.append({"sv_layer": layer, "reason": f"no shipped adapter cats@{layer} (shipped shallow "
                                                         f"verifiers: {verifiers or 'none'})"})
        else:
            usable.append(layer)
    notes = [f"ℓ_SV = {s['sv_layer']} skipped: {s['reason']}" for s in skipped]
    gamma_leg = list(dict.fromkeys(gammas)) if sv_layer in verifiers and sv_layer > dm_layer else []
    if gammas and not gamma_leg:
        notes.append(f"γ sweep skipped: no shipped shallow-verifier adapter cats@{sv_layer}")
    budgets = list(dict.fromkeys(usable + ([sv_layer] if gamma_leg else [])))
    jobs = [("ar", layer, None) for layer in budgets]  # (what, ℓ_SV, γ): every run, planned first for progress
    for layer, g in [(layer, gamma) for layer in usable] + [(sv_layer, g) for g in gamma_leg]:
        for what in ("cats", "kangaroo") if kangaroo else ("cats",):
            if (what, layer, g) not in jobs:
                jobs.append((what, layer, g))
    tick = _Ticker(len(jobs), progress)
    common = {"max_new_tokens": max_new_tokens, "temperature": 0.0}
    runs = {}

    def memory(layer):
        return memory_settings(engine, layer, flash_mb_s, stream)

    for what, layer, g in jobs:
        if what == "ar":
            runs[(what, layer, g)] = engine.run(prompt, "ar", **common, **memory(layer))
        elif what == "cats":
            runs[(what, layer, g)] = engine.run(prompt, "cats", dm_layer=dm_layer, sv_layer=layer, gamma=g, **common,
                                                **memory(layer))
        else:
            runs[(what, layer, g)] = engine.run(prompt, "eesd", **kangaroo_options(dm_layer, g), **common,
                                                **memory(layer))
        tick()

    def point(layer, g):
        ar = runs[("ar", layer, None)]
        row = {"sv_layer": layer, "gamma": g, "resident_layers": layer,
               "budget_mb": memory(layer)["memory_budget_mb"], **_point(runs[("cats", layer, g)], ar),
               "ar_tokens_per_s": ar.stats.tokens_per_s, "ar_bpt": decode_bytes_per_token(ar.events)}
        if ("kangaroo", layer, g) in runs:
            k = _point(runs[("kangaroo", layer, g)], ar)
            row.update(kangaroo_tau=k["tau"], kangaroo_bpt=k["bpt"], kangaroo_speedup=k["speedup"])
        return row

    return {"sv_points": [point(layer, gamma) for layer in usable],
            "gamma_points": [point(sv_layer, g) for g in gamma_leg], "skipped": skipped, "notes": notes,
            "dm_layer": dm_layer, "sv_layer": sv_layer, "gamma": gamma, "flash_mb_s": flash_mb_s, "stream": stream,
            "max_new_tokens": max_new_tokens, "kangaroo": kangaroo}


def bandwidth_sweep(engine, prompt, bandwidths: Sequence[float] = (500, 1000, 2000), *, resident_layers: int = 15,
                    dm_layer: int = 3, sv_layer: int = 15, gamma: int = 5, max_new_tokens: int = 16,
                    stream: str = "deep", kangaroo: bool = True,
                    progress: Callable[[int, int], None] | None = None) -> dict:
    """``ar``, Kangaroo (``eesd(exit_layer=dm_layer, head=cats)``, with ``kangaroo``) and ``cats`` under one
    memory budget (layers 1..``resident_layers`` resident) at each flash bandwidth (MB/s), greedy.

    Returns ``points`` (per run: ``method``, ``flash_mb_s``, τ, tok/s, BPT, ``speedup`` over ``ar`` at the
    same bandwidth and the run's stage ``costs``) and the settings; :func:`specviz.views.cats_sweep_figures.bandwidth_figure` draws them
    with the time model fitted to the pooled costs."""
    if not bandwidths or any(not isinstance(b, (int, float)) or isinstance(b, bool) or b <= 0 for b in bandwidths):
        raise ValueError(f"bandwidths must be positive MB/s, got {list(bandwidths)!r}")
    methods = [("ar", "ar", {})]
    if kangaroo:
        methods.append(("kangaroo", "eesd", kangaroo_options(dm_layer, gamma)))
    methods.append(("cats", "cats", {"dm_layer": dm_layer, "sv_layer": sv_layer, "gamma": gamma}))
    tick = _Ticker(len(bandwidths) * len(methods), progress)
    points = []
    for rate in bandwidths:
        memory = memory_settings(engine, resident_layers, rate, stream)
        ar = None
        for key, method, options in methods:
            run = engine.run(prompt, method, max_new_tokens=max_new_tokens, temperature=0.0, **options, **memory)
            ar = run if key == "ar" else ar
            points.append({"method": key, "flash_mb_s": rate, **_point(run, ar)})
            tick()
    return {"points": points, "resident_layers": resident_layers,
            "budget_mb": memory_settings(engine, resident_layers, None)["memory_budget_mb"], "dm_layer": dm_layer,
            "sv_layer": sv_layer, "gamma": gamma, "max_new_tokens": max_new_tokens, "stream": stream}
