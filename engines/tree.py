"""Draft trees and their lossless verification: the one module every tree method uses.

A draft tree hangs off the last committed token (the *root*, not itself a node). The target runs the
root and every node in one forward under a tree mask — a node attends to the cached prefix, the root,
its ancestors and itself, at position prefix + depth — so each node's row of logits is the target's
next-token distribution after that node's path, exactly as if the path had been decoded alone.

The walk then decides which path survives:

- greedy: from the root, step to the child whose token is the target's argmax; stop when none is; the
  target's argmax after the last accepted node is the bonus (or correction) token;
- sampling, the multi-candidate rule (SpecInfer; Chen et al. 2023, "recursive rejection sampling"):
  at a node with target distribution p, try its children in order. A child drawn from q is accepted
  with probability min(1, p(c)/q(c)); on rejection p ← norm(max(p − q, 0)). A child picked
  deterministically (top-k, a correction, a lookup) is a point mass: accepted with probability p(c), on
  rejection p ← norm(p with c removed) — the same formula with q = δ_c. Each child must be drawn
  independently of its siblings' draws (top-k picks are deterministic, hence independent). If every
  child is rejected the next token is drawn from the final residual; after the last accepted node with
  no children left, from that node's p (the bonus). The output distribution equals the target's.

After verification the KV cache keeps only the root's and the accepted path's rows, packed in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .kv_cache import KVCache
from .sampling import Sampler
from .verify import residual_distribution


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


@dataclass
class TreeVerdict:
    path: list[int]  # accepted node ids, root's child first
    next_token: int
    next_fate: str  # bonus | correction
    # per node: accepted | rejected (tried and refused) | unreached (its parent was never accepted)
    outcomes: list[str]
    p_token: list[float | None] = field(default_factory=list)  # target p(token) under the rule, per tried node
    q_token: list[float | None] = field(default_factory=list)
    draws: list[float | None] = field(default_factory=list)  # the uniform that decided each tried node


def greedy_tree(tree: DraftTreeNodes, target_logits: torch.Tensor) -> TreeVerdict:
    """``target_logits`` ``[1 + n, V]``: row 0 after the root, row 1 + i after node i."""
    predicted = target_logits.argmax(-1).tolist()
    kids = tree.children()
    outcomes = ["unreached"] * len(tree)
    path, row = [], 0
    parent = -1
    while True:
        chosen = None
        for child in kids.get(parent, []):
            if chosen is None and tree.nodes[child].token == predicted[row]:
                chosen = child
            outcomes[child] = "accepted" if child == chosen else "rejected"
        if chosen is None:
            break
        path.append(chosen)
        parent, row = chosen, chosen + 1
    fate = "correction" if kids.get(parent) else "bonus"
    return TreeVerdict(path, predicted[row], fate, outcomes)


def sample_tree(tree: DraftTreeNodes, target_probs: torch.Tensor, sampler: Sampler) -> TreeVerdict:
    """The multi-candidate rule over warped target distributions ``[1 + n, V]``.

    p(token) under each node's parent row and q(token) are fetched for the whole tree in one transfer; the
    host waits on the device again only after a rejection, when the residual replaces the row."""
    kids = tree.children()
    n = len(tree)
    outcomes = ["unreached"] * n
    p_token: list[float | None] = [None] * n
    q_token: list[float | None] = [None] * n
    draws: list[float | None] = [None] * n
    first_p, first_q = _node_probabilities(tree, target_probs)
    path, parent, row = [], -1, 0
    p, residual = target_probs[0], False
    while True:
        accepted = None
        for child in kids.get(parent, []):
            node = tree.nodes[child]
            p_c = float(p[node.token]) if residual else first_p[child]
            q_c = first_q[child]
            u = sampler.uniform()
            p_token[child], q_token[child], draws[child] = p_c, q_c, u
            if u * q_c < p_c:  # u < p/q without dividing by zero
                accepted = child
                outcomes[child] = "accepted"
                break
            outcomes[child] = "rejected"
            p = _remove_token(p, node.token) if node.q is None else residual_distribution(p, node.q)
            residual = True
        if accepted is None:
            fate = "correction" if kids.get(parent) else "bonus"
            return TreeVerdict(path, sampler.draw(p), fate, outcomes, p_token, q_token, draws)
        path.append(accepted)
        parent, row = accepted, accepted + 1
        p, residual = target_probs[row], False


def _node_probabilities(tree: DraftTreeNodes, target_probs: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per node: the target's p(token) in its parent's row, and the draft's q(token) (1 for a point mass)."""
    if not len(tree):
        return [], []
    device = target_probs.device
    rows = torch.tensor([node.parent + 1 for node in tree.nodes], device=device)  # row 0 is the root's
    tokens = torch.tensor([node.token for node in tree.nodes], device=device)
    one = torch.ones((), device=device)
    q = torch.stack([one if node.q is None else node.q[node.token].to(device, torch.float32) for node in tree.nodes])
    p_host, q_host = torch.stack([target_probs[rows, tokens].float(), q]).cpu().tolist()
    return p_host, q_host


