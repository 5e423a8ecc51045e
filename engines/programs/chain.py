"""The draft → verify loop every chain method shares (sps, pld, eesd), readable in one screen.

Invariant: the target cache holds every committed token but the last one. Each round the last
committed token and the γ draft tokens go through the target in one forward (γ+1 positions) and the
round closes as every round does (:func:`engines.core.round.close_round`): the verdict keeps the
accepted prefix plus one target token, and the cache is cropped to match.
Drafters that learn from the target's hidden states (trained exit heads, EAGLE) name the layers they
need in ``observe_layers`` and are shown those states for every committed position. ``gamma=None``
chooses the draft length every round (:mod:`engines.core.draft_length`); a drafter that names the evidence
behind each token (``evidence_per_token``) proposes all it can and the round verifies the prefix that pays.
"""

from __future__ import annotations

from typing import Callable, Iterator

from engines.core.acceptance import chain_tree
from engines.core.context import DecodeContext, drafter_events, open_with_drafter, target_forward
from engines.core.draft_length import DraftLength
from engines.core.round import close_round, draft_event, observe_rows
from engines.core.trace import Event
from engines.drafters.base import Drafter


def speculative_decode(ctx: DecodeContext, drafter: Drafter, gamma: int | None,
                       verify_seconds: Callable[[int], float] | None = None) -> Iterator[Event]:
    trace = ctx.trace
    auto = DraftLength(verify_seconds) if gamma is None else None
    by_evidence = auto is not None and getattr(drafter, "evidence_per_token", False)
    observe = tuple(getattr(drafter, "observe_layers", ()))
    cache, out, opening = open_with_drafter(ctx, drafter)
    yield from opening
    round_ = 0
    while not out.done:
        round_ += 1
        started = trace.now()
        if auto:
            length = auto.limit(out.remaining - 1) if by_evidence else auto.choose(out.remaining - 1)
        else:
            length = min(gamma, out.remaining - 1)
        draft = drafter.propose(out.ids, length, ctx.sampler)
        if by_evidence and draft.evidence is not None:
            draft = draft.prefix(auto.cut(draft.evidence))
        chain = chain_tree(draft.tokens, draft.probs, draft.logprobs)
        draft_seconds = trace.now() - started
        if trace.detailed:
            yield ctx.span("draft", round_, started)
            yield draft_event(trace.now(), round_, drafter.name, chain)
            yield from drafter_events(ctx, drafter, "draft", round_)
        started = trace.now()
        shallow = (draft.hidden, draft.exit_layer) if draft.hidden is not None else None
        logits, seen = target_forward(ctx, cache, [out.ids[-1]] + draft.tokens, observe, shallow)
        verdict = yield from close_round(ctx, out, cache, round_, chain, logits, started,
                                         observe=observe_rows(drafter, seen), drafter=drafter)
        if auto and draft.tokens:
            auto.update(len(draft.tokens), verdict.n_accepted, draft_seconds, draft.evidence)
