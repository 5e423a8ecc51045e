"""Drafting with a MoA head, split the way the paper's client–server mode splits it.

- :class:`MoAServer` is the target's side: after each verification it turns the newly verified tokens'
  keys/values (read from the target's own cache) into a :class:`VerifiedBlock` — their LSA memory rows
  and, for TLI > 0, the target's keys/values at the last TLI layers. That block is exactly what the
  server sends the client (Table 7: ``2·E_kv·(TLI + 1)`` values per accepted token).
- :class:`MoADrafter` is the client's side: SA with its own cache, CA over the memory rows it has
  absorbed, the target's last TLI layers over a draft-local cache (target keys/values for verified
  positions, ĥ for the rest), the head. It grows EAGLE-2 trees (``root`` / ``expand`` / ``finish``) or
  chains (``propose``).

On one device ``observe`` hands the block straight over; in client–server mode
(:mod:`engines.programs.client_server`) it goes through the wire format and the simulated link first.

Cache invariant: SA's cache holds every committed token (root included) once the round's root step
ran; memory rows exist for every committed token but the root (the target has not run it yet). The
draft-local TLI cache holds target rows for the verified positions and ĥ after them; a new block
replaces the ĥ.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from engines.core.draft_tree import DraftTreeNodes, TreeNode, TreeSlots
from engines.core.sampling import Sampler
from engines.core.trace import DraftStep, Lsa
from engines.drafters.base import Draft, chain_draft, draft_token, sample_draft_token
from engines.drafters.moa_head import MoAHead, layer_kv_rows
from engines.model.kv_cache import KVCache
from engines.model.layers import LayerStack


@dataclass
class VerifiedBlock:
    """What the client learns per newly verified token: memory rows ``[n, W]`` and, for TLI > 0, the
    target's keys/values at its last TLI layers ``[TLI, 2, n, E_kv]``."""

    memory: torch.Tensor
    tli_kv: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.memory.shape[0]

    def activations(self) -> torch.Tensor:
        """One row per token, ``[n, W + TLI·2·E_kv]``: what goes on the wire."""
        rows = [self.memory.float()]
        if self.tli_kv is not None:
            rows.append(self.tli_kv.float().permute(2, 0, 1, 3).flatten(1))
        return torch.cat(rows, dim=1)

    @classmethod
    def from_activations(cls, rows: torch.Tensor, memory_width: int, tli: int) -> "VerifiedBlock":
        memory = rows[:, :memory_width]
        if not tli:
            return cls(memory)
        kv = rows[:, memory_width:].reshape(len(rows), tli, 2, -1).permute(1, 2, 0, 3)
        return cls(memory, kv.contiguous())


class MoAServer:
    """The target's half: LSA over every layer's keys/values of the newly verified tokens."""

    def __init__(self, head: MoAHead):
        self.head = head
        self.seconds = 0.0  # LSA time of the last block (the ``lsa`` event)
        self.tokens = 0  # tokens in the last block

    @torch.no_grad()
    def block(self, target_cache: KVCache, n_valid: int, seen: dict) -> VerifiedBlock:
        started = time.perf_counter()
        head, stack = self.head, self.head.stack
        end = target_cache.length()
        start = end - n_valid

        needed = list(range(stack.n_layers) if head.uses_lsa else head.tli_layers)
        first = target_cache.first_layer
        # the layers' new keys and values stacked first, then laid out once: per layer, 30 small operations
        # took 0.3 ms of a round (2-core AMD EPYC Zen 4); each layer's rows read once, for LSA and TLI alike
        if needed:
            keys = torch.stack([target_cache.keys[l - first][0, :, start:end] for l in needed])  # [L, H_kv, n, D]
            values = torch.stack([target_cache.values[l - first][0, :, start:end] for l in needed])
            layer_kv = layer_kv_rows(keys, values).transpose(0, 1)  # [n, L, 2·E_kv]
        if head.uses_lsa:
            memory = head.memory_rows(layer_kv=layer_kv.to(next(head.parameters()).dtype))
        else:
            memory = stack.backbone.norm(seen[stack.n_layers][0, :n_valid])
        tli_kv = None
        if head.tli:
            tli_kv = torch.stack([torch.stack(split_keys_values(layer_kv[:, needed.index(l)], head))
                                  for l in head.tli_layers])
        self.seconds, self.tokens = time.perf_counter() - started, n_valid
        return VerifiedBlock(memory, tli_kv)


