"""Prompt lookup decoding: drafts copied from the context by n-gram match, verified by the target."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ..decoding import DecodeContext
from ..drafters import PromptLookupDrafter
from ..speculative import speculative_decode
from ..trace import Event
from .base import Method, MethodConfig, require_int


@dataclass
class PldConfig(MethodConfig):
    gamma: int = 10
    max_ngram: int = 3
    min_ngram: int = 1

    def validate(self, n_layers: int) -> None:
        require_int("gamma", self.gamma, 1, 64)
        require_int("max_ngram", self.max_ngram, 1, 64)
        require_int("min_ngram", self.min_ngram, 1, self.max_ngram)


class PromptLookup(Method):
    name = "pld"
    Config = PldConfig
    description = "prompt lookup: n-gram matches in the context as drafts"

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        drafter = PromptLookupDrafter(self.config.max_ngram, self.config.min_ngram)
        yield from speculative_decode(ctx, drafter, self.config.gamma)
