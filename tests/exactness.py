"""The statistical harness for exactness tests: a table language model, its exact output law, and a pooled
chi-square test.

A verification rule is lossless when the tokens it commits follow the target's distribution whatever the
draft proposed. These tests run the engine's own rules (``engines.core.acceptance``, ``engines.core.draft_tree``, ...) on a
*table model*: p(· | prefix) and q(· | prefix) are fixed random distributions over a few tokens, looked up
by prefix, so a decoding loop costs microseconds instead of a transformer forward, and the exact law of
the first few committed tokens is a product of table entries. Each rule's test has a broken twin (the
same loop with one piece of the rule wrong) that the same test must reject.

Sizing N (the number of decoded sequences): the chi-square statistic of a broken twin grows linearly with
N (its non-centrality is N·D, D = Σ (P_twin − P)² / P). :func:`size_runs` turns one measured statistic
into the smallest N whose *expected* statistic reaches the p < 1e-6 critical value, and the tests run
``MARGIN`` times that, so the twin is rejected with room to spare while the correct rule stays cheap.
Each test's docstring states its N and the twin's statistic at that N against the critical value.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import Counter
from typing import Callable, Iterable

import torch
from scipy.stats import chi2, chisquare

REJECT_P = 1e-6  # a broken twin must be rejected below this p-value
PASS_P = 1e-3  # the correct rule must stay above this one (the seed is fixed: the test is deterministic)
MARGIN = 2.0  # tests run MARGIN × the smallest N whose expected twin statistic reaches the critical value
MIN_EXPECTED = 5  # chi-square cells expecting fewer samples are pooled into one


class TableModel:
    """A language model over ``vocab`` tokens whose next-token distribution is a fixed random table entry
    per prefix: deterministic, cheap, and enumerable. ``scale`` sharpens the logits (peaky distributions
    make draft and target disagree often, which is where a wrong rule shows)."""

    def __init__(self, vocab: int, seed: int, scale: float = 2.0):
        self.vocab, self.seed, self.scale = vocab, seed, scale
        self._rows: dict[tuple[int, ...], torch.Tensor] = {}

    def probs(self, prefix: Iterable[int]) -> torch.Tensor:
        key = tuple(prefix)
        row = self._rows.get(key)
        if row is None:
            digest = hashlib.blake2b(repr((self.seed, key)).encode(), digest_size=8).digest()
            generator = torch.Generator().manual_seed(int.from_bytes(digest, "little"))
            row = torch.softmax(torch.randn(self.vocab, generator=generator) * self.scale, -1)
            self._rows[key] = row
        return row

    def rows(self, prefix: tuple[int, ...], continuations: list[list[int]]) -> torch.Tensor:
        """``[len(continuations), V]``: the next-token distribution after ``prefix`` + each continuation."""
        return torch.stack([self.probs(prefix + tuple(c)) for c in continuations])

    def law(self, length: int) -> dict[tuple[int, ...], float]:
        """The exact probability of every sequence of ``length`` tokens."""
        law = {}
        for seq in itertools.product(range(self.vocab), repeat=length):
            law[seq] = math.prod(float(self.probs(seq[:i])[t]) for i, t in enumerate(seq))
        return law


def sample_sequences(decode: Callable[[], tuple[int, ...]], runs: int) -> Counter:
    """How often each sequence came out of ``runs`` calls of ``decode`` (it draws from its own seeded stream)."""
    return Counter(decode() for _ in range(runs))


def _pooled(counts: Counter, law: dict[tuple, float], runs: int) -> tuple[list[float], list[float]]:
    """Observed counts and expected probabilities per cell, cells expecting < MIN_EXPECTED of ``runs`` pooled."""
    common = [s for s in law if law[s] * runs >= MIN_EXPECTED]
    rare = [s for s in law if law[s] * runs < MIN_EXPECTED]
    observed = [float(counts[s]) for s in common]
    probs = [law[s] for s in common]
    if rare:
        observed.append(float(sum(counts[s] for s in rare)))
        probs.append(sum(law[s] for s in rare))
    total = sum(probs)  # the law sums to 1 up to rounding; chisquare wants equal sums
    return observed, [p / total for p in probs]


def chi_square(counts: Counter, law: dict[tuple, float]) -> tuple[float, float, int]:
    """(statistic, p-value, degrees of freedom) of ``counts`` against ``law``, rare cells pooled."""
    runs = sum(counts.values())
    observed, probs = _pooled(counts, law, runs)
    result = chisquare(observed, [p * runs for p in probs])
    return float(result.statistic), float(result.pvalue), len(observed) - 1


def critical_value(dof: int, p: float = REJECT_P) -> float:
    return float(chi2.isf(p, dof))


def size_runs(twin_counts: Counter, law: dict[tuple, float], margin: float = MARGIN) -> int:
    """The runs a test needs to reject a twin, from one large sample of the twin's output.

    Expected statistic at N runs ≈ N·D_N + dof_N, where D_N = Σ (f − P)² / P over the cells as pooled at N
    (f: the twin's measured frequencies; pooling at small N merges cells, which can hide a twin's bias, so
    D depends on N). Returns the smallest N (stepping by 5%) with N·D_N ≥ ``margin`` × (critical − dof)."""
    measured = sum(twin_counts.values())
    n = 50
    while n < 100 * measured:
        observed, probs = _pooled(twin_counts, law, n)
        per_run = sum((o / measured - p) ** 2 / p for o, p in zip(observed, probs))
        # the sample's own noise adds (cells − 1) / measured to D: take it off
        per_run -= (len(observed) - 1) / measured
        dof = len(observed) - 1
        if n * per_run >= margin * (critical_value(dof) - dof):
            return n
        n = math.ceil(n * 1.05)
    raise ValueError(f"the twin is not distinguishable with up to {n} runs: strengthen it")
