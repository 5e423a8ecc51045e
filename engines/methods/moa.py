"""Mixture of Attentions (Zimmer et al. 2024): EAGLE-2 trees drafted by a drafter that reads every layer.

The drafter (:mod:`engines.drafters.moa_head`) attends over the target's keys/values at all layers (LSA),
over its own drafted tokens (SA) and over the verified context (CA), optionally finishing through the
target's last ``tli`` layers. Verification is the ordinary lossless tree (or chain) verification, so
the method is lossless; the drafter only changes what is proposed.

Drafters: ``moa-tli{tli}`` (``lsa=False``: the −LSA ablation ``moa-tli0-nolsa``), or any shipped MoA
drafter by name (``drafter=``). ``tree=False`` drafts a chain of ``gamma`` tokens instead, sampled from q.

``network`` runs the paper's client–server split over a simulated link (:mod:`engines.programs.client_server`);
``disconnect_after=B`` then drops the server after B new tokens (lossy, labelled so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from engines.core.context import DRAFT_MARGIN, DecodeContext
from engines.core.trace import Event
from engines.drafters.moa_drafter import MoADrafter
from engines.drafters.moa_head import moa_name
from engines.methods.base import (AUTO, Method, auto_as_none, decode_chain, int_or_auto, require_int,
                                  require_int_or_auto)
from engines.methods.link_config import LinkConfig
from engines.programs.client_server import client_server_decode
from engines.programs.tree import MAX_TREE_NODES, TREE_TOPK, tree_decode


@dataclass
class MoAConfig(LinkConfig):
    tli: int = 0
    lsa: bool = True
    drafter: str = ""  # a shipped MoA drafter by name; empty: moa-tli{tli} (-nolsa)
    tree: bool = True
    depth: int | str = AUTO
    topk: int = TREE_TOPK
    total_tokens: int | str = "auto"
    gamma: int | str = 4  # chain length when tree=False

    def __post_init__(self):
        super().__post_init__()
        self.total_tokens = int_or_auto(self.total_tokens)
        self.depth = int_or_auto(self.depth)
        self.gamma = int_or_auto(self.gamma)

    def validate(self, n_layers: int) -> None:
        require_int("tli", self.tli, 0, n_layers - 1)
        for name in ("lsa", "tree"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.drafter, str):
            raise ValueError(f"drafter must be a shipped MoA drafter's name or empty, got {self.drafter!r}")
        require_int_or_auto("depth", self.depth, 1, 12)
        require_int("topk", self.topk, 1, 16)
        require_int_or_auto("total_tokens", self.total_tokens, 1, MAX_TREE_NODES)
        require_int_or_auto("gamma", self.gamma, 1, DRAFT_MARGIN)
        if self.client_server and not self.tree and self.gamma == AUTO:
            raise ValueError("gamma must be an integer in client–server mode (a chain is sent whole), got 'auto'")
        self.validate_link()

    @property
    def drafter_name(self) -> str:
        return self.drafter or moa_name(self.tli, self.lsa)


class MixtureOfAttentions(Method):
    name = "moa"
    Config = MoAConfig
    description = "Mixture of Attentions: a drafter reading every layer's KV, EAGLE-2 trees (client–server option)"

    def __init__(self, config: MoAConfig, engine):
        super().__init__(config, engine)
        self.lossless, self.clock = config.run_labels()

    def lanes(self, ctx: DecodeContext) -> dict:
        if self.config.client_server:
            return {"target": f"server ({ctx.lane})", "draft": f"client ({ctx.lane})",
                    "link": self.config.network}
        return super().lanes(ctx)

    def prepare(self) -> None:
        super().prepare()
        head = self.engine.trained_drafter(self.config.drafter_name)
        if getattr(head, "kind", "") != "moa":
            raise ValueError(f"drafter {self.config.drafter_name!r} is not a MoA drafter")

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        config = self.config
        drafter = MoADrafter(self.engine.trained_drafter(config.drafter_name), name=config.drafter_name)
        depth, total = auto_as_none(config.depth), auto_as_none(config.total_tokens)
        curve = self.engine.verify_cost() if None in (depth, total) and config.tree else None
        cost = curve.cost if curve else None
        if config.client_server:
            depth, topk, total = (depth, config.topk, total) if config.tree else (config.gamma, 1, config.gamma)
            yield from client_server_decode(ctx, drafter, config.link(), depth, topk, total, cost,
                                            config.disconnect_after)
        elif config.tree:
            yield from tree_decode(ctx, drafter, depth, config.topk, total, cost)
        else:
            yield from decode_chain(self.engine, ctx, drafter, config.gamma)
