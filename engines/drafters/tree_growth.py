"""EAGLE-2's dynamic draft tree (Li et al. 2024): grow where the drafter is confident, then keep the best.

Expansion: the root's top-k children form the first frontier. At every further depth the frontier's k
nodes are fed to the drafter in one batched call; each proposes its top-k children, all k² become
candidates, and the k with the highest cumulative log-prob (the product of draft probabilities
along the path — EAGLE-2's estimate of the chance the path is accepted) become the next frontier.
Rerank: after ``depth`` levels, the ``total_tokens`` candidates with the highest cumulative log-prob go
to verification. A path's score only falls as it deepens, so the kept set contains every kept node's
ancestors (ties are broken shallower-first to keep that true).

Children are top-k picks, not samples, so under sampling they are point masses for the verifier.

Choosing ``total_tokens`` per round (``auto``, this project's rule, not EAGLE-2's): offering the m
most likely nodes is expected to commit 1 + Σ_{i≤m} P(node i accepted) tokens (a node adds one token
exactly when it is on the accepted path). EAGLE-2 reads that chance off the score, exp(s); here it is
calibrated on the run so far (:class:`TreeSizer`). A round costs the drafting already done plus the
target's forward over m + 1 tokens, read off the machine's verify-cost curve; the m with the most
expected tokens per second is sent.

Choosing the depth per round (``depth=auto``, this project's rule too): before each further level the sizer
asks whether it is expected to pay. The level's children are not drafted yet, so each frontier node's k children
are priced at the node's calibrated chance times how often a child of that rank was accepted after its parent was,
learned on the run (optimistic until seen, so that every level is tried); the level costs one more drafter call
(its measured time) and the larger tree's forward. The level is grown when the best tree it allows is expected to
commit more tokens per second than the best tree already grown. On a 2-core Zen 4, where verifying many rows is
steep, that was one level in most rounds (1.04-1.10 a round, docs/trees-and-cats.md); a confident root, or a flatter
verify-cost curve, makes a deeper level pay sooner.
"""

from __future__ import annotations

import bisect
import math
import time

import torch

from engines.core.draft_length import running_mean
from engines.core.draft_tree import DraftTreeNodes, TreeNode
from engines.core.sampling import Sampler
from engines.drafters.tree_drafters import draft_logprobs


def grow_tree(drafter, committed: list[int], depth: int, topk: int, sampler: Sampler,
              deeper: "TreeSizer | None" = None) -> DraftTreeNodes:
    """``deeper``: a sizer that decides before each level past the first whether to grow it (``depth=auto``;
    ``depth`` is then the most levels a round may grow)."""
    tree = DraftTreeNodes(drafter=drafter.name)
    started = time.perf_counter()
    values, tokens = _top_children(*drafter.root(committed), topk, sampler)
    values, tokens = values[0], tokens[0]
    frontier = [tree.add(TreeNode(t, -1, 1, v, v, rank))
                for rank, (v, t) in enumerate(zip(values, tokens)) if not math.isinf(v)]
    for level in range(2, depth + 1):
        if deeper is not None:
            now = time.perf_counter()
            if not deeper.deeper(tree, frontier, topk, now - started):
                break
        values, tokens = _top_children(*drafter.expand(tree, frontier), topk, sampler)
        if deeper is not None:
            deeper.level_took(time.perf_counter() - now)
        candidates = []
        for parent, row_values, row_tokens in zip(frontier, values, tokens):
            base = tree.nodes[parent].score
            for rank, (v, t) in enumerate(zip(row_values, row_tokens)):
                if math.isinf(v):  # outside a top-p nucleus or the draft vocabulary: never proposed
                    continue
                candidates.append(tree.add(TreeNode(t, parent, level, v, base + v, rank)))
        frontier = sorted(candidates, key=lambda i: -tree.nodes[i].score)[:topk]
        if not frontier:
            break
    drafter.finish()
    return tree


def _top_children(logits: torch.Tensor, column_ids: torch.Tensor | None, topk: int,
                  sampler: Sampler) -> tuple[list, list]:
    """Top-k (log q, token id) per row of draft logits over the drafter's own vocabulary."""
    values, columns = draft_logprobs(logits.reshape(-1, logits.shape[-1]), sampler).topk(min(topk, logits.shape[-1]), dim=-1)
    tokens = columns if column_ids is None else column_ids[columns]
    return values.tolist(), tokens.tolist()


def best_nodes(tree: DraftTreeNodes, total_tokens: int) -> list[int]:
    """The ``total_tokens`` highest-scoring nodes, shallower first on ties. An ancestor's score is never
    below its descendants', so this set already holds every kept node's ancestors; the closure is a guard."""
    order = sorted(range(len(tree)), key=lambda i: (-tree.nodes[i].score, tree.nodes[i].depth))
    keep = set(order[:total_tokens])
    for i in list(keep):
        keep.update(tree.path_to(i))
    return sorted(keep)


