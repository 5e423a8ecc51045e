"""The draft → verify loop every chain method shares (sps, pld, eesd), readable in one screen.

Invariant: the target cache holds every committed token but the last one. Each round the last
committed token and the γ draft tokens go through the target in one forward (γ+1 positions), the
verdict keeps the accepted prefix plus one target token, and the cache is cropped to match.
Drafters that learn from the target's hidden states (trained exit heads, EAGLE) name the layers they
need in ``observe_layers`` and are shown those states for every committed position. ``gamma=None``
chooses the draft length every round (:mod:`engines.draft_length`).
"""

from __future__ import annotations

from typing import Callable, Iterator

from .decoding import DecodeContext, drafter_events, open_with_drafter, target_forward
from .draft_length import DraftLength
from .drafters.base import Draft, Drafter
from .rejection_view import draft_q, rejection_view
from .trace import DraftTree, Event, Verification
from .verify import Verdict, verify_chain


def speculative_decode(ctx: DecodeContext, drafter: Drafter, gamma: int | None,
                       verify_seconds: Callable[[int], float] | None = None) -> Iterator[Event]:
    trace = ctx.trace
    auto = DraftLength(verify_seconds) if gamma is None else None
    observe = tuple(getattr(drafter, "observe_layers", ()))
    cache, out, opening = open_with_drafter(ctx, drafter)
    yield from opening
    round_ = 0
    while not out.done:
        round_ += 1
        started = trace.now()
        length = auto.choose(out.remaining - 1) if auto else min(gamma, out.remaining - 1)
        draft = drafter.propose(out.ids, length, ctx.sampler)
        draft_seconds = trace.now() - started
        if trace.detailed:
            yield ctx.span("draft", round_, started)
            yield DraftTree(t=trace.now(), round=round_, drafter=drafter.name, nodes=chain_nodes(draft))
            yield from drafter_events(ctx, drafter, "draft", round_)
        started = trace.now()
        shallow = (draft.hidden, draft.exit_layer) if draft.hidden is not None else None
        logits, seen = target_forward(ctx, cache, [out.ids[-1]] + draft.tokens, observe, shallow)
        verdict = verify_chain(draft.tokens, draft.probs, logits, ctx.sampler)
        cache.crop(len(out.ids) + verdict.n_accepted)
        if observe:
            drafter.observe(seen, verdict.n_accepted + 1)
            yield from drafter_events(ctx, drafter, "observe", round_)
        if auto and draft.tokens:
            auto.update(len(draft.tokens), verdict.n_accepted, draft_seconds)
        if trace.detailed:
            yield ctx.span("verify", round_, started)
            event = verification_event(trace.now(), round_, len(draft.tokens), verdict)
            if verdict.n_accepted < len(draft.tokens):
                event.rejection = chain_rejection(draft, logits, verdict.n_accepted, ctx.sampler)
            yield event
        next_fate = verdict.next_fate if draft.tokens else "target"  # nothing drafted: a plain target step
        fates = ["accepted"] * verdict.n_accepted + [next_fate]
        yield out.commit(round_, draft.tokens[: verdict.n_accepted] + [verdict.next_token], fates,
                         drafted=len(draft.tokens), accepted=verdict.n_accepted)


def chain_nodes(draft: Draft) -> list[dict]:
    logprobs = draft.logprobs or [0.0] * len(draft.tokens)
    return [{"id": i, "parent": i - 1, "token": t, "logprob": lp, "depth": i + 1}
            for i, (t, lp) in enumerate(zip(draft.tokens, logprobs))]


def verification_event(t: float, round_: int, n_drafted: int, verdict: Verdict) -> Verification:
    return Verification(t=t, round=round_, accepted=list(range(verdict.n_accepted)),
                        rejected=list(range(verdict.n_accepted, n_drafted)),
                        next_token=verdict.next_token, next_fate=verdict.next_fate)


def chain_rejection(draft: Draft, logits, position: int, sampler) -> dict:
    """The refused draft token at ``position`` against the target's distribution there (``draft``: a
    :class:`Draft` or a speculation cache's ``Window``, both with tokens, probs and logprobs)."""
    logprob = draft.logprobs[position] if draft.logprobs else None
    probs = draft.probs[position] if draft.probs is not None else None
    return rejection_view(logits[position], sampler, {draft.tokens[position]: draft_q(logprob)}, probs)
