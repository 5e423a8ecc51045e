"""Size the statistical exactness tests from their broken twins (tests/test_verification_rules.py).

For every rule: run its broken twin ``MEASURE_RUNS`` times and measure its chi-square statistic; take the
smallest N whose expected statistic reaches the p < 1e-6 critical value, times a 2× margin
(``tests.exactness.size_runs``); then, at that N with the tests' own seed, check the twin is rejected and
the correct rule passes, and print the N and the twin's statistic to paste into the test module.

    .venv/bin/python scripts/size_exactness_tests.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.core.sampling import Sampler  # noqa: E402
from tests.exactness import PASS_P, REJECT_P, chi_square, critical_value, sample_sequences, size_runs  # noqa: E402
from tests.test_verification_rules import LENGTH, case_table, models, run_case  # noqa: E402

MEASURE_RUNS = 20000
MEASURE_SEED = 99  # not the tests' seed: N is sized on one sample and checked on another


def main() -> None:
    law = models()[0].law(LENGTH)
    runs, twins = {}, {}
    for name, case in case_table().items():
        patch = pytest.MonkeyPatch()
        twin = case.twin(patch)
        sampler = Sampler(1.0, seed=MEASURE_SEED)
        measured = sample_sequences(lambda: twin(sampler), MEASURE_RUNS)
        statistic, _, dof = chi_square(measured, law)
        n = size_runs(measured, law)
        twin_stat, twin_p, twin_dof = run_case(twin, n, law)
        patch.undo()
        _, good_p, _ = run_case(case.decode, n, law)
        critical = critical_value(twin_dof)
        runs[name] = n
        twins[name] = f"χ² {twin_stat:.0f} against {critical:.0f} ({twin_stat / critical:.1f}×)"
        verdict = "ok" if twin_p < REJECT_P and good_p > PASS_P else "CHECK"
        print(f"{name:28s} twin χ²/run {(statistic - dof) / MEASURE_RUNS:.3f}  N {n:5d}  twin at N: {twins[name]}, "
              f"p {twin_p:.1e}; correct rule p {good_p:.3f}  {verdict}")
    print("RUNS =", runs)
    print("TWIN =", twins)


if __name__ == "__main__":
    main()
