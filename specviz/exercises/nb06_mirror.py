"""Notebook 06's exercises (Mirror-SD): the step time and the best draft cost from the latency law, at the
costs the reader's own run measured, and an engine change to the roots the draft lane prepares windows for.

The expected values are computed here from the numbers the notebook passes in, so the cell never shows
them; a wrong answer gets a hint that points at what to compare, not the formula.
"""

from __future__ import annotations

from ..theory import mirror_speedup_vs_sd, mirror_step_time
from .checks import check_number
from .engine_change import EngineExercise, register

MIRROR_ROOTS = register("nb06.mirror_roots", EngineExercise(
    target="engines.programs.verdict.guesser:mirror_roots",
    tests=("tests/test_verdict.py::test_mirror_roots_are_the_early_exits_top_kappa_less_each_drafted_token",
           "tests/test_verdict.py::test_mirror_events_carry_the_early_exit_and_each_reuse_decision"),
    explanation="The draft lane now prepares a window for every verdict the early exit can still catch, and none "
                "for a verdict that cannot happen.",
    hint="Look at what a verdict at position j means for the token drafted at j, and at how the flat logprobs "
         "line up with the rows of ids."))


def step_time_ms(answer: float | None, t_prefix: float, t_suffix: float, t_gen: float, t_rv: float) -> bool | None:
    """Exercise 1: the paper's step time (no fallbacks) in ms, from the measured means in seconds."""
    for name, value in (("t_prefix", t_prefix), ("t_suffix", t_suffix), ("t_gen", t_gen), ("t_rv", t_rv)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0 seconds, got {value}")
    longer = "the rollout T_gen" if t_gen > t_suffix else "the suffix Δ"
    return check_number(answer, 1e3 * mirror_step_time(t_prefix, t_suffix, t_gen, t_rv), tolerance=0.02,
                        relative=True,
                        explanation=f"Here {longer} is the longer of the two branches that run side by side, so it "
                                    "sets the round.",
                        hint="Two things run side by side after the prefix; only the longer one is on the critical "
                             "path. Compare the printed Δ and T_gen first, and keep everything in ms.")


def best_speedup_over_sd(answer: float | None, t_prefix: float, t_suffix: float, t_rv: float) -> tuple[bool | None, float]:
    """Exercise 2: the largest speedup over vanilla SD the law allows over every draft cost; returns the check and
    the draft cost (s) that reaches it, which the notebook prints only after a right answer."""
    grid = [t_suffix] + [i * 1e-4 for i in range(1, 5001)]  # T_gen = Δ, and 0.1 ms to 500 ms
    best = max(grid, key=lambda t: mirror_speedup_vs_sd(t_prefix, t_suffix, t, t_rv))
    ok = check_number(answer, mirror_speedup_vs_sd(t_prefix, t_suffix, best, t_rv), tolerance=0.01,
                      explanation="Below Δ the draft hides completely and the saving grows with its cost; above Δ "
                                  "only Δ of it can hide.",
                      hint="Try a few draft costs in the section 2 explorer: one cheaper than Δ, one equal, one "
                           "dearer. Which one does the speedup peak at?")
    return ok, best
