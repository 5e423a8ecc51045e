"""Speculating on the verdict: Mirror-SD (paper 000) and SSD (paper 002) as two lane programs.

Lane T (rank 0, the driver) holds the target; lane D (rank 1) the draft. Each round T verifies the
window it holds while D, on its own core, prepares the next window for every verdict it thinks likely
(:mod:`~engines.programs.verdict.speculation_cache`, :mod:`~engines.programs.verdict.branch_rollout`).
Then T sends the verdict (k accepted, token c) and D answers with the cached window for that key — or,
on a miss, one drafted on the spot.

The two methods differ only in where the guesses come from and when they start:

- ``mirror``: T runs the window through layers 1..l_e, sends the early exit's top-κ at each of the γ+1
  positions (the ``ee`` message), then finishes layers l_e+1..N; D rolls out a window for each (j, v).
- ``ssd``: D guesses at once from its own glue forward — the top-F_k tokens of z_k, the speculated
  token excluded — with fan-out ``uniform`` or ``geometric``, and may draw windows by SAGUARO sampling.

Lossless in both: the committed tokens come only from T's verification of each drafted token against
the distribution it was drawn from; which window is used depends only on the verdict's key.

The package, one job a module: :mod:`~engines.programs.verdict.wire` (the plan both lanes agree on and
what they send each other), :mod:`~engines.programs.verdict.target_lane`,
:mod:`~engines.programs.verdict.draft_lane` with its :mod:`~engines.programs.verdict.guesser`, and
:mod:`~engines.programs.verdict.worker` (lane D in its own process).
"""
