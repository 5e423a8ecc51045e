"""Autoregressive decoding: one target forward per token. The ground truth and the speedup denominator.

Deliberately the engine's own lean loop (not ``model.generate``) so every method is compared with
the same layer stack, cache and sampler; ``specviz bench`` also times Hugging Face's ``generate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from engines.core.context import DecodeContext, Transcript, prefill
from engines.core.trace import Event
from engines.methods.base import Method, MethodConfig


@dataclass
class ARConfig(MethodConfig):
    pass


class AR(Method):
    name = "ar"
    Config = ARConfig
    description = "autoregressive: one target forward per token"

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        cache = ctx.target.new_cache(ctx.capacity)
        logits, _, prefill_event = prefill(ctx, cache)
        yield prefill_event
        out = Transcript(ctx)
        yield out.commit(0, [ctx.sampler.next_token(logits)], ["target"])
        round_ = 0
        while not out.done:
            round_ += 1
            started = ctx.trace.now()
            logits = ctx.target.forward(out.ids[-1:], cache)[-1]
            if ctx.trace.detailed:
                yield ctx.span("verify", round_, started)
            yield out.commit(round_, [ctx.sampler.next_token(logits)], ["target"])
