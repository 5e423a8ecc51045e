"""Draft trees: the nodes a drafter proposes, and how the target's forward and cache see them.

A draft tree hangs off the last committed token (the *root*, not itself a node); a chain is a tree with
one child per node. The target runs the root and every node in one forward under a tree mask — a node
attends to the cached prefix, the root, its ancestors and itself, at position prefix + depth — so each
node's row of logits is the target's next-token distribution after that node's path, exactly as if the
path had been decoded alone. :mod:`engines.core.acceptance` then decides which path survives, and the KV
cache keeps only the root's and that path's rows, packed in order (:func:`keep_path`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engines.model.kv_cache import KVCache
from engines.model.layers import visibility_mask


@dataclass
class TreeNode:
    """One drafted token. ``parent`` −1 hangs off the root; ``q`` is the distribution the token was drawn
    from (``None``: picked deterministically, a point mass)."""

    token: int
    parent: int
    depth: int  # 1 for the root's children
    logprob: float = 0.0  # the drafter's log q(token)
    score: float = 0.0  # cumulative log-prob along the path (EAGLE-2's ranking)
    rank: int = 0  # among its siblings, by the drafter's preference
    source: str = "draft"  # draft | correction | lookup
    q: torch.Tensor | None = None


@dataclass
class DraftTreeNodes:
    """Nodes listed parents-first, plus the drafter's name (for the trace)."""

    nodes: list[TreeNode] = field(default_factory=list)
    drafter: str = ""

    def __len__(self) -> int:
        return len(self.nodes)

    def add(self, node: TreeNode) -> int:
        if node.parent >= len(self.nodes):
            raise ValueError("tree nodes must be listed parents-first")
        self.nodes.append(node)
        return len(self.nodes) - 1

    @property
    def tokens(self) -> list[int]:
        return [n.token for n in self.nodes]

    @property
    def parents(self) -> list[int]:
        return [n.parent for n in self.nodes]

    def children(self) -> dict[int, list[int]]:
        """Node ids by parent (−1 = root), siblings in the order they are tried."""
        kids: dict[int, list[int]] = {}
        for i, node in enumerate(self.nodes):
            kids.setdefault(node.parent, []).append(i)
        for ids in kids.values():
            ids.sort(key=lambda i: self.nodes[i].rank)
        return kids

    def path_to(self, node: int) -> list[int]:
        path = []
        while node >= 0:
            path.append(node)
            node = self.nodes[node].parent
        return path[::-1]

    def subset(self, keep: list[int]) -> "DraftTreeNodes":
        """The tree restricted to ``keep`` (which must hold every kept node's ancestors), renumbered."""
        keep = sorted(keep)
        new_id = {old: new for new, old in enumerate(keep)}
        out = DraftTreeNodes(drafter=self.drafter)
        for old in keep:
            node = self.nodes[old]
            if node.parent >= 0 and node.parent not in new_id:
                raise ValueError(f"node {old} is kept without its parent {node.parent}")
            out.add(TreeNode(node.token, new_id.get(node.parent, -1), node.depth, node.logprob, node.score,
                             node.rank, node.source, node.q))
        return out

    def verify_parents(self) -> list[int]:
        """Parents for the target's forward over [root] + nodes (root at index 0)."""
        return [-1] + [n.parent + 1 for n in self.nodes]


def keep_path(cache: KVCache, prefix: int, path: list[int]) -> list[int]:
    """Compact a cache that holds [root] + nodes after ``prefix``: keep the root and the accepted path. Returns
    the kept rows of that forward (root first), which a drafter observing the target's states needs too."""
    kept = [0] + [node + 1 for node in path]
    cache.keep(prefix, kept)
    return kept


def tree_mask_over(prefix: int, slots: int, ancestors: list[list[int]], dtype: torch.dtype, device) -> torch.Tensor:
    """Additive mask ``[1, 1, n, prefix + slots + n]`` for n new rows appended after ``slots`` earlier tree
    rows: row i sees the prefix, the earlier slots listed in ``ancestors[i]`` and itself."""
    return visibility_mask(prefix, slots + len(ancestors), [seen + [slots + i] for i, seen in enumerate(ancestors)],
                           dtype, device)


class TreeSlots:
    """Where a drafter's own KV cache holds the tree nodes it has fed so far, to grow a tree depth by depth.

    A drafter's cache holds its committed prefix (``base`` entries); each expansion appends a batch of
    nodes after it, in the order fed. A new node must see the prefix, its fed ancestors and itself, at
    position ``base + depth − 1 + offset``.
    """

    def __init__(self, base: int, offset: int = 0):
        self.base = base
        self.offset = offset
        self.slot: dict[int, int] = {}

    def inputs(self, tree: DraftTreeNodes, ids: list[int], dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions ``[1, k]`` and mask for feeding nodes ``ids``; records their slots."""
        ancestors = []
        for i in ids:
            parent = tree.nodes[i].parent
            path = tree.path_to(parent) if parent >= 0 else []
            missing = [a for a in path if a not in self.slot]
            if missing:
                raise ValueError(f"node {i} fed before its ancestors {missing}")
            ancestors.append([self.slot[a] for a in path])
        positions = torch.tensor([[self.base + self.offset + tree.nodes[i].depth - 1 for i in ids]], device=device)
        mask = tree_mask_over(self.base, len(self.slot), ancestors, dtype, device)
        for i in ids:
            self.slot[i] = len(self.slot)
        return positions, mask
