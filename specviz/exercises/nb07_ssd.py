"""Notebook 07's exercises (SSD): a round time from the law at the geometric run's measured costs, the hit rate
a speedup over SD needs, and an engine change to the geometric fan-out (the cache's shape).

Expected values are computed here from what the notebook passes in, never in the cell.
"""

from __future__ import annotations

from ..theory import ssd_round_time, ssd_speedup_vs_sd
from .checks import check_number
from .engine_change import EngineExercise, register

GEOMETRIC_FANOUT = register("nb07.geometric_fanout", EngineExercise(
    target="engines.programs.verdict.speculation_cache:geometric_fanout",
    tests=("tests/test_verdict.py::test_geometric_fanout_follows_the_lagrangian_optimum_within_budget",
           "tests/test_verdict.py::test_serial_greedy_equals_ar[ssd-options1]"),
    explanation="The budget now goes where verdicts land, the rows add up to it exactly, and SSD with the geometric "
                "fan-out still commits ar's tokens.",
    hint="Check three things: the rows sum to the budget exactly (rounding must not lose or add a branch), there "
         "are lookahead + 1 rows, and the weights follow the accepted-length law raised to the power section 2 "
         "gives."))


def round_time_ms(answer: float | None, t_verify: float, t_comm: float, hit_rate: float, t_backup: float,
                  t_draftwork: float) -> bool | None:
    """Exercise 1: E[T_round] in ms at the given costs (seconds) and hit rate h."""
    if not 0 <= hit_rate <= 1:
        raise ValueError(f"hit_rate must be in [0, 1], got {hit_rate}")
    side = "the draft work" if t_draftwork > t_verify else "the verification"
    return check_number(answer, 1e3 * ssd_round_time(t_verify, t_comm, hit_rate, t_backup, t_draftwork),
                        tolerance=0.02, relative=True,
                        explanation=f"Here {side} is the longer side of the overlap; the hit rate only scales the "
                                    "backup term.",
                        hint="Which of the two lanes' work is longer this round? Then add what every round pays, and "
                             "the backup only for the share of rounds that miss. Everything in ms.")


def hit_rate_for(answer: float | None, speedup: float, t_draft: float, t_verify: float, t_backup: float) -> bool | None:
    """Exercise 2: the hit rate h at which SSD's §5.6 ratio over SD reaches ``speedup``."""
    if t_backup <= 0 or t_verify <= 0:
        raise ValueError(f"t_backup and t_verify must be > 0, got {t_backup}, {t_verify}")
    needed = 1 - ((t_draft + t_verify) / speedup - t_verify) / t_backup
    if not 0 <= needed <= 1:
        raise ValueError(f"speedup must be reachable with a hit rate in [0, 1]; {speedup}× needs {needed:.3f}")
    assert abs(ssd_speedup_vs_sd(t_draft, t_verify, needed, t_backup) - speedup) < 1e-9
    return check_number(answer, needed, tolerance=0.005,
                        explanation=f"Even at h = 1 the ratio is only 1 + T_d/T_v = {1 + t_draft / t_verify:.2f}×: "
                                    "SSD can hide the draft, nothing more.",
                        hint="Write the round SSD must reach (SD's round ÷ the speedup), then ask what share of "
                             "misses fits in what is left after T_v.")
