"""The end of every speculative round, written once.

Every method's round ends the same way, whatever drafted and wherever the target ran: judge the drafts
(:mod:`engines.core.acceptance`), keep the accepted rows of the target's cache, let the drafter observe
the target's states at those rows, record the round (the verify span, the verification with what the
target wanted where it refused, the cache rollback), and commit the accepted tokens plus the target's
own. :func:`close_round` is that tail; chain, tree, CATS, client–server and the verdict lanes all call it.

Invariant on entry: the target cache holds every committed token but the last (the *root*), then the root
and the n drafted nodes that went through this round's forward, in node order.
"""

from __future__ import annotations

from typing import Callable, Generator, Iterable

import torch

from engines.core.acceptance import Verdict, judge
from engines.core.context import DecodeContext, Transcript, drafter_events
from engines.core.draft_tree import DraftTreeNodes, keep_path
from engines.core.rejection_view import draft_q, rejection_view
from engines.core.trace import DraftTree, Event, KvRollback, Verification
from engines.model.kv_cache import KVCache

Observer = Callable[[torch.Tensor], None]  # given the kept rows (root first) of this round's forward
Delivery = Callable[[Verdict, list[int]], Generator[Event, None, list[int]]]


def close_round(ctx: DecodeContext, out: Transcript, cache: KVCache, round_: int, tree: DraftTreeNodes,
                logits: torch.Tensor, started: float, *, rule: str = "exact", observe: Observer | None = None,
                drafter=None, node_ids: list[int] | None = None, stage: str = "verify",
                deliver: Delivery | None = None, draft_depth: int | None = None) -> Generator[Event, None, Verdict]:
    """Judge ``tree`` on ``logits`` ``[1 + n, V]`` and commit; yields the round's events, returns the verdict.

    ``observe`` takes the kept rows in (a drafter that learns from the target's states); ``drafter`` is
    asked for its own report of that; ``node_ids`` number the nodes as the round's DraftTree event did
    (a subset sent for verification); ``stage`` names the verify span; ``deliver`` carries the verdict to
    where the tokens are committed (client–server: over the link) and returns the tokens as received."""
    trace = ctx.trace
    verdict = judge(tree, logits, ctx.sampler, rule)
    kept = keep_path(cache, len(out.ids) - 1, verdict.path)
    if observe is not None:
        observe(torch.tensor(kept, device=logits.device))
        yield from drafter_events(ctx, drafter, "observe", round_)
    if trace.detailed:
        yield ctx.span(stage, round_, started)
        yield verification(trace.now(), round_, tree, verdict, logits, ctx.sampler, node_ids)
        yield KvRollback(t=trace.now(), round=round_, kept=len(kept), dropped=len(tree) + 1 - len(kept))
    tokens = [tree.nodes[node].token for node in verdict.path] + [verdict.next_token]
    if deliver is not None:
        tokens = yield from deliver(verdict, tokens)
    fates = ["accepted"] * verdict.n_accepted + [verdict.next_fate if len(tree) else "target"]
    yield out.commit(round_, tokens, fates, drafted=len(tree), accepted=verdict.n_accepted, draft_depth=draft_depth)
    return verdict


def observe_rows(drafter, seen: dict[int, torch.Tensor]) -> Observer | None:
    """The usual observer: the drafter is shown the observed layers' states at the kept rows."""
    if not seen:
        return None
    return lambda rows: drafter.observe({layer: h.index_select(1, rows) for layer, h in seen.items()}, len(rows))


def draft_event(t: float, round_: int, drafter: str, tree: DraftTreeNodes,
                sent: Iterable[int] | None = None) -> DraftTree:
    """The round's draft as the trace shows it; ``sent`` marks the nodes verified (all when None)."""
    sent = set(range(len(tree))) if sent is None else set(sent)
    nodes = [{"id": i, "parent": n.parent, "token": n.token, "logprob": n.logprob, "depth": n.depth,
              "score": n.score, "rank": n.rank, "sent": i in sent, "source": n.source}
             for i, n in enumerate(tree.nodes)]
    return DraftTree(t=t, round=round_, drafter=drafter, nodes=nodes)


def verification(t: float, round_: int, tree: DraftTreeNodes, verdict: Verdict, logits: torch.Tensor, sampler,
                 node_ids: list[int] | None = None) -> Verification:
    """The verdict as the trace records it, node ids in ``node_ids``' numbering (the DraftTree event's)."""
    ids = list(range(len(tree))) if node_ids is None else node_ids
    nodes = []
    for local, outcome in enumerate(verdict.outcomes):
        if outcome == "unreached":
            continue
        record = {"id": ids[local], "outcome": outcome}
        if verdict.draws[local] is not None:
            record.update(p=verdict.p_token[local], q=verdict.q_token[local], draw=verdict.draws[local])
        nodes.append(record)
    event = Verification(t=t, round=round_, accepted=[ids[i] for i in verdict.path],
                         rejected=[ids[i] for i, o in enumerate(verdict.outcomes) if o != "accepted"],
                         next_token=verdict.next_token, next_fate=verdict.next_fate, nodes=nodes)
    event.rejection = refusal(tree, logits, verdict, sampler)
    return event


def refusal(tree: DraftTreeNodes, logits: torch.Tensor, verdict: Verdict, sampler) -> dict | None:
    """What the target wanted where it refused the children of the last kept node (None when it refused
    none: the walk ended on a leaf and took a bonus token)."""
    parent = verdict.path[-1] if verdict.path else -1
    refused = [i for i, outcome in enumerate(verdict.outcomes)
               if outcome == "rejected" and tree.nodes[i].parent == parent]
    if not refused:
        return None
    q = tree.nodes[refused[0]].q if len(refused) == 1 else None  # the one refused draft's whole q, if kept
    return rejection_view(logits[parent + 1], sampler, {tree.nodes[i].token: draft_q(tree.nodes[i].logprob)
                                                         for i in refused}, q)
