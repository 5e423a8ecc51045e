"""Notebook 08's exercises (MoA): server calls and time on the link of a longer answer under 4G, predicted from the
5G runs, and an engine change to the 8-bit quantization that keeps MoA's verdict message small.

Expected values come from the runs the notebook passes in, never from the cell.
"""

from __future__ import annotations

from ..theory import server_calls_per_answer
from .checks import check_number
from .engine_change import EngineExercise, register

QUANTIZE_ROWS = register("nb08.quantize_rows", EngineExercise(
    target="engines.network.link:quantize_rows",
    tests=("tests/test_network.py::test_int8_error_is_at_most_half_a_step_per_row",
           "tests/test_network.py::test_sizes_are_table7_plus_header_and_row_scales",
           "tests/test_network.py::test_verdict_round_trips"),
    explanation="Each activation now crosses the link as one byte plus a float16 scale per row, with an error of "
                "at most half a step.",
    hint="Rows differ in magnitude by orders: what must the scale be for the largest value of a row to land on "
         "the int8 range's edge? And what dtypes does the wire format expect?"))


def _runs(answer: dict | None, runs: dict) -> dict:
    if not runs:
        raise ValueError("runs must name at least one measured run")
    return answer if isinstance(answer, dict) else {name: None for name in runs}


def _new_tokens(m: dict, new_tokens: int | None) -> int:
    if new_tokens is None:
        return m["new_tokens"]
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
        raise ValueError(f"new_tokens must be a positive integer (None: each run's own), got {new_tokens!r}")
    return new_tokens


def server_calls(answer: dict | None, runs: dict[str, dict], new_tokens: int | None = None) -> dict[str, bool | None]:
    """Server calls per answer of ``new_tokens`` (None: each run's own length) on another link, predicted from
    each run's τ (``{name: moa_metrics}``)."""
    answer = _runs(answer, runs)
    out = {}
    for name, m in runs.items():
        print(f"{name}:", end=" ")
        out[name] = check_number(answer.get(name), server_calls_per_answer(_new_tokens(m, new_tokens), m["tau"]),
                                 tolerance=1,
                                 explanation="The link changes the seconds, not what the server verifies.",
                                 hint="What does the link change: the tokens each call commits, or only the time? "
                                      "Count the prefill call too.")
    return out


def link_seconds(answer: dict | None, runs: dict[str, dict], rtt: float,
                 new_tokens: int | None = None) -> dict[str, bool | None]:
    """Seconds on a link of mean round trip ``rtt`` per answer of ``new_tokens`` (None: each run's own), for each
    run."""
    if rtt <= 0:
        raise ValueError(f"rtt must be > 0 seconds, got {rtt}")
    answer = _runs(answer, runs)
    out = {}
    for name, m in runs.items():
        calls = server_calls_per_answer(_new_tokens(m, new_tokens), m["tau"])
        print(f"{name}:", end=" ")
        out[name] = check_number(answer.get(name), (calls - 1) * rtt, tolerance=0.03, relative=True,
                                 explanation="Every call but the prefill is one cycle with one round trip.",
                                 hint="Which calls pay a round trip on the link during decoding? Multiply, in "
                                      "seconds.")
    return out
