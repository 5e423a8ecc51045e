"""The draft on its own lane: the glue forward, and every branch of a round rolled out as one tree.

The draft keeps a KV cache of the committed sequence and the window under verification (the *glue*:
SSD §5.2 step 1). A branch is a guessed verdict — ``k`` window tokens accepted, then a root token — so
it sees the committed prefix plus the first ``k`` window tokens, and its root sits at the position
right after them. All branches advance together, one tree-masked draft forward per step (Mirror-SD's
rollout, SSD's §5.2 step 3): each row sees the linear prefix its branch sees, its own branch's earlier
rows and itself, never a sibling's. The tree rows are dropped again after the rollout.

With the speculative-streaming draft (``ss``) each step also runs S lookahead streams at every branch's
newest row in its stream layers, so a branch gains 1 + S tokens per forward (J = ⌈γ/(1+S)⌉ steps).
Every drafted token keeps the distribution it was drawn from, whichever stream drew it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from engines.core.sampling import Sampler, greedy_token
from engines.drafters.heads import SharedHead
from engines.drafters.streaming import StreamingDraft
from engines.model.layers import LayerStack, decoder_pass
from engines.programs.verdict.speculation_cache import Window

# (window position d, q) → (the distribution to draw from, mass moved): SAGUARO shaping, or none
Shaper = Callable[[int, torch.Tensor], tuple[torch.Tensor, float]]


@dataclass
class Branch:
    """A branch: it sees the first ``visible`` cached positions, then its own rows from ``root`` on."""

    visible: int
    root: int
    tokens: list[int] = field(default_factory=list)
    probs: list = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)  # absolute cache columns of its fed rows
    pending: list[int] = field(default_factory=list)  # tokens to feed at the next step
    moved: list[float] = field(default_factory=list)

    def window(self, source: str = "draft") -> Window:
        probs = None if not self.probs or self.probs[0] is None else torch.stack(self.probs)
        return Window(list(self.tokens), probs, list(self.logprobs), source)


@dataclass
class RolloutStats:
    steps: int = 0
    rows: list[int] = field(default_factory=list)


class BranchDrafter:
    """A trained draft (``tiny`` or ``ss``) with its own cache; ``name`` is the drafter's."""

    def __init__(self, module: torch.nn.Module, name: str, capacity: int, positions: int | None = None):
        """``positions``: the context window; no row is run, and no token drafted, at a position past it (a
        branch near the window's end drafts fewer tokens), so lane D never computes past what the target can
        verify. ``None``: no limit."""
        self.name = name
        self.positions = positions or None
        self.streaming: StreamingDraft | None = module if isinstance(module, StreamingDraft) else None
        if self.streaming is not None:
            self.stack, self.head = self.streaming.stack, self.streaming.head
        else:  # tiny (a draft vocabulary) or any causal LM (its own full head)
            self.stack = LayerStack(module)
            vocab = getattr(module, "draft_vocab", None)
            self.head = SharedHead(self.stack, vocab) if vocab is not None else None
        self.cache = self.stack.new_cache(capacity)
        self.cached: list[int] = []
        self._glued = 0  # the last this many cached tokens are the window glued on (roots count k from before it)

    @property
    def vocab_ids(self) -> torch.Tensor:
        """The tokens this draft can propose (all of them for a causal LM with its own head)."""
        if self.head is None:
            return torch.arange(self.stack.config.vocab_size, device=self.stack.device)
        return self.head.vocab_ids

    @property
    def n_streams(self) -> int:
        return self.streaming.n_streams if self.streaming is not None else 0

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary fp32 logits ``[n, V]`` for hidden states ``[1, n, d]`` (−inf outside the draft vocabulary)."""
        if self.head is None:
            return self.stack.logits(hidden)
        return self.head.to_full(self.head(self.stack.backbone.norm(hidden))[0])

    def _sync(self, committed: list[int], keep_last: bool) -> list[int]:
        """Crop the cache to its longest prefix agreeing with ``committed`` (leaving at least the last token
        out when ``keep_last`` is false); return the committed tokens still to feed."""
        limit = min(len(self.cached), len(committed) - (0 if keep_last else 1))
        keep = 0
        while keep < limit and self.cached[keep] == committed[keep]:
            keep += 1
        self.cache.crop(keep)
        del self.cached[keep:]
        return committed[keep:]

    def glue(self, committed: list[int], window: list[int]) -> torch.Tensor:
        """Feed what the cache lacks of ``committed`` plus the window; the draft's logits z_0..z_K ``[K+1, V]``
        (z_k: its next-token view after k window tokens are accepted)."""
        feed = self._sync(committed, keep_last=False) + list(window)
        hidden = self.stack.run(self.stack.embed(feed), 0, self.stack.n_layers, self.cache)
        self.cached.extend(feed)
        self._glued = len(window)
        return self.logits(hidden[:, -(len(window) + 1):])

    def rollout(self, roots: list[tuple[int, int]], n_tokens: int, sampler: Sampler,
                shape: Shaper | None = None) -> tuple[list[Branch], RolloutStats]:
        """``roots`` ``(k, token)`` hang after k tokens of the glued window; ``n_tokens`` drafted after each."""
        base = len(self.cached) - self._glued
        return self._grow([Branch(base + k, token, pending=[token]) for k, token in roots], n_tokens, sampler, shape)

    def jit(self, committed: list[int], n_tokens: int, sampler: Sampler,
            shape: Shaper | None = None) -> tuple[Branch, RolloutStats]:
        """A window drafted from the committed sequence alone, on the critical path (backup, fallback, the first)."""
        feed = self._sync(committed, keep_last=False)[:-1]
        if feed:
            self.stack.run(self.stack.embed(feed), 0, self.stack.n_layers, self.cache)
            self.cached.extend(feed)
        self._glued = 0
        branches, stats = self._grow([Branch(len(committed) - 1, committed[-1], pending=[committed[-1]])],
                                     n_tokens, sampler, shape)
        return branches[0], stats

    # --- the tree steps ------------------------------------------------------------------------------
    def room(self, visible: int, n_tokens: int) -> int:
        """Tokens a branch whose root sits at position ``visible`` may draft: ``n_tokens``, cut where its last
        token would sit past the context window."""
        return n_tokens if self.positions is None else max(0, min(n_tokens, self.positions - 1 - visible))

    def _grow(self, branches: list[Branch], n_tokens: int, sampler: Sampler, shape: Shaper | None):
        linear = self.cache.length(0)
        stats = RolloutStats()
        while branches and any(len(b.tokens) < self.room(b.visible, n_tokens) for b in branches):
            live = [b for b in branches if len(b.tokens) < self.room(b.visible, n_tokens)]
            rows = self._step(live, linear, sampler, shape, n_tokens)
            stats.steps += 1
            stats.rows.append(rows)
        self.cache.crop(linear)
        return branches, stats

    def _step(self, live: list[Branch], linear: int, sampler: Sampler, shape: Shaper | None, n_tokens: int) -> int:
        device, dtype = self.stack.device, self.stack.dtype
        existing = self.cache.length(0)
        main_ids, positions, owners = [], [], []
        for b in live:
            depth0 = len(b.slots)
            for i, token in enumerate(b.pending):
                main_ids.append(token)
                positions.append(b.visible + depth0 + i)
                owners.append(b)
        n_main = len(main_ids)
        streams = self.n_streams
        anchors = []  # index of each live branch's last main row
        row = 0
        for b in live:
            row += len(b.pending)
            anchors.append(row - 1)
        stream_positions = [positions[a] + 1 + j for a in anchors for j in range(streams)]
        if self.positions is not None:  # a stream row past the window drafts a token the branch has no room for
            stream_positions = [min(p, self.positions - 1) for p in stream_positions]
        allowed = self._allowed(live, existing, n_main, streams)
        mask = torch.zeros(allowed.shape, dtype=dtype)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        mask = mask[None, None].to(device)
        hidden = self.stack.embed(main_ids)
        pos = torch.tensor([positions], device=device)
        if streams:
            split = self.streaming.stream_start
            hidden = self.stack.run_at(hidden, 0, split, self.cache, pos, mask[..., :n_main, :existing + n_main])
            lookahead = hidden[:, anchors, None, :] + self.streaming.streams.to(hidden.dtype)
            x = torch.cat([hidden, lookahead.reshape(1, -1, hidden.shape[-1])], dim=1)
            all_pos = torch.tensor([positions + stream_positions], device=device)
            x = decoder_pass(self.stack.layers[split:], x, all_pos, self.stack.backbone.rotary_emb(x, all_pos), mask,
                             self.cache)
            self.cache.crop(existing + n_main, range(split, self.stack.n_layers))
            hidden = x
        else:
            hidden = self.stack.run_at(hidden, 0, self.stack.n_layers, self.cache, pos, mask)
        picked = [anchors[i] for i in range(len(live))]
        stream_rows = [n_main + i * streams + j for i in range(len(live)) for j in range(streams)]
        logits = self.logits(hidden[:, picked + stream_rows])
        slot = existing
        for b in live:
            b.slots.extend(range(slot, slot + len(b.pending)))
            slot += len(b.pending)
            b.pending = []
        for i, b in enumerate(live):
            rows = [logits[i]] + [logits[len(live) + i * streams + j] for j in range(streams)]
            for row_logits in rows:
                if len(b.tokens) >= self.room(b.visible, n_tokens):
                    break
                token, q = self._draw(row_logits, len(b.tokens), sampler, shape, b)
                b.tokens.append(token)
                b.probs.append(q)
                b.logprobs.append(float(torch.log_softmax(row_logits, -1)[token]))
                b.pending.append(token)
        return n_main + len(live) * streams

    @staticmethod
    def _draw(logits: torch.Tensor, depth: int, sampler: Sampler, shape: Shaper | None, branch: Branch):
        if sampler.greedy:
            return greedy_token(logits), None
        q = sampler.probs(logits[None])[0]
        if shape is not None:
            q, moved = shape(depth, q)
            branch.moved.append(moved)
        return sampler.draw_by_cdf(q), q

    def _allowed(self, live: list[Branch], existing: int, n_main: int, streams: int) -> torch.Tensor:
        """Which columns (cache, then this step's main rows, then stream rows) each new row may attend to."""
        n_rows = n_main + len(live) * streams
        allowed = torch.zeros(n_rows, existing + n_rows, dtype=torch.bool)
        row = 0
        for i, b in enumerate(live):
            seen = torch.zeros(existing + n_rows, dtype=torch.bool)
            seen[: b.visible] = True
            if b.slots:
                seen[torch.tensor(b.slots)] = True
            for _ in b.pending:  # a chain: each main row sees the branch's earlier rows of this step
                seen[existing + row] = True
                allowed[row] = seen
                row += 1
            for j in range(streams):  # stream j sees what its anchor sees and streams ≤ j of its branch
                at = n_main + i * streams + j
                seen[existing + at] = True
                allowed[at] = seen
        return allowed
