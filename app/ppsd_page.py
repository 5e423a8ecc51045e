"""The PPSD page's logic, kept out of the page so it can be tested without Streamlit.

What the page offers (the shipped exit heads, the modes this machine can run), the options each run gets,
and the headline numbers with their help texts. Every number from a
``mode="virtual"`` run carries ``clock=virtual`` in its label.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from engines.core.trace import Event
from engines.drafters.trained import available
from engines.programs.pipeline import stage_count
from specviz.theory import ppsd_speedup
from specviz.views.ppsd_pipeline import pipeline_metrics
from specviz.views.ppsd_runs import VIRTUAL, measured_point, run_end, run_start

HEADS = ("layer", "norm")
HEAD_LABELS = {"layer": "layer: one transformer layer + norm + LM head", "norm": "norm: RMSNorm + projection + LM head"}
MODES = ("lanes", "serial", "virtual")
MODE_LABELS = {"lanes": "lanes: one process per stage, each on its own core (real parallel)",
               "serial": "serial: the same schedule in one process, stage after stage (the 'before')",
               "virtual": f"virtual: serial compute replayed on one clock per lane ({VIRTUAL})"}
EESD_GAMMA = 5
_EXIT_NAME = re.compile(r"^exit@(\d+)-(\w+)$")


def shipped_exits(head: str, names: Sequence[str] | None = None) -> list[int]:
    """Exit layers with a shipped ``exit@ℓ-{head}`` head (``names``: the drafters available; default: data/drafts)."""
    found = []
    for name in available() if names is None else names:
        match = _EXIT_NAME.match(name)
        if match and match.group(2) == head:
            found.append(int(match.group(1)))
    return sorted(found)


def default_exit(exits: Sequence[int], preferred: int = 15) -> int:
    return preferred if preferred in exits else exits[-1]


def effective_mode(mode: str, stages: int, capacity: int, unavailable: str | None = None) -> tuple[str, str | None]:
    """The mode a run can use here, and why it differs from the one asked for: ``lanes`` needs one core per
    stage, and worker processes (``unavailable``: why this PyTorch cannot start them, from
    :func:`engines.lanes.lanes_unavailable`); without either, the same schedule runs on a virtual clock
    (labelled so) instead."""
    if mode == "lanes" and unavailable:
        return "virtual", (f"mode=lanes cannot run here: {unavailable}. The run uses **virtual** mode instead: the "
                           f"same schedule computed serially and replayed on one clock per lane, every number "
                           f"labelled {VIRTUAL}.")
    if mode != "lanes" or capacity >= stages:
        return mode, None
    return "virtual", (f"mode=lanes needs P = {stages} lanes (one core per stage) but this machine has {capacity}. "
                       f"The run uses **virtual** mode instead: the same schedule computed serially and replayed on "
                       f"one clock per lane, every number labelled {VIRTUAL}. Pick ℓ ≥ the exit that gives "
                       f"P ≤ {capacity} stages for a real parallel run.")


def stages_caption(n_layers: int, exit_layer: int, capacity: int) -> str:
    stages = stage_count(n_layers, exit_layer)
    return (f"P = ⌈L/ℓ⌉ = ⌈{n_layers}/{exit_layer}⌉ = {stages} stages · this machine has {capacity} lane"
            f"{'s' if capacity != 1 else ''} for mode=lanes")


def ppsd_options(exit_layer: int, head: str, mode: str) -> dict:
    return {"exit_layer": exit_layer, "head": head, "mode": mode}


def eesd_options(exit_layer: int, head: str, gamma: int = EESD_GAMMA) -> dict:
    """EESD at the same exit and head as the PPSD run: the paper's comparison (Figure 2, Table 1)."""
    return {"gamma": gamma, "exit_layer": exit_layer, "head": head}


ONE_LANE_AR = "ar (one core)"  # the baseline of a virtual-clock run: one lane's real speed


def run_plan(exit_layer: int, head: str, mode: str, compare: bool) -> dict[str, tuple[str, dict]]:
    """Display name → (method, options) for one press of Run: ar and eesd first when comparing (the figure
    reads top-down as the paper's Figure 2), PPSD last. A virtual run is compared with ``ar`` on one core
    (:data:`ONE_LANE_AR`), never with a multi-threaded wall-clock one."""
    plan: dict[str, tuple[str, dict]] = {}
    if compare:
        plan["ar"] = ("ar", {})
        if mode == "virtual":
            plan[ONE_LANE_AR] = ("ar", {})
        plan[f"eesd γ={EESD_GAMMA}"] = ("eesd", eesd_options(exit_layer, head))
    plan[f"ppsd {mode}"] = ("ppsd", ppsd_options(exit_layer, head, mode))
    return plan


def needs_warmup(method: str, options: dict) -> bool:
    """A lanes run counts the start of its worker processes (and their loading of layers) as its own time;
    a 1-token run first makes the measured run find them ready (later runs reuse them at no cost)."""
    return method == "ppsd" and options.get("mode") == "lanes"


