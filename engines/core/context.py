"""What every decoding loop shares: the run's context, prefill, and committing tokens.

A method's loop decides *which* tokens become final; :class:`Transcript` decides how they are
committed — cut at the token budget and after EOS, turned into text pieces, announced as a
:class:`~engines.core.trace.Commit` event — so every method stops and streams the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from engines.core.sampling import Sampler
from engines.core.text_pieces import IncrementalDetokenizer
from engines.core.trace import Commit, Prefill, StageSpan, Trace
from engines.model.kv_cache import KVCache
from engines.model.layers import LayerStack

# cache slots beyond prompt + budget for draft tokens that may be rejected: the most any round may draft
# (methods validate γ against it; engines.model.exact_numerics.MAX_EXACT_ROWS covers 1 + it)
DRAFT_MARGIN = 64


@dataclass
class DecodeContext:
    target: LayerStack
    prompt_ids: list[int]
    max_new_tokens: int
    sampler: Sampler
    trace: Trace
    eos_ids: frozenset
    detokenize: Callable[[list[int]], str]
    lane: str = "cpu0"

    @property
    def capacity(self) -> int:
        return len(self.prompt_ids) + self.max_new_tokens + DRAFT_MARGIN

    def span(self, stage: str, round_: int, start: float) -> StageSpan:
        return StageSpan(t=self.trace.now(), lane=self.lane, stage=stage, round=round_, start=start,
                         end=self.trace.now())


class Transcript:
    """The committed sequence; the single place where tokens become final."""

    def __init__(self, ctx: DecodeContext):
        self.ctx = ctx
        self.ids = list(ctx.prompt_ids)
        self.new_ids: list[int] = []
        self.text = ""
        self.stop_reason = ""
        self._pieces = IncrementalDetokenizer(ctx.detokenize)

    @property
    def done(self) -> bool:
        return bool(self.stop_reason)

    @property
    def remaining(self) -> int:
        return self.ctx.max_new_tokens - len(self.new_ids)

    def commit(self, round_: int, tokens: list[int], fates: list[str], drafted: int = 0,
               accepted: int = 0, draft_depth: int | None = None) -> Commit:
        tokens, fates = tokens[: self.remaining], fates[: self.remaining]
        for i, token in enumerate(tokens):
            if token in self.ctx.eos_ids:
                tokens, fates = tokens[: i + 1], fates[: i + 1]
                self.stop_reason = "eos"
                break
        pieces = []
        for token in tokens:
            self.ids.append(token)
            self.new_ids.append(token)
            pieces.append(self._pieces.push(token))
        if not self.stop_reason and self.remaining <= 0:
            self.stop_reason = "max_new_tokens"
        if self.stop_reason and pieces:  # the last commit: nothing may stay held back
            pieces[-1] += self._pieces.flush()
        self.text += "".join(pieces)
        return Commit(t=self.ctx.trace.now(), round=round_, tokens=tokens, fates=fates, pieces=pieces,
                      drafted=drafted, accepted=min(accepted, len(tokens)), draft_depth=draft_depth)


def target_forward(ctx: DecodeContext, cache: KVCache, tokens: list[int], observe: tuple = (),
                   shallow: tuple[torch.Tensor, int] | None = None,
                   parents: list[int] | None = None, last_only: bool = False) -> tuple[torch.Tensor, dict]:
    """Target logits for ``tokens`` ``[n, V]``, plus the hidden states after each layer in ``observe``.

    ``parents`` makes ``tokens`` a tree (see :func:`engines.model.layers.tree_mask`) instead of a chain.
    ``last_only``: logits for the last token only (``[1, V]``): a prefill needs no more, and an 8,000-token
    prompt's logits would take 1.6 GB in fp32.

    ``shallow = (hidden, ℓ)``: an early-exit draft already ran layers [0, ℓ) on all but the last token
    (sharing this cache), so only that token goes through them before the deep layers run on all.
    """
    target = ctx.target
    stops = sorted(set(observe) | {target.n_layers} | ({shallow[1]} if shallow else set()))
    hidden, layer, seen = target.embed(tokens), 0, {}
    for stop in stops:
        if shallow and stop == shallow[1]:
            last = target.run(hidden[:, -1:], layer, stop, cache)
            hidden = torch.cat([shallow[0], last], dim=1)
        else:
            hidden = target.run(hidden, layer, stop, cache, parents)
        layer = stop
        if stop in observe:
            seen[stop] = hidden
    return target.logits(hidden[:, -1:] if last_only else hidden), seen


def prefill(ctx: DecodeContext, cache: KVCache, observe: tuple = ()) -> tuple[torch.Tensor, dict, Prefill]:
    """Run the whole prompt through the target: logits for the first new token, observed states, the event."""
    ctx.trace.sync()
    start = time.perf_counter()
    logits, seen = target_forward(ctx, cache, ctx.prompt_ids, observe, last_only=True)
    ctx.trace.sync()  # decode time starts when the prefill's kernels have finished, on any trace
    return logits[-1], seen, Prefill(t=ctx.trace.now(), n_tokens=len(ctx.prompt_ids),
                                     seconds=time.perf_counter() - start)


def open_with_drafter(ctx: DecodeContext, drafter) -> tuple[KVCache, Transcript, list]:
    """What every draft → verify loop does first: prefill (observing the layers the drafter learns from),
    commit the prompt's next token, start the drafter. Returns the target cache, the transcript and the
    two events to yield (the prefill and the first commit)."""
    observe = tuple(getattr(drafter, "observe_layers", ()))
    cache = ctx.target.new_cache(ctx.capacity)
    logits, seen, prefill_event = prefill(ctx, cache, observe)
    out = Transcript(ctx)
    first = out.commit(0, [ctx.sampler.next_token(logits)], ["target"])
    drafter.start(ctx, cache)
    if observe:
        drafter.observe(seen, len(ctx.prompt_ids))
    return cache, out, [prefill_event, first, *drafter_events(ctx, drafter, "observe", 0)]


def drafter_events(ctx: DecodeContext, drafter, stage: str, round_: int) -> list:
    """Events a drafter records about its own work, after it drafted (``stage="draft"``) or took in a
    verification (``"observe"``): MoA's split of drafting time, its server-side LSA. Detailed runs only."""
    report = getattr(drafter, "report", None)
    return report(stage, ctx.trace.now(), round_) if report is not None and ctx.trace.detailed else []
