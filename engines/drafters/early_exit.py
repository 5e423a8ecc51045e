"""Early-exit self-speculation: draft with the target's own first ℓ layers and an exit head.

Unlike a self-draft model, it shares the target's KV cache: the keys and values the draft writes in
layers [0, ℓ) are exactly those verification needs, so verification runs only layers [ℓ, N) on the
draft's hidden states (plus layers [0, ℓ) for the last draft token, which the draft never fed in).

The exit head is the model's own final norm + LM head (untrained), or a trained head from
``data/drafts``: a norm head, or a one-decoder-layer head whose own KV cache must cover every
committed position — it is fed the layer-ℓ states of verified tokens through ``observe``.
"""

from __future__ import annotations

import torch

from engines.core.context import DecodeContext
from engines.core.sampling import Sampler
from engines.drafters.base import Draft, chain_draft, draft_token, sample_draft_token
from engines.drafters.heads import DraftHead
from engines.model.kv_cache import KVCache
from engines.model.layers import LayerStack


class SyncedHead:
    """A head with a KV cache of its own that must cover every committed position (``exit@ℓ-layer``, the
    CATS adapters): fed the verified states after each round (``observe``), this round's states on top
    until the next ``sync`` drops them."""

    def __init__(self, head: DraftHead, capacity: int):
        self.head = head
        self.cache = head.new_cache(capacity)
        self.synced = 0
        self.backlog: list[torch.Tensor] = []  # verified states not yet in the cache

    def observe(self, states: torch.Tensor) -> None:
        self.backlog.append(states)

    def sync(self) -> None:
        """Drop the entries of the last round's drafts and feed the verified states instead."""
        self.cache.crop(self.synced)
        if self.backlog:
            verified = torch.cat(self.backlog, dim=1)
            self.head(verified, self.cache)
            self.synced += verified.shape[1]
            self.backlog = []

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits ``[n, V]`` for states ``[1, n, d]`` after the cached ones."""
        return self.head.head.to_full(self.draft_logits(hidden))

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits ``[n, V']`` (columns: ``head.head.vocab_ids``) for states after the cached ones."""
        return self.head(hidden, self.cache)[0]


class EarlyExitDrafter:
    def __init__(self, target: LayerStack, exit_layer: int, head: DraftHead | None = None, name: str = ""):
        self.target = target
        self.exit_layer = exit_layer
        self.head = head
        self.name = name or f"exit@{exit_layer}"
        self.observe_layers = (exit_layer,) if head is not None and head.has_cache else ()
        self.cache: KVCache | None = None
        self.synced_head: SyncedHead | None = None

    def start(self, ctx: DecodeContext, target_cache: KVCache) -> None:
        self.cache = target_cache
        self.synced_head = SyncedHead(self.head, ctx.capacity) if self.observe_layers else None

    def observe(self, seen: dict, n_valid: int) -> None:
        self.synced_head.observe(seen[self.exit_layer][:, :n_valid])

    def _logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The last row's logits over the head's draft vocabulary and its columns' token ids (no head: the
        model's own head, every token, ``None``)."""
        if self.head is None:
            return self.target.logits(hidden)[-1], None
        if self.synced_head is not None:
            return self.synced_head.draft_logits(hidden)[-1], self.head.head.vocab_ids
        return self.head(hidden)[0, -1], self.head.head.vocab_ids

    def propose(self, committed: list[int], gamma: int, sampler: Sampler) -> Draft:
        if gamma == 0:
            return Draft([])
        if self.synced_head is not None:
            self.synced_head.sync()
        token = committed[-1]  # the target cache holds everything before it
        tokens, qs, logprobs, hiddens = [], [], [], []
        for _ in range(gamma):
            hidden = self.target.run(self.target.embed([token]), 0, self.exit_layer, self.cache)
            hiddens.append(hidden)
            logits, columns = self._logits(hidden)
            token, q, logprob = draft_token(logits, columns, self.target.config.vocab_size, sampler, sample_draft_token)
            tokens.append(token)
            qs.append(q)
            logprobs.append(logprob)
        return chain_draft(tokens, qs, logprobs, torch.cat(hiddens, dim=1), self.exit_layer)