def pin_to_one_core(method: str, options: dict, one_core: bool) -> bool:
    """Whether a run should be held to one core and one thread (``engines.lanes.pinned``): every run but PPSD's
    lanes and virtual modes, which place their own stages, when the page compares per lane (each PPSD stage
    gets one core; so do ar, eesd and the serial schedule). Two torch threads on a machine whose other core is
    busy can also run many times slower than one."""
    return one_core and not (method == "ppsd" and options.get("mode") in ("lanes", "virtual"))


# --- the numbers ---------------------------------------------------------------------------------
METRIC_HELP = {
    "tok/s": "New tokens per second of decoding (prefill excluded). For a virtual run the seconds are the "
             "replayed per-lane clock, not wall time.",
    "α (acceptance rate)": "Accepted draft tokens ÷ drafted tokens. A ppsd draft is drafted when the last stage "
                           "judges it (drafts flushed after a rejection are not counted), so for ppsd this is also "
                           "the per-position acceptance, the a that Eq. 6 takes.",
    "ticks / token": "Stage-1 steps per committed token: 1 if every draft is accepted, P if none is.",
    "idle per lane": "Each lane's share of the decode span spent waiting: the Gantt's gaps.",
    "message overhead": "Median wait from one stage finishing to the next starting on the same tick (transfer + "
                        "wake-up), and activation bytes sent per committed token.",
    "Eq. 6 tok/s vs measured": "Eq. 6 in time units, 1 / (tick·(a + (1 − a)·P)), with the tick = the slowest "
                               "stage's median compute + the message time, at the measured per-position "
                               "acceptance a (accepted ÷ drafts judged); then the measured tok/s. — for a "
                               "serial run: its stages never overlap, so Eq. 6 does not apply.",
    "S_PPSD (Eq. 6) vs measured speedup": "Eq. 6's speedup S_PPSD = L / (aℓ + (1 − a)·P·ℓ) at the measured "
                                          "per-position "
                                      "acceptance a; then the measured tok/s ÷ ar's on the same prompt (with "
                                      "'also run ar and eesd').",
}


def labelled(label: str, clock: str) -> str:
    return f"{label} · {VIRTUAL}" if clock == "virtual" else label


def metric_values(events: Sequence[Event], n_layers: int, ar_events: Sequence[Event] | None = None) -> dict[str, str]:
    """The PPSD run's headline numbers, formatted, keyed by label (``· clock=virtual`` added to every label of a
    virtual run); :data:`METRIC_HELP` explains each (look a label up with :func:`help_for`)."""
    start, end = run_start(events), run_end(events)
    metrics = pipeline_metrics(events)
    clock = start.clock if start is not None else "wall"
    point = measured_point(events, ar_events)
    s_ppsd = ppsd_speedup(point["position_acceptance"], point["exit_layer"], n_layers)
    values = {"tok/s": f"{end.stats['tokens_per_s']:.1f}",
              "α (acceptance rate)": f"{end.stats['acceptance_rate']:.2f}" if end.stats.get("drafted") else "—"}
    if metrics:
        values["ticks / token"] = f"{metrics['ticks_per_token']:.2f}" if metrics["ticks_per_token"] else "—"
        values["idle per lane"] = " · ".join(f"{100 * v:.0f}%" for v in metrics["idle"].values())
        values["message overhead"] = (f"{1e3 * metrics['message_seconds']:.2f} ms · "
                                      f"{(metrics['message_bytes_per_token'] or 0) / 1e3:.1f} kB/tok")
        eq6 = metrics.get("eq6_tokens_per_s")  # None for a serial run: its stages never overlap
        values["Eq. 6 tok/s vs measured"] = f"{'—' if eq6 is None else f'{eq6:.1f}'} vs {metrics['tokens_per_s']:.1f}"
    measured = "—" if point["speedup"] is None else f"{point['speedup']:.2f}×"
    values["S_PPSD (Eq. 6) vs measured speedup"] = f"{s_ppsd:.2f}× vs {measured}"
    return {labelled(label, clock): value for label, value in values.items()}


def help_for(label: str) -> str:
    return METRIC_HELP[label.removesuffix(f" · {VIRTUAL}")]


def run_caption(events: Sequence[Event], n_layers: int) -> str:
    """What ran where, in a line: the stages and their lanes, the clock, the tokens."""
    start, end = run_start(events), run_end(events)
    config = start.config
    stages = " · ".join(f"{role} on {lane}" for role, lane in start.lanes.items())
    clock = (f"**{VIRTUAL}**: per-lane times replayed from measured per-operation costs, not wall time"
             if start.clock == "virtual" else "wall clock")
    return (f"ppsd(exit_layer={config['exit_layer']}, head={config['head']}, mode={config['mode']}) · L = {n_layers} "
            f"· {stages} · {clock} · {end.stats['new_tokens']} new tokens ({end.stop_reason}) · greedy")


def gantt_runs(runs: Mapping[str, dict]) -> dict[str, list[Event]]:
    """Display name → events for every finished run of one press of Run (the Gantt's input)."""
    return {name: run["events"] for name, run in runs.items()}
