"""specviz dashboard page: Mirror-SD (paper 000), the target's early exit launching the draft, live.

Streamlit lists this page in the sidebar because it sits in ``app/pages/`` beside ``Run.py``
(``streamlit run app/Run.py``). The sidebar holds Mirror's options (γ, κ, the exit layer and head, the
draft, the acceptance rule, the mode), the generation settings and the model; the page holds the latency
law's explorer, the prompt, the live two-lane Gantt and hypothesis grid, the metrics with the law beside
them, and (optionally) synchronous SD with the same draft for the speedup.

Decisions:
- The engine and its lock come from ``engine_cache``, shared with the other pages.
- ``mode="lanes"`` needs two cores (target and draft). Where the machine has one, the page says so and runs
  ``serial`` instead.
- A lanes run is preceded by a 1-token run, so the measured one does not count starting the draft's worker.
- The Gantt and the grid redraw at most every 0.4 s while a run streams, from the partial event list; the
  engine stops the run's clock while the page holds an event, so drawing is not timed as decoding.
- "One core per lane" (on by default) runs the serial schedule and sps on one core with one thread, as each
  lane of a lanes run does: lane is compared with lane, and a two-thread run on a busy 2-core machine cannot
  collapse.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import streamlit as st

APP = Path(__file__).resolve().parent.parent
for path in (APP, APP.parent):  # app/ for the helpers, the project root for engines/ and specviz/
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import pandas as pd  # noqa: E402
import verdict_helpers as vh  # noqa: E402
import verdict_page as vp  # noqa: E402
from engine_cache import model_picker  # noqa: E402
from prompt_picker import example_prompts, prompt_picker  # noqa: E402

from engines.core.trace import EeMessage  # noqa: E402
from engines.lanes import LaneError, can_pin, lane_capacity, lanes_unavailable  # noqa: E402
from engines.methods.mirror import MirrorConfig  # noqa: E402
from specviz.views import mirror_sd, verdict_gantt
from specviz.views import verdict_metrics as vv  # noqa: E402
from specviz.views.ppsd_runs import one_token  # noqa: E402

P = "mirror:"  # widget key prefix
DEFAULTS = MirrorConfig()  # the method's own defaults start the widgets
st.set_page_config(page_title="specviz — Mirror-SD", page_icon="🪞", layout="wide")

# --- explanation --------------------------------------------------------------------------------
st.title("🪞 Mirror-SD: the target's early exit launches the draft, live")
st.markdown(
    "In plain speculative decoding the draft waits for the verdict before it drafts again, so a round costs "
    "T_draft + T_target. **Mirror-SD** puts the draft on its own lane. Halfway through verifying a window, at "
    "layer l_e, the target sends the top-κ of its *early exit* (the LM head on h^(l_e)) at each of the γ+1 "
    "positions (**ee**). While the target finishes layers l_e+1..N, the draft rolls out a next window for every "
    "one of those (γ+1)·κ possible corrections. When the **verdict** (A accepted, token c) arrives, the branch "
    "rooted at c after A drafts is the next window (a *hit*), or the draft makes a fresh one on the critical "
    "path (a *fallback*). Step time (Eq. 10/14): T^{1:l_e} + T_rv + max(T^{l_e+1:N}, T_gen). The bet never "
    "decides what is committed, only which window comes next: the run is lossless.")

# --- sidebar ------------------------------------------------------------------------------------
method_box, settings_box, model_box = st.sidebar.container(), st.sidebar.container(), st.sidebar.container()
with model_box:
    dtype, engine = model_picker(P)
    n_layers = engine.target.n_layers
capacity = lane_capacity(engine.device)

with method_box:
    st.header("Mirror-SD")
    gamma = int(st.number_input("γ: window", 1, 16, DEFAULTS.gamma, key=f"{P}gamma", help="Draft tokens per round."))
    kappa = int(st.number_input("κ: top-κ of the early exit", 1, 16, DEFAULTS.kappa, key=f"{P}kappa",
                                help="Candidates per position; the draft rolls out (γ+1)·κ branches per round."))
    exit_head = st.selectbox("exit head", list(vh.EXIT_HEADS), format_func=vh.EXIT_HEAD_LABELS.get,
                             key=f"{P}exit_head")
    layers = vh.exit_layer_choices(exit_head, n_layers)
    if not layers:
        st.error("No shipped norm exit head in data/drafts (`specviz train exit`).")
        st.stop()
    if st.session_state.get(f"{P}exit_layer") not in layers:
        st.session_state[f"{P}exit_layer"] = vh.default_exit_layer(layers, n_layers)
    exit_layer = st.selectbox("l_e: exit layer", layers, key=f"{P}exit_layer",
                              help="The target's prefix is layers 1..l_e; the suffix l_e+1..N is the overlap budget Δ.")
    draft = st.selectbox("draft", list(vh.MIRROR_DRAFTS), format_func=vh.DRAFT_LABELS.get, key=f"{P}draft")
    rule = st.selectbox("acceptance rule", list(vh.RULES), format_func=vh.RULE_LABELS.get, key=f"{P}rule",
                        help="Both are lossless; they differ only when sampling (temperature > 0).")
    asked = st.selectbox("mode", list(vh.MODES), format_func=vh.MODE_LABELS.get, key=f"{P}mode")
    mode, why = vh.effective_mode(asked, capacity, lanes_unavailable())
    if why:
        st.warning(why)
    compare = st.checkbox("also run sps (same draft and γ)", value=False, key=f"{P}compare",
                          help="Synchronous SD, the paper's 'vanilla SD': the measured speedup beside the paper's S.")
    one_core = st.checkbox("one core per lane", value=True, key=f"{P}one_core",
                           help="Run the serial schedule and sps on one core with one thread, as each lane of a "
                                "lanes run does.")
    if pin_note := vh.one_core_note(can_pin()):
        st.caption(pin_note)

with settings_box:
    st.header("Generation")
    max_new_tokens = int(st.number_input("max new tokens", 1, 256, 32, step=8, key=f"{P}max_new_tokens"))
    temperature = float(st.slider("temperature", 0.0, 1.5, 0.0, 0.05, key=f"{P}temperature",
                                  help="0 = greedy; the acceptance rule matters only when sampling (seed 0)."))

options = vh.mirror_options(gamma, kappa, exit_layer, exit_head, draft, rule, mode)

# --- the formula --------------------------------------------------------------------------------
with st.expander("The latency law (Eq. 10/14): move the costs", expanded=False):
    left, right = st.columns([1, 2])
    with left:
        t_prefix = st.slider("T^{1:l_e} (prefix) ms", 1.0, 80.0, 20.0, 0.5, key=f"{P}x:prefix")
        t_suffix = st.slider("Δ = T^{l_e+1:N} (suffix) ms", 1.0, 80.0, 20.0, 0.5, key=f"{P}x:suffix")
        t_step = st.slider("draft ms per step", 0.5, 30.0, 4.0, 0.5, key=f"{P}x:step")
        eta = st.slider("η̄: tokens per draft step", 1.0, 3.0, 1.5, 0.1, key=f"{P}x:eta")
        x_gamma = st.slider("γ", 1, 12, 5, key=f"{P}x:gamma")
        t_rv = st.slider("T_rv (both rendezvous) ms", 0.0, 20.0, 1.0, 0.1, key=f"{P}x:rv")
        ff = st.slider("FF: fallback rate", 0.0, 1.0, 0.3, 0.01, key=f"{P}x:ff")
    x = vh.mirror_explorer(t_prefix, t_suffix, t_step, eta, x_gamma, t_rv, ff)
    with right:
        cols = st.columns(4)
        cols[0].metric("T_gen(γ)", f"{x['t_gen_ms']:.1f} ms", help="⌈γ/η̄⌉ draft steps.")
        cols[1].metric("T_SD vs T_Mirror", f"{x['t_sd_ms']:.1f} vs {x['t_mirror_ms']:.1f} ms")
        cols[2].metric("S over SD", f"{x['speedup']:.2f}×", help="The paper's S (§3.6), no fallbacks.")
        cols[3].metric("with FF", f"{x['speedup_with_ff']:.2f}×", help="E[T_step] = T_Mirror + FF·T_gen [derived].")
        st.plotly_chart(mirror_sd.mirror_law_figure(t_prefix / 1e3, t_suffix / 1e3, t_rv / 1e3, x["gen"]), key=f"{P}law")
        st.caption("The draft is free while T_gen fits under the suffix Δ (shaded: zero slope in γ); past that only "
                   "the part that sticks out costs. Mirror beats vanilla SD iff T_rv < min(Δ, T_gen).")

# --- prompt -------------------------------------------------------------------------------------
prompt = prompt_picker(example_prompts(), P, "qa")
generate = st.button("Run Mirror-SD" if mode == asked else "Run Mirror-SD (serial mode)", type="primary",
                     key=f"{P}generate")
status_area, gantt_area, grid_area = st.empty(), st.empty(), st.empty()
token_text = one_token(engine.detokenize)


# --- running ------------------------------------------------------------------------------------
def draw_live(events: list, drawn: int) -> None:
    gantt_area.plotly_chart(verdict_gantt.verdict_gantt(events), key=f"{P}live:gantt:{drawn}")
    grid_area.plotly_chart(mirror_sd.hypothesis_grid(events, token_text=token_text), key=f"{P}live:grid:{drawn}")


def stream(plan: dict[str, tuple[str, dict]]) -> dict[str, dict]:
    return vp.stream_plan(engine, dtype, prompt, plan, max_new_tokens=max_new_tokens, temperature=temperature,
                          one_core=one_core, status_area=status_area, draw_live=draw_live)


if generate:
    st.session_state.pop("mirror_run", None)
    try:
        runs = stream(vh.run_plan("mirror", options, compare))
        st.session_state["mirror_run"] = {"id": uuid.uuid4().hex, "runs": runs, "main": next(iter(runs)), "why": why}
    except (ValueError, OSError, LaneError) as error:  # the engine names the problem (bad input, a lane that died)
        gantt_area.empty()
        grid_area.empty()
        status_area.empty()
        st.error(str(error))


# --- results ------------------------------------------------------------------------------------
def show_round(record: dict) -> None:
    events = record["runs"][record["main"]]["events"]
    rounds = vh.rounds_with(events, EeMessage)
    if not rounds:
        return
    st.subheader("One round's bet: the hypothesis grid")
    first = vh.default_round(events, EeMessage)
    chosen = st.select_slider("round", rounds, value=first, key=f"{P}round") if len(rounds) > 1 else rounds[0]
    st.plotly_chart(mirror_sd.hypothesis_grid(events, chosen, token_text=token_text), key=f"{P}grid")
    overlap = mirror_sd.overlap_rate(events)
    if overlap["omega"] is not None:
        st.caption(f"Ω_κ measured: the target's token was in the early exit's top-{overlap['kappa']} at "
                   f"{overlap['in_top_k']} of {overlap['positions']} verified positions (Ω = {overlap['omega']:.2f}; "
                   f"by rank {overlap['rank_counts']}). The paper bounds the fallback rate by 1 − Ω_κ.")


def show_split(record: dict) -> None:
    split = vv.draft_time_split(record["runs"][record["main"]]["events"])
    if split:
        st.subheader("Draft work per round: hidden under the target, or exposed")
        frame = pd.DataFrame(split).set_index("round")[["hidden_s", "exposed_s"]] * 1e3
        st.bar_chart(frame.rename(columns={"hidden_s": "hidden ms", "exposed_s": "exposed ms"}),
                     color=["#81c784", "#e57373"])


record = st.session_state.get("mirror_run")
if record is None:
    if not generate:
        gantt_area.info("Pick γ, κ, the exit and a mode, then press **Run Mirror-SD**.")
else:
    if record["why"]:
        st.caption("This run used serial mode: " + record["why"].split(". ")[0] + ".")
    events = record["runs"][record["main"]]["events"]
    metrics = vv.verdict_metrics(events)
    gantt_area.plotly_chart(verdict_gantt.verdict_gantt(events), key=f"{P}gantt")
    grid_area.empty()
    vp.show_metrics(record, metrics)
    vp.show_law(record, metrics, P, "vanilla SD")
    show_round(record)
    show_split(record)
