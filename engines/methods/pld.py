"""Prompt lookup decoding: drafts copied from the context by n-gram match, verified by the target."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from engines.core.context import DRAFT_MARGIN, DecodeContext
from engines.core.trace import Event
from engines.drafters import PromptLookupDrafter
from engines.methods.base import Method, MethodConfig, decode_chain, int_or_auto, require_int, require_int_or_auto


@dataclass
class PldConfig(MethodConfig):
    gamma: int | str = 10
    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self):
        self.gamma = int_or_auto(self.gamma)

    def validate(self, n_layers: int) -> None:
        require_int_or_auto("gamma", self.gamma, 1, DRAFT_MARGIN)
        require_int("max_ngram", self.max_ngram, 1, 64)
        require_int("min_ngram", self.min_ngram, 1, self.max_ngram)


class PromptLookup(Method):
    name = "pld"
    Config = PldConfig
    description = "prompt lookup: n-gram matches in the context as drafts"

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        drafter = PromptLookupDrafter(self.config.max_ngram, self.config.min_ngram)
        yield from decode_chain(self.engine, ctx, drafter, self.config.gamma)
