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
    """``draft_probs`` ``[γ, V]`` is q at each draft position; ``None`` means point-mass proposals.

    The whole chain is judged in one vectorized step — p(xᵢ) and q(xᵢ) gathered at once and compared with
    γ uniforms — so the host waits on the device once per round, not once per drafted token."""
    n = len(draft)
    if n:
        rows = torch.arange(n, device=target_probs.device)
        tokens = torch.tensor(draft, device=target_probs.device)
        p = target_probs[rows, tokens]
        q = draft_probs.to(target_probs.device)[rows, tokens] if draft_probs is not None else torch.ones_like(p)
        p_host, q_host = torch.stack([p.float(), q.float()]).cpu()  # the round's one wait on the device
        refused = (sampler.uniforms(n) * q_host >= p_host).nonzero()  # u < p/q keeps, without dividing by zero
        if len(refused):
            i = int(refused[0])
            q_i = draft_probs[i].to(target_probs.device) if draft_probs is not None \
                else point_mass(draft[i], target_probs[i])
            return Verdict(i, sampler.draw(residual_distribution(target_probs[i], q_i)), "correction")
    return Verdict(n, sampler.draw(target_probs[n]), "bonus")


def point_mass(token: int, like: torch.Tensor) -> torch.Tensor:
    """A proposal that always drafts ``token`` (prompt lookup): one-hot, shaped and typed like ``like``."""
    return torch.nn.functional.one_hot(torch.tensor(token, device=like.device), like.shape[-1]).to(like.dtype)


def judge_token(token: int, p: torch.Tensor, q: torch.Tensor | None, sampler: Sampler) -> int | None:
    """One draft token against the target: kept with probability min(1, p/q) (``None``), else the token
    drawn from norm(max(p − q, 0)) in its place. ``q`` ``None`` is a point mass on ``token``."""
    q = point_mass(token, p) if q is None else q.to(p.device)
    if sampler.uniform() * float(q[token]) < float(p[token]):  # u < p/q without dividing by zero
        return None
    return sampler.draw(residual_distribution(p, q))


def verify_chain(draft: list[int], draft_probs: torch.Tensor | None, target_logits: torch.Tensor,
                 sampler: Sampler) -> Verdict:
    if sampler.greedy:
        return greedy_chain(draft, target_logits)
    return sample_chain(draft, draft_probs, sampler.probs(target_logits), sampler)
