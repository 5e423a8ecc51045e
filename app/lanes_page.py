"""The scaffold of the lane-method pages (PPSD, Mirror-SD, SSD), written once: each of them is a method whose
programs run on lanes (worker processes, a core each), streamed live, with a fallback mode where lanes cannot
run here.

The structure they share, top to bottom: the page's title and explanation; the sidebar's method box (the page's
own options, then the mode with the fallback's warning, "also run …" and "one core per lane"), the generation
box and the model box; the prompt, the Run button, a status line and the live areas; on a press of Run every
run of the page's plan streamed under the engine's lock (a 1-token warm-up before a lanes run, runs pinned to
one core where asked, the live areas redrawn at most every 0.4 s) and stored in the session; then the stored
run, or a hint before the first.

A page supplies only what differs (see :class:`LanePage`): its names and explanation, its option widgets, its
modes and their fallback rule, the plan of one press of Run, which runs warm up or are pinned, how the live
areas draw a run in progress, and the views of a finished run.

Decisions:
- The engine and its lock come from ``engine_cache``, shared with the other pages: runs from different pages
  never time each other's work.
- The engine stops the run's clock while the page holds an event, so drawing is not timed as decoding; the
  throttle keeps drawing (which does not stop the other lanes' worker processes) a small share of the run.
"""

from __future__ import annotations

import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import streamlit as st

from app.engine_cache import engine_lock, model_picker
from app.prompt_picker import example_prompts, prompt_picker
from engines.lanes import LaneError, can_pin, lane_capacity, pinned

Plan = dict[str, tuple[str, dict]]  # display name → (method, options) for one press of Run


class LiveThrottle:
    """When a live view redraws: at most every ``seconds`` of real time, so drawing (which stops the run's
    clock but not the other lanes' worker processes) stays a small share of the run."""

    def __init__(self, seconds: float = 0.4, clock=time.perf_counter):
        self.seconds, self.clock = seconds, clock
        self.last = -float("inf")

    def due(self) -> bool:
        now = self.clock()
        if now - self.last >= self.seconds:
            self.last = now
            return True
        return False


def one_core_note(can_pin: bool) -> str | None:
    """What "one core per lane" means where the OS cannot hold a thread to a core (macOS, Windows): one torch
    thread, unpinned. ``None`` where it can (Linux)."""
    if can_pin:
        return None
    return ("This OS cannot pin a thread to a core: \"one core per lane\" runs one torch thread that the OS may "
            "move between cores.")


