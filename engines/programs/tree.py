"""The draft-tree → verify loop every tree method shares, readable in one screen.

Invariant (as in :mod:`engines.programs.chain`): the target cache holds every committed token but the last
one (the root). Each round the drafter grows a tree, the best nodes go through the target in one forward
with the root under a tree mask, the walk keeps one path, and the cache keeps the root's and that path's
rows (:func:`engines.core.round.close_round`). Drafters that learn from target features are shown those of the
root and the accepted path only. A ``suffix`` drafter (:mod:`engines.drafters.suffix`) adds its chain to each
round's tree as extra branches (:func:`~engines.drafters.suffix.graft`), point masses like the model's top-k;
where the size is auto only the chain's prefix that pays, and a round whose chain pays better alone drafts no
model tree (:class:`~engines.drafters.suffix.ChainCut`).
"""

from __future__ import annotations

from typing import Callable, Iterator

from engines.core.context import DecodeContext, drafter_events, open_with_drafter, target_forward
from engines.core.draft_tree import DraftTreeNodes
from engines.core.round import close_round, draft_event, observe_rows
from engines.core.trace import Event
from engines.drafters.suffix import ChainCut, SuffixDrafter, graft, match_event
from engines.drafters.tree_growth import TreeSizer, best_nodes, grow_tree

MAX_TREE_NODES = 60  # stays inside the cache's draft margin (engines.core.context.DRAFT_MARGIN)
# The grown trees' shape (eagle, moa), re-fitted on the shipped heads and this project's step (docs/trees-and-cats.md,
# "The trees' shape"). Their depth is chosen every round by default (``depth=auto``: TreeSizer.deeper): on the
# GGUF's blocks, where verification is steep, a fixed depth 2 trailed it by 8-11 points of speedup and depth 1 tied
# it. A fixed TREE_DEPTH is what the teaching views draw (a tree with grandchildren) and the dashboard's depth box
# shows. Two candidates a node commit about as much as four. The suffix chain grafted in has its own length
# (engines.drafters.suffix.SUFFIX_CHAIN_DEPTH), so a shallow tree does not shorten it.
TREE_DEPTH = 2
TREE_TOPK = 2
# ``depth=auto``: the most levels a round may grow while the sizer expects each to pay (at topk 2-3 its candidates
# stay far inside MAX_TREE_NODES).
MAX_AUTO_DEPTH = 8


def tree_decode(ctx: DecodeContext, drafter, depth: int | None, topk: int, total_tokens: int | None,
                verify_seconds: Callable[[int], float] | None = None,
                suffix: SuffixDrafter | None = None) -> Iterator[Event]:
    """``total_tokens=None`` sizes every tree with :class:`~engines.drafters.tree_growth.TreeSizer` on
    ``verify_seconds``, ``depth=None`` lets it choose each round's depth too; ``suffix`` merges a suffix
    drafter's chain into every tree."""
    trace = ctx.trace
    observe = tuple(getattr(drafter, "observe_layers", ()))
    cache, out, opening = open_with_drafter(ctx, drafter)
    yield from opening
    if suffix is not None:
        suffix.start(ctx, cache)
    sizer = tree_sizer(depth, total_tokens, verify_seconds)
    chain_cut = ChainCut(verify_seconds) if suffix is not None and total_tokens is None else None
    round_ = 0
    while not out.done:
        round_ += 1
        tree, sent_ids, sent = yield from draft_round(ctx, drafter, out, depth, topk, sizer, total_tokens, round_,
                                                      suffix, chain_cut)
        started = trace.now()
        logits, seen = target_forward(ctx, cache, [out.ids[-1]] + sent.tokens, observe,
                                      parents=sent.verify_parents())
        verdict = yield from close_round(ctx, out, cache, round_, sent, logits, started,
                                         observe=observe_rows(drafter, seen), drafter=drafter, node_ids=sent_ids,
                                         draft_depth=max((n.depth for n in sent.nodes), default=0))
        learn(sizer, chain_cut, tree, [sent.nodes[i].token for i in verdict.path], verdict.next_token)


def learn(sizer: TreeSizer | None, chain_cut: ChainCut | None, tree, path_tokens: list[int], next_token: int) -> None:
    """After a verdict: the sizer and the chain's cut learn what the round committed."""
    if sizer:
        sizer.update(tree, path_tokens + [next_token])
    if chain_cut:
        chain_cut.learn(path_tokens)


def tree_sizer(depth: int | None, total_tokens: int | None, verify_seconds) -> TreeSizer | None:
    """The round's sizer where anything is ``auto`` (``None``): the tree's size, its depth, or both."""
    if depth is not None and total_tokens is not None:
        return None
    if verify_seconds is None:
        raise ValueError("an auto tree size or depth needs the machine's verify-cost curve")
    return TreeSizer(verify_seconds, MAX_TREE_NODES)


def draft_round(ctx: DecodeContext, drafter, out, depth: int | None, topk: int, sizer: TreeSizer | None,
                total_tokens: int | None, round_: int, suffix: SuffixDrafter | None = None,
                chain_cut: ChainCut | None = None):
    """Grow this round's tree and choose the nodes to verify (every tree loop, one device or client–server):
    yields the round's draft events, returns ``(tree, sent_ids, sent)`` — ``tree`` the model's own (what the
    sizer learns from), ``sent_ids`` numbered as the DraftTree event's nodes (the model's, then suffix ones)."""
    trace = ctx.trace
    started = trace.now()
    room = max(out.remaining - 1, 1)  # a round commits one token past its drafts
    levels = min(MAX_AUTO_DEPTH if depth is None else depth, room)
    if suffix is not None:
        length = min(suffix.chain_depth, room)
        chain = suffix.propose_tree(out.ids, length, max_nodes=length, branching=1)
    if chain_cut is not None and chain_cut.alone(suffix):  # the chain pays better without the model's tree
        tree, sent_ids = DraftTreeNodes(drafter=drafter.name), []
    else:
        tree = grow_tree(drafter, out.ids, levels, topk, ctx.sampler, deeper=sizer if depth is None else None)
        size = sizer.choose(tree, trace.now() - started) if total_tokens is None else total_tokens
        sent_ids = best_nodes(tree, size)
    shown, placed = tree, {}
    if suffix is not None:
        if chain_cut is not None:  # an auto size: the chain's prefix that pays beside the model's nodes
            expected = 1 + sum(sizer.acceptance(tree.nodes[i].score) for i in sent_ids)
            if len(tree):
                chain_cut.priced_model(expected - 1, len(sent_ids), trace.now() - started)
            chain = chain_cut.cut(suffix, chain, tree, sent_ids, expected, trace.now() - started)
        shown, sent_ids, placed = graft(tree, sent_ids, chain, MAX_TREE_NODES)
    sent = shown.subset(sent_ids)
    if trace.detailed:
        yield ctx.span("draft", round_, started)
        yield draft_event(trace.now(), round_, drafter.name, shown, sent_ids)
        yield from drafter_events(ctx, drafter, "draft", round_)
        if placed:
            yield match_event(trace.now(), round_, [(placed[i], match) for i, match in suffix.last if i in placed])
    return tree, sent_ids, sent
