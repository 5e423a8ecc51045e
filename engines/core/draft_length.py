"""``gamma=auto`` for chain methods: each round, draft only as many tokens as pay on this machine.

Leviathan et al.'s model gives the expected tokens a round of γ drafts commits when each position is
accepted with probability a (the per-token acceptance probability, the paper's α): (1 − a^{γ+1}) / (1 − a).
A round costs γ draft steps plus one target forward over γ + 1 tokens. The draft step's cost is measured
on the run (seconds per drafted token, a running mean); the forward's comes from the machine's
verify-cost curve (:mod:`engines.model.verify_cost`), so on a CPU where 16 tokens cost twice one the same
acceptance buys a shorter draft than on one where they cost 1.3×. a is the run's own per-position
acceptance estimate so far (accepted ÷ positions judged), starting from a prior of one hit in two. Each
round takes the γ with the most expected tokens per second; at least one token is drafted so the
estimate keeps being measured.

A drafter that says why it proposes each token (``Draft.evidence``: the model-free drafters name the
n-gram match behind each token) is judged token by token instead: it proposes as many as could pay (as if
each were of the best kind seen so far), and the round keeps the prefix with the most expected tokens per second, where position i is accepted with the
run's own estimate for its kind of evidence (:meth:`DraftLength.cut`). Why: one a for all of a drafter's
tokens averages a continuation seen three times after a 4-gram (accepted ~0.9 of the time on
``data/prompts.jsonl``) with one seen once after a single token (~0.1), so a round either verifies the
doubtful ones or cuts the sure ones short; judged apart, a round whose first token is doubtful verifies
nothing and costs one step (``docs/verify-cost.md``, "Drafts cut by their evidence"). A kind of evidence
never judged starts from the run's estimate over all kinds rather than from a fixed prior, and its own record
outweighs that as it grows: where copies are rarely accepted (sampling at T = 1) each of the suffix drafter's
~50 kinds is not tried afresh at one in two.
"""

from __future__ import annotations

from typing import Callable, Hashable, Sequence

PRIOR_HITS, PRIOR_TRIALS = 1.0, 2.0


def running_mean(mean: float | None, value: float, weight: float = 0.2) -> float:
    """A mean that follows a cost as it drifts (a drafter's call, a link's round trip): the last few rounds weigh
    most. ``None``: nothing measured yet, so the first value stands."""
    return value if mean is None else (1 - weight) * mean + weight * value


class DraftLength:
    def __init__(self, verify_seconds: Callable[[int], float], max_gamma: int = 16, prior_hits: float = PRIOR_HITS,
                 prior_trials: float = PRIOR_TRIALS):
        self.verify_seconds = verify_seconds
        self.max_gamma = max_gamma
        self.prior = (prior_hits, prior_trials)
        self.hits, self.trials = prior_hits, prior_trials
        self.by_evidence: dict[Hashable, list[float]] = {}  # kind of evidence → [hits, trials] judged
        self.draft_seconds = 0.0
        self.drafted = 0

    @property
    def alpha(self) -> float:
        """The running per-position acceptance estimate, accepted ÷ positions judged (prior included);
        the per-token acceptance probability the model above takes, not the run's α (accepted ÷ drafted)."""
        return self.hits / self.trials

    def alpha_for(self, evidence: Hashable) -> float:
        """The per-position acceptance estimate of tokens proposed on ``evidence``: its own hits and trials, shrunk
        towards the run's estimate over every kind (:attr:`alpha`) by as many trials as the prior holds. A kind
        never judged starts at what the drafter's tokens have been worth so far in this run."""
        hits, trials = self.by_evidence.get(evidence, (0.0, 0.0))
        weight = self.prior[1]
        return (hits + weight * self.alpha) / (trials + weight)

    @property
    def seconds_per_draft_token(self) -> float:
        return self.draft_seconds / self.drafted if self.drafted else 0.0

    def expected_tokens(self, gamma: int, alpha: float | None = None) -> float:
        a = min(self.alpha if alpha is None else alpha, 1 - 1e-9)
        return (1 - a ** (gamma + 1)) / (1 - a)

    def limit(self, limit: int) -> int:
        """How many tokens a drafter with evidence may propose: as many as would pay if every one were of the
        best kind seen so far (a kind never judged counts at :attr:`alpha`), up to ``max_gamma`` and what the
        round may commit. Why a bound: proposing costs the drafter's Python per token, and where copies are
        rarely accepted (sampling at T = 1) a proposal of 16 that the cut shortens to 0 or 1 was most of c."""
        limit = max(0, min(self.max_gamma, limit))
        if limit < 1 or not self.by_evidence:
            return limit
        best = max([self.alpha] + [self.alpha_for(kind) for kind in self.by_evidence])
        return self.choose(limit, best, drafting=False)

    def choose(self, limit: int, alpha: float | None = None, drafting: bool = True) -> int:
        """Best γ in [1, min(max_gamma, limit)] at acceptance ``alpha`` (the run's estimate when None), the draft
        steps priced unless ``drafting`` is off; ``limit`` < 1 (nothing left to draft) gives 0."""
        limit = max(0, min(self.max_gamma, limit))
        if limit < 1:
            return 0
        step = self.seconds_per_draft_token if drafting else 0.0
        return max(range(1, limit + 1),
                   key=lambda g: self.expected_tokens(g, alpha) / (g * step + self.verify_seconds(g + 1)))

    def cut(self, evidence: Sequence[Hashable], expected: float = 1.0, rows: int = 1, seconds: float = 0.0,
            free: int = 0) -> int:
        """How many of a proposal's tokens to verify (0 … len(evidence)): the prefix with the most expected
        tokens per second, token i accepted (once those before it were) with its evidence's estimate. The
        tokens are already drafted, so only verification is priced. ``expected``, ``rows`` and ``seconds``: what
        the round holds besides them (a chain round: the bonus token, the root's row; a tree round with a chain
        grafted in: the model's nodes too, and its drafting). The first ``free`` tokens are sent anyway (a
        model's nodes that spell them): kept, and neither priced nor counted again."""
        reach = self.reach(evidence[: self.max_gamma])
        free = min(free, len(reach))
        best, keep = expected / (seconds + self.verify_seconds(rows)), free
        for i in range(free, len(reach)):
            expected += reach[i]
            rate = expected / (seconds + self.verify_seconds(rows + i - free + 1))
            if rate > best:
                best, keep = rate, i + 1
        return keep

    def reach(self, evidence: Sequence[Hashable]) -> list[float]:
        """The chance that each token of a proposal is accepted together with every token before it: the running
        products of their kinds' estimates. Their sum is the tokens the proposal is expected to commit."""
        chances, reached = [], 1.0
        for kind in evidence:
            reached *= self.alpha_for(kind)
            chances.append(reached)
        return chances

    def update(self, drafted: int, accepted: int, draft_seconds: float,
               evidence: Sequence[Hashable] | None = None) -> None:
        self.trials += min(accepted + 1, drafted)
        self.hits += accepted
        self.drafted += drafted
        self.draft_seconds += draft_seconds
        for i, kind in enumerate((evidence or ())[:drafted]):
            if i > accepted:  # never judged: the round ended at the rejection before it
                break
            tally = self.by_evidence.setdefault(kind, [0.0, 0.0])
            tally[0] += i < accepted
            tally[1] += 1