def split_keys_values(rows: torch.Tensor, head: MoAHead) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``[n, H_kv·2·D]`` (per head: key, value) → keys, values ``[n, H_kv·D]`` each."""
    heads = head.sa.kv_heads
    per_head = rows.view(len(rows), heads, 2, -1)
    return per_head[:, :, 0].flatten(1), per_head[:, :, 1].flatten(1)


class MoADrafter:
    """The client's half; also a tree drafter (``root``/``expand``/``finish``) and a chain drafter."""

    def __init__(self, head: MoAHead, name: str = "moa", server: MoAServer | None = None):
        self.head = head
        self.stack: LayerStack = head.stack
        self.name = name
        self.server = server if server is not None else MoAServer(head)
        self.observe_layers = (self.stack.n_layers,)
        self.timing = {"sa": 0.0, "ca": 0.0, "tli": 0.0, "head": 0.0}  # seconds this round (``draft_step``)
        self.steps = 0  # drafter calls this round

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self, ctx, target_cache: KVCache) -> None:
        head, stack = self.head, self.stack
        dtype, device = next(head.parameters()).dtype, stack.device
        self.target_cache = target_cache
        self.sa_cache = KVCache(1, head.sa.kv_heads, head.sa.head_dim, ctx.capacity, dtype, device)
        self.tli_cache = stack.new_cache(ctx.capacity, head.tli_layers) if head.tli else None
        self.memory_keys, self.memory_values = head.null_keys_values()
        self.memory_length = 0  # verified tokens with a memory row
        self.synced = 0  # committed tokens in SA's cache

    def observe(self, seen: dict, n_valid: int) -> None:
        self.absorb(self.server.block(self.target_cache, n_valid, seen))

    @torch.no_grad()
    def absorb(self, block: VerifiedBlock) -> None:
        """Append a verified block's memory rows (and, TLI > 0, the target's keys/values, replacing ĥ)."""
        head = self.head
        dtype = self.memory_keys.dtype
        keys, values = head.memory_keys_values(block.memory.to(dtype)[None])
        self.memory_keys = torch.cat([self.memory_keys, keys], dim=2)
        self.memory_values = torch.cat([self.memory_values, values], dim=2)
        if self.tli_cache is not None:
            self.tli_cache.crop(self.memory_length)
            n = len(block)
            for layer, (k, v) in zip(head.tli_layers, block.tli_kv.to(self.tli_cache.keys[0].dtype)):
                shape = (1, n, head.sa.kv_heads, head.sa.head_dim)
                self.tli_cache.update(k.reshape(shape).transpose(1, 2), v.reshape(shape).transpose(1, 2), layer)
        self.memory_length += len(block)

    # --- drafting ----------------------------------------------------------------------------------
    def _clocked(self, part: str, fn, *args):
        started = time.perf_counter()
        out = fn(*args)
        self.timing[part] += time.perf_counter() - started
        return out

    def report(self, stage: str, t: float, round_: int) -> list:
        """``draft``: where this round's drafting time went; ``observe``: the server's LSA over the new block."""
        if stage == "draft":
            return [DraftStep(t=t, round=round_, steps=self.steps, **self.timing)]
        return [Lsa(t=t, round=round_, n_tokens=self.server.tokens, seconds=self.server.seconds)]

    def _draft(self, tokens: list[int], positions: torch.Tensor, mask: torch.Tensor | None, rows: int) -> torch.Tensor:
        """SA on ``tokens`` (all cached), then CA, TLI and the head on the last ``rows`` of them."""
        self.steps += 1
        head = self.head
        embeddings = self.stack.embed(tokens).to(self.memory_keys.dtype)
        queries = self._clocked("sa", head.self_attend, embeddings, positions, self.sa_cache, mask)[:, -rows:]
        predicted = self._clocked("ca", head.cross_attend, queries, self.memory_keys, self.memory_values)
        if self.tli_cache is not None:
            tli_mask = mask if rows == len(tokens) else None
            if tli_mask is None and rows > 1:
                tli_mask = LayerStack.causal_mask(self.tli_cache.length(), rows, self.stack.dtype, self.stack.device)
            predicted = self._clocked("tli", head.finish_layers, predicted, self.tli_cache, positions[:, -rows:],
                                      tli_mask)
        return self._clocked("head", head, predicted)

    @torch.no_grad()
    def root(self, committed: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``[V']`` of the token after ``committed`` and each column's token id."""
        self.timing, self.steps = dict.fromkeys(self.timing, 0.0), 0
        n = len(committed)
        self.sa_cache.crop(self.synced)
        feed = committed[self.synced:]
        positions = torch.arange(self.synced, n, device=self.stack.device)[None]
        mask = None if len(feed) == 1 else LayerStack.causal_mask(self.synced, len(feed), self.memory_keys.dtype,
                                                                  self.stack.device)
        # TLI needs ĥ for every committed position after the verified ones; without TLI only the root matters
        rows = n - (self.tli_cache.length() if self.tli_cache is not None else n - 1)
        logits = self._draft(feed, positions, mask, rows)
        self.synced = n
        self.slots = TreeSlots(n)
        return logits[0, -1], self.head.head.vocab_ids

    @torch.no_grad()
    def expand(self, tree: DraftTreeNodes, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed nodes ``ids`` (one batch) under the tree mask; logits ``[k, V']`` of each one's children."""
        positions, mask = self.slots.inputs(tree, ids, self.memory_keys.dtype, self.stack.device)
        logits = self._draft([tree.nodes[i].token for i in ids], positions, mask, len(ids))
        return logits[0], self.head.head.vocab_ids

    def finish(self) -> None:
        """Drop the tree's rows: SA keeps the committed tokens, TLI keeps ĥ of committed ones (the root)."""
        self.sa_cache.crop(self.synced)
        if self.tli_cache is not None:
            self.tli_cache.crop(self.synced)

    def propose(self, committed: list[int], gamma: int, sampler: Sampler) -> Draft:
        """A chain of ``gamma`` tokens, each drawn from the drafter's q (argmax when greedy)."""
        if gamma == 0:
            return Draft([])
        chain = DraftTreeNodes(drafter=self.name)
        logits, columns = self.root(committed)
        tokens, qs, logprobs = [], [], []
        for step in range(gamma):
            token, q, logprob = draft_token(logits, columns, self.head.head.vocab_size, sampler, sample_draft_token)
            tokens.append(token)
            qs.append(q)
            logprobs.append(logprob)
            if step + 1 < gamma:
                node = chain.add(TreeNode(token, len(chain) - 1, step + 1))
                logits = self.expand(chain, [node])[0][0]
        self.finish()
        return chain_draft(tokens, qs, logprobs)
