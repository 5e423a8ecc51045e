"""specviz dashboard page: PPSD (paper 003), the pipeline filling in live, one stage compute at a time.

Streamlit lists this page in the sidebar because it sits in ``app/pages/`` beside ``Run.py``
(``streamlit run app/Run.py``). The sidebar holds PPSD's settings (the shipped exit head and its
layer E, the mode, the tokens) and the model; the page holds the prompt, the live worker × time Gantt, the
metrics with Eq. 6 beside them, the text strip, and (optionally) ar and EESD γ = 5 on the same prompt.

Decisions:
- The engine and its lock come from ``engine_cache``, shared with the other pages: runs from different
  pages never time each other's work.
- ``mode="lanes"`` needs one core per stage (S = ⌈N/E⌉). Where the machine has fewer, the page says so and
  runs the same schedule in ``virtual`` mode; every number from a virtual run says ``clock=virtual``.
- A lanes run is preceded by a 1-token run, so the measured one does not count starting the worker processes.
- The Gantt redraws at most every 0.4 s while a run streams. The engine stops the run's clock while the
  page holds an event, so drawing is not timed as decoding.
- Runs decode greedily (lossless: the committed text is the target's own).
- "One core per lane" (on by default) pins ar, eesd and the serial schedule to one core with one thread, as
  each PPSD stage runs, so the Gantt compares lane with lane.
"""

from __future__ import annotations

import sys
import uuid
from contextlib import nullcontext
from pathlib import Path

import streamlit as st

APP = Path(__file__).resolve().parent.parent
for path in (APP, APP.parent):  # app/ for the helpers, the project root for engines/ and specviz/
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import pandas as pd  # noqa: E402
import ppsd_helpers as ph  # noqa: E402
from engine_cache import engine_lock, model_picker  # noqa: E402
from prompt_picker import example_prompts, prompt_picker  # noqa: E402

from engines.lanes import LaneError, can_pin, lane_capacity, lanes_unavailable, pinned  # noqa: E402
from engines.programs.pipeline import stage_count  # noqa: E402
from specviz.views.ppsd_pipeline import text_strip  # noqa: E402
from specviz.views.ppsd_runs import (  # noqa: E402
    FATE_COLOURS,
    FATE_LABELS,
    baseline_for,
    committed_strip,
    lane_gantt_figure,
    measured_point,
    one_token,
    run_metrics_rows,
    run_start,
    text_strip_html,
    text_strip_legend_html,
)
from specviz.views.ppsd_theory import speedup_surface_figure  # noqa: E402

st.set_page_config(page_title="specviz — PPSD", page_icon="🚰", layout="wide")

# --- explanation --------------------------------------------------------------------------------
st.title("🚰 PPSD: pipeline-parallel early exit, live")
st.markdown(
    "Early-exit speculation (EESD) drafts γ tokens with the first E layers, then verifies them with the whole "
    "model, and a rejection early in the chain throws the rest of the drafts away. **PPSD** cuts the N layers "
    "into S = ⌈N/E⌉ stages, one per worker. Stage 1 (layers 1..E and the exit head) drafts a token every "
    "tick, while earlier drafts flow through the later stages and the last stage checks each one as it "
    "arrives (*verify-while-draft*). An accepted draft costs one tick; a rejection flushes what is in flight "
    "and costs a whole pipeline of S ticks: ρ* = N / (aE + (1 − a)·S·E) (Eq. 6), with a the chance that the last "
    "stage accepts a draft. Below, each bar is one stage "
    "computing one token, coloured by what became of the draft it carried.")
swatches = " ".join(f'<span style="color:{FATE_COLOURS[f]}">■</span> {FATE_LABELS[f]}'
                    for f in ("prefill", "accepted", "rejected", "flushed", "unused", "draft", "verify"))
st.markdown(f"<small>{swatches}</small>", unsafe_allow_html=True)

# --- sidebar ------------------------------------------------------------------------------------
ppsd_box, settings_box, model_box = st.sidebar.container(), st.sidebar.container(), st.sidebar.container()
with model_box:
    dtype, engine = model_picker("ppsd:")
    n_layers = engine.target.n_layers
capacity = lane_capacity(engine.device)

with ppsd_box:
    st.header("PPSD")
    head = st.selectbox("exit head", list(ph.HEADS), format_func=ph.HEAD_LABELS.get, key="ppsd:head",
                        help="The shipped early-exit heads (data/drafts, exit@E-head), trained by self-distillation.")
    exits = ph.shipped_exits(head)
    if not exits:
        st.error(f"No shipped {head} exit head in data/drafts (`specviz train exit`).")
        st.stop()
    if st.session_state.get("ppsd:exit_layer") not in exits:
        st.session_state["ppsd:exit_layer"] = ph.default_exit(exits)
    exit_layer = st.selectbox("E: exit layer", exits, key="ppsd:exit_layer",
                              help="Stage 1 = layers 1..E and the exit head; the rest is cut into stages of E layers.")
    st.caption(ph.stages_caption(n_layers, exit_layer, capacity))
    asked = st.selectbox("mode", list(ph.MODES), format_func=ph.MODE_LABELS.get, key="ppsd:mode")
    mode, why = ph.effective_mode(asked, stage_count(n_layers, exit_layer), capacity, lanes_unavailable())
    if why:
        st.warning(why)
    compare = st.checkbox(f"also run ar and eesd γ={ph.EESD_GAMMA} (same E and head)", value=False,
                          key="ppsd:compare", help="The paper's Figure 2: the three Gantts on one time axis.")
    one_core = st.checkbox("one core per lane", value=False, key="ppsd:one_core",
                           help="Run ar, eesd and the serial schedule on one core with one thread, as each PPSD "
                                "stage runs: the Gantt then compares lane with lane. Off (the fair comparison): "
                                "they use every core, as they would in production.")
    if pin_note := ph.one_core_note(can_pin()):
        st.caption(pin_note)

