"""Notebook 05's exercises (PPSD): Eq. 6's answers and the pipeline's diagnosis, computed here from the
stage ticks the reader's runs measured."""

from __future__ import annotations

from typing import Mapping

from ..theory import ppsd_speedup, ppsd_tokens_per_s
from .checks import check_number
from .diagnosis import check_costliest
from .engine_change import EngineExercise, register

PIPELINE_TERMS = ("acceptance", "tick")

TICK_SCHEDULER = register("nb05.tick_scheduler", EngineExercise(
    target="engines.programs.pipeline:must_collect",
    tests=("tests/test_lanes.py::test_the_tick_scheduler_charges_one_tick_per_accepted_draft_and_s_per_rejected_one",
           "tests/test_lanes.py::test_serial_and_virtual_greedy_equal_ar"),
    explanation="With P − 1 drafts in flight, every draft is judged P ticks after it entered: one tick per "
                "accepted token, P per rejected one, as Eq. 6 counts.",
    hint="How many drafts can be in flight before the first one reaches the last stage? And what must happen "
         "to the verdicts still in flight once the answer is complete?"))


def break_even_acceptance(n_layers: int, exit_layer: int) -> float:
    """The a at which Eq. 6 gives S = 1."""
    stages = -(-n_layers // exit_layer)
    if stages < 2:
        raise ValueError(f"exit_layer must leave at least two stages of n_layers={n_layers}, got {exit_layer}")
    return (stages - n_layers / exit_layer) / (stages - 1)


def when_ppsd_loses(answer: float | None, n_layers: int = 30, exit_layer: int = 8) -> bool | None:
    """Exercise 1: below which a does Eq. 6 put PPSD under ``ar`` at this exit?"""
    expected = break_even_acceptance(n_layers, exit_layer)
    stages = -(-n_layers // exit_layer)
    assert abs(ppsd_speedup(expected, exit_layer, n_layers) - 1) < 1e-12
    return check_number(answer, expected, tolerance=0.005,
                        explanation=f"The pipeline's {stages} stages hold {stages * exit_layer} layer slots for "
                                    f"{n_layers} layers: a rejection costs {stages * exit_layer - n_layers} layers "
                                    "more than a forward.",
                        hint="Set Eq. 6 equal to 1 and solve for a; P is a whole number of stages.")


def tick_alone(lanes: Mapping, serial: Mapping) -> float:
    """A tick had the stages computed beside each other as fast as alone: the slowest stage alone plus the
    message."""
    return max(serial["stage_seconds"].values()) + lanes["message_seconds"]


def lanes_tokens_per_s_alone(answer: float | None, lanes: Mapping, serial: Mapping,
                             ar_tokens_per_s: float) -> bool | None:
    """Exercise 2: Eq. 6's tokens/s for the lanes run with each stage as fast as it was alone."""
    tick = tick_alone(lanes, serial)
    a, stages = lanes["position_acceptance"], lanes["stages"]
    expected = ppsd_tokens_per_s(a, stages, tick)
    return check_number(answer, expected, tolerance=0.03, relative=True,
                        explanation=f"A tick of {1e3 * tick:.2f} ms, {a + (1 - a) * stages:.2f} ticks per token: "
                                    f"{expected / ar_tokens_per_s:.2f}× ar.",
                        hint="Which stage sets the tick? What does a tick pay besides that stage's compute? How "
                             "many ticks does an accepted token take, and a rejected one?")


def pipeline_counterfactuals(lanes: Mapping, ar_tokens_per_s: float, exit_layer: int, n_layers: int) -> dict:
    """S of the lanes run with one thing at its ideal, the other as measured: every draft accepted (one tick
    per token), or a tick that costs exactly its layers' share of one ``ar`` step (ℓ ÷ L of it: no heads, no
    message, no stages slowing each other down)."""
    a, stages, tick = lanes["position_acceptance"], lanes["stages"], lanes["tick_seconds"]
    ideal_tick = exit_layer / n_layers / ar_tokens_per_s
    return {"acceptance": 1 / tick / ar_tokens_per_s,
            "tick": ppsd_tokens_per_s(a, stages, ideal_tick) / ar_tokens_per_s}


def diagnose_pipeline(answer: str | None, lanes: Mapping, ar_tokens_per_s: float, exit_layer: int,
                      n_layers: int) -> bool | None:
    """"Which cost the pipeline more?": the rejections (``acceptance``) or a tick longer than its layers'
    share of an ``ar`` step (``tick``), measured from the lanes run's stage ticks."""
    counterfactuals = pipeline_counterfactuals(lanes, ar_tokens_per_s, exit_layer, n_layers)
    gains = {term: counterfactuals[term] for term in PIPELINE_TERMS}
    return check_costliest(answer, gains, lanes["tokens_per_s"] / ar_tokens_per_s,
                           explanation=" · ".join(f"{t} at its ideal: {g:.2f}×" for t, g in gains.items()),
                           hint="compare ticks per token with 1, and the tick with its layers' share of ar's step.")
