"""A separate draft model with its own KV cache: a Hugging Face causal LM sharing the target's
tokenizer, or a self-draft made of the target's first k layers plus its final norm and head.

The drafter remembers which tokens its cache holds and, each round, keeps the longest prefix that
still agrees with the committed sequence — rejected drafts simply fall off the end.
"""

from __future__ import annotations

import torch

from engines.core.context import DecodeContext
from engines.core.sampling import Sampler
from engines.drafters.base import Draft, chain_draft, draft_token, sample_draft_token
from engines.drafters.heads import SharedHead
from engines.model.kv_cache import KVCache
from engines.model.layers import LayerStack


class ModelDrafter:
    """``head`` optionally restricts the LM head to a draft vocabulary (see :mod:`engines.drafters.heads`)."""

    def __init__(self, stack: LayerStack, n_layers: int | None = None, name: str = "draft",
                 head: SharedHead | None = None):
        self.stack = stack
        self.n_layers = n_layers or stack.n_layers
        self.name = name
        self.head = head
        self.cache: KVCache | None = None
        self.cached_ids: list[int] = []

    def start(self, ctx: DecodeContext, target_cache: KVCache) -> None:
        if self.stack is not ctx.target:  # a separate draft model runs on the step its target runs on
            self.stack.use_native(ctx.target.native is not None)
        self.cache = self.stack.new_cache(ctx.capacity, range(self.n_layers))
        self.cached_ids = []

    def _rewind(self, committed: list[int]) -> list[int]:
        """Crop the cache to its longest prefix that agrees with ``committed``; return what to feed next."""
        keep = 0
        limit = min(len(self.cached_ids), len(committed) - 1)  # always feed at least one token
        while keep < limit and self.cached_ids[keep] == committed[keep]:
            keep += 1
        self.cache.crop(keep)
        del self.cached_ids[keep:]
        return committed[keep:]

    def _logits(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The next token's logits over the draft vocabulary and each column's token id (``None``: every token)."""
        hidden = self.stack.run(self.stack.embed(ids), 0, self.n_layers, self.cache)
        self.cached_ids.extend(ids)
        if self.head is not None:
            return self.head.logits(hidden[:, -1:], self.stack.backbone.norm)[0, -1], self.head.vocab_ids
        return self.stack.logits(hidden[:, -1:])[-1], None

    def propose(self, committed: list[int], gamma: int, sampler: Sampler) -> Draft:
        if gamma == 0:
            return Draft([])
        logits, columns = self._logits(self._rewind(committed))
        tokens, qs, logprobs = [], [], []
        for step in range(gamma):
            token, q, logprob = draft_token(logits, columns, self.stack.config.vocab_size, sampler, sample_draft_token)
            tokens.append(token)
            qs.append(q)
            logprobs.append(logprob)
            if step + 1 < gamma:
                logits, columns = self._logits([token])
        return chain_draft(tokens, qs, logprobs)


def tiny_model(stack: LayerStack, n_layers: int) -> torch.nn.Module:
    """A standard LlamaForCausalLM made of the target's embeddings, first ``n_layers`` layers and norm."""
    config = type(stack.config)(**{**stack.config.to_dict(), "num_hidden_layers": n_layers})
    model = type(stack.model)(config)  # ties its head to its embeddings exactly when the target does
    state = {k: v for k, v in stack.model.state_dict().items()
             if not k.startswith("model.layers.") or int(k.split(".")[2]) < n_layers}
    model.load_state_dict(state, strict=False)
    return model.to(stack.device, stack.dtype).eval()


def restrict_head_to_vocab(model: torch.nn.Module, vocab_ids: torch.Tensor) -> None:
    """Give a ``tiny`` drafter its own LM head whose rows outside the draft vocabulary are zero.

    ``tiny`` is distilled on its draft vocabulary only, so through the shared (tied) 49k-token head the
    tokens it never trained against outscore its real guess at most positions. Zero rows give those
    tokens logit 0, far below the draft's best (about 16 on SmolLM2): greedy never picks them and sampling
    puts about 0.5% of its mass there. The model stays a standard untied ``LlamaForCausalLM``, so
    Hugging Face's ``generate(assistant_model=…)`` drafts exactly what the engine's full-vocabulary path does.
    """
    embedding = model.get_input_embeddings().weight
    keep = torch.zeros(embedding.shape[0], dtype=torch.bool, device=embedding.device)
    keep[vocab_ids.to(embedding.device)] = True
    head = torch.nn.Linear(embedding.shape[1], embedding.shape[0], bias=False,
                           device=embedding.device, dtype=embedding.dtype)
    with torch.no_grad():
        head.weight.copy_(embedding * keep[:, None])
    head.requires_grad_(False)
    model.config.tie_word_embeddings = False
    model.lm_head = head
