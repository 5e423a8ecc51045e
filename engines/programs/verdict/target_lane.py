"""Lane T (rank 0, the driver): prefill, then verify each window lane D hands over, and send the verdict.

Mirror-SD sends the early exit's top-κ midway through the forward (the ``ee`` message) so lane D can
start guessing while T finishes the deep layers. Each round closes as every round does
(:func:`engines.core.round.close_round`), with Mirror-SD's token-match rule where the plan asks for it.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from engines.core.acceptance import chain_tree
from engines.core.context import DecodeContext, Transcript, target_forward
from engines.core.round import close_round
from engines.core.sampling import Sampler
from engines.core.trace import EeMessage, Prefill
from engines.lanes import Emit, Lane, Message, Recv, Send
from engines.programs.verdict.wire import Plan, send, span, window_from, wire_bytes


def target_lane(lane: Lane, ctx: DecodeContext, plan: Plan, sampler: Sampler, vocab: torch.Tensor, lanes: list[str],
                exit_head=None):
    """Rank 0: prefill, then verify each window D hands over (Mirror: sending the early exit's top-κ midway)."""
    ctx = replace(ctx, sampler=sampler, lane=lane.name)
    target, detailed = ctx.target, ctx.trace.detailed
    rule = "token_match" if plan.rule == "token_match" else "exact"
    out = Transcript(ctx)
    cache = target.new_cache(ctx.capacity)
    started = lane.now()
    logits, _ = target_forward(ctx, cache, ctx.prompt_ids, last_only=True)
    yield Emit(Prefill(t=lane.now(), n_tokens=len(ctx.prompt_ids), seconds=lane.now() - started))
    yield Emit(out.commit(0, [sampler.next_token(logits[-1])], ["target"]))
    yield from send(lane, lanes, Message("start", blob={"ids": out.ids}), "start", 0)
    round_, waiting = 0, lane.now()
    while not out.done:
        round_ += 1
        message = yield Recv(1)
        if detailed:
            yield Emit(span(lane, "wait", round_, waiting))  # T idle: the draft time it could not hide
        window = window_from(message, vocab, target.config.vocab_size, target.device).cut(out.remaining - 1)
        start = lane.now()
        hidden = target.embed([out.ids[-1]] + window.tokens)
        if plan.method == "mirror":
            hidden = target.run(hidden, 0, plan.exit_layer, cache)
            proxy = exit_head.head.to_full(exit_head(hidden)[0]) if exit_head is not None else target.logits(hidden)
            top = torch.log_softmax(proxy.float(), -1).topk(plan.kappa)
            ee = Message("ee", tick=round_, probs=top.values.reshape(-1).cpu(), blob={"ids": top.indices.tolist()})
            yield from send(lane, lanes, ee, "ee", round_)
            if detailed:
                yield Emit(EeMessage(t=lane.now(), round=round_, exit_layer=plan.exit_layer, ids=top.indices.tolist(),
                                     logprobs=top.values.round(decimals=3).tolist(), bytes=wire_bytes(ee)))
                yield Emit(span(lane, "prefix", round_, start))
            start = lane.now()
            hidden = target.run(hidden, plan.exit_layer, target.n_layers, cache)
        else:
            hidden = target.run(hidden, 0, target.n_layers, cache)
        chain = chain_tree(window.tokens, window.probs, window.logprobs)
        verdict = yield from emitted(close_round(ctx, out, cache, round_, chain, target.logits(hidden), start,
                                                 rule=rule, stage="suffix" if plan.method == "mirror" else "verify"))
        if out.done:
            break
        yield from send(lane, lanes, Message("verdict", tick=round_, token=verdict.next_token,
                                             flag=verdict.n_accepted), "verdict", round_)
        waiting = lane.now()
    yield Send(1, Message("end"))
    while (yield Recv(1)).kind != "end":  # a window D sent before it learned we are done
        pass


def emitted(events):
    """A trace-event generator as a lane program's: each event wrapped in :class:`Emit`, its result kept."""
    while True:
        try:
            event = next(events)
        except StopIteration as stop:
            return stop.value
        yield Emit(event)
