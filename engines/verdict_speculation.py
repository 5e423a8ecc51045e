"""Speculating on the verdict: Mirror-SD (paper 000) and SSD (paper 002) as two lane programs.

Lane T (rank 0, the driver) holds the target; lane D (rank 1) the draft. Each round T verifies the
window it holds while D, on its own core, prepares the next window for every verdict it thinks likely
(:mod:`engines.speculation_cache`, :mod:`engines.branch_rollout`). Then T sends the verdict (k accepted,
token c) and D answers with the cached window for that key — or, on a miss, one drafted on the spot.

The two methods differ only in where the guesses come from and when they start:

- ``mirror``: T runs the window through layers 1..l_e, sends the early exit's top-κ at each of the γ+1
  positions (the ``ee`` message), then finishes layers l_e+1..N; D rolls out a window for each (j, v).
- ``ssd``: D guesses at once from its own glue forward — the top-F_k tokens of z_k, the speculated
  token excluded — with fan-out ``uniform`` or ``geometric``, and may draw windows by SAGUARO sampling.

Lossless in both: the committed tokens come only from T's verification of each drafted token against
the distribution it was drawn from; which window is used depends only on the verdict's key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import torch

from .branch_rollout import BranchDrafter
from .decoding import DecodeContext, Transcript, target_forward
from .drafters.prompt_lookup import lookup
from .lanes import Emit, Lane, Message, Recv, Send
from .sampling import Sampler
from .speculation_cache import (Root, SpeculationCache, Window, fit_power_law, geometric_fanout, saguaro,
                                uniform_fanout)
from .speculative import chain_rejection, verification_event
from .trace import (Backup, BranchRollout, CacheBuild, CacheLookup, EeMessage, FallbackRollout, LaneMessage, Prefill,
                    ReuseDecision, Saguaro, StageSpan)
from .verify import Verdict, verify_chain

HIT, MISS = 1, 0


@dataclass
class Plan:
    """What both lanes must agree on for one run (it travels to the draft worker as JSON)."""

    method: str  # mirror | ssd
    window: int  # γ (mirror) or K (ssd)
    rule: str = "sample"  # sample | token_match (T's acceptance rule)
    # mirror
    kappa: int = 4
    exit_layer: int = 15
    # ssd
    fanout: str = "uniform"
    f: int = 3
    budget: int = 24
    c: float = 1.0
    saguaro_top: str = "f+1"
    backup: str = "jit"
    a_p_prior: float = 0.5
    r_prior: float = 0.5
    detailed: bool = True


# --- what T and D send each other ---------------------------------------------------------------
def window_message(round_: int, window: Window, hit: bool, vocab: torch.Tensor) -> Message:
    """Draft tokens and their q, restricted to the draft vocabulary when all of q lies there (4–6× fewer bytes)."""
    blob = {"tokens": window.tokens, "logprobs": [round(x, 4) for x in window.logprobs], "q": "none"}
    probs = None
    if window.source == "lookup":
        blob["q"] = "point"
    elif window.probs is not None:
        outside = torch.ones(window.probs.shape[-1], dtype=torch.bool, device=window.probs.device)
        outside[vocab.to(outside.device)] = False
        if not bool(window.probs[:, outside].any()):  # every q lies in the draft vocabulary: send only that part
            blob["q"], probs = "draft", window.probs[:, vocab.to(outside.device)].float().reshape(-1)
        else:
            blob["q"], probs = "full", window.probs.float().reshape(-1)
    return Message("window", tick=round_, flag=HIT if hit else MISS, probs=probs, blob=blob)


def window_from(message: Message, vocab: torch.Tensor, vocab_size: int, device) -> Window:
    tokens = list(message.blob["tokens"])
    kind = message.blob["q"]
    probs = None
    if kind == "draft":
        probs = torch.zeros(len(tokens), vocab_size, dtype=torch.float32, device=device)
        probs[:, vocab.to(device)] = message.probs.view(len(tokens), -1).to(device)
    elif kind == "full":
        probs = message.probs.view(len(tokens), vocab_size).to(device)
    return Window(tokens, probs, list(message.blob["logprobs"]), "lookup" if kind == "point" else "draft")


def wire_bytes(message: Message) -> int:
    return message.nbytes() + (len(json.dumps(message.blob)) if message.blob else 0)


def token_match_chain(draft: list[int], target_probs: torch.Tensor, sampler: Sampler) -> Verdict:
    """Mirror-SD's own rule (Eq. 3/11): draw the target's token at each position and keep the draft while
    they agree. Lossless — the committed tokens are the target's own draws — but it accepts less often
    than min(1, p/q)."""
    for i, token in enumerate(draft):
        drawn = sampler.draw(target_probs[i])
        if drawn != token:
            return Verdict(i, drawn, "correction")
    return Verdict(len(draft), sampler.draw(target_probs[len(draft)]), "bonus")


# --- lane T ---------------------------------------------------------------------------------------
def target_lane(lane: Lane, ctx: DecodeContext, plan: Plan, sampler: Sampler, vocab: torch.Tensor, lanes: list[str],
                exit_head=None):
    """Rank 0: prefill, then verify each window D hands over (Mirror: sending the early exit's top-κ midway)."""
    target, detailed = ctx.target, plan.detailed
    out = Transcript(ctx)
    cache = target.new_cache(ctx.capacity)
    started = lane.now()
    logits, _ = target_forward(ctx, cache, ctx.prompt_ids)
    yield Emit(Prefill(t=lane.now(), n_tokens=len(ctx.prompt_ids), seconds=lane.now() - started))
    yield Emit(out.commit(0, [sampler.next_token(logits[-1])], ["target"]))
    yield from _send(lane, lanes, Message("start", blob={"ids": out.ids}), "start", 0)
    round_, waiting = 0, lane.now()
    while not out.done:
        round_ += 1
        message = yield Recv(1)
        if detailed:
            yield Emit(_span(lane, "wait", round_, waiting))  # T idle: the draft time it could not hide
        window = window_from(message, vocab, target.config.vocab_size, target.device).cut(out.remaining - 1)
        start = lane.now()
        hidden = target.embed([out.ids[-1]] + window.tokens)
        if plan.method == "mirror":
            hidden = target.run(hidden, 0, plan.exit_layer, cache)
            proxy = exit_head.head.to_full(exit_head(hidden)[0]) if exit_head is not None else target.logits(hidden)
            top = torch.log_softmax(proxy.float(), -1).topk(plan.kappa)
            ee = Message("ee", tick=round_, probs=top.values.reshape(-1).cpu(), blob={"ids": top.indices.tolist()})
            yield from _send(lane, lanes, ee, "ee", round_)
            if detailed:
                yield Emit(EeMessage(t=lane.now(), round=round_, exit_layer=plan.exit_layer, ids=top.indices.tolist(),
                                     logprobs=top.values.round(decimals=3).tolist(), bytes=wire_bytes(ee)))
                yield Emit(_span(lane, "prefix", round_, start))
            start = lane.now()
            hidden = target.run(hidden, plan.exit_layer, target.n_layers, cache)
        else:
            hidden = target.run(hidden, 0, target.n_layers, cache)
        logits = target.logits(hidden)
        if plan.rule == "token_match" and not sampler.greedy:
            verdict = token_match_chain(window.tokens, sampler.probs(logits), sampler)
        else:
            verdict = verify_chain(window.tokens, window.probs, logits, sampler)
        cache.crop(len(out.ids) + verdict.n_accepted)
        if detailed:
            yield Emit(_span(lane, "suffix" if plan.method == "mirror" else "verify", round_, start))
            event = verification_event(lane.now(), round_, len(window), verdict)
            if verdict.n_accepted < len(window):
                event.rejection = chain_rejection(window, logits, verdict.n_accepted, sampler)
            yield Emit(event)
        fates = ["accepted"] * verdict.n_accepted + [verdict.next_fate if window.tokens else "target"]
        yield Emit(out.commit(round_, window.tokens[: verdict.n_accepted] + [verdict.next_token], fates,
                              drafted=len(window), accepted=verdict.n_accepted))
        if out.done:
            break
        yield from _send(lane, lanes, Message("verdict", tick=round_, token=verdict.next_token,
                                              flag=verdict.n_accepted), "verdict", round_)
        waiting = lane.now()
    yield Send(1, Message("end"))
    while (yield Recv(1)).kind != "end":  # a window D sent before it learned we are done
        pass


def _send(lane: Lane, lanes: list[str], message: Message, what: str, round_: int):
    peer = 1 - lane.rank
    yield Send(peer, message)
    yield Emit(LaneMessage(t=lane.now(), lane=lanes[lane.rank], to_lane=lanes[peer], what=what, round=round_,
                           bytes=wire_bytes(message)))


def _span(lane: Lane, stage: str, round_: int, start: float) -> StageSpan:
    end = lane.now()
    return StageSpan(t=end, lane=lane.name, stage=stage, round=round_, start=start, end=end)


# --- lane D ---------------------------------------------------------------------------------------
class Guesser:
    """Which verdicts D prepares for, and how it draws (SAGUARO), from one round's evidence."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.accepts: list[tuple[int, int]] = []  # (accepted, window length) per round
        self.ranks: list[int] = []  # rank of the true token among z_k's candidates, per round

    # SSD: fan-out from the run's own log (§5.3)
    def fanout(self) -> list[int]:
        plan = self.plan
        if plan.fanout == "uniform":
            return uniform_fanout(plan.window, plan.f)
        a_p, r = plan.a_p_prior, plan.r_prior
        if len(self.accepts) >= 8:
            kept = sum(a for a, _ in self.accepts)
            a_p = kept / max(kept + sum(1 for a, n in self.accepts if a < n), 1)
            _, fitted = fit_power_law(self.ranks)
            r = fitted if fitted > 0 else r
        return geometric_fanout(plan.window, plan.budget, a_p, r)

    def ssd_roots(self, z: torch.Tensor, window: list[int], fan: list[int]) -> list[Root]:
        roots = []
        for k, width in enumerate(fan[: len(z)]):  # a short window (a lookup) has fewer outcomes
            if width <= 0:
                continue
            logp = torch.log_softmax(z[k], -1)
            top = logp.topk(width + 1)
            rank = 0
            for value, token in zip(top.values.tolist(), top.indices.tolist()):
                if (k < len(window) and token == window[k]) or value == float("-inf"):
                    continue
                if rank < width:
                    roots.append(Root(k, token, rank, value))
                rank += 1
        return roots

    @staticmethod
    def ssd_rank(z: torch.Tensor, window: list[int], k: int, token: int) -> int:
        """Rank of ``token`` in z_k with the speculated token left out (−1 outside the draft's support)."""
        row = z[k]
        if row[token] == float("-inf"):
            return -1
        rank = int((row > row[token]).sum())
        if k < len(window) and row[window[k]] > row[token]:
            rank -= 1
        return rank

    def mirror_roots(self, ids: list[list[int]], logprobs: torch.Tensor, window: list[int]) -> list[Root]:
        """(γ+1)·κ roots from the early exit's top-κ, each position's drafted token left out (a rejected
        token is never the correction)."""
        kappa = len(ids[0]) if ids else 0
        roots = []
        for j, row in enumerate(ids):
            rank = 0
            for i, token in enumerate(row):
                if j < len(window) and token == window[j]:
                    continue
                roots.append(Root(j, token, rank, float(logprobs[j * kappa + i])))
                rank += 1
        return roots

    def shaper(self, fan: list[int]):
        """SAGUARO: draw window position d from σ_{F_d, C} (its top-F_d, or F_d + 1, tokens scaled by C)."""
        plan = self.plan
        if plan.method != "ssd" or plan.c >= 1:
            return None
        extra = 1 if plan.saguaro_top == "f+1" else 0
        return lambda d, q: saguaro(q, fan[min(d, len(fan) - 1)] + extra, plan.c)


def draft_lane(lane: Lane, drafter: BranchDrafter, plan: Plan, sampler: Sampler, lanes: list[str]):
    """Rank 1: after each window it sends, glue it on, guess the verdicts, roll out a window for each, and
    answer the real verdict from the cache (or a backup)."""
    detailed = plan.detailed
    guesser = Guesser(plan)
    vocab = drafter.vocab_ids
    start = yield Recv(0)
    if start.kind == "end":
        yield Send(0, Message("end"))
        return
    committed = list(start.blob["ids"])
    fan = guesser.fanout()
    window = yield from _backup(lane, drafter, plan, committed, sampler, guesser.shaper(fan), 0, "initial")
    yield from _send(lane, lanes, window_message(0, window, False, vocab), "window", 0)
    round_ = 0
    while True:
        round_ += 1
        began = lane.now()
        z = drafter.glue(committed, window.tokens)
        if detailed:
            yield Emit(_span(lane, "glue", round_, began))
        ee_ids = ee_logprobs = None
        if plan.method == "mirror":
            ee = yield Recv(0)
            if ee.kind == "end":
                break
            ee_ids, ee_logprobs = ee.blob["ids"], ee.probs
            roots = guesser.mirror_roots(ee_ids, ee_logprobs, window.tokens)
        else:
            fan = guesser.fanout()
            roots = guesser.ssd_roots(z, window.tokens, fan)
        began = lane.now()
        branches, stats = drafter.rollout([(r.k, r.token) for r in roots], plan.window, sampler, guesser.shaper(fan))
        cache = SpeculationCache()
        for root, branch in zip(roots, branches):
            cache.put(root, branch.window())
        if detailed:
            ended = lane.now()
            yield Emit(BranchRollout(t=ended, lane=lane.name, round=round_, roots=[[r.k, r.token] for r in roots],
                                     windows=[b.tokens for b in branches], steps=stats.steps, rows=stats.rows,
                                     start=began, end=ended))
            if plan.method == "ssd":
                entries = [[r.k, r.token, r.rank, round(float(torch.exp(torch.tensor(r.score))), 4)] for r in roots]
                yield Emit(CacheBuild(t=ended, round=round_, entries=entries, fanout=fan, seconds=ended - began))
            moved = [m for b in branches for m in b.moved]
            if moved:
                yield Emit(Saguaro(t=ended, round=round_, c=plan.c, mass_moved=[round(m, 4) for m in moved[:64]]))
        verdict = yield Recv(0)
        if verdict.kind == "end":
            break
        accepted, token = verdict.flag, verdict.token
        committed += window.tokens[:accepted] + [token]
        found = cache.lookup(accepted, token)
        if plan.method == "mirror":
            rank = _mirror_rank(ee_ids, accepted, token)
            outcome = "fallback" if found is None else ("root_hit" if accepted == 0 else "depth_hit")
            yield Emit(ReuseDecision(t=lane.now(), round=round_, outcome=outcome, accepted=accepted, token=token,
                                     rank=rank))
        else:
            rank = guesser.ssd_rank(z, window.tokens, min(accepted, len(z) - 1), token)
        yield Emit(CacheLookup(t=lane.now(), round=round_, accepted=accepted, token=token, hit=found is not None,
                               rank=rank))
        guesser.accepts.append((accepted, len(window)))
        guesser.ranks.append(rank)
        if found is not None:
            window = found
        else:
            kind = "fallback" if plan.method == "mirror" else plan.backup
            window = yield from _backup(lane, drafter, plan, committed, sampler, guesser.shaper(fan), round_, kind)
        yield from _send(lane, lanes, window_message(round_, window, found is not None, vocab), "window", round_)
    yield Send(0, Message("end"))


def _mirror_rank(ids: list[list[int]] | None, k: int, token: int) -> int:
    if not ids or k >= len(ids):
        return -1
    return ids[k].index(token) if token in ids[k] else -1


def _backup(lane: Lane, drafter: BranchDrafter, plan: Plan, committed: list[int], sampler: Sampler, shape,
            round_: int, kind: str):
    """A window made on the critical path: the draft decoding from the true prefix, or an n-gram lookup."""
    began = lane.now()
    if kind == "fast":
        tokens, _ = lookup(committed, 3, 1, plan.window)
        window = Window(tokens, None, [0.0] * len(tokens), "lookup")
    else:
        branch, _ = drafter.jit(committed, plan.window, sampler, shape)
        window = branch.window()
    event = FallbackRollout if kind == "fallback" else Backup
    yield Emit(event(t=lane.now(), lane=lane.name, round=round_, backup=kind, tokens=len(window), start=began,
                     end=lane.now()))
    return window


# --- the draft lane as a worker process ----------------------------------------------------------------
@lru_cache(maxsize=2)
def _draft_module(source: str, dtype: str, device: str, draft: str) -> torch.nn.Module:
    """A trained draft by name (built on the target's lower layers from ``source``), or a causal LM's directory."""
    from .drafters.trained import load_trained, read_card
    from .layers import LayerStack
    from .model import DTYPES, load_layers

    from .drafters.registry import VERDICT, drafter_kind_names, shipped_kind

    if shipped_kind(draft) not in drafter_kind_names(VERDICT):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(draft, dtype=DTYPES[dtype], local_files_only=True)
        model.config._attn_implementation = "sdpa"
        return model.to(device).eval()
    layers = read_card(draft)["layers"]
    stack = LayerStack(load_layers(source, dtype, device, range(layers), embed=True, head=True))
    return load_trained(draft, stack)[0]


def draft_worker(lane: Lane, source: str, dtype: str, draft: str, capacity: int, temperature: float, top_p: float,
                 seed: int | None, plan: dict, lanes: list[str]):
    """Lane D in a worker process: load (once) only the draft (and the target's lower layers it is built
    from), then serve one run."""
    device = lane.name if lane.name.startswith("cuda") else "cpu"
    module = _draft_module(source, dtype, device, draft)
    sampler = Sampler(temperature, top_p, seed).for_lane(1)  # a CPU generator, as in serial mode: the same draws
    named = Lane(1, lanes[1], lane.now)
    return draft_lane(named, BranchDrafter(module, draft, capacity), Plan(**plan), sampler, lanes)


def preload_worker(lane: Lane, source: str, dtype: str, draft: str):
    """Load the draft on lane D before any run's clock starts (its first run would otherwise pay for it)."""
    device = lane.name if lane.name.startswith("cuda") else "cpu"
    _draft_module(source, dtype, device, draft)
    return _say_ready()


def _say_ready():
    yield Send(0, Message("end"))


def await_ready():
    """Lane T's side of :func:`preload_worker`."""
    yield Recv(1)
