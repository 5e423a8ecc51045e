"""specviz dashboard page: PPSD (paper 003), the pipeline filling in live, one stage compute at a time.

``app/main.py`` (``streamlit run app/main.py``) lists this page in the sidebar. The page is a lane-method page
(:mod:`app.lanes_page`: sidebar, prompt, live run, stored run); this script supplies what is PPSD's own: its
settings (the shipped exit head and its layer ℓ, the mode), the live worker × time Gantt of every run so far,
the metrics with Eq. 6 beside them, the per-run table, the text strip, and (optionally) ar and EESD γ = 5 on
the same prompt placed on the paper's formulas.

Decisions:
- ``mode="lanes"`` needs one core per stage (P = ⌈L/ℓ⌉). Where the machine has fewer, the page says so and
  runs the same schedule in ``virtual`` mode; every number from a virtual run says ``clock=virtual``.
- A lanes run is preceded by a 1-token run, so the measured one does not count starting the worker processes.
- The Gantt redraws at most every 0.4 s while a run streams.
- Runs decode greedily (lossless: the committed text is the target's own).
- "One core per lane" (off by default) pins ar, eesd and the serial schedule to one core with one thread, as
  each PPSD stage runs, so the Gantt compares lane with lane.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import ppsd_page as ph
from app.lanes_page import LanePage
from engines.lanes import lanes_unavailable
from engines.programs.pipeline import stage_count
from specviz.views.ppsd_pipeline import text_strip
from specviz.views.ppsd_runs import (
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
from specviz.views.ppsd_theory import speedup_surface_figure

page = LanePage(
    "ppsd", "PPSD", "🚰", "🚰 PPSD: pipeline-parallel early exit, live",
    "Early-exit speculation (EESD) drafts γ tokens with the first ℓ layers, then verifies them with the whole "
    "model, and a rejection early in the chain throws the rest of the drafts away. **PPSD** cuts the L layers "
    "into P = ⌈L/ℓ⌉ stages, one per worker. Stage 1 (layers 1..ℓ and the exit head) drafts a token every "
    "tick, while earlier drafts flow through the later stages and the last stage checks each one as it "
    "arrives (*verify-while-draft*). An accepted draft costs one tick; a rejection flushes what is in flight "
    "and costs a whole pipeline of P ticks: S_PPSD = L / (aℓ + (1 − a)·P·ℓ) (Eq. 6), with a the chance that the "
    "last stage accepts a draft (the paper's α). Below, each bar is one stage "
    "computing one token, coloured by what became of the draft it carried.",
    "starting the lane workers (they load their layers once)…")
page.start()
swatches = " ".join(f'<span style="color:{FATE_COLOURS[f]}">■</span> {FATE_LABELS[f]}'
                    for f in ("prefill", "accepted", "rejected", "flushed", "unused", "draft", "verify"))
st.markdown(f"<small>{swatches}</small>", unsafe_allow_html=True)
n_layers = page.n_layers

# --- sidebar ------------------------------------------------------------------------------------
with page.method_box:
    head = st.selectbox("exit head", list(ph.HEADS), format_func=ph.HEAD_LABELS.get, key="ppsd:head",
                        help="The shipped early-exit heads (data/drafts, exit@ℓ-head), trained by self-distillation.")
    exits = ph.shipped_exits(head)
    if not exits:
        st.error(f"No shipped {head} exit head in data/drafts (`specviz train exit`).")
        st.stop()
    if st.session_state.get("ppsd:exit_layer") not in exits:
        st.session_state["ppsd:exit_layer"] = ph.default_exit(exits)
    exit_layer = st.selectbox("ℓ: exit layer", exits, key="ppsd:exit_layer",
                              help="Stage 1 = layers 1..ℓ and the exit head; the rest is cut into stages of ℓ layers.")
    st.caption(ph.stages_caption(n_layers, exit_layer, page.capacity))
    page.mode_select(ph.MODES, ph.MODE_LABELS, lambda asked: ph.effective_mode(
        asked, stage_count(n_layers, exit_layer), page.capacity, lanes_unavailable()))
    page.lane_checkboxes(f"also run ar and eesd γ={ph.EESD_GAMMA} (same ℓ and head)",
                         "The paper's Figure 2: the three Gantts on one time axis.", False,
                         "Run ar, eesd and the serial schedule on one core with one thread, as each PPSD stage runs: "
                         "the Gantt then compares lane with lane. Off (the fair comparison): they use every core, as "
                         "they would in production.")
page.generation()  # greedy

# --- prompt, running ----------------------------------------------------------------------------
[live_area] = page.controls(live_areas=1)


def draw_live(runs: dict[str, dict], drawn: int) -> None:
    """The Gantt of every run so far."""
    live_area.plotly_chart(lane_gantt_figure({n: r["events"] for n, r in runs.items()}), key=f"ppsd:live:{drawn}")


page.run(ph.run_plan(exit_layer, head, page.mode, page.compare), needs_warmup=ph.needs_warmup,
         pin=lambda name, method, options: name == ph.ONE_LANE_AR or ph.pin_to_one_core(method, options, page.one_core),
         draw_live=draw_live, live_all=True, prompt=page.prompt, n_layers=n_layers)


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
    strip = committed_strip(text_strip(events, one_token(page.engine.detokenize)), events)
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


record = page.stored_run("Pick an exit head, ℓ and a mode, then press **Run PPSD**.")
if record is not None:
    live_area.plotly_chart(lane_gantt_figure(ph.gantt_runs(record["runs"])), key="ppsd:gantt")
    show_metrics(record)
    show_table(record)
    show_strip(record)
    show_theory(record)
