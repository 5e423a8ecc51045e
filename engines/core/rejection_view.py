"""What the target wanted where a draft was refused: its most likely tokens, the target's p beside the
draft's q. Recorded in detailed traces only (one small top-k per refusing round), so a view can show
*why* a token is struck through, not only that it was.

Greedy runs keep the target's argmax, a point mass; the p recorded for them is the softmax of the
target's logits at temperature 1, which says how sure the target was. The draft's q is its full
distribution where the run kept one (sampling), else q(token) for the refused tokens only (the
drafter's log-prob), or a point mass for drafts copied from the context (prompt lookup).
"""

from __future__ import annotations

import math

import torch

from engines.core.sampling import Sampler, top_indices

TOP_TOKENS = 5


def rejection_view(target_logits: torch.Tensor, sampler: Sampler, refused: dict[int, float | None],
                   draft_probs: torch.Tensor | None = None, k: int = TOP_TOKENS) -> dict:
    """``target_logits`` ``[V]`` at the refused position; ``refused`` the drafted tokens the target turned
    down there with q(token) (None: unknown); ``draft_probs`` ``[V]`` the draft's q there when kept.

    Returns ``{"tokens", "p", "q", "refused", "p_source"}``: the target's top ``k`` tokens and then any
    refused token outside them, with p and q per token (q None where unknown)."""
    if not refused:
        raise ValueError("refused must name at least one drafted token")
    if sampler.greedy:
        p = torch.softmax(target_logits.float(), -1)
    else:
        p = sampler.probs(target_logits[None].float())[0]
    top = top_indices(p, k)
    tokens = top + [t for t in refused if t not in top]
    index = torch.tensor(tokens, device=p.device)
    p_values = p[index].tolist()
    if draft_probs is not None and not sampler.greedy:
        q_values = draft_probs.float()[index.to(draft_probs.device)].tolist()
    else:
        point_mass = all(q == 1.0 for q in refused.values())
        q_values = [refused.get(t, 0.0 if point_mass else None) for t in tokens]
    return {"tokens": tokens, "p": p_values, "q": q_values, "refused": list(refused),
            "p_source": "softmax of the target's logits at T = 1 (greedy keeps its argmax)" if sampler.greedy
            else "the target's sampling distribution"}


def draft_q(logprob: float | None) -> float:
    """q(token) from a drafter's log-prob; a draft without one (a copy from the context) is a point mass."""
    return 1.0 if logprob is None else math.exp(logprob)
