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

from ..decoding import DecodeContext
from ..kv_cache import KVCache
from ..layers import LayerStack
from ..sampling import Sampler
from .base import Draft, finish_draft, sample_draft_token
from .heads import DraftHead


class EarlyExitDrafter:
    def __init__(self, target: LayerStack, exit_layer: int, head: DraftHead | None = None, name: str = ""):
        self.target = target
        self.exit_layer = exit_layer
        self.head = head
        self.name = name or f"exit@{exit_layer}"
        self.observe_layers = (exit_layer,) if head is not None and head.has_cache else ()
        self.cache: KVCache | None = None
        self.head_cache: KVCache | None = None
        self.backlog: list[torch.Tensor] = []  # verified layer-ℓ states not yet in the head's cache
        self.synced = 0

    def start(self, ctx: DecodeContext, target_cache: KVCache) -> None:
        self.cache = target_cache
        self.head_cache = self.head.new_cache(ctx.capacity) if self.observe_layers else None
        self.backlog, self.synced = [], 0

    def observe(self, seen: dict, n_valid: int) -> None:
        self.backlog.append(seen[self.exit_layer][:, :n_valid])

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.head is None:
            return self.target.logits(hidden)[-1]
        out = self.head(hidden, self.head_cache) if self.head_cache is not None else self.head(hidden)
        return self.head.head.to_full(out[0, -1])

    def _sync_head_cache(self) -> None:
        """Drop the head's draft-time entries and feed it the verified states instead."""
        self.head_cache.crop(self.synced)
        if self.backlog:
            verified = torch.cat(self.backlog, dim=1)
            self.head(verified, self.head_cache)
            self.synced += verified.shape[1]
            self.backlog = []

    def propose(self, committed: list[int], gamma: int, sampler: Sampler) -> Draft:
        if gamma == 0:
            return Draft([])
        if self.head_cache is not None:
            self._sync_head_cache()
        token = committed[-1]  # the target cache holds everything before it
        tokens, qs, rows, hiddens = [], [], [], []
        for _ in range(gamma):
            hidden = self.target.run(self.target.embed([token]), 0, self.exit_layer, self.cache)
            hiddens.append(hidden)
            logits = self._logits(hidden)
            token, q = sample_draft_token(logits, sampler)
            tokens.append(token)
            qs.append(q)
            rows.append(logits)
        return finish_draft(tokens, qs, rows, torch.cat(hiddens, dim=1), self.exit_layer)
