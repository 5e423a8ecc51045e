"""The acceptance rule, written once: how the target judges drafted tokens, for every method.

One judged-token rule (Leviathan et al. 2023; Chen et al. 2023): a drafted token x, drawn from q, is kept
with probability min(1, p(x)/q(x)); on refusal the target's distribution becomes the residual
p ← norm(max(p − q, 0)). A token picked deterministically (prompt lookup, top-k, a correction) is a
point mass, q = δ_x: kept with probability p(x), and the residual is p with x removed.

Everything else is that rule applied along a draft tree (:class:`~engines.core.draft_tree.DraftTreeNodes`):

- a **tree** (SpecInfer's multi-candidate rule): at each reached node, try its children in order; the
  first one kept is stepped into; if all are refused, the next token is drawn from the last residual;
  after the last kept node with no children, from that node's own p (the bonus token);
- a **chain** is a tree with one child per node (:func:`judge_chain`);
- **one token** (PPSD's last stage judging the draft that rode along) is a chain of one (:func:`judge_token`).

**Greedy is the T = 0 case**: the target's p at each row is a point mass on its argmax, so a child is
kept exactly when it is the argmax (every child of a reached node is judged at once), and the residual
of a point mass stays that point mass, so the next token is the argmax. No random number is drawn.

Two other rules share the walk: ``token_match`` (Mirror-SD's Eq. 3/11: draw the target's own token at
each reached node and keep the child equal to it; lossless, accepts less often) and ``typical``
(Medusa's typical acceptance, CATS's relaxed mode: a child is kept when p(c) > min(ε, δ·exp(−H(p)));
LOSSY when sampling). At T = 0 both are the greedy walk. Every uniform of a round is drawn up front, one
per node, so a round waits on the device once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from engines.core.draft_tree import DraftTreeNodes, TreeNode
from engines.core.sampling import Sampler, greedy_tokens

RULES = ("exact", "token_match", "typical")
TYPICAL_EPSILON, TYPICAL_DELTA = 0.09, 0.3


@dataclass
class Verdict:
    """The outcome of judging one round's drafts. Node ids are the judged tree's own."""

    path: list[int]  # kept node ids, the root's child first
    next_token: int  # the target's token after the last kept node
    next_fate: str  # "bonus" when the last kept node had no children to try, else "correction"
    # per node: accepted | rejected (judged and refused) | unreached (its parent was never kept)
    outcomes: list[str] = field(default_factory=list)
    p_token: list[float | None] = field(default_factory=list)  # p(token) the rule used, per judged node (sampling)
    q_token: list[float | None] = field(default_factory=list)
    draws: list[float | None] = field(default_factory=list)  # the uniform that decided each judged node

    @property
    def n_accepted(self) -> int:
        return len(self.path)


def residual_distribution(p: torch.Tensor, q: torch.Tensor | None, token: int | None = None) -> torch.Tensor:
    """norm(max(p − q, 0)): what is left of p once q's proposal was refused. ``q`` ``None`` is the point
    mass on ``token``: p with that token removed. Nothing left (q covers p) falls back to p."""
    if q is None:
        residual = p.clone()
        residual[token] = 0
    else:
        residual = (p - q.to(p.device)).clamp_min(0)
    total = residual.sum()
    return residual / total if total > 0 else p


def judge(tree: DraftTreeNodes, target_logits: torch.Tensor, sampler: Sampler, rule: str = "exact",
          bonus: bool = True) -> Verdict:
    """Judge a draft tree. ``target_logits`` ``[1 + n, V]``: row 0 after the root, row 1 + i after node i.
    ``bonus=False``: a walk that keeps a leaf ends there without drawing the token after it (``next_token``
    −1), for a caller that holds no row after the drafts (PPSD's last stage)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    n = len(tree)
    verdict = Verdict([], -1, "", ["unreached"] * n, [None] * n, [None] * n, [None] * n)
    rows = _TargetRows(tree, target_logits, sampler, rule)
    kids = tree.children()
    parent, row = -1, 0
    while True:
        children = kids.get(parent, [])
        kept = rows.try_children(row, children, verdict)
        if kept is None:
            verdict.next_token = rows.next_token(row) if children or bonus else -1
            verdict.next_fate = "correction" if children else "bonus"
            return verdict
        verdict.path.append(kept)
        parent, row = kept, kept + 1


def judge_chain(tokens: list[int], probs: torch.Tensor | None, target_logits: torch.Tensor, sampler: Sampler,
                rule: str = "exact") -> Verdict:
    """A drafted chain: ``probs`` ``[γ, V]`` is q at each position (``None``: point masses, a lookup)."""
    return judge(chain_tree(tokens, probs), target_logits, sampler, rule)


def judge_token(token: int, target_logits: torch.Tensor, q: torch.Tensor | None, sampler: Sampler) -> tuple[int, bool]:
    """One drafted token against the target's logits ``[V]`` at its position (the row that predicts it): the
    token committed there and whether it is the draft."""
    verdict = judge(chain_tree([token], None if q is None else q[None]), target_logits[None], sampler, bonus=False)
    return (token, True) if verdict.n_accepted else (verdict.next_token, False)


def chain_tree(tokens: list[int], probs: torch.Tensor | None = None,
               logprobs: list[float] | None = None) -> DraftTreeNodes:
    """A chain as the tree the rule walks: node i hangs off node i − 1."""
    tree = DraftTreeNodes()
    for i, token in enumerate(tokens):
        tree.add(TreeNode(token, i - 1, i + 1, logprob=logprobs[i] if logprobs else 0.0,
                          q=None if probs is None else probs[i]))
    return tree


class _TargetRows:
    """The target's distribution at each row of a round, as the rule needs it: argmaxes when greedy;
    else p(token) and q(token) for every node fetched in one transfer, and one uniform per node."""

    def __init__(self, tree: DraftTreeNodes, logits: torch.Tensor, sampler: Sampler, rule: str):
        self.tree, self.sampler, self.rule = tree, sampler, rule
        self.greedy = sampler.greedy
        self.residual: dict[int, torch.Tensor] = {}  # row -> p after refusals there
        if self.greedy:  # every rule's T = 0 case: a point mass on each row's argmax
            self.argmax = greedy_tokens(logits)
            return
        self.probs = sampler.probs(logits)
        self.first_p, self.first_q = _node_probabilities(tree, self.probs)
        self.uniforms = sampler.uniforms(len(tree)).tolist() if rule == "exact" and len(tree) else []
        self.drawn: dict[int, int] = {}  # token_match: the target's own token per row

    def try_children(self, row: int, children: list[int], verdict: Verdict) -> int | None:
        if not children:
            return None
        nodes = self.tree.nodes
        if self.rule == "typical" and not self.greedy:
            return self._typical(row, children, verdict)
        if self.greedy or self.rule == "token_match":  # every child judged at once against one target token
            wanted = self.argmax[row] if self.greedy else self._drawn(row)
            kept = next((c for c in children if nodes[c].token == wanted), None)
            for c in children:
                verdict.outcomes[c] = "accepted" if c == kept else "rejected"
            return kept
        for c in children:  # min(1, p/q), children tried in order, the residual carried between them
            node = nodes[c]
            p = float(self.residual[row][node.token]) if row in self.residual else self.first_p[c]
            q, u = self.first_q[c], self.uniforms[c]
            verdict.p_token[c], verdict.q_token[c], verdict.draws[c] = p, q, u
            if u * q < p:  # u < p/q without dividing by zero
                verdict.outcomes[c] = "accepted"
                return c
            verdict.outcomes[c] = "rejected"
            self.residual[row] = residual_distribution(self.residual.get(row, self.probs[row]), node.q, node.token)
        return None

    def next_token(self, row: int) -> int:
        if self.greedy:
            return self.argmax[row]
        if self.rule == "token_match":
            return self._drawn(row)
        return self.sampler.draw(self.residual.get(row, self.probs[row]))

    def _drawn(self, row: int) -> int:
        if row not in self.drawn:
            self.drawn[row] = self.sampler.draw(self.probs[row])
        return self.drawn[row]

    def _typical(self, row: int, children: list[int], verdict: Verdict) -> int | None:
        p = self.probs[row]
        entropy = float(-(p * p.clamp_min(1e-12).log()).sum())
        threshold = min(TYPICAL_EPSILON, TYPICAL_DELTA * math.exp(-entropy))
        kept = next((c for c in children if float(p[self.tree.nodes[c].token]) > threshold), None)
        for c in children:
            verdict.outcomes[c] = "accepted" if c == kept else "rejected"
        return kept


def _node_probabilities(tree: DraftTreeNodes, target_probs: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per node: the target's p(token) in its parent's row, and the draft's q(token) (1 for a point mass)."""
    if not len(tree):
        return [], []
    device = target_probs.device
    rows = torch.tensor([node.parent + 1 for node in tree.nodes], device=device)  # row 0 is the root's
    tokens = torch.tensor(tree.tokens, device=device)
    one = torch.ones((), device=device)
    q = torch.stack([one if node.q is None else node.q[node.token].to(device, torch.float32) for node in tree.nodes])
    p_host, q_host = torch.stack([target_probs[rows, tokens].float(), q]).cpu().tolist()
    return p_host, q_host
