"""PPSD's pipeline (paper 003; docs/ppsd.md): the target cut into stages, each stage a lane program.

Stage 1 (rank 0, the driver) runs layers [0, E) and the exit head on the newest token and drafts the
next one; every later stage runs its layers on the activations it receives; the last stage also runs
the final norm and LM head and judges the draft that rode along (greedy match, or min(1, p/q) with the
exact draft distribution shipped beside it). An accepted draft costs one tick; a rejection commits the
target's token and makes everything in flight after it stale: stage 1 restarts from the corrected token
under a new *epoch*, the last stage drops messages of older epochs, and every stage cuts its KV cache
back when a message arrives for an earlier position. Stage 1 keeps at most S − 1 drafts unverified, so
each is judged S ticks after it entered — the paper's schedule, message by message.

The programs are the same in every mode (see :mod:`engines.lanes`): lanes, serial and virtual runs
commit the same tokens.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from engines.core.acceptance import judge_token
from engines.core.context import DecodeContext, Transcript
from engines.core.sampling import Sampler
from engines.core.trace import ActivationSend, Check, Flush, KvTruncate, Prefill, StageCompute
from engines.drafters.base import sample_draft_token
from engines.lanes import Emit, Lane, Message, Recv, Send
from engines.model.kv_cache import KVCache
from engines.model.layers import LayerStack

DROPPED = -1  # a reply's flag for a stale message the last stage did not judge


def stage_bounds(n_layers: int, exit_layer: int) -> list[tuple[int, int]]:
    """S = ⌈N/E⌉ stages of E layers; the remainder forms the last stage."""
    return [(start, min(start + exit_layer, n_layers)) for start in range(0, n_layers, exit_layer)]


def stage_count(n_layers: int, exit_layer: int) -> int:
    return math.ceil(n_layers / exit_layer)


class StagePiece:
    """Layers [start, stop) of the target with a KV cache of their own; the first stage embeds tokens
    and ends in the exit head, the last ends in the final norm and LM head."""

    def __init__(self, stack: LayerStack, start: int, stop: int, capacity: int, exit_head=None):
        self.stack, self.start, self.stop, self.exit_head = stack, start, stop, exit_head
        self.cache = stack.new_cache(capacity, range(start, stop))
        self.head_cache: KVCache | None = exit_head.new_cache(capacity) if getattr(exit_head, "has_cache", False) else None

    @property
    def length(self) -> int:
        return self.cache.length(self.start)

    def forward(self, inputs: list[int] | torch.Tensor, position: int) -> tuple[torch.Tensor, int]:
        """Hidden states after this stage for positions ``position`` on; also how many cached positions at
        or after ``position`` were stale and dropped first."""
        dropped = max(self.length - position, 0)
        self.cache.crop(position)
        hidden = self.stack.embed(inputs) if isinstance(inputs, list) else inputs
        return self.stack.run(hidden, self.start, self.stop, self.cache), dropped

    def draft_logits(self, hidden: torch.Tensor, position: int) -> torch.Tensor:
        """The exit head's full-vocabulary logits ``[V]`` for the token after the last of ``hidden``."""
        if self.exit_head is None:
            return self.stack.logits(hidden[:, -1:])[-1]
        if self.head_cache is None:
            return self.exit_head.head.to_full(self.exit_head(hidden[:, -1:])[0, -1])
        self.head_cache.crop(position)
        return self.exit_head.head.to_full(self.exit_head(hidden, self.head_cache)[0, -1])

    def target_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.stack.logits(hidden[:, -1:])[-1]


def must_collect(in_flight: int, n_stages: int, done: bool) -> bool:
    """The tick scheduler: must stage 1 wait for a verdict before its next tick? It keeps at most S − 1 drafts
    unverified when a tick starts, so each is judged S ticks after it entered (an accepted token costs one
    tick, a rejected one S); once the answer is complete (or the next tick would run past the context window)
    it collects every verdict still in flight."""
    return in_flight > 0 and (in_flight > n_stages - 1 or done)


