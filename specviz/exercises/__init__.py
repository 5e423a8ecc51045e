"""Checks for the notebooks' exercises: the answer is computed here, never in the notebook's cell.

``checks``: a number, a choice, a function that must pass a test. ``predictions``: asked before the run,
compared after it. ``diagnosis``: which measured term cost the speedup. ``engine_change``: a change to an
engine function, checked by the engine's own tests. One module per notebook (``nb01_…``) holds that
notebook's checkers, so its expected values come from the run the reader just made.
"""

from .checks import UNANSWERED, check_choice, check_number, check_passes
from .diagnosis import diagnose_speedup, round_terms_markdown
from .engine_change import ENGINE_EXERCISES, EngineExercise, check_engine_change
from .predictions import predict, reveal

__all__ = ["UNANSWERED", "check_choice", "check_number", "check_passes", "diagnose_speedup", "round_terms_markdown", "ENGINE_EXERCISES",
           "EngineExercise", "check_engine_change", "predict", "reveal"]
