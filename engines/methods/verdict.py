"""What ``mirror`` and ``ssd`` share as methods: the draft on lane D, the target on lane T, two modes.

``mode``: ``lanes`` runs the draft in a worker process on its own core (or CUDA device) while this
process verifies — the draft's work hidden under verification; ``serial`` runs both lane programs in
this process, one after the other — the same tokens, nothing overlapping (the "before" picture).
The programs are in :mod:`engines.programs.verdict`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Iterator

import torch

from engines.core.context import DecodeContext
from engines.core.trace import Event, Trace
from engines.drafters.registry import VERDICT, drafter_kind_names
from engines.drafters.suffix import SuffixConfig
from engines.drafters.trained import draft_vocab, read_card, shipped_kind
from engines.lanes import Lane, default_lanes, pinned, run_serial
from engines.methods.base import Method, MethodConfig
from engines.programs.verdict.branch_rollout import BranchDrafter
from engines.programs.verdict.draft_lane import draft_lane
from engines.programs.verdict.target_lane import target_lane
from engines.programs.verdict.wire import Plan
from engines.programs.verdict.worker import await_ready

MODES = ("lanes", "serial")
RULES = ("sample", "token_match")


def check_common(config: MethodConfig, drafts: tuple[str, ...] | list[str]) -> None:
    if config.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {config.mode!r}")
    if not isinstance(config.draft, str) or not config.draft or config.draft == "self" or (
            shipped_kind(config.draft) not in (None, *drafter_kind_names(VERDICT))):
        raise ValueError(f"draft must be one of the trained drafts {drafts} or a causal LM sharing the target's "
                         f"tokenizer (a registered name or a local path), got {config.draft!r}")


def is_trained(draft: str) -> bool:
    """A shipped draft a branch rollout can run on its own lane (eagle needs the target's features: not here)."""
    return shipped_kind(draft) in drafter_kind_names(VERDICT)


class VerdictMethod(Method):
    """Subclasses give ``plan()`` (what both lanes agree on) and their Config."""

    def plan(self, detailed: bool) -> Plan:
        raise NotImplementedError

    def lanes(self, ctx: DecodeContext) -> dict:
        names = self._lane_names(ctx)
        return {"target": names[0], "draft": names[1]}

    def _lane_names(self, ctx: DecodeContext | None) -> list[str]:
        if self.config.mode == "lanes" and not self.engine.lane_spec.spawn:
            return ["cpu0", "remote1"]
        if self.config.mode == "lanes":
            return list(default_lanes(2, self.engine.device))
        lane = ctx.lane if ctx is not None else "cpu0"
        return [f"{lane}/target", f"{lane}/draft"]

    def exit_head(self):
        return None

    def draft_module(self):
        """The trained draft (``tiny``, ``ss``) or a registered / local causal LM with the target's tokenizer."""
        draft = self.config.draft
        if is_trained(draft):
            card = read_card(draft)
            if card.get("vocab_size") != self.engine.target.config.vocab_size:
                raise ValueError(f"draft {draft!r} uses another tokenizer (vocabulary {card.get('vocab_size')} "
                                 f"vs the target's {self.engine.target.config.vocab_size})")
            return self.engine.trained_drafter(draft)
        return self.engine.draft_stack(draft).model  # ValueError for another tokenizer or vocabulary

    def prepare(self) -> None:
        self.draft_module()
        self.exit_head()
        if self.config.mode == "lanes":
            if self.engine.memory_budget is not None:
                raise ValueError("mode='lanes' runs the draft in a worker process; it cannot honour a memory budget "
                                 "(use mode='serial')")
            if self.engine.lane_spec.spawn:
                try:
                    default_lanes(2, self.engine.device)
                except ValueError:
                    raise ValueError("mode='lanes' needs a second lane (a second CPU core or CUDA device) for the "
                                     "draft, and this machine has one; use mode='serial'") from None
            group = self.engine.lane_group(self._lane_names(None))
            args = {"source": str(self.engine.lanes_source()), "dtype": self.engine.dtype, "draft": self._draft_source()}
            for _ in group.run(await_ready(), Trace(detailed=False),
                               {1: {"program": "engines.programs.verdict.worker:preload_worker", "args": args}}):
                pass

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        engine, config = self.engine, self.config
        plan = self.plan(ctx.trace.detailed)
        plan.positions = engine.context_window  # lane D drafts nothing the target could not verify
        if plan.backup == "suffix":
            plan.suffix_corpus = [list(a) for a in engine.suffix_corpus.answers(ctx.prompt_ids, SuffixConfig().corpus)]
        names = self._lane_names(ctx)
        module = self.draft_module()
        vocab = draft_vocab(module) if is_trained(config.draft) else torch.arange(engine.target.config.vocab_size)
        target_sampler = ctx.sampler.for_lane(0)
        capacity = ctx.capacity + self.max_branches() * (plan.window + 2) + 64
        target = target_lane(Lane(0, names[0], ctx.trace.now), ctx, plan, target_sampler, vocab, names,
                             self.exit_head())
        if config.mode == "lanes":
            group = engine.lane_group(names)
            args = {"source": str(engine.lanes_source()), "dtype": engine.dtype, "draft": self._draft_source(),
                    "capacity": capacity, "temperature": ctx.sampler.temperature, "top_p": ctx.sampler.top_p,
                    "seed": ctx.sampler.seed, "plan": asdict(plan), "lanes": names}
            with pinned(names[0]):
                yield from group.run(target, ctx.trace,
                                     {1: {"program": "engines.programs.verdict.worker:draft_worker", "args": args}})
            return
        drafter = BranchDrafter(module, config.draft, capacity, plan.positions)
        draft = draft_lane(Lane(1, names[1], ctx.trace.now), drafter, plan, ctx.sampler.for_lane(1), names)
        yield from run_serial({0: target, 1: draft})

    def max_branches(self) -> int:
        raise NotImplementedError

    def _draft_source(self) -> str:
        """What lane D loads: a trained draft's name, or the directory of a causal LM's weights."""
        draft = self.config.draft
        return draft if is_trained(draft) else str(self.engine.draft_source(draft))
