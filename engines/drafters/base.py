"""One small interface for every drafter, after Hugging Face's candidate generators.

A drafter looks at the committed sequence and proposes up to γ next tokens, with the distribution q
each was drawn from (``None`` for deterministic proposals such as prompt lookup: point masses).
Methods own verification; drafters only propose, which keeps every drafter usable by every method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Protocol, Sequence

import torch

from engines.core.context import DecodeContext
from engines.core.sampling import Sampler, greedy_token
from engines.model.kv_cache import KVCache


@dataclass
class Draft:
    tokens: list[int]
    probs: torch.Tensor | None = None  # [γ, V] q per position; None = point masses
    logprobs: list[float] | None = None  # log q(token) per position, for the trace
    # Early exit shares the target's cache: the layer-ℓ hidden states of [last committed, d1..d_{γ-1}]
    # so verification runs only the remaining layers on them instead of the whole stack.
    hidden: torch.Tensor | None = None
    exit_layer: int = 0
    # Per token, what the drafter proposed it on (a model-free drafter's kind of match), for gamma=auto to
    # learn how often each kind is accepted and verify only the prefix that pays (engines.core.draft_length)
    evidence: list[Hashable] | None = None

    def prefix(self, n: int) -> "Draft":
        """The draft's first ``n`` tokens, everything kept per token cut to match. Not an early-exit draft's:
        its shallow layers already wrote every token into the target's cache."""
        if n >= len(self.tokens):
            return self
        if self.hidden is not None:
            raise ValueError("an early-exit draft (hidden states given) cannot be cut: its tokens are in the "
                             "target's cache")
        return Draft(self.tokens[:n], None if self.probs is None else self.probs[:n],
                     None if self.logprobs is None else self.logprobs[:n], None, self.exit_layer,
                     None if self.evidence is None else self.evidence[:n])


def point_masses(tokens: list[int], evidence: Sequence[Hashable] | None = None) -> Draft:
    """A deterministic draft (copied from the context, not drawn): q = δ per token, log q = 0 for the trace."""
    return Draft(tokens, None, [0.0] * len(tokens), evidence=None if evidence is None else list(evidence))


class Drafter(Protocol):
    """Optionally a drafter also has ``observe_layers`` (target layers whose outputs it needs) and
    ``observe(seen, n_valid)``, called after prefill and each verification with ``{layer: [1, n, d]}``
    of which the first ``n_valid`` positions were committed."""

    name: str

    def start(self, ctx: DecodeContext, target_cache: KVCache) -> None:
        """Called once per run after prefill."""

    def propose(self, committed: list[int], gamma: int, sampler: Sampler) -> Draft:
        """Up to ``gamma`` tokens continuing ``committed`` (prompt + generated so far)."""


def sample_draft_token(logits: torch.Tensor, sampler: Sampler) -> tuple[int, torch.Tensor | None]:
    """The drafter's own choice from one row of logits: argmax when greedy, else a sample from q."""
    if sampler.greedy:
        return greedy_token(logits), None
    q = sampler.probs(logits[None])[0]
    return sampler.draw(q), q


def draft_token(logits: torch.Tensor, columns: torch.Tensor | None, vocab_size: int, sampler: Sampler,
                sample=sample_draft_token) -> tuple[int, torch.Tensor | None, float]:
    """The drafter's choice from one row of draft-vocabulary logits ``[V']`` (``columns``: each column's token id;
    ``None``: column = token id): token, q (``None`` when greedy) and log q(token) for the trace.

    Greedy needs no 49k-wide vector: the argmax is taken in the draft vocabulary and mapped back, and log q
    over the draft vocabulary equals the full one (q is zero outside it). Sampled drafting scatters the row into
    the full vocabulary and draws there through ``sample`` (the caller's ``sample_draft_token``), because the
    rule judges the token against that very q (``Draft.probs`` ``[γ, V]``: the residual max(p − q, 0) needs it
    over every token)."""
    row = logits.float()
    if sampler.greedy:
        column = greedy_token(row)
        token = column if columns is None else int(columns[column])
        return token, None, float(row[column] - torch.logsumexp(row, -1))
    full = row
    if columns is not None:
        full = torch.full((vocab_size,), float("-inf"), dtype=torch.float32, device=row.device)
        full[columns] = row
    token, q = sample(full, sampler)
    return token, q, float(full[token] - torch.logsumexp(row, -1))


def chain_draft(tokens: list[int], qs: list[torch.Tensor | None], logprobs: list[float],
                hidden: torch.Tensor | None = None, exit_layer: int = 0) -> Draft:
    """Bundle per-step choices of :func:`draft_token` into a :class:`Draft`."""
    probs = torch.stack(qs) if qs and qs[0] is not None else None
    return Draft(tokens, probs, logprobs, hidden, exit_layer)

