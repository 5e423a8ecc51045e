"""Vanilla speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

The draft is ``suffix`` (model-free: the most frequent continuation in the prompt, the answer so far and
earlier answers, :mod:`engines.drafters.suffix`), ``self`` — the target's first ``draft_layers`` layers with
its final norm and head, run as a separate model with its own cache — a trained drafter from ``data/drafts``
(``tiny``, or the
feature-level ``eagle`` head drafting a chain, or the speculative-streaming ``ss`` draft proposing 1 + S tokens
per forward), or any Hugging Face causal LM (local path, or a hub
id already in the local cache) that uses exactly the target's tokenizer. Trained drafters propose
from their draft vocabulary; ``full_vocab=True`` runs ``tiny`` through its own 49k-token head instead
(as Hugging Face's assisted generation runs it; its rows outside the draft vocabulary are zero, so it
guesses the same tokens at a higher cost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from engines.core.context import DRAFT_MARGIN, DecodeContext
from engines.core.trace import Event
from engines.drafters import EagleDrafter, ModelDrafter, StreamingDrafter
from engines.drafters.heads import SharedHead
from engines.drafters.registry import SPS, drafter_kind_names, model_free_drafters
from engines.drafters.suffix import SuffixDrafter
from engines.drafters.trained import drafters_for, shipped_kind
from engines.methods.base import Method, MethodConfig, decode_chain, int_or_auto, require_int, require_int_or_auto
from engines.model.layers import LayerStack


@dataclass
class SpsConfig(MethodConfig):
    gamma: int | str = 5
    draft: str = "self"
    draft_layers: int = 4
    full_vocab: bool = False

    def __post_init__(self):
        self.gamma = int_or_auto(self.gamma)

    def validate(self, n_layers: int) -> None:
        require_int_or_auto("gamma", self.gamma, 1, DRAFT_MARGIN)
        if not isinstance(self.draft, str) or not self.draft:
            raise ValueError(f"draft must be 'self', {' or '.join(map(repr, model_free_drafters(SPS)))}, one of the "
                             f"trained drafts {drafters_for(SPS)} or a model path, "
                             f"got {self.draft!r}")
        if self.draft == "self":
            require_int("draft_layers", self.draft_layers, 1, n_layers - 1)
        if not isinstance(self.full_vocab, bool):
            raise ValueError(f"full_vocab must be true or false, got {self.full_vocab!r}")


class SpeculativeSampling(Method):
    name = "sps"
    Config = SpsConfig
    description = "vanilla speculative sampling with a draft model"

    def prepare(self) -> None:
        super().prepare()
        if shipped_kind(self.config.draft) is not None:
            self.engine.trained_drafter(self.config.draft)
        elif self.config.draft not in ("self", *model_free_drafters(SPS)):
            self.engine.draft_stack(self.config.draft)

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        draft = self.config.draft
        kind = shipped_kind(draft) if draft not in ("self", *model_free_drafters(SPS)) else None
        if kind is not None and kind not in drafter_kind_names(SPS):
            raise ValueError(f"draft {draft!r} is a {kind} drafter, which sps cannot draft with; "
                             f"trained drafts for sps: {drafters_for(SPS)}")
        if draft in model_free_drafters(SPS):
            drafter = SuffixDrafter(corpus=self.engine.suffix_corpus)
        elif draft == "self":
            drafter = ModelDrafter(ctx.target, self.config.draft_layers, f"self[:{self.config.draft_layers}]")
        elif kind == "eagle":  # eagle, eagle-matched (trained beside MoA)
            drafter = EagleDrafter(self.engine.trained_drafter(draft), name=draft)
        elif kind == "ss":
            drafter = StreamingDrafter(self.engine.trained_drafter(draft), name=draft)
        elif kind == "tiny":
            model = self.engine.trained_drafter(draft)
            stack = LayerStack(model)
            head = None if self.config.full_vocab else SharedHead(stack, model.draft_vocab)
            drafter = ModelDrafter(stack, name=draft, head=head)
        else:
            drafter = ModelDrafter(self.engine.draft_stack(draft), name=draft)
        yield from decode_chain(self.engine, ctx, drafter, self.config.gamma)