def first_stage(lane, ctx: DecodeContext, piece: StagePiece, n_stages: int, sampler: Sampler, lanes: list[str],
                window: int | None = None):
    """Rank 0: draft, send, and commit what the last stage judged (one token per judged draft). ``window``: the
    context window: no tick runs a row at a position past it (at its end, stage 1 waits for verdicts instead of
    drafting tokens no answer can hold)."""
    out = Transcript(ctx)
    last = n_stages - 1
    epoch = tick = in_flight = round_ = 0
    inputs, position, draft_input = list(ctx.prompt_ids), 0, False
    started = lane.now()

    def past() -> bool:
        """Would the next tick run a row past the context window? Only while drafts are in flight: with none,
        the next input is the last committed token, inside the window; so waiting never waits for nothing."""
        return window is not None and position + len(inputs) > window

    while True:
        if not out.done and not past():
            tick += 1
            start = lane.now()
            hidden, dropped = piece.forward(inputs, position)
            if dropped:
                yield Emit(KvTruncate(t=start, lane=lane.name, position=position, dropped=dropped))
            token, q = sample_draft_token(piece.draft_logits(hidden, position), sampler)
            end = lane.now()
            yield Emit(StageCompute(t=end, lane=lane.name, stage=0, tick=tick, position=position, rows=len(inputs),
                                    token=inputs[-1], draft=draft_input, start=start, end=end, epoch=epoch))
            message = Message("act", epoch=epoch, tick=tick, position=position, token=token, flag=int(draft_input),
                              hidden=hidden, probs=q)
            yield Send(1, message)
            yield Emit(ActivationSend(t=lane.now(), lane=lane.name, to_lane=lanes[1], tick=tick, position=position,
                                      bytes=message.nbytes()))
            in_flight += 1
            inputs, position, draft_input = [token], position + len(inputs), True
        while must_collect(in_flight, n_stages, out.done or past()):
            reply = yield Recv(last)
            in_flight -= 1
            if reply.flag == DROPPED or out.done:
                continue
            if round_ == 0:
                yield Emit(Prefill(t=lane.now(), n_tokens=len(ctx.prompt_ids), seconds=lane.now() - started))
            accepted = bool(reply.flag)
            yield Emit(out.commit(round_, [reply.token], ["accepted" if accepted else "correction"],
                                  drafted=1, accepted=int(accepted)))
            round_ += 1
            if not accepted:  # everything after this position is stale: restart from the target's token
                epoch += 1
                inputs, position, draft_input = [reply.token], reply.position, False
        if out.done and not in_flight:
            yield Send(1, Message("end"))
            while (yield Recv(last)).kind != "end":
                pass
            return


def later_stage(lane, piece: StagePiece, rank: int, n_stages: int, sampler: Sampler, lanes: list[str]):
    """Ranks 1 .. S−1: run this stage's layers on what arrives; the last stage judges each draft."""
    last = rank == n_stages - 1
    epoch = 0
    while True:
        message = yield Recv(rank - 1)
        if message.kind == "end":
            yield Send(0 if last else rank + 1, message)
            return
        rows = message.hidden.shape[1]
        if last and message.epoch < epoch:  # sent before a rejection we already made: stale
            yield Emit(Flush(t=lane.now(), lane=lane.name, tick=message.tick, position=message.position,
                             discarded=rows))
            yield Send(0, Message("reply", epoch=message.epoch, tick=message.tick, flag=DROPPED))
            continue
        start = lane.now()
        hidden, dropped = piece.forward(message.hidden, message.position)
        if dropped:
            yield Emit(KvTruncate(t=start, lane=lane.name, position=message.position, dropped=dropped))
        if not last:
            end = lane.now()
            yield Emit(_compute(lane, rank, message, start, end))
            forward = Message("act", message.epoch, message.tick, message.position, message.token, message.flag,
                              hidden=hidden, probs=message.probs)
            yield Send(rank + 1, forward)
            yield Emit(ActivationSend(t=lane.now(), lane=lane.name, to_lane=lanes[rank + 1], tick=message.tick,
                                      position=message.position, bytes=forward.nbytes()))
            continue
        target, accepted = judge_token(message.token, piece.target_logits(hidden), message.probs, sampler)
        end = lane.now()
        yield Emit(_compute(lane, rank, message, start, end))
        checked = message.position + rows
        yield Emit(Check(t=end, tick=message.tick, position=checked, draft=message.token, target=target,
                         accepted=accepted))
        if not accepted:
            epoch = message.epoch + 1
        yield Send(0, Message("reply", epoch=message.epoch, tick=message.tick, position=checked, token=target,
                              flag=int(accepted)))


def _compute(lane, rank: int, message: Message, start: float, end: float) -> StageCompute:
    return StageCompute(t=end, lane=lane.name, stage=rank, tick=message.tick, position=message.position,
                        rows=message.hidden.shape[1], token=-1, draft=bool(message.flag), start=start, end=end,
                        epoch=message.epoch)


@lru_cache(maxsize=4)
def _stage_stack(source: str, dtype: str, start: int, stop: int, device: str, head: bool) -> LayerStack:
    from engines.model.loading import load_layers

    stack = LayerStack(load_layers(source, dtype, device, range(start, stop), head=head))
    stack.prepare_inference()  # the numerics the driver's stages run, so every token equals ar's
    return stack


def stage_worker(lane, source: str, dtype: str, start: int, stop: int, rank: int, n_stages: int, capacity: int,
                 temperature: float, top_p: float, seed: int | None, lanes: list[str]):
    """A later stage in a worker process: load (once) only layers [start, stop) and the head, then serve."""
    device = lane.name if lane.name.startswith("cuda") else "cpu"
    stack = _stage_stack(source, dtype, start, stop, device, rank == n_stages - 1)
    piece = StagePiece(stack, start, stop, capacity)
    sampler = Sampler(temperature, top_p, seed, device)
    named = Lane(rank, lanes[rank], lane.now)  # events carry the driver's name for this lane
    return later_stage(named, piece, rank, n_stages, sampler, lanes)
