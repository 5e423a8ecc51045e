"""The speculation cache Mirror-SD and SSD share (the SSD paper's §5.2–5.4; docs/mirror-and-ssd.md).

While the target verifies a window, the draft prepares the *next* window for each verdict it thinks
likely — ``k`` draft tokens accepted, then token ``t`` (the correction, or the bonus after all K) — and
files it under the key ``(k, t)``. When the real verdict arrives the draft looks it up: a hit hands the
window over at once, a miss costs a backup on the critical path.

Losslessness rests on two rules kept here: every cached token carries the exact distribution it was
drawn from (what the target's min(1, p/q) test uses), and which window is used depends only on the
verdict's key, never on a window's content.

Also here: SSD's fan-out (how many guesses per k, uniform or the geometric optimum of §5.3), the
power-law fit of its miss rate, and SAGUARO sampling (§5.4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class Window:
    """A window of draft tokens; ``probs`` ``[n, V]`` holds the q each token was drawn from (``None`` when
    greedy; a one-hot row is a point mass, as for n-gram lookups)."""

    tokens: list[int]
    probs: torch.Tensor | None = None
    logprobs: list[float] = field(default_factory=list)
    source: str = "draft"  # draft | lookup

    def __len__(self) -> int:
        return len(self.tokens)

    def cut(self, n: int) -> "Window":
        return Window(self.tokens[:n], None if self.probs is None else self.probs[:n], self.logprobs[:n], self.source)


@dataclass
class Root:
    """A guessed verdict: ``k`` accepted, then ``token``; ``rank`` among the candidates it came from."""

    k: int
    token: int
    rank: int
    score: float = 0.0  # log-probability the guesser gave it (ordering only)


class SpeculationCache:
    """Windows keyed by the verdict ``(k, token)`` they continue; rebuilt every round (§9.14: nothing persists)."""

    def __init__(self):
        self.entries: dict[tuple[int, int], Window] = {}

    def put(self, root: Root, window: Window) -> None:
        self.entries[(root.k, root.token)] = window

    def lookup(self, k: int, token: int) -> Window | None:
        return self.entries.get((k, token))

    def __len__(self) -> int:
        return len(self.entries)


# --- fan-out (SSD §5.3) -------------------------------------------------------------------------------
def uniform_fanout(lookahead: int, f: int) -> list[int]:
    return [f] * (lookahead + 1)


def geometric_fanout(lookahead: int, budget: int, a_p: float, r: float, vocab: int | None = None) -> list[int]:
    """F_k ∝ P(A = k)^{1/(1+r)} (the Lagrangian optimum of P(hit) under Σ F_k ≤ B with a power-law miss
    rate c·F^{−r}), rounded by largest remainder so the sum is ``budget``."""
    a_p = min(max(a_p, 1e-3), 1 - 1e-3)
    weights = [(a_p ** k * (1 - a_p)) ** (1 / (1 + r)) for k in range(lookahead)] + [(a_p ** lookahead) ** (1 / (1 + r))]
    total = sum(weights)
    exact = [budget * w / total for w in weights]
    fan = [math.floor(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: exact[i] - fan[i], reverse=True)
    for i in order[: budget - sum(fan)]:
        fan[i] += 1
    if vocab is not None:
        fan = [min(f, vocab) for f in fan]
    return fan


def acceptance_law(a_p: float, lookahead: int) -> list[float]:
    """P(A = k) for k = 0..K under a constant per-token acceptance a_p (§5.3)."""
    return [a_p ** k * (1 - a_p) for k in range(lookahead)] + [a_p ** lookahead]


def predicted_hit_rate(fanout: list[int], a_p: float, r: float, c: float = 1.0) -> float:
    """Σ_k P(A = k) · (1 − c·F_k^{−r}) (a slot of zero width never hits)."""
    law = acceptance_law(a_p, len(fanout) - 1)
    return sum(p * (max(0.0, 1 - c * f ** (-r)) if f > 0 else 0.0) for p, f in zip(law, fanout))


def fit_power_law(ranks: list[int], max_fanout: int = 64) -> tuple[float, float]:
    """Fit 1 − P(hit | F) ≈ c·F^{−r} to logged ranks of the true token among the draft's candidates
    (rank < F is a hit at fan-out F; −1 = never ranked). Returns (c, r); (1, 0) with too little data."""
    if len(ranks) < 4:
        return 1.0, 0.0
    xs, ys = [], []
    for f in range(1, max_fanout + 1):
        miss = sum(1 for rank in ranks if rank < 0 or rank >= f) / len(ranks)
        if 0 < miss < 1:
            xs.append(math.log(f))
            ys.append(math.log(miss))
    if len(xs) < 2:
        return 1.0, 0.0
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / max(sum((x - mean_x) ** 2 for x in xs), 1e-12)
    return math.exp(mean_y - slope * mean_x), max(-slope, 0.0)


# --- SAGUARO sampling (SSD §5.4) ----------------------------------------------------------------------
def saguaro(probs: torch.Tensor, fanout: int, c: float) -> tuple[torch.Tensor, float]:
    """σ_{F,C}: the draft distribution with its top-F tokens scaled by C, renormalized; and the mass moved
    off them. Drawing the window from σ (and verifying against σ) pushes the residual max(0, p − σ) onto
    the tokens the cache guesses as the next bonus — lossless, because σ is the q the target sees."""
    if c >= 1 or fanout <= 0:
        return probs, 0.0
    top = torch.topk(probs, min(fanout, probs.shape[-1])).indices
    weights = torch.ones_like(probs)
    weights[top] = c
    shaped = probs * weights
    shaped = shaped / shaped.sum()
    return shaped, float(probs[top].sum() - shaped[top].sum())