class TreeSizer:
    """``total_tokens=auto``: the tree size with the most expected tokens per second (module docstring).

    The chance a node is accepted is read from its draft score through a calibration learned on this
    run: nodes are binned by log score, and a bin's estimate is its accepted fraction so far, shrunk
    towards exp(score) by ``prior`` pseudo-nodes. One global factor is not enough: measured on the
    shipped ``eagle`` head, confident nodes are about as likely as their score says, while nodes with
    a score near 0.01 are accepted 2–4 times as often.
    """

    EDGES = (-0.25, -0.5, -1.0, -1.5, -2.0, -2.5, -3.0, -3.5, -4.0, -5.0, -6.0)  # natural-log score bins

    CHILD_PRIOR = (0.8, 0.3)  # a child's chance given its parent's, by rank, before the run has measured it
    CHILD_LEVELS = 4  # levels learned apart; deeper ones share the fourth's record

    def __init__(self, verify_seconds, max_nodes: int, prior: float = 2.0):
        self.verify_seconds = verify_seconds  # n → seconds of a target forward over n tokens
        self.max_nodes = max_nodes
        self.prior = prior
        bins = len(self.EDGES) + 1
        self.seen, self.hits = [0] * bins, [0] * bins
        self.child_seen: dict[tuple[int, int], int] = {}  # (level, rank) → children of an accepted parent
        self.child_hits: dict[tuple[int, int], int] = {}
        self.level_seconds: float | None = None
        self.link_seconds = 0.0  # a client–server round's link time (link_took); 0 on one device

    def _bin(self, score: float) -> int:
        """How many edges lie above ``score`` (a bisection: a round bins every node twice)."""
        return bisect.bisect_left(_NEGATED_EDGES, -score)

    def acceptance(self, score: float) -> float:
        b = self._bin(score)
        return (self.hits[b] + self.prior * math.exp(score)) / (self.seen[b] + self.prior)

    def choose(self, tree: DraftTreeNodes, draft_seconds: float) -> int:
        return self._best([self.acceptance(n.score) for n in tree.nodes], draft_seconds)[0]

    def _best(self, chances: list[float], draft_seconds: float) -> tuple[int, float]:
        """(m, expected tokens per second) of the best tree made of the m likeliest nodes."""
        chances = sorted(chances, reverse=True)[: self.max_nodes]
        best, best_rate, expected = 1, -1.0, 1.0
        for m, chance in enumerate(chances, start=1):
            expected += chance
            rate = expected / (draft_seconds + self.link_seconds + self.verify_seconds(m + 1))
            if rate > best_rate:
                best, best_rate = m, rate
        return best, best_rate

    def deeper(self, tree: DraftTreeNodes, frontier: list[int], topk: int, draft_seconds: float) -> bool:
        """Whether growing the frontier's children is expected to raise the round's tokens per second (module
        docstring). Until a level has been timed, the root's call (``draft_seconds``) stands in for it."""
        if not frontier:
            return False
        chances = [self.acceptance(n.score) for n in tree.nodes]
        level = tree.nodes[frontier[0]].depth + 1
        children = [chances[f] * self.continuation(level, rank)
                    for f in frontier for rank in range(topk)]
        level_seconds = self.level_seconds if self.level_seconds is not None else draft_seconds
        now = self._best(chances, draft_seconds)[1]
        grown = self._best(chances + children, draft_seconds + level_seconds)[1]
        return grown > now

    def continuation(self, level: int, rank: int) -> float:
        """P(a rank-``rank`` child at ``level`` is accepted | its parent was), shrunk towards an optimistic prior
        so that a level never grown is still tried."""
        key = self._child_key(level, rank)
        seen, hits = self.child_seen.get(key, 0), self.child_hits.get(key, 0)
        return (hits + self.prior * self.CHILD_PRIOR[min(rank, len(self.CHILD_PRIOR) - 1)]) / (seen + self.prior)

    def _child_key(self, level: int, rank: int) -> tuple[int, int]:
        return min(level, self.CHILD_LEVELS), rank

    def link_took(self, seconds: float) -> None:
        """A round's time on a client–server link (both messages), timed: a running mean. A round that pays a
        link's latency is worth more tokens, so larger and deeper trees pay sooner."""
        self.link_seconds = running_mean(self.link_seconds or None, seconds)

    def level_took(self, seconds: float) -> None:
        """One level's drafter call, timed: a running mean over the last few (the drafter's cost moves little)."""
        self.level_seconds = running_mean(self.level_seconds, seconds)

    def update(self, tree: DraftTreeNodes, committed: list[int]) -> None:
        """Learn from every candidate, sent or pruned: a node "hits" when its path spells the start of
        what the round committed. Under greedy decoding that is exactly whether it would have been
        accepted; learning from pruned nodes too means a size once judged too large is still revisited."""
        hit = [False] * len(tree)
        for i, node in enumerate(tree.nodes):
            parent_hit = node.parent < 0 or hit[node.parent]
            hit[i] = parent_hit and node.depth <= len(committed) and node.token == committed[node.depth - 1]
            b = self._bin(node.score)
            self.seen[b] += 1
            self.hits[b] += hit[i]
            if node.parent >= 0 and parent_hit:
                key = self._child_key(node.depth, node.rank)
                self.child_seen[key] = self.child_seen.get(key, 0) + 1
                self.child_hits[key] = self.child_hits.get(key, 0) + hit[i]


_NEGATED_EDGES = tuple(-edge for edge in TreeSizer.EDGES)  # ascending: bisect counts the edges above a score
