"""The draft-tree → verify loop every tree method shares, readable in one screen.

Invariant (as in :mod:`engines.speculative`): the target cache holds every committed token but the last
one (the root). Each round the drafter grows a tree, the best nodes go through the target in one forward
with the root under a tree mask, the walk keeps one path, and the cache keeps the root's and that path's
rows (:func:`engines.tree.keep_path`). Drafters that learn from target features are shown those of the
root and the accepted path only.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch

from .decoding import DecodeContext, drafter_events, open_with_drafter, target_forward
from .dynamic_tree import TreeSizer, best_nodes, grow_tree
from .rejection_view import draft_q, rejection_view
from .trace import DraftTree, Event, Verification
from .tree import DraftTreeNodes, TreeVerdict, keep_path, verify_tree

MAX_TREE_NODES = 60  # stays inside the cache's draft margin (engines.decoding.DRAFT_MARGIN)


def tree_decode(ctx: DecodeContext, drafter, depth: int, topk: int, total_tokens: int | None,
                verify_seconds: Callable[[int], float] | None = None) -> Iterator[Event]:
    """``total_tokens=None`` sizes every tree with :class:`~engines.dynamic_tree.TreeSizer` on ``verify_seconds``."""
    trace = ctx.trace
    observe = tuple(getattr(drafter, "observe_layers", ()))
    cache, out, opening = open_with_drafter(ctx, drafter)
    yield from opening
    sizer = TreeSizer(verify_seconds, MAX_TREE_NODES) if total_tokens is None else None
    round_ = 0
    while not out.done:
        round_ += 1
        tree, sent_ids, sent = yield from draft_round(ctx, drafter, out, depth, topk, sizer, total_tokens, round_)
        started = trace.now()
        prefix = len(out.ids) - 1
        logits, seen = target_forward(ctx, cache, [out.ids[-1]] + sent.tokens, observe,
                                      parents=sent.verify_parents())
        verdict = verify_tree(sent, logits, ctx.sampler)
        keep_path(cache, prefix, verdict.path)
        if observe:
            rows = torch.tensor([0] + [i + 1 for i in verdict.path], device=logits.device)
            drafter.observe({layer: h.index_select(1, rows) for layer, h in seen.items()}, len(rows))
            yield from drafter_events(ctx, drafter, "observe", round_)
        if trace.detailed:
            yield ctx.span("verify", round_, started)
            event = tree_verification(trace.now(), round_, sent_ids, verdict)
            event.rejection = tree_rejection(sent, logits, verdict, ctx.sampler)
            yield event
        fates = ["accepted"] * len(verdict.path) + [verdict.next_fate]
        tokens = [sent.nodes[i].token for i in verdict.path] + [verdict.next_token]
        if sizer:
            sizer.update(tree, tokens)
        yield out.commit(round_, tokens, fates, drafted=len(sent), accepted=len(verdict.path),
                         draft_depth=max((n.depth for n in sent.nodes), default=0))


def draft_round(ctx: DecodeContext, drafter, out, depth: int, topk: int, sizer: TreeSizer | None,
                total_tokens: int | None, round_: int):
    """Grow this round's tree and choose the nodes to verify (every tree loop, one device or client–server):
    yields the round's draft events, returns ``(tree, sent_ids, sent)``."""
    trace = ctx.trace
    started = trace.now()
    tree = grow_tree(drafter, out.ids, min(depth, max(out.remaining - 1, 1)), topk, ctx.sampler)
    size = sizer.choose(tree, trace.now() - started) if sizer else total_tokens
    sent_ids = best_nodes(tree, size)
    sent = tree.subset(sent_ids)
    if trace.detailed:
        yield ctx.span("draft", round_, started)
        yield DraftTree(t=trace.now(), round=round_, drafter=drafter.name, nodes=tree_nodes(tree, set(sent_ids)))
        yield from drafter_events(ctx, drafter, "draft", round_)
    return tree, sent_ids, sent


def tree_nodes(tree: DraftTreeNodes, sent: set[int]) -> list[dict]:
    return [{"id": i, "parent": n.parent, "token": n.token, "logprob": n.logprob, "depth": n.depth,
             "score": n.score, "rank": n.rank, "sent": i in sent, "source": n.source}
            for i, n in enumerate(tree.nodes)]


def tree_verification(t: float, round_: int, sent_ids: list[int], verdict: TreeVerdict) -> Verification:
    """Node ids in the full tree's numbering (the DraftTree event's), not the verified subset's."""
    nodes = []
    for local, outcome in enumerate(verdict.outcomes):
        if outcome == "unreached":
            continue
        record = {"id": sent_ids[local], "outcome": outcome}
        if verdict.draws:
            record.update(p=verdict.p_token[local], q=verdict.q_token[local], draw=verdict.draws[local])
        nodes.append(record)
    return Verification(t=t, round=round_, accepted=[sent_ids[i] for i in verdict.path],
                        rejected=[sent_ids[i] for i, o in enumerate(verdict.outcomes) if o != "accepted"],
                        next_token=verdict.next_token, next_fate=verdict.next_fate, nodes=nodes)


def tree_rejection(sent: DraftTreeNodes, logits: torch.Tensor, verdict: TreeVerdict, sampler) -> dict | None:
    """The children the target tried and refused under the last accepted node (None when it refused none:
    the walk ended on a leaf and took a bonus token)."""
    parent = verdict.path[-1] if verdict.path else -1
    refused = {sent.nodes[i].token: draft_q(sent.nodes[i].logprob) for i, outcome in enumerate(verdict.outcomes)
               if outcome == "rejected" and sent.nodes[i].parent == parent}
    if not refused:
        return None
    return rejection_view(logits[parent + 1], sampler, refused)
