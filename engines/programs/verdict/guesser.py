"""Which verdicts lane D prepares windows for, and how it draws them: SSD's fan-out fitted to the run's
own log (§5.3), Mirror-SD's early-exit top-κ roots, SAGUARO's reshaped draws (§5.4)."""

from __future__ import annotations

import torch

from engines.programs.verdict.speculation_cache import Root, fit_power_law, geometric_fanout, saguaro, uniform_fanout
from engines.programs.verdict.wire import Plan


class Guesser:
    """Which verdicts D prepares for, and how it draws (SAGUARO), from one round's evidence."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.accepts: list[tuple[int, int]] = []  # (accepted, window length) per round
        self.ranks: list[int] = []  # rank of the true token among z_k's candidates, per round

    # SSD: fan-out from the run's own log (§5.3)
    def fanout(self) -> list[int]:
        plan = self.plan
        if plan.fanout == "uniform":
            return uniform_fanout(plan.window, plan.f)
        a_p, r = plan.a_p_prior, plan.r_prior
        if len(self.accepts) >= 8:
            kept = sum(a for a, _ in self.accepts)
            a_p = kept / max(kept + sum(1 for a, n in self.accepts if a < n), 1)
            _, fitted = fit_power_law(self.ranks)
            r = fitted if fitted > 0 else r
        return geometric_fanout(plan.window, plan.budget, a_p, r)

    def ssd_roots(self, z: torch.Tensor, window: list[int], fan: list[int]) -> list[Root]:
        roots = []
        for k, width in enumerate(fan[: len(z)]):  # a short window (a lookup) has fewer outcomes
            if width <= 0:
                continue
            logp = torch.log_softmax(z[k], -1)
            top = logp.topk(width + 1)
            rank = 0
            for value, token in zip(top.values.tolist(), top.indices.tolist()):
                if (k < len(window) and token == window[k]) or value == float("-inf"):
                    continue
                if rank < width:
                    roots.append(Root(k, token, rank, value))
                rank += 1
        return roots

    @staticmethod
    def ssd_rank(z: torch.Tensor, window: list[int], k: int, token: int) -> int:
        """Rank of ``token`` in z_k with the speculated token left out (−1 outside the draft's support)."""
        row = z[k]
        if row[token] == float("-inf"):
            return -1
        rank = int((row > row[token]).sum())
        if k < len(window) and row[window[k]] > row[token]:
            rank -= 1
        return rank

    def mirror_roots(self, ids: list[list[int]], logprobs: torch.Tensor, window: list[int]) -> list[Root]:
        return mirror_roots(ids, logprobs, window)

    def shaper(self, fan: list[int]):
        """SAGUARO: draw window position d from σ_{F_d, C} (its top-F_d, or F_d + 1, tokens scaled by C)."""
        plan = self.plan
        if plan.method != "ssd" or plan.c >= 1:
            return None
        extra = 1 if plan.saguaro_top == "f+1" else 0
        return lambda d, q: saguaro(q, fan[min(d, len(fan) - 1)] + extra, plan.c)


def mirror_roots(ids: list[list[int]], logprobs: torch.Tensor, window: list[int]) -> list[Root]:
    """Mirror-SD's guessed verdicts: (γ+1)·κ roots from the early exit's top-κ ``ids`` (one row per verified
    position j, best first; ``logprobs`` flat, row-major), each position's drafted token left out, because a
    verdict lands at j only when the target refused ``window[j]``, so that token is never the correction.

    A module-level function (not a method) so notebook 06's exercise can swap it for the reader's own."""
    kappa = len(ids[0]) if ids else 0
    roots = []
    for j, row in enumerate(ids):
        rank = 0
        for i, token in enumerate(row):
            if j < len(window) and token == window[j]:
                continue
            roots.append(Root(j, token, rank, float(logprobs[j * kappa + i])))
            rank += 1
    return roots
