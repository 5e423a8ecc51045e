"""EAGLE-2 dynamic draft trees (Li et al. 2024), verified in one target forward under a tree mask.

The drafter grows a tree ``depth`` levels deep, expanding the ``topk`` most probable paths at each
level (one batched drafter call per level), and the ``total_tokens`` best nodes by cumulative draft
log-prob go to the target (see :mod:`engines.drafters.tree_growth`). ``total_tokens="auto"`` sizes each tree
from this machine's verify-cost curve and the drafter's measured calibration: a tree as large as a GPU
likes is too large for a 2-core CPU. ``draft``: the shipped ``eagle`` feature head (EAGLE's own drafter),
the shipped ``tiny`` draft model, the target's first ℓ layers with its own head (``exit@ℓ``) or a trained
norm exit head (``exit@ℓ-norm``), or any draft model ``sps`` takes (a local path or a name registered
with ``Engine.add_draft``), so a tree and a chain (``sps(draft=…)``) of the same drafter compare like
for like. ``merge_suffix``: the model-free suffix drafter's chain (:mod:`engines.drafters.suffix`) joins every
tree as extra branches, tried after the model's own children (with ``total_tokens="auto"``, only the chain's
prefix that pays beside the model's nodes, and no model tree in rounds where the chain pays better alone:
:class:`~engines.drafters.suffix.ChainCut`). Lossless: greedy keeps the
target's argmax path; sampling uses the multi-candidate rule with top-k children as point masses
(:mod:`engines.core.draft_tree`). ``network`` splits it into a client (the drafter)
and a server (the target) over a simulated link, as MoA's paper compares them (:mod:`engines.programs.client_server`).

``suffix_depth``: how long that chain may be; it costs no model step, so it reaches deeper than the tree.

Defaults: topk 2 (:mod:`engines.programs.tree`, shared with ``moa``), a suffix chain of 6, and ``depth="auto"``:
before each level past the first the sizer asks whether the level is expected to pay, pricing its children from the
run's own acceptance, the drafter's measured time and the verify-cost curve (:meth:`TreeSizer.deeper
<engines.drafters.tree_growth.TreeSizer.deeper>`). Measured on a 2-core AMD EPYC Zen 4 in bf16 on the native step's
GGUF blocks (``specviz bench --per-category 6 --max-new-tokens 128``, ``data/bench/bf16/tree-shape/depth-auto-36``):
``eagle`` 0.88× ``ar`` against 0.77× at a fixed depth 2 and 0.86× at depth 1, ``moa`` 0.55× against 0.52×. Two
candidates a node commit about as much as four. With ``auto`` the tree follows the machine, so a number only bounds
it: ``depth`` the levels, ``topk`` each level's candidates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from engines.core.context import DecodeContext
from engines.core.trace import Event
from engines.drafters.heads import SharedHead
from engines.drafters.registry import TREE
from engines.drafters.suffix import SUFFIX_CHAIN_DEPTH, SuffixDrafter
from engines.drafters.trained import drafters_for, shipped_kind
from engines.drafters.tree_drafters import EagleTreeDrafter, ExitTreeDrafter, ModelTreeDrafter
from engines.methods.base import AUTO, Method, auto_as_none, int_or_auto, require_int, require_int_or_auto
from engines.methods.link_config import LinkConfig
from engines.model.layers import LayerStack
from engines.programs.client_server import client_server_decode
from engines.programs.tree import MAX_TREE_NODES, TREE_TOPK, tree_decode

EXIT_DRAFT = re.compile(r"exit@(\d+)(-norm)?$")  # exit@ℓ: the model's own head at ℓ; exit@ℓ-norm: the trained one


@dataclass
class EagleConfig(LinkConfig):
    depth: int | str = AUTO
    topk: int = TREE_TOPK
    total_tokens: int | str = "auto"
    draft: str = "eagle"
    merge_suffix: bool = False
    suffix_depth: int = SUFFIX_CHAIN_DEPTH  # with merge_suffix: the grafted chain's length, apart from depth

    def __post_init__(self):
        super().__post_init__()
        self.total_tokens = int_or_auto(self.total_tokens)
        self.depth = int_or_auto(self.depth)

    def validate(self, n_layers: int) -> None:
        require_int_or_auto("depth", self.depth, 1, 12)
        require_int("topk", self.topk, 1, 16)
        require_int_or_auto("total_tokens", self.total_tokens, 1, MAX_TREE_NODES)
        if not isinstance(self.draft, str) or not self.draft or self.draft == "self":
            raise ValueError(f"draft must be one of {drafters_for(TREE)}, exit@ℓ, exit@ℓ-norm or a draft model's path, "
                             f"got {self.draft!r}")
        exit_draft = EXIT_DRAFT.match(self.draft)
        if exit_draft:
            require_int("exit layer ℓ of draft exit@ℓ", int(exit_draft.group(1)), 1, n_layers - 1)
        if not isinstance(self.merge_suffix, bool):
            raise ValueError(f"merge_suffix must be true or false, got {self.merge_suffix!r}")
        require_int("suffix_depth", self.suffix_depth, 1, 16)
        self.validate_link()
        if self.client_server and exit_draft:  # the draft would run the target's own first layers: server-side
            raise ValueError(f"client–server mode needs a draft the client can hold (eagle, tiny, a draft model), "
                             f"got draft={self.draft!r}")


def is_eagle_head(draft: str) -> bool:
    """``eagle`` or another shipped EAGLE head (``eagle-matched``: trained beside MoA on its budget)."""
    return shipped_kind(draft) == "eagle"


class EagleTree(Method):
    name = "eagle"
    Config = EagleConfig
    description = "EAGLE-2: a dynamic draft tree verified in one target call"

    def __init__(self, config: EagleConfig, engine):
        super().__init__(config, engine)
        self.lossless, self.clock = config.run_labels()

    def prepare(self) -> None:
        super().prepare()
        self._drafter()  # loads the drafter now, so a missing one fails before the stream starts

    def _drafter(self):
        draft, engine = self.config.draft, self.engine
        exit_draft = EXIT_DRAFT.match(draft)
        if exit_draft:
            head = engine.trained_drafter(draft) if exit_draft.group(2) else None
            return ExitTreeDrafter(engine.target, int(exit_draft.group(1)), head, f"{draft}-tree")
        if is_eagle_head(draft):
            return EagleTreeDrafter(engine.trained_drafter(draft), name=f"{draft}-tree")
        if shipped_kind(draft) == "tiny":
            module = engine.trained_drafter(draft)
            stack = LayerStack(module)
            return ModelTreeDrafter(stack, name=f"{draft}-tree", head=SharedHead(stack, module.draft_vocab))
        return ModelTreeDrafter(engine.draft_stack(draft), name=f"{draft}-tree")

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        suffix = (SuffixDrafter(corpus=self.engine.suffix_corpus, chain_depth=self.config.suffix_depth)
                  if self.config.merge_suffix else None)
        depth, total = auto_as_none(self.config.depth), auto_as_none(self.config.total_tokens)
        curve = self.engine.verify_cost() if None in (depth, total) else None
        if self.config.client_server:
            yield from client_server_decode(ctx, self._drafter(), self.config.link(), depth, self.config.topk,
                                            total, curve.cost if curve else None, self.config.disconnect_after,
                                            suffix)
        else:
            yield from tree_decode(ctx, self._drafter(), depth, self.config.topk, total,
                                   curve.cost if curve else None, suffix)
