"""EAGLE-style feature-level drafting (chain form; EAGLE-2 trees build on the same head).

The head reads pairs (embedding of token t+1, target feature f_t) and predicts f_{t+1}; the target's
own LM head turns a feature into a token. Target features exist only for verified positions, so the
head's KV cache is rebuilt from them each round (``observe``); within a round the head feeds on its
own predicted features, as EAGLE does.
"""

from __future__ import annotations

import torch

from engines.core.context import DecodeContext
from engines.core.sampling import Sampler
from engines.drafters.base import Draft, chain_draft, draft_token, sample_draft_token
from engines.drafters.heads import EagleHead
from engines.model.kv_cache import KVCache


class EagleDrafter:
    def __init__(self, head: EagleHead, name: str = "eagle"):
        self.head = head
        self.target = head.stack
        self.name = name
        self.observe_layers = head.observe_layers  # the last layer (EAGLE), or three (EAGLE-3)
        self.cache: KVCache | None = None
        self.features: list[torch.Tensor] = []  # verified target features f_t not yet paired and fed
        self.synced = 0  # pairs (y_{t+1}, f_t) in the head's cache

    def start(self, ctx: DecodeContext, target_cache: KVCache) -> None:
        self.cache = self.head.new_cache(ctx.capacity)
        self.features, self.synced = [], 0

    def observe(self, seen: dict, n_valid: int) -> None:
        self.features.append(self.head.target_feature(self.head.observed_rows(seen, n_valid)))

    def _step(self, tokens: list[int], features: torch.Tensor) -> torch.Tensor:
        embeddings = self.target.embed(tokens).to(features.dtype)
        return self.head.features(embeddings, features, self.cache)

    def propose(self, committed: list[int], gamma: int, sampler: Sampler) -> Draft:
        if gamma == 0:
            return Draft([])
        self.cache.crop(self.synced)
        features = torch.cat(self.features, dim=1)  # f_t for t = synced .. len(committed) - 2
        n = features.shape[1]
        predicted = self._step(committed[self.synced + 1: self.synced + 1 + n], features)[:, -1:]
        self.synced += n
        self.features = []
        shared = self.head.head
        tokens, qs, logprobs = [], [], []
        for step in range(gamma):
            token, q, logprob = draft_token(self.head(predicted)[0, -1], shared.vocab_ids, shared.vocab_size, sampler,
                                            sample_draft_token)
            tokens.append(token)
            qs.append(q)
            logprobs.append(logprob)
            if step + 1 < gamma:
                predicted = self._step([token], predicted)
        return chain_draft(tokens, qs, logprobs)