with settings_box:
    st.header("Generation")
    max_new_tokens = int(st.number_input("max new tokens", 1, 256, 32, step=8, key="ppsd:max_new_tokens"))
    st.caption("Greedy decoding: every method commits the target's own tokens.")

# --- prompt -------------------------------------------------------------------------------------
prompt = prompt_picker(example_prompts(), "ppsd:", "qa")
generate = st.button("Run PPSD" if mode == asked else "Run PPSD (virtual mode)", type="primary", key="ppsd:generate")
status_area, live_area = st.empty(), st.empty()


# --- running ------------------------------------------------------------------------------------
def stream(plan: dict[str, tuple[str, dict]]) -> dict[str, dict]:
    """Every run of the plan under the engine's lock, the Gantt of everything so far redrawn as events arrive."""
    runs: dict[str, dict] = {}
    throttle, drawn = ph.LiveThrottle(), 0
    with engine_lock(dtype):
        for name, (method, options) in plan.items():
            events: list = []
            runs[name] = {"method": method, "options": options, "events": events}
            if ph.needs_warmup(method, options):
                status_area.caption("starting the lane workers (they load their layers once)…")
                engine.run(prompt, method, max_new_tokens=1, **options)
            status_area.caption(f"running {name}…")
            one_lane = name == ph.ONE_LANE_AR or ph.pin_to_one_core(method, options, one_core)
            with pinned("cpu0") if one_lane else nullcontext():
                for event in engine.generate(prompt, method, max_new_tokens=max_new_tokens, **options):
                    events.append(event)
                    if throttle.due():
                        live_area.plotly_chart(lane_gantt_figure({n: r["events"] for n, r in runs.items()}),
                                               key=f"ppsd:live:{drawn}")
                        drawn += 1
    status_area.empty()
    return runs


if generate:
    st.session_state.pop("ppsd_run", None)
    try:
        runs = stream(ph.run_plan(exit_layer, head, mode, compare))
        st.session_state["ppsd_run"] = {"id": uuid.uuid4().hex, "runs": runs, "prompt": prompt, "n_layers": n_layers,
                                        "main": next(reversed(runs)), "why": why}
    except (ValueError, OSError, LaneError) as error:  # the engine names the problem (bad input, a lane that died)
        live_area.empty()
        status_area.empty()
        st.error(str(error))


# --- results ------------------------------------------------------------------------------------
def show_metrics(record: dict) -> None:
    runs, main = record["runs"], record["main"]
    events = runs[main]["events"]
    values = ph.metric_values(events, record["n_layers"], baseline_for(events, ph.gantt_runs(runs)))
    for column, (label, value) in zip(st.columns(len(values)), values.items()):
        column.metric(label, value, help=ph.help_for(label))
    st.caption(ph.run_caption(events, record["n_layers"]))


def show_table(record: dict) -> None:
    rows = run_metrics_rows(ph.gantt_runs(record["runs"]), record["n_layers"])
    st.dataframe(pd.DataFrame(rows).set_index("run"), key="ppsd:table")
    st.caption("Per run: what the pipeline did (ticks, stage and message times, idle share per lane) and Eq. 6 at the "
               "measured per-position acceptance a (accepted ÷ drafts judged) beside the measurement. Rows marked "
               "clock=virtual count replayed per-lane time.")


def show_strip(record: dict) -> None:
    st.subheader("The text as the last stage judged it")
    events = record["runs"][record["main"]]["events"]
    strip = committed_strip(text_strip(events, one_token(engine.detokenize)), events)
    st.markdown(text_strip_legend_html(), unsafe_allow_html=True)
    st.markdown(text_strip_html(strip), unsafe_allow_html=True)


def show_theory(record: dict) -> None:
    runs = record["runs"]
    if not any(run["method"] == "ar" for run in runs.values()):
        return
    events = ph.gantt_runs(runs)
    points = [measured_point(e, baseline_for(e, events), name) for name, e in events.items()
              if run_start(e).method != "ar"]
    st.subheader("Where these runs sit on the paper's formulas")
    st.plotly_chart(speedup_surface_figure(record["n_layers"], ph.EESD_GAMMA, points), key="ppsd:surface")


record = st.session_state.get("ppsd_run")
if record is None:
    if not generate:
        live_area.info("Pick an exit head, E and a mode, then press **Run PPSD**.")
else:
    if record["why"]:
        st.caption("This run used virtual mode: " + record["why"].split(". ")[0] + ".")
    live_area.plotly_chart(lane_gantt_figure(ph.gantt_runs(record["runs"])), key="ppsd:gantt")
    show_metrics(record)
    show_table(record)
    show_strip(record)
    show_theory(record)
