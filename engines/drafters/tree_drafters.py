"""Drafters that grow a tree: the root's next-token logits, then one batched call per depth.

Both return draft logits over the drafter's own vocabulary with the token id of each column (``None``:
column = token id), so ranking a level's children never touches the 49k-token full vocabulary.

Each keeps its own KV cache: the committed prefix (synced as in chain drafting) followed by the tree
nodes fed this round under a tree mask (:class:`engines.core.draft_tree.TreeSlots`); ``finish`` drops the nodes,
so next round starts from the committed prefix again, whatever the verdict.

- :class:`EagleTreeDrafter` — the EAGLE head: a node's input pairs its token's embedding with the
  feature the head predicted at its parent (the root's from the last verified features);
- :class:`ModelTreeDrafter` — a separate draft model (``tiny``): a node is one more token in its cache.
"""

from __future__ import annotations

import torch

from engines.core.draft_tree import DraftTreeNodes, TreeSlots
from engines.core.sampling import Sampler
from engines.drafters.eagle import EagleDrafter
from engines.drafters.model_draft import ModelDrafter


class EagleTreeDrafter(EagleDrafter):
    def root(self, committed: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits ``[V']`` of the token after ``committed``, and the token id of each column."""
        self.cache.crop(self.synced)
        features = torch.cat(self.features, dim=1)
        n = features.shape[1]
        predicted = self._step(committed[self.synced + 1: self.synced + 1 + n], features)[:, -1:]
        self.synced += n
        self.features = []
        self.slots = TreeSlots(self.cache.length())
        self.root_feature = predicted
        self.node_features: dict[int, torch.Tensor] = {}
        return self.head(predicted)[0, -1], self.head.head.vocab_ids

    def expand(self, tree: DraftTreeNodes, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feed nodes ``ids`` (one batch); logits ``[k, V']`` of each one's children, and column ids."""
        parents = [tree.nodes[i].parent for i in ids]
        features = torch.cat([self.root_feature if p < 0 else self.node_features[p] for p in parents], dim=1)
        embeddings = self.target.embed([tree.nodes[i].token for i in ids]).to(features.dtype)
        positions, mask = self.slots.inputs(tree, ids, features.dtype, features.device)
        predicted = self.head.features_at(embeddings, features, self.cache, positions, mask)
        for j, i in enumerate(ids):
            self.node_features[i] = predicted[:, j:j + 1]
        return self.head(predicted)[0], self.head.head.vocab_ids

    def finish(self) -> None:
        self.cache.crop(self.synced)


class ModelTreeDrafter(ModelDrafter):
    def root(self, committed: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        hidden = self.stack.run(self.stack.embed(feed := self._rewind(committed)), 0, self.n_layers, self.cache)
        self.cached_ids.extend(feed)
        self.slots = TreeSlots(self.cache.length())
        return self._rows(hidden[:, -1:])

    def expand(self, tree: DraftTreeNodes, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        stack = self.stack
        positions, mask = self.slots.inputs(tree, ids, stack.dtype, stack.device)
        hidden = stack.run_at(stack.embed([tree.nodes[i].token for i in ids]), 0, self.n_layers, self.cache,
                              positions, mask)
        return self._rows(hidden)

    def _rows(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.head is not None:
            return self.head.logits(hidden, self.stack.backbone.norm)[0], self.head.vocab_ids
        return self.stack.logits(hidden), None

    def finish(self) -> None:
        self.cache.crop(len(self.cached_ids))


def draft_logprobs(logits: torch.Tensor, sampler: Sampler) -> torch.Tensor:
    """log q for ranking tree nodes: the drafter's distribution after the run's warpers (raw when greedy)."""
    if sampler.greedy:
        return torch.log_softmax(logits.float(), dim=-1)
    return sampler.probs(logits.float()).log()


class ExitTreeDrafter:
    """The target's first ℓ layers and a norm exit head (``exit@ℓ-norm``) grow the tree in the target's own
    cache: root and nodes go through layers [0, ℓ) after the committed prefix under the tree mask, and
    ``finish`` crops those layers back, so verification runs every layer over the tree. Heads with a KV
    cache of their own (``exit@ℓ-layer``, the CATS adapters) would need that cache grown as a tree too;
    they draft chains only."""

    def __init__(self, target, exit_layer: int, head, name: str):
        self.target = target
        self.exit_layer = exit_layer
        self.head = head
        self.name = name
        self.cache = None

    def start(self, ctx, target_cache) -> None:
        self.cache = target_cache

    def root(self, committed: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        self.prefix = self.cache.length(0)
        hidden = self.target.run(self.target.embed(committed[-1:]), 0, self.exit_layer, self.cache)
        self.slots = TreeSlots(self.prefix + 1)  # the root is everyone's ancestor: part of the visible prefix
        return self._rows(hidden)

    def expand(self, tree: DraftTreeNodes, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        target = self.target
        positions, mask = self.slots.inputs(tree, ids, target.dtype, target.device)  # depth d at prefix + d
        hidden = target.run_at(target.embed([tree.nodes[i].token for i in ids]), 0, self.exit_layer, self.cache,
                               positions, mask)
        return self._rows(hidden)

    def finish(self) -> None:
        self.cache.crop(self.prefix, range(0, self.exit_layer))

    def _rows(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.head is None:
            return self.target.logits(hidden), None
        return self.head(hidden)[0], self.head.head.vocab_ids
