"""Early-exit self-speculation: draft with the target's own first ℓ layers and its final norm + head.

Unlike a self-draft model, it shares the target's KV cache: the keys and values the draft writes in
layers [0, ℓ) are exactly those verification needs, so verification runs only layers [ℓ, N) on the
draft's hidden states (plus layers [0, ℓ) for the last draft token, which the draft never fed in).
A trained exit head can replace the final norm + head (see the drafters issue).
"""

from __future__ import annotations

import torch

from ..decoding import DecodeContext
from ..kv_cache import KVCache
from ..layers import LayerStack
from ..sampling import Sampler
from .base import Draft, finish_draft, sample_draft_token


class EarlyExitDrafter:
    def __init__(self, target: LayerStack, exit_layer: int, head: torch.nn.Module | None = None):
        self.target = target
        self.exit_layer = exit_layer
        self.head = head
        self.name = f"exit@{exit_layer}"
        self.cache: KVCache | None = None

    def start(self, ctx: DecodeContext, target_cache: KVCache) -> None:
        self.cache = target_cache

    def propose(self, committed: list[int], gamma: int, sampler: Sampler) -> Draft:
        if gamma == 0:
            return Draft([])
        token = committed[-1]  # the target cache holds everything before it
        tokens, qs, rows, hiddens = [], [], [], []
        for _ in range(gamma):
            hidden = self.target.run(self.target.embed([token]), 0, self.exit_layer, self.cache)
            hiddens.append(hidden)
            logits = self.target.logits(hidden, self.head)[-1]
            token, q = sample_draft_token(logits, sampler)
            tokens.append(token)
            qs.append(q)
            rows.append(logits)
        return finish_draft(tokens, qs, rows, torch.cat(hiddens, dim=1), self.exit_layer)
