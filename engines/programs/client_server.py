"""Client–server speculative decoding over a simulated network (the MoA paper's §4.3 setting).

The client holds the drafter; the server holds the target (and, for MoA, the LSA). Each cycle:

    client drafts a tree ──up: ids + tree positions──▶ server verifies it (and runs LSA)
    client absorbs      ◀──down: accepted ids + activations── (quantized; the first one gzipped)

Every message is really serialized (:mod:`engines.network.link`) and the client drafts from what it
decodes, so 8-bit quantization reaches the drafts exactly as it would over a wire. Compute is measured;
the link is simulated: its seconds are *added* to the run's clock, not waited (clock ``wall+link``),
so a 4G run takes no longer to bench than a local one. Client and server share this machine, so the
paper's 3× faster server is not modelled: the split changes what crosses the link, not who is faster.

Drafters and what the server sends for them (Table 7):

- ``moa``: LSA memory rows plus the last TLI layers' keys/values, ``2·E_kv·(TLI + 1)`` values a token;
- ``eagle``: the target's normed last hidden state, ``E`` values a token;
- ``tiny`` (an independent draft): ids only.

Lossless like the single-device loop: the server verifies with the same rule and sampler. Disconnection
mode (``disconnect_after=B``) is lossy: after B new tokens the server is gone and the client keeps
writing alone with its drafter's own choices (fate ``client``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from engines.core.context import DecodeContext, Transcript, drafter_events, prefill, target_forward
from engines.core.draft_tree import DraftTreeNodes, TreeNode
from engines.core.round import close_round
from engines.core.trace import Event, LinkSend
from engines.drafters.base import sample_draft_token
from engines.drafters.moa_drafter import MoADrafter, VerifiedBlock
from engines.drafters.suffix import ChainCut
from engines.drafters.tree_drafters import EagleTreeDrafter
from engines.network.link import Link, decode_draft, decode_verdict, encode_draft, encode_verdict
from engines.programs.tree import draft_round, learn, tree_sizer


@dataclass
class LinkHalves:
    """What the server computes for the client after a verification, and how the client takes it in."""

    content: str
    server: Callable[[object, int, dict], torch.Tensor | None]  # (target cache, n verified, observed states)
    client: Callable[[torch.Tensor | None], None]


def link_halves(drafter) -> LinkHalves:
    if isinstance(drafter, MoADrafter):
        head = drafter.head
        return LinkHalves(
            f"ids + LSA rows{f' + {head.tli} layers of K/V' if head.tli else ''} (int8)" if head.uses_lsa
            else "ids + last hidden states (int8)",
            lambda cache, n, seen: drafter.server.block(cache, n, seen).activations(),
            lambda rows: drafter.absorb(VerifiedBlock.from_activations(rows, head.memory_width, head.tli)))
    if isinstance(drafter, EagleTreeDrafter):
        head = drafter.head  # EAGLE: the normed last hidden state; EAGLE-3: three layers' (fused on the client)
        return LinkHalves("ids + last hidden states (int8)" if len(head.observe_layers) == 1
                          else f"ids + hidden states of layers {', '.join(map(str, head.observe_layers))} (int8)",
                          lambda cache, n, seen: head.observed_rows(seen, n)[0].float(),
                          lambda rows: drafter.features.append(head.target_feature(rows[None])))
    return LinkHalves("ids", lambda cache, n, seen: None, lambda rows: None)


def continue_alone(drafter) -> None:
    """After a token the client chose alone: EAGLE must pair it with its own predicted feature, having no
    target feature to pair it with; MoA and a draft model need nothing."""
    if isinstance(drafter, EagleTreeDrafter):
        drafter.features.append(drafter.root_feature)


def rebuild_tree(tokens: list[int], parents: list[int]) -> DraftTreeNodes:
    """The server's copy of the draft tree from the wire: ids and parents (siblings keep their order)."""
    tree = DraftTreeNodes()
    siblings: dict[int, int] = {}
    for token, parent in zip(tokens, parents):
        depth = 1 if parent < 0 else tree.nodes[parent].depth + 1
        rank = siblings.get(parent, 0)
        siblings[parent] = rank + 1
        tree.add(TreeNode(token, parent, depth, rank=rank))
    return tree


