"""The papers' analytic models, so every plot can lay theory beside measurement.

Leviathan et al. (2023), with α the per-token acceptance rate, γ the draft length and c the cost of
one draft step as a fraction of one target step (verifying γ+1 tokens is assumed to cost one step):

    E[tokens per round] = (1 − α^(γ+1)) / (1 − α)
    speedup             = (1 − α^(γ+1)) / ((1 − α)(γ·c + 1))
"""

from __future__ import annotations


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if alpha == 1:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def expected_speedup(alpha: float, gamma: int, cost_ratio: float) -> float:
    if cost_ratio < 0:
        raise ValueError(f"cost_ratio must be >= 0, got {cost_ratio}")
    return expected_tokens_per_round(alpha, gamma) / (gamma * cost_ratio + 1)


def optimal_gamma(alpha: float, cost_ratio: float, max_gamma: int = 32) -> int:
    return max(range(1, max_gamma + 1), key=lambda g: expected_speedup(alpha, g, cost_ratio))
