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
"""

from __future__ import annotations

from typing import Callable


class DraftLength:
    def __init__(self, verify_seconds: Callable[[int], float], max_gamma: int = 16, prior_hits: float = 1.0,
                 prior_trials: float = 2.0):
        self.verify_seconds = verify_seconds
        self.max_gamma = max_gamma
        self.hits, self.trials = prior_hits, prior_trials
        self.draft_seconds = 0.0
        self.drafted = 0

    @property
    def alpha(self) -> float:
        """The running per-position acceptance estimate, accepted ÷ positions judged (prior included);
        the per-token acceptance probability the model above takes, not the run's α (accepted ÷ drafted)."""
        return self.hits / self.trials

    @property
    def seconds_per_draft_token(self) -> float:
        return self.draft_seconds / self.drafted if self.drafted else 0.0

    def expected_tokens(self, gamma: int) -> float:
        a = min(self.alpha, 1 - 1e-9)
        return (1 - a ** (gamma + 1)) / (1 - a)

    def choose(self, limit: int) -> int:
        """Best γ in [1, min(max_gamma, limit)]; ``limit`` < 1 (nothing left to draft) gives 0."""
        if limit < 1:
            return 0
        step = self.seconds_per_draft_token
        return max(range(1, min(self.max_gamma, limit) + 1),
                   key=lambda g: self.expected_tokens(g) / (g * step + self.verify_seconds(g + 1)))

    def update(self, drafted: int, accepted: int, draft_seconds: float) -> None:
        self.trials += min(accepted + 1, drafted)
        self.hits += accepted
        self.drafted += drafted
        self.draft_seconds += draft_seconds
