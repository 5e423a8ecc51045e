"""CATS: cascaded adaptive tree speculation for memory-limited devices (paper 004), one cycle at a time.

Where the model does not fit in memory and its deep layers stream from flash on every forward, the
costly thing is a pass through the deep layers, so CATS makes each one verify as much as it can:

1. **draft** γ̄ tokens through layers 1..L_DM plus the DM adapter (``cats@L_DM``), writing the target's
   own KV cache for those layers (as early-exit self-speculation does);
2. **shallow verification**: one pass of layers L_DM+1..L_SV over all drafts and the SV adapter
   (``cats@L_SV``) gives the shallow verifier's token ĉ_i at each position; where ĉ_i ≠ d_i it becomes
   a *correction sibling* of d_i (the set R);
3. **re-forward** the corrections and the last draft (never an input so far) through layers 1..L_SV under
   the tree mask — resident layers, no flash traffic;
4. **final verification** of the whole tree (the chain and its corrections) through the remaining layers
   in one tree-masked pass, then the walk: accept d_i if the target agrees, else try ĉ_i (a taken
   correction ends the cycle), then the target's own token after the last accepted node;
5. **rollback**: every layer's cache keeps only the root's and the accepted path's rows; both adapters'
   caches are re-fed the verified states.

Acceptance: ``greedy`` (the target's argmax, lossless against greedy decoding; temperature must be 0),
``sample`` (the multi-candidate rule of :mod:`engines.core.draft_tree`: d_i against the DM adapter's q, then ĉ_i as a
point mass against the residual — lossless at any temperature) or ``typical`` (Medusa's typical
acceptance, the paper's "relaxed" mode: LOSSY, labelled so in the trace and every view).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from engines.core.context import DRAFT_MARGIN, DecodeContext, Transcript, prefill
from engines.core.draft_tree import DraftTreeNodes, TreeNode, tree_mask_over
from engines.core.round import close_round, draft_event
from engines.core.sampling import greedy_tokens
from engines.core.trace import Event, ShallowVerification
from engines.drafters import EarlyExitDrafter
from engines.drafters.early_exit import SyncedHead
from engines.drafters.trained import exit_head_name
from engines.methods.base import Method, MethodConfig, require_int

ACCEPTANCE = ("greedy", "sample", "typical")


@dataclass
class CatsConfig(MethodConfig):
    dm_layer: int = 3
    sv_layer: int = 15
    gamma: int = 5
    acceptance: str = "greedy"

    def validate(self, n_layers: int) -> None:
        require_int("dm_layer", self.dm_layer, 1, n_layers - 2)
        require_int("sv_layer", self.sv_layer, 2, n_layers - 1)
        if self.dm_layer >= self.sv_layer:
            raise ValueError(f"dm_layer must be below sv_layer: 1 <= dm_layer < sv_layer <= {n_layers - 1}, "
                             f"got dm_layer={self.dm_layer}, sv_layer={self.sv_layer}")
        require_int("gamma", self.gamma, 1, DRAFT_MARGIN // 2)  # drafts + corrections
        if self.acceptance not in ACCEPTANCE:
            raise ValueError(f"acceptance must be one of {ACCEPTANCE}, got {self.acceptance!r}")


class Cats(Method):
    name = "cats"
    Config = CatsConfig
    description = "CATS: shallow draft, shallow verifier with correction siblings, one deep tree pass"

    def __init__(self, config: CatsConfig, engine):
        super().__init__(config, engine)
        self.lossless = config.acceptance != "typical"

    def adapter_names(self) -> tuple[str, str]:
        return exit_head_name(self.config.dm_layer, "cats"), exit_head_name(self.config.sv_layer, "cats")

    def prepare(self) -> None:
        super().prepare()
        for name in self.adapter_names():
            self.engine.trained_drafter(name)

    def check_sampling(self, greedy: bool) -> None:
        if self.config.acceptance == "greedy" and not greedy:
            raise ValueError("acceptance='greedy' needs temperature 0; use acceptance='sample' (lossless) or "
                             "'typical' (lossy) to sample")

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        dm, sv, gamma = self.config.dm_layer, self.config.sv_layer, self.config.gamma
        dm_name, sv_name = self.adapter_names()
        target, trace = ctx.target, ctx.trace
        cache = target.new_cache(ctx.capacity)
        logits, seen, prefill_event = prefill(ctx, cache, observe=(dm, sv))
        yield prefill_event
        out = Transcript(ctx)
        yield out.commit(0, [ctx.sampler.next_token(logits)], ["target"])
        drafter = EarlyExitDrafter(target, dm, self.engine.trained_drafter(dm_name), dm_name)
        drafter.start(ctx, cache)
        drafter.observe(seen, len(ctx.prompt_ids))
        verifier = SyncedHead(self.engine.trained_drafter(sv_name), ctx.capacity)
        verifier.observe(seen[sv])
        round_ = 0
        while not out.done:
            round_ += 1
            prefix = len(out.ids) - 1  # the cache holds every committed token but the root
            started = trace.now()
            length = max(1, min(gamma, out.remaining - 1))  # no more drafts than tokens left to commit
            draft = drafter.propose(out.ids, length, ctx.sampler)  # layers [0, dm) for root, d_0..d_{γ̄-2}
            if trace.detailed:
                yield ctx.span("draft", round_, started)
            started = trace.now()
            shallow = target.run(draft.hidden, dm, sv, cache)  # one parallel pass, layers [dm, sv)
            verifier.sync()
            checked = greedy_tokens(verifier.logits(shallow))
            tree, mismatches = correction_tree(draft.tokens, draft.probs, draft.logprobs, checked, dm_name)
            if trace.detailed:
                yield ctx.span("sv", round_, started)
                yield ShallowVerification(t=trace.now(), round=round_, drafts=draft.tokens, verifier=checked,
                                          mismatches=mismatches)
            started = trace.now()
            new = list(range(length - 1, len(tree)))  # the last draft, then the corrections
            new_dm, new_sv = reforward(target, cache, tree, new, prefix, length, dm, sv)
            if trace.detailed:
                yield ctx.span("reforward", round_, started)
                yield draft_event(trace.now(), round_, f"cats({dm_name}+{sv_name})", tree)
            started = trace.now()
            shallow_states = torch.cat([shallow, new_sv], dim=1)
            deep = target.run(shallow_states, sv, target.n_layers, cache, tree.verify_parents())
            at_dm = torch.cat([draft.hidden, new_dm], dim=1)

            def observe(rows, at_dm=at_dm, shallow_states=shallow_states):
                drafter.observe({dm: at_dm.index_select(1, rows)}, len(rows))
                verifier.observe(shallow_states.index_select(1, rows))

            rule = "typical" if self.config.acceptance == "typical" else "exact"
            yield from close_round(ctx, out, cache, round_, tree, target.logits(deep), started, rule=rule,
                                   observe=observe, draft_depth=length)


def correction_tree(drafts: list[int], probs: torch.Tensor | None, logprobs: list[float], checked: list[int],
                    drafter: str) -> tuple[DraftTreeNodes, list[int]]:
    """The draft chain (nodes 0..γ̄−1) and, after it, a correction sibling for every position where the
    shallow verifier disagrees. A correction's q is a point mass (the verifier's argmax)."""
    tree = DraftTreeNodes(drafter=drafter)
    for i, token in enumerate(drafts):
        tree.add(TreeNode(token, i - 1, i + 1, logprobs[i], sum(logprobs[: i + 1]), 0, "draft",
                          None if probs is None else probs[i]))
    mismatches = [i for i, (d, c) in enumerate(zip(drafts, checked)) if d != c]
    for i in mismatches:
        tree.add(TreeNode(checked[i], i - 1, i + 1, 0.0, sum(logprobs[:i]), 1, "correction"))
    return tree, mismatches


def reforward(target, cache, tree: DraftTreeNodes, new: list[int], prefix: int, gamma: int, dm: int,
              sv: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Layers [0, sv) for nodes that were never an input (the last draft, the corrections), under the tree
    mask: the cache's shallow layers hold the root and d_0..d_{γ̄−2} after ``prefix`` (slots 0..γ̄−1), and a
    node at depth k sees slots 0..k−1 (the root and its ancestors on the chain)."""
    ancestors = [list(range(tree.nodes[i].depth)) for i in new]
    positions = torch.tensor([[prefix + tree.nodes[i].depth for i in new]], device=target.device)
    mask = tree_mask_over(prefix, gamma, ancestors, target.dtype, target.device)
    hidden = target.embed([tree.nodes[i].token for i in new])
    at_dm = target.run_at(hidden, 0, dm, cache, positions, mask)
    return at_dm, target.run_at(at_dm, dm, sv, cache, positions, mask)
