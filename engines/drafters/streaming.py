"""Speculative streaming (Bhendawade et al. 2024), the draft Mirror-SD runs: a γ-window in fewer forwards.

The draft is Draft-4L — the target's embeddings and first layers, the top ones trained — whose top
``stream_layers`` layers also carry S lookahead streams. At a position t, stream j starts as the main
hidden state plus a learned stream embedding e_j, attends to the prefix up to t and to streams ≤ j at
t, and predicts token t+1+j while the main stream predicts t+1. One forward so proposes 1 + S tokens.
It is trained with the future n-gram objective: KL to the target on the main stream plus Σ_j 0.5^j·CE
on stream j's future token.

Lossless whatever the streams guess: every drafted token carries the distribution it was drawn from
(main stream or stream j, which depends only on the prefix, never on its sibling draft tokens), and
the target verifies it against exactly that q. Stream tokens never stay in the KV cache: they are
appended for one forward and cropped right after.
"""

from __future__ import annotations

import torch
from torch import nn

from engines.core.sampling import Sampler
from engines.drafters.base import Draft, chain_draft, draft_token, sample_draft_token
from engines.drafters.heads import SharedHead
from engines.drafters.model_draft import ModelDrafter, tiny_model
from engines.model.kv_cache import KVCache
from engines.model.layers import LayerStack, decoder_pass


def stream_mask(prefix: int, n: int, anchors: torch.Tensor, n_streams: int, dtype: torch.dtype,
                device) -> torch.Tensor:
    """Additive mask ``[1, 1, n + A·S, prefix + n + A·S]`` for n main tokens followed by S streams at
    each of the A ``anchors`` (main indices): main is causal; stream (a, j) sees the prefix, main tokens
    up to its anchor, and the streams i ≤ j of the same anchor."""
    main = torch.arange(n, device=device)
    anchor_of_row = anchors.to(device).repeat_interleave(n_streams)
    stream_of_row = torch.arange(n_streams, device=device).repeat(len(anchors))
    group_of_row = torch.arange(len(anchors), device=device).repeat_interleave(n_streams)
    rows = n + len(anchor_of_row)
    allowed = torch.zeros(rows, prefix + rows, dtype=torch.bool, device=device)
    allowed[:, :prefix] = True
    allowed[:n, prefix:prefix + n] = main[:, None] >= main[None, :]
    allowed[n:, prefix:prefix + n] = main[None, :] <= anchor_of_row[:, None]
    allowed[n:, prefix + n:] = (group_of_row[:, None] == group_of_row[None, :]) & (
        stream_of_row[None, :] <= stream_of_row[:, None])
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


class StreamingDraft(nn.Module):
    kind = "ss"

    def __init__(self, stack: LayerStack, vocab_ids: torch.Tensor, n_layers: int = 4, stream_layers: int = 2,
                 n_streams: int = 2):
        super().__init__()
        if not 1 <= stream_layers <= n_layers < stack.n_layers:
            raise ValueError(f"speculative streaming needs 1 <= stream_layers ({stream_layers}) <= layers "
                             f"({n_layers}) < {stack.n_layers}")
        if n_streams < 1:
            raise ValueError(f"n_streams must be >= 1, got {n_streams}")
        self.model = tiny_model(stack, n_layers)
        self.streams = nn.Parameter(torch.zeros(n_streams, stack.config.hidden_size, dtype=stack.dtype))
        self.head = SharedHead(stack, vocab_ids)
        self.stream_start = n_layers - stream_layers

    @property
    def stack(self) -> LayerStack:
        return LayerStack(self.model)

    @property
    def n_streams(self) -> int:
        return self.streams.shape[0]

    def run_streams(self, hidden: torch.Tensor, anchors: torch.Tensor, prefix: int = 0,
                    cache: KVCache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The stream layers on main states ``[B, n, d]`` plus streams at ``anchors``; returns main ``[B, n, d]``
        and streams ``[B, A, S, d]``. With a cache, only the main tokens' keys/values stay in it."""
        batch, n, d = hidden.shape
        offsets = torch.arange(1, self.n_streams + 1, device=hidden.device)
        lookahead = hidden[:, anchors, None, :] + self.streams.to(hidden.dtype)
        x = torch.cat([hidden, lookahead.reshape(batch, -1, d)], dim=1)
        positions = torch.cat([torch.arange(n, device=hidden.device),
                               (anchors.to(hidden.device)[:, None] + offsets).reshape(-1)])[None] + prefix
        mask = stream_mask(prefix, n, anchors, self.n_streams, hidden.dtype, hidden.device)
        x = decoder_pass(self.model.model.layers[self.stream_start:], x, positions,
                         self.model.model.rotary_emb(x, positions), mask, cache)
        if cache is not None:
            cache.crop(prefix + n, range(self.stream_start, len(self.model.model.layers)))
        return x[:, :n], x[:, n:].reshape(batch, len(anchors), self.n_streams, d)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits."""
        return self.head(self.model.model.norm(hidden))

    def step(self, ids: list[int], cache: KVCache) -> torch.Tensor:
        """Feed ``ids`` to the main stream; draft-vocabulary logits ``[1 + S, V']`` (columns: ``head.vocab_ids``)
        for the next 1 + S tokens, norm and head on the native step at inference."""
        stack = self.stack
        prefix = cache.length(0)
        hidden = stack.run(stack.embed(ids), 0, self.stream_start, cache)
        main, streams = self.run_streams(hidden, torch.tensor([len(ids) - 1]), prefix, cache)
        return self.head.logits(torch.cat([main[:, -1:], streams[:, 0]], dim=1), self.model.model.norm)[0]


class StreamingDrafter(ModelDrafter):
    """Drafts a γ-window ``1 + S`` tokens per forward; caching as :class:`ModelDrafter` (main stream only)."""

    def __init__(self, draft: StreamingDraft, name: str = "ss"):
        super().__init__(draft.stack, name=name)
        self.draft = draft

    def propose(self, committed: list[int], gamma: int, sampler: Sampler) -> Draft:
        tokens, qs, logprobs = [], [], []
        feed = self._rewind(committed) if gamma else []
        head = self.draft.head
        while len(tokens) < gamma:
            window = self.draft.step(feed, self.cache)
            self.cached_ids.extend(feed)
            feed = []
            for logits in window[: gamma - len(tokens)]:
                token, q, logprob = draft_token(logits, head.vocab_ids, head.vocab_size, sampler, sample_draft_token)
                tokens.append(token)
                qs.append(q)
                logprobs.append(logprob)
                feed.append(token)
        return chain_draft(tokens, qs, logprobs)
