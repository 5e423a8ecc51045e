"""Lossless verification of a drafted chain against the target's distributions.

Greedy: keep the longest prefix equal to the target's argmax, then append the target's own token.
Sampling (Leviathan et al. 2023; Chen et al. 2023): accept draft token x with probability
min(1, p(x)/q(x)); at the first rejection draw from norm(max(p − q, 0)); if every draft survives,
draw a bonus token from the target's next distribution. A deterministic proposal (prompt lookup)
is the special case where q is a point mass, so the same rule covers it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import Sampler


@dataclass
class Verdict:
    n_accepted: int
    next_token: int
    next_fate: str  # "bonus" when every draft token was accepted, else "correction"


def greedy_chain(draft: list[int], target_logits: torch.Tensor) -> Verdict:
    """``target_logits`` holds γ+1 rows: the target's prediction after the last committed token and after each draft."""
    predicted = target_logits.argmax(-1).tolist()
    n = 0
    while n < len(draft) and draft[n] == predicted[n]:
        n += 1
    return Verdict(n, predicted[n], "bonus" if n == len(draft) else "correction")


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(p − q, 0)): what is left of p once q's proposals have been accepted."""
    residual = (p - q).clamp_min(0)
    total = residual.sum()
    return residual / total if total > 0 else p


def sample_chain(draft: list[int], draft_probs: torch.Tensor | None, target_probs: torch.Tensor,
                 sampler: Sampler) -> Verdict:
    """``draft_probs`` ``[γ, V]`` is q at each draft position; ``None`` means point-mass proposals."""
    for i, token in enumerate(draft):
        correction = judge_token(token, target_probs[i], draft_probs[i] if draft_probs is not None else None, sampler)
        if correction is not None:
            return Verdict(i, correction, "correction")
    return Verdict(len(draft), sampler.draw(target_probs[len(draft)]), "bonus")


def judge_token(token: int, p: torch.Tensor, q: torch.Tensor | None, sampler: Sampler) -> int | None:
    """One draft token against the target: kept with probability min(1, p/q) (``None``), else the token
    drawn from norm(max(p − q, 0)) in its place. ``q`` ``None`` is a point mass on ``token``."""
    if q is None:
        q = torch.nn.functional.one_hot(torch.tensor(token, device=p.device), p.shape[-1]).to(p.dtype)
    q = q.to(p.device)
    if sampler.uniform() * float(q[token]) < float(p[token]):  # u < p/q without dividing by zero
        return None
    return sampler.draw(residual_distribution(p, q))


def verify_chain(draft: list[int], draft_probs: torch.Tensor | None, target_logits: torch.Tensor,
                 sampler: Sampler) -> Verdict:
    if sampler.greedy:
        return greedy_chain(draft, target_logits)
    return sample_chain(draft, draft_probs, sampler.probs(target_logits), sampler)
