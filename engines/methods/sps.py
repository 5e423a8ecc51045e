"""Vanilla speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

The draft is either ``self`` — the target's first ``draft_layers`` layers with its final norm and
head, run as a separate model with its own cache — or any Hugging Face causal LM (hub id already in
the local cache, or a local path) that uses exactly the target's tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ..decoding import DecodeContext
from ..drafters import ModelDrafter
from ..speculative import speculative_decode
from ..trace import Event
from .base import Method, MethodConfig, require_int


@dataclass
class SpsConfig(MethodConfig):
    gamma: int = 5
    draft: str = "self"
    draft_layers: int = 4

    def validate(self, n_layers: int) -> None:
        require_int("gamma", self.gamma, 1, 64)
        if not isinstance(self.draft, str) or not self.draft:
            raise ValueError(f"draft must be 'self' or a model id/path, got {self.draft!r}")
        if self.draft == "self":
            require_int("draft_layers", self.draft_layers, 1, n_layers - 1)


class SpeculativeSampling(Method):
    name = "sps"
    Config = SpsConfig
    description = "vanilla speculative sampling with a draft model"

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        if self.config.draft == "self":
            drafter = ModelDrafter(ctx.target, self.config.draft_layers, f"self[:{self.config.draft_layers}]")
        else:
            drafter = ModelDrafter(self.engine.draft_stack(self.config.draft), name=self.config.draft)
        yield from speculative_decode(ctx, drafter, self.config.gamma)
