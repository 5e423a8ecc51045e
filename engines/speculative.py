"""The draft → verify loop every chain method shares (sps, pld, eesd), readable in one screen.

Invariant: the target cache holds every committed token but the last one. Each round the last
committed token and the γ draft tokens go through the target in one forward (γ+1 positions), the
verdict keeps the accepted prefix plus one target token, and the cache is cropped to match.
"""

from __future__ import annotations

from typing import Iterator

import torch

from .decoding import DecodeContext, Transcript, prefill
from .drafters.base import Draft, Drafter
from .trace import DraftTree, Event, Verification
from .verify import Verdict, verify_chain


def speculative_decode(ctx: DecodeContext, drafter: Drafter, gamma: int) -> Iterator[Event]:
    target, trace = ctx.target, ctx.trace
    cache = target.new_cache(ctx.capacity)
    logits, prefill_event = prefill(ctx, cache)
    yield prefill_event
    out = Transcript(ctx)
    yield out.commit(0, [ctx.sampler.next_token(logits)], ["target"])
    drafter.start(ctx, cache)
    round_ = 0
    while not out.done:
        round_ += 1
        started = trace.now()
        draft = drafter.propose(out.ids, min(gamma, out.remaining - 1), ctx.sampler)
        if trace.detailed:
            yield ctx.span("draft", round_, started)
            yield DraftTree(t=trace.now(), round=round_, drafter=drafter.name, nodes=chain_nodes(draft))
        started = trace.now()
        logits = verify_forward(ctx, cache, out.ids[-1], draft)
        verdict = verify_chain(draft.tokens, draft.probs, logits, ctx.sampler)
        cache.crop(len(out.ids) + verdict.n_accepted)
        if trace.detailed:
            yield ctx.span("verify", round_, started)
            yield verification_event(trace.now(), round_, len(draft.tokens), verdict)
        fates = ["accepted"] * verdict.n_accepted + [verdict.next_fate]
        yield out.commit(round_, draft.tokens[: verdict.n_accepted] + [verdict.next_token], fates,
                         drafted=len(draft.tokens), accepted=verdict.n_accepted)


def verify_forward(ctx: DecodeContext, cache, last_token: int, draft: Draft) -> torch.Tensor:
    """Target logits after ``last_token`` and after each draft token: ``[γ+1, V]``."""
    target = ctx.target
    tokens = [last_token] + draft.tokens
    if draft.hidden is None:
        return target.forward(tokens, cache)
    ell = draft.exit_layer  # the drafter already ran layers [0, ℓ) on all but the last draft token
    last = target.run(target.embed(tokens[-1:]), 0, ell, cache)
    hidden = target.run(torch.cat([draft.hidden, last], dim=1), ell, target.n_layers, cache)
    return target.logits(hidden)


def chain_nodes(draft: Draft) -> list[dict]:
    logprobs = draft.logprobs or [0.0] * len(draft.tokens)
    return [{"id": i, "parent": i - 1, "token": t, "logprob": lp, "depth": i + 1}
            for i, (t, lp) in enumerate(zip(draft.tokens, logprobs))]


def verification_event(t: float, round_: int, n_drafted: int, verdict: Verdict) -> Verification:
    return Verification(t=t, round=round_, accepted=list(range(verdict.n_accepted)),
                        rejected=list(range(verdict.n_accepted, n_drafted)),
                        next_token=verdict.next_token, next_fate=verdict.next_fate)