def typical_tree(tree: DraftTreeNodes, target_probs: torch.Tensor, sampler: Sampler, epsilon: float = 0.09,
                 delta: float = 0.3) -> TreeVerdict:
    """Typical acceptance (Medusa; CATS's "relaxed" mode) — LOSSY: a child is accepted when the target
    finds it plausible enough, p(c) > min(ε, δ·exp(−H(p))), not when it is what the target would
    have produced. The next token is the target's own (argmax when greedy, else a sample)."""
    kids = tree.children()
    outcomes = ["unreached"] * len(tree)
    path, parent, row = [], -1, 0
    while True:
        p = target_probs[row]
        entropy = float(-(p * p.clamp_min(1e-12).log()).sum())
        threshold = min(epsilon, delta * math.exp(-entropy))
        accepted = None
        for child in kids.get(parent, []):
            if accepted is None and float(p[tree.nodes[child].token]) > threshold:
                accepted = child
            outcomes[child] = "accepted" if child == accepted else "rejected"
        if accepted is None:
            token = int(p.argmax()) if sampler.greedy else sampler.draw(p)
            return TreeVerdict(path, token, "correction" if kids.get(parent) else "bonus", outcomes)
        path.append(accepted)
        parent, row = accepted, accepted + 1


def _remove_token(p: torch.Tensor, token: int) -> torch.Tensor:
    """The residual after a point mass at ``token`` is rejected: p with that token removed, renormalized."""
    p = p.clone()
    p[token] = 0
    total = p.sum()
    return p / total if total > 0 else p


def verify_tree(tree: DraftTreeNodes, target_logits: torch.Tensor, sampler: Sampler) -> TreeVerdict:
    if sampler.greedy:
        return greedy_tree(tree, target_logits)
    return sample_tree(tree, sampler.probs(target_logits), sampler)


def keep_path(cache: KVCache, prefix: int, path: list[int]) -> None:
    """Compact a cache that holds [root] + nodes after ``prefix``: keep the root and the accepted path."""
    cache.keep(prefix, [0] + [node + 1 for node in path])


def tree_mask_over(prefix: int, slots: int, ancestors: list[list[int]], dtype: torch.dtype, device) -> torch.Tensor:
    """Additive mask ``[1, 1, n, prefix + slots + n]`` for n new rows appended after ``slots`` earlier tree
    rows: row i sees the prefix, the earlier slots listed in ``ancestors[i]`` and itself."""
    n = len(ancestors)
    allowed = torch.zeros(n, prefix + slots + n, dtype=torch.bool)
    allowed[:, :prefix] = True
    for i, seen in enumerate(ancestors):
        allowed[i, [prefix + s for s in seen]] = True
        allowed[i, prefix + slots + i] = True
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None].to(device)


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
