"""The speculative-sampling rule as an experiment: does the emitted token really follow the target?

For one position, a draft token ``x ~ q`` is accepted with probability ``min(1, p(x)/q(x))``; on
rejection a token is drawn from ``norm(max(p − q, 0))``. The emitted token is then distributed
exactly as ``p``: P(x) = min(p(x), q(x)) + (1 − a)·(p(x) − q(x))⁺/(1 − a) = p(x), with
a = Σ min(p, q) the expected acceptance: the probability that one token drawn from q is accepted (the
per-token acceptance probability, the papers' α; not the project's α, accepted ÷ drafted over a run).
This module gets real p and q from the model, simulates the rule many times at once (vectorized; the
engine's own :func:`engines.core.acceptance.judge_chain` is checked separately on a small example because
calling it a million times would take minutes), and plots the result.
A deliberately broken variant — resample from p on rejection — shows what the residual is for.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from engines import Engine
from engines.core.acceptance import judge_chain, residual_distribution
from engines.core.sampling import Sampler

RULES = ("residual", "resample_p")


def acceptance_probability(p: torch.Tensor, q: torch.Tensor) -> float:
    """Expected acceptance Σ_x min(p(x), q(x)): the chance a draft token drawn from q is accepted."""
    return float(torch.minimum(p, q).sum())


def total_variation(a: torch.Tensor, b: torch.Tensor) -> float:
    """½ Σ |a − b| between two distributions (or normalized counts)."""
    a, b = a.double() / a.sum(), b.double() / b.sum()
    return 0.5 * float((a - b).abs().sum())


def answer_distributions(engine: Engine, prompt, continuation: Sequence[int], draft_layers: int,
                         temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, Q), each ``[len(continuation) + 1, V]``: row j is the next-token distribution after the prompt
    and the first j continuation tokens, for the full target (P) and its first ``draft_layers`` layers (Q).

    The self-draft is exactly the one ``sps(draft="self", draft_layers=k)`` uses (first k layers, the
    model's own final norm and head), and both go through the same :class:`Sampler` warping.
    """
    stack = engine.target
    prompt_ids = engine.encode(prompt)
    ids = prompt_ids + list(continuation)
    rows = slice(len(prompt_ids) - 1, len(ids))
    sampler = Sampler(temperature)
    with torch.inference_mode():
        target_logits = stack.forward(ids, stack.new_cache(len(ids)))[rows]
        hidden = stack.run(stack.embed(ids), 0, draft_layers, stack.new_cache(len(ids), range(draft_layers)))
        draft_logits = stack.logits(hidden)[rows]
    return sampler.probs(target_logits).double(), sampler.probs(draft_logits).double()


def acceptance_by_position(P: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    """Expected acceptance Σ_x min(P_j(x), Q_j(x)) for every row j: how acceptable the draft is at each
    position."""
    return torch.minimum(P, Q).sum(-1)


def simulate_rule(p: torch.Tensor, q: torch.Tensor, n: int, rule: str = "residual", seed: int = 0) -> dict:
    """Run one round of the rule ``n`` times in parallel; counts of the emitted token and the acceptance rate.

    ``rule="residual"`` is speculative sampling; ``rule="resample_p"`` replaces the residual by p
    (the tempting but wrong shortcut), which over-weights the tokens the draft already likes.
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    generator = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(q, n, replacement=True, generator=generator)
    u = torch.rand(n, generator=generator, dtype=p.dtype)
    accepted = u * q[drafts] < p[drafts]  # u < p/q without dividing by zero
    fallback = residual_distribution(p, q) if rule == "residual" else p
    n_rejected = int((~accepted).sum())
    emitted = drafts.clone()
    if n_rejected:
        emitted[~accepted] = torch.multinomial(fallback, n_rejected, replacement=True, generator=generator)
    return {"counts": torch.bincount(emitted, minlength=p.numel()).double(),
            "acceptance": float(accepted.double().mean())}


def broken_rule_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """What "resample from p on rejection" emits: min(p, q) + (1 − Σ min(p, q))·p, which is not p unless q = p."""
    return torch.minimum(p, q) + (1 - acceptance_probability(p, q)) * p


def direct_samples(p: torch.Tensor, n: int, seed: int = 1) -> torch.Tensor:
    """Counts of ``n`` tokens drawn straight from p: the sampling noise any correct rule must show."""
    generator = torch.Generator().manual_seed(seed)
    return torch.bincount(torch.multinomial(p, n, replacement=True, generator=generator), minlength=p.numel()).double()


def engine_rule_counts(p: torch.Tensor, q: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    """Counts of the first emitted token over ``n`` calls of the engine's own ``judge_chain`` (γ = 1).

    The first committed token of a round is the draft when accepted, else the correction; the
    bonus row (the second row of target probabilities) is not part of this question.
    """
    sampler = Sampler(temperature=1.0, seed=seed)
    target_rows = torch.stack([p, p])
    counts = torch.zeros(p.numel(), dtype=torch.float64)
    for _ in range(n):
        draft = sampler.draw(q)
        verdict = judge_chain([draft], q[None], target_rows.log(), sampler)
        counts[draft if verdict.n_accepted else verdict.next_token] += 1
    return counts


def token_label(engine: Engine) -> Callable[[int], str]:
    """A token id's text, quoted so leading spaces and newlines show (for axis labels)."""
    return lambda token: repr(engine.detokenize([token]))