@dataclass
class LanePage:
    """One lane-method page. The page script builds it, then calls, in order: :meth:`start`; its own option
    widgets ``with page.method_box``, then :meth:`mode_select` and :meth:`lane_checkboxes` there;
    :meth:`generation`; anything it shows above the prompt (a formula explorer); :meth:`controls`; :meth:`run`;
    and :meth:`stored_run`, whose record it draws with its own views."""

    method: str  # the engine's method; widget keys are "{method}:…", the stored run st.session_state["{method}_run"]
    name: str  # "Mirror-SD": the sidebar's header, the Run button, the browser tab
    icon: str
    title: str  # the page's heading
    explanation: str  # markdown under the heading
    warmup_note: str  # the status line while a lanes run's worker processes start
    prefix: str = field(init=False)
    record_key: str = field(init=False)

    def __post_init__(self):
        self.prefix, self.record_key = f"{self.method}:", f"{self.method}_run"

    # --- layout -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Page config, title and explanation; the sidebar's method, generation and model boxes (the model
        picked, so ``engine``, ``dtype``, ``n_layers`` and the machine's lane ``capacity`` are known)."""
        st.set_page_config(page_title=f"specviz — {self.name}", page_icon=self.icon, layout="wide")
        st.title(self.title)
        st.markdown(self.explanation)
        self.method_box, self.settings_box, model_box = (st.sidebar.container(), st.sidebar.container(),
                                                         st.sidebar.container())
        with model_box:
            self.dtype, self.engine = model_picker(self.prefix)
        self.n_layers = self.engine.target.n_layers
        self.capacity = lane_capacity(self.engine.device)
        with self.method_box:
            st.header(self.name)

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def mode_select(self, modes: Sequence[str], labels: Mapping[str, str],
                    effective: Callable[[str], tuple[str, str | None]]) -> str:
        """The mode select; ``effective(asked)`` gives the mode a run can use here and why it differs (shown as
        a warning). Returns the mode the run will use."""
        self.asked = st.selectbox("mode", list(modes), format_func=labels.get, key=self.key("mode"))
        self.mode, self.why = effective(self.asked)
        if self.why:
            st.warning(self.why)
        return self.mode

    def lane_checkboxes(self, compare_label: str, compare_help: str, one_core: bool, one_core_help: str) -> None:
        """"also run …" (``compare``) and "one core per lane" (``one_core``, on by default where ``one_core``),
        with a note where this OS cannot pin a thread."""
        self.compare = st.checkbox(compare_label, value=False, key=self.key("compare"), help=compare_help)
        self.one_core = st.checkbox("one core per lane", value=one_core, key=self.key("one_core"), help=one_core_help)
        if pin_note := one_core_note(can_pin()):
            st.caption(pin_note)

    def generation(self, temperature_help: str | None = None) -> dict:
        """The generation box: max new tokens, and the temperature where the page samples (``temperature_help``;
        ``None``: greedy). Returns the settings every run of the plan gets."""
        with self.settings_box:
            st.header("Generation")
            self.settings = {"max_new_tokens": int(st.number_input("max new tokens", 1, 256, 32, step=8,
                                                                   key=self.key("max_new_tokens")))}
            if temperature_help is None:
                st.caption("Greedy decoding: every method commits the target's own tokens.")
            else:
                self.settings["temperature"] = float(st.slider("temperature", 0.0, 1.5, 0.0, 0.05,
                                                               key=self.key("temperature"), help=temperature_help))
        return self.settings

    def controls(self, live_areas: int) -> list:
        """The prompt, the Run button (naming the fallback mode where the run uses it), a status line and
        ``live_areas`` empty areas, which the live view and the stored run draw into."""
        self.prompt = prompt_picker(example_prompts(), self.prefix, "qa")
        label = f"Run {self.name}" if self.mode == self.asked else f"Run {self.name} ({self.mode} mode)"
        self.generate = st.button(label, type="primary", key=self.key("generate"))
        self.status_area = st.empty()
        self.areas = [st.empty() for _ in range(live_areas)]
        return self.areas

    # --- running ------------------------------------------------------------------------------------
    def run(self, plan: Plan, *, needs_warmup: Callable[[str, dict], bool], pin: Callable[[str, str, dict], bool],
            draw_live: Callable[[dict[str, dict], int], None], live_all: bool = False, **extra) -> None:
        """On a press of Run: :meth:`stream` the plan and keep it as the page's record (``id``, ``runs``,
        ``main``: the name of the page's method's run, ``why``: the fallback's reason, ``mode``, and ``extra``);
        an error from the engine (bad input, a lane that died) clears the live areas and is shown instead."""
        if not self.generate:
            return
        st.session_state.pop(self.record_key, None)
        try:
            runs = self.stream(plan, needs_warmup=needs_warmup, pin=pin, draw_live=draw_live, live_all=live_all)
            st.session_state[self.record_key] = {"id": uuid.uuid4().hex, "runs": runs, "main": self.main,
                                                 "why": self.why, "mode": self.mode, **extra}
        except (ValueError, OSError, LaneError) as error:
            for area in (*self.areas, self.status_area):
                area.empty()
            st.error(str(error))

    def stream(self, plan: Plan, *, needs_warmup: Callable[[str, dict], bool], pin: Callable[[str, str, dict], bool],
               draw_live: Callable[[dict[str, dict], int], None], live_all: bool = False) -> dict[str, dict]:
        """Every run of the plan under the engine's lock, in order: a 1-token warm-up first where
        ``needs_warmup(method, options)``, pinned to one core where ``pin(name, method, options)``.
        ``draw_live(runs so far, n)`` redraws (throttled) while the page's method streams, or while any run
        does (``live_all``). Returns name → {method, options, events}."""
        self.main = next(name for name, (method, _) in plan.items() if method == self.method)
        runs: dict[str, dict] = {}
        throttle, drawn = LiveThrottle(), 0
        with engine_lock(self.dtype):
            for name, (method, options) in plan.items():
                events: list = []
                runs[name] = {"method": method, "options": options, "events": events}
                if needs_warmup(method, options):
                    self.status_area.caption(self.warmup_note)
                    self.engine.run(self.prompt, method, **{**self.settings, "max_new_tokens": 1}, **options)
                self.status_area.caption(f"running {name}…")
                live = live_all or name == self.main
                with pinned("cpu0") if pin(name, method, options) else nullcontext():
                    for event in self.engine.generate(self.prompt, method, **self.settings, **options):
                        events.append(event)
                        if live and throttle.due():
                            draw_live(runs, drawn)
                            drawn += 1
        self.status_area.empty()
        return runs

    # --- the stored run -----------------------------------------------------------------------------
    def stored_run(self, hint: str) -> dict | None:
        """The page's record of its last run; before the first, ``hint`` in the first live area. A run that fell
        back from the mode asked for says so."""
        record = st.session_state.get(self.record_key)
        if record is None:
            if not self.generate:
                self.areas[0].info(hint)
        elif record["why"]:
            st.caption(f"This run used {record['mode']} mode: " + record["why"].split(". ")[0] + ".")
        return record