def client_server_decode(ctx: DecodeContext, drafter, link: Link, depth: int | None, topk: int,
                         total_tokens: int | None, verify_seconds: Callable[[int], float] | None = None,
                         disconnect_after: int | None = None, suffix=None) -> Iterator[Event]:
    """``suffix``: a suffix drafter on the client whose chain joins every tree (see :mod:`engines.programs.tree`)."""
    trace = ctx.trace
    link_time = [0.0]
    trace.use_clock(lambda: trace.wall() + link_time[0])  # simulated link seconds join the measured compute
    halves = link_halves(drafter)
    observe = tuple(getattr(drafter, "observe_layers", ()))

    def send(payload: bytes, direction: str, round_: int, content: str) -> Iterator[Event]:
        start = trace.now()
        delivery = link.send(payload, direction)
        link_time[0] += delivery.seconds
        yield LinkSend(t=trace.now(), round=round_, direction=direction, bytes=delivery.bytes,
                       seconds=delivery.seconds, attempts=delivery.attempts, packets=delivery.packets, start=start,
                       content=content)

    # server: prefill, the first token, the prompt's activations (gzipped: the one big message)
    cache = ctx.target.new_cache(ctx.capacity)
    logits, seen, prefill_event = prefill(ctx, cache, observe)
    yield prefill_event
    drafter.start(ctx, cache)
    if suffix is not None:
        suffix.start(ctx, cache)
    first = ctx.sampler.next_token(logits)
    payload = encode_verdict([first], halves.server(cache, len(ctx.prompt_ids), seen), compress=True)
    yield from drafter_events(ctx, drafter, "observe", 0)
    yield from send(payload, "down", 0, halves.content + " (prompt, gzip)")
    ids, rows = decode_verdict(payload)
    halves.client(rows)
    out = Transcript(ctx)
    yield out.commit(0, ids, ["target"])

    sizer = tree_sizer(depth, total_tokens, verify_seconds)
    chain_cut = ChainCut(verify_seconds) if suffix is not None and total_tokens is None else None
    round_ = 0
    while not out.done:
        round_ += 1
        if disconnect_after is not None and len(out.new_ids) >= disconnect_after:
            yield from _alone(ctx, drafter, out, round_)
            return
        # client: draft a tree, send its ids and shape
        link_before = link_time[0]
        tree, sent_ids, sent = yield from draft_round(ctx, drafter, out, depth, topk, sizer, total_tokens, round_,
                                                      suffix, chain_cut)
        up = encode_draft(sent.tokens, sent.parents)
        yield from send(up, "up", round_, "draft tree: ids + tree positions")
        # server: verify, keep the accepted path, compute the client's activations; then down to the client
        started = trace.now()
        verified = rebuild_tree(*decode_draft(up))
        logits, seen = target_forward(ctx, cache, [out.ids[-1]] + verified.tokens, observe,
                                      parents=verified.verify_parents())
        activations = []

        def server_observes(rows, seen=seen):
            activations.append(halves.server(cache, len(rows), {layer: h.index_select(1, rows)
                                                                for layer, h in seen.items()}))

        def deliver(verdict, tokens, round_=round_):
            down = encode_verdict(tokens, activations[0])
            yield from send(down, "down", round_, halves.content)
            ids, rows = decode_verdict(down)  # client: take the verdict in
            halves.client(rows)
            return ids

        verdict = yield from close_round(ctx, out, cache, round_, verified, logits, started, observe=server_observes,
                                         drafter=drafter, node_ids=sent_ids, deliver=deliver,
                                         draft_depth=max((n.depth for n in sent.nodes), default=0))
        learn(sizer, chain_cut, tree, [verified.nodes[i].token for i in verdict.path], verdict.next_token)
        if sizer:
            sizer.link_took(link_time[0] - link_before)


def _alone(ctx: DecodeContext, drafter, out: Transcript, round_: int) -> Iterator[Event]:
    """Disconnected: the client's own next token each step, nobody to verify it (lossy)."""
    while not out.done:
        started = ctx.trace.now()
        logits, columns = drafter.root(out.ids)
        full = torch.full((ctx.target.config.vocab_size,), float("-inf"), device=logits.device)
        full[columns] = logits.float()
        token, _ = sample_draft_token(full, ctx.sampler)
        drafter.finish()
        continue_alone(drafter)
        if ctx.trace.detailed:
            yield ctx.span("draft", round_, started)
        yield out.commit(round_, [token], ["client"])
        round_ += 1
