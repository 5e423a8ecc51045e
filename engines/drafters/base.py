"""One small interface for every drafter, after Hugging Face's candidate generators.

A drafter looks at the committed sequence and proposes up to γ next tokens, with the distribution q
each was drawn from (``None`` for deterministic proposals such as prompt lookup: point masses).
Methods own verification; drafters only propose, which keeps every drafter usable by every method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from engines.core.context import DecodeContext
from engines.core.sampling import Sampler
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


def point_masses(tokens: list[int]) -> Draft:
    """A deterministic draft (copied from the context, not drawn): q = δ per token, log q = 0 for the trace."""
    return Draft(tokens, None, [0.0] * len(tokens))


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
        return int(logits.argmax()), None
    q = sampler.probs(logits[None])[0]
    return sampler.draw(q), q


def finish_draft(tokens: list[int], qs: list[torch.Tensor | None], logits_rows: list[torch.Tensor],
                 hidden: torch.Tensor | None = None, exit_layer: int = 0) -> Draft:
    """Bundle per-step choices into a :class:`Draft`, with log q of each token for the trace."""
    logprobs = [float(torch.log_softmax(row, -1)[t]) for row, t in zip(logits_rows, tokens)]
    probs = torch.stack(qs) if qs and qs[0] is not None else None
    return Draft(tokens, probs, logprobs, hidden, exit_layer)
