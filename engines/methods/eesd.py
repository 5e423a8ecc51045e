"""Early-exit self-speculation (EESD / Kangaroo-style): draft from layer ℓ, verify with the rest.

The draft is the target's first ``exit_layer`` layers followed by an exit head: ``head="none"`` is the
model's own final norm + LM head (untrained), ``"norm"`` and ``"layer"`` are the trained heads of
``data/drafts/exit@ℓ-norm`` / ``exit@ℓ-layer`` (PPSD compares the two), ``"cats"`` the CATS adapter
``data/drafts/cats@ℓ`` (with ℓ = 3 this is Kangaroo, the baseline CATS compares against). Draft and target share one
KV cache, so a verified round costs the deep layers only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from engines.core.context import DRAFT_MARGIN, DecodeContext
from engines.core.trace import Event
from engines.drafters import EarlyExitDrafter
from engines.drafters.trained import exit_head_name
from engines.methods.base import Method, MethodConfig, decode_chain, int_or_auto, require_int, require_int_or_auto

HEADS = ("none", "norm", "layer", "cats")


@dataclass
class EesdConfig(MethodConfig):
    gamma: int | str = 5
    exit_layer: int = 15
    head: str = "none"

    def __post_init__(self):
        self.gamma = int_or_auto(self.gamma)

    def validate(self, n_layers: int) -> None:
        require_int_or_auto("gamma", self.gamma, 1, DRAFT_MARGIN)
        require_int("exit_layer", self.exit_layer, 1, n_layers - 1)
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {self.head!r}")


class EarlyExitSelfSpeculation(Method):
    name = "eesd"
    Config = EesdConfig
    description = "early-exit self-speculation: the target's first ℓ layers draft"

    def prepare(self) -> None:
        super().prepare()
        if self.config.head != "none":
            self.engine.trained_drafter(exit_head_name(self.config.exit_layer, self.config.head))

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        head = None
        if self.config.head != "none":
            head = self.engine.trained_drafter(exit_head_name(self.config.exit_layer, self.config.head))
        name = exit_head_name(self.config.exit_layer, self.config.head) if head else f"exit@{self.config.exit_layer}"
        drafter = EarlyExitDrafter(ctx.target, self.config.exit_layer, head, name)
        yield from decode_chain(self.engine, ctx, drafter, self.config.gamma)
