"""Lane D: after each window it sends, glue it on, guess the verdicts, roll out a window for each, and
answer the real verdict from the speculation cache (or a window made on the critical path)."""

from __future__ import annotations

import torch

from engines.core.sampling import Sampler
from engines.core.trace import Backup, BranchRollout, CacheBuild, CacheLookup, FallbackRollout, ReuseDecision, Saguaro
from engines.drafters.base import point_masses
from engines.drafters.prompt_lookup import lookup
from engines.drafters.suffix import SuffixCorpus, SuffixDrafter
from engines.lanes import Emit, Lane, Message, Recv, Send
from engines.programs.verdict.branch_rollout import BranchDrafter
from engines.programs.verdict.guesser import Guesser
from engines.programs.verdict.speculation_cache import SpeculationCache, Window
from engines.programs.verdict.wire import Plan, send, span, window_message


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
    suffix = _suffix_drafter(plan, committed[:-1]) if plan.backup == "suffix" else None
    fan = guesser.fanout()
    window = yield from _backup(lane, drafter, plan, committed, sampler, guesser.shaper(fan), 0, "initial")
    yield from send(lane, lanes, window_message(0, window, False, vocab), "window", 0)
    round_ = 0
    while True:
        round_ += 1
        began = lane.now()
        z = drafter.glue(committed, window.tokens)
        if detailed:
            yield Emit(span(lane, "glue", round_, began))
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
            window = yield from _backup(lane, drafter, plan, committed, sampler, guesser.shaper(fan), round_, kind,
                                        suffix)
        yield from send(lane, lanes, window_message(round_, window, found is not None, vocab), "window", round_)
    yield Send(0, Message("end"))


def _mirror_rank(ids: list[list[int]] | None, k: int, token: int) -> int:
    if not ids or k >= len(ids):
        return -1
    return ids[k].index(token) if token in ids[k] else -1


def _suffix_drafter(plan: Plan, prompt: list[int]) -> SuffixDrafter:
    """``backup=suffix``: the suffix index over this run's prompt and answer, and the earlier answers lane T
    chose for it (already without this prompt's own: :meth:`SuffixCorpus.answers`)."""
    corpus = SuffixCorpus()
    for answer in plan.suffix_corpus:
        corpus.add((), answer)
    drafter = SuffixDrafter(corpus=corpus)
    drafter.begin(prompt)
    return drafter


def _backup(lane: Lane, drafter: BranchDrafter, plan: Plan, committed: list[int], sampler: Sampler, shape,
            round_: int, kind: str, suffix: SuffixDrafter | None = None):
    """A window made on the critical path: the draft decoding from the true prefix, or a model-free one (``fast``:
    prompt lookup; ``suffix``: the suffix index), verified as point masses."""
    began = lane.now()
    if kind in ("fast", "suffix"):
        n = drafter.room(len(committed) - 1, plan.window)  # nothing past the context window
        draft = suffix.propose(committed, n) if kind == "suffix" else point_masses(lookup(committed, 3, 1, n)[0])
        window = Window(draft.tokens, None, draft.logprobs, "lookup")
    else:
        branch, _ = drafter.jit(committed, plan.window, sampler, shape)
        window = branch.window()
    event = FallbackRollout if kind == "fallback" else Backup
    yield Emit(event(t=lane.now(), lane=lane.name, round=round_, backup=kind, tokens=len(window), start=began,
                     end=lane.now()))
    return window
