"""Early-exit self-speculation (EESD / Kangaroo-style): draft from layer ℓ, verify with the rest.

The draft is the target's first ``exit_layer`` layers followed by the model's own final norm and LM
head (trained exit heads come with the drafters issue). Draft and target share one KV cache, so a
verified round costs the deep layers only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ..decoding import DecodeContext
from ..drafters import EarlyExitDrafter
from ..speculative import speculative_decode
from ..trace import Event
from .base import Method, MethodConfig, require_int


@dataclass
class EesdConfig(MethodConfig):
    gamma: int = 5
    exit_layer: int = 15

    def validate(self, n_layers: int) -> None:
        require_int("gamma", self.gamma, 1, 64)
        require_int("exit_layer", self.exit_layer, 1, n_layers - 1)


class EarlyExitSelfSpeculation(Method):
    name = "eesd"
    Config = EesdConfig
    description = "early-exit self-speculation: the target's first ℓ layers draft"

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        drafter = EarlyExitDrafter(ctx.target, self.config.exit_layer)
        yield from speculative_decode(ctx, drafter, self.config.gamma)
