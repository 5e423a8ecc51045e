"""specviz dashboard page: Mirror-SD (paper 000), the target's early exit launching the draft, live.

``app/main.py`` (``streamlit run app/main.py``) lists this page in the sidebar. The page is a lane-method page
(:mod:`app.lanes_page`: sidebar, prompt, live run, stored run); this script supplies what is Mirror's own: its
options (γ, κ, the exit layer and head, the draft, the acceptance rule), the latency law's explorer, the
hypothesis grid beside the live two-lane Gantt, and the views of one round's bet and of the draft's work.
The Gantt, the metrics with the law beside them and (optionally) synchronous SD with the same draft for the
speedup are shared with the SSD page (:mod:`app.verdict_page`).

Decisions:
- ``mode="lanes"`` needs two cores (target and draft). Where the machine has one, the page says so and runs
  ``serial`` instead.
- A lanes run is preceded by a 1-token run, so the measured one does not count starting the draft's worker.
- The Gantt and the grid redraw at most every 0.4 s while a run streams, from the partial event list.
- "One core per lane" (on by default) runs the serial schedule and sps on one core with one thread, as each
  lane of a lanes run does: lane is compared with lane, and a two-thread run on a busy 2-core machine cannot
  collapse.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import verdict_page as vp
from app.lanes_page import LanePage
from engines.core.trace import EeMessage
from engines.methods.mirror import MirrorConfig
from specviz.views import mirror_sd, verdict_metrics
from specviz.views.ppsd_runs import one_token

DEFAULTS = MirrorConfig()  # the method's own defaults start the widgets
page = LanePage(
    "mirror", "Mirror-SD", "🪞", "🪞 Mirror-SD: the target's early exit launches the draft, live",
    "In plain speculative decoding the draft waits for the verdict before it drafts again, so a round costs "
    "T_draft + T_target. **Mirror-SD** puts the draft on its own lane. Halfway through verifying a window, at "
    "layer ℓ, the target sends the top-κ of its *early exit* (the LM head on the hidden state after layer ℓ) at each of the γ+1 "
    "positions (**ee**). While the target finishes layers ℓ+1..L, the draft rolls out a next window for every "
    "one of those (γ+1)·κ possible corrections. When the **verdict** (A accepted, token x*) arrives, the branch "
    "rooted at x* after A drafts is the next window (a *hit*), or the draft makes a fresh one on the critical "
    "path (a *fallback*). Step time (Eq. 10/14): T^{1:ℓ} + T_rv + max(T^{ℓ+1:L}, T_gen). The bet never "
    "decides what is committed, only which window comes next: the run is lossless.",
    "starting the draft lane (a worker process that loads the draft once)…")
page.start()
P = page.prefix

# --- sidebar ------------------------------------------------------------------------------------
with page.method_box:
    gamma = int(st.number_input("γ: window", 1, 16, DEFAULTS.gamma, key=f"{P}gamma", help="Draft tokens per round."))
    kappa = int(st.number_input("κ: top-κ of the early exit", 1, 16, DEFAULTS.kappa, key=f"{P}kappa",
                                help="Candidates per position; the draft rolls out (γ+1)·κ branches per round."))
    exit_head = st.selectbox("exit head", list(vp.EXIT_HEADS), format_func=vp.EXIT_HEAD_LABELS.get,
                             key=f"{P}exit_head")
    layers = vp.exit_layer_choices(exit_head, page.n_layers)
    if not layers:
        st.error("No shipped norm exit head in data/drafts (`specviz train exit`).")
        st.stop()
    if st.session_state.get(f"{P}exit_layer") not in layers:
        st.session_state[f"{P}exit_layer"] = vp.default_exit_layer(layers, page.n_layers)
    exit_layer = st.selectbox("ℓ: exit layer", layers, key=f"{P}exit_layer",
                              help="The target's prefix is layers 1..ℓ; the suffix ℓ+1..L is the overlap budget Δ.")
    draft = st.selectbox("draft", list(vp.MIRROR_DRAFTS), format_func=vp.DRAFT_LABELS.get, key=f"{P}draft")
    rule = st.selectbox("acceptance rule", list(vp.RULES), format_func=vp.RULE_LABELS.get, key=f"{P}rule",
                        help="Both are lossless; they differ only when sampling (temperature > 0).")
    vp.lane_options(page, "also run sps (same draft and γ)",
                    "Synchronous SD, the paper's 'vanilla SD': the measured speedup beside the paper's S.")
page.generation("0 = greedy; the acceptance rule matters only when sampling (seed 0).")
options = vp.mirror_options(gamma, kappa, exit_layer, exit_head, draft, rule, page.mode)

# --- the formula --------------------------------------------------------------------------------
with st.expander("The latency law (Eq. 10/14): move the costs", expanded=False):
    left, right = st.columns([1, 2])
    with left:
        t_prefix = st.slider("T^{1:ℓ} (prefix) ms", 1.0, 80.0, 20.0, 0.5, key=f"{P}x:prefix")
        t_suffix = st.slider("Δ = T^{ℓ+1:L} (suffix) ms", 1.0, 80.0, 20.0, 0.5, key=f"{P}x:suffix")
        t_step = st.slider("draft ms per step", 0.5, 30.0, 4.0, 0.5, key=f"{P}x:step")
        eta = st.slider("η̄: tokens per draft step", 1.0, 3.0, 1.5, 0.1, key=f"{P}x:eta")
        x_gamma = st.slider("γ", 1, 12, 5, key=f"{P}x:gamma")
        t_rv = st.slider("T_rv (both rendezvous) ms", 0.0, 20.0, 1.0, 0.1, key=f"{P}x:rv")
        ff = st.slider("FF: fallback rate", 0.0, 1.0, 0.3, 0.01, key=f"{P}x:ff")
    x = vp.mirror_explorer(t_prefix, t_suffix, t_step, eta, x_gamma, t_rv, ff)
    with right:
        cols = st.columns(4)
        cols[0].metric("T_gen(γ)", f"{x['t_gen_ms']:.1f} ms", help="⌈γ/η̄⌉ draft steps.")
        cols[1].metric("T_SD vs T_Mirror", f"{x['t_sd_ms']:.1f} vs {x['t_mirror_ms']:.1f} ms")
        cols[2].metric("S over SD", f"{x['speedup']:.2f}×", help="The paper's S (§3.6), no fallbacks.")
        cols[3].metric("with FF", f"{x['speedup_with_ff']:.2f}×", help="E[T_step] = T_Mirror + FF·T_gen [derived].")
        st.plotly_chart(mirror_sd.mirror_law_figure(t_prefix / 1e3, t_suffix / 1e3, t_rv / 1e3, x["gen"]), key=f"{P}law")
        st.caption("The draft is free while T_gen fits under the suffix Δ (shaded: zero slope in γ); past that only "
                   "the part that sticks out costs. Mirror beats vanilla SD iff T_rv < min(Δ, T_gen).")

# --- prompt, running ----------------------------------------------------------------------------
page.controls(live_areas=2)  # the Gantt, the hypothesis grid
token_text = one_token(page.engine.detokenize)
vp.run(page, options, lambda events: mirror_sd.hypothesis_grid(events, token_text=token_text), "grid")


# --- results ------------------------------------------------------------------------------------
def show_round(record: dict) -> None:
    events = record["runs"][record["main"]]["events"]
    chosen = vp.round_slider(events, EeMessage, "One round's bet: the hypothesis grid", f"{P}round")
    if chosen is None:
        return
    st.plotly_chart(mirror_sd.hypothesis_grid(events, chosen, token_text=token_text), key=f"{P}grid")
    overlap = mirror_sd.overlap_rate(events)
    if overlap["omega"] is not None:
        st.caption(f"Ω_κ measured: the target's token was in the early exit's top-{overlap['kappa']} at "
                   f"{overlap['in_top_k']} of {overlap['positions']} verified positions (Ω = {overlap['omega']:.2f}; "
                   f"by rank {overlap['rank_counts']}). The paper bounds the fallback rate by 1 − Ω_κ.")


def show_split(record: dict) -> None:
    split = verdict_metrics.draft_time_split(record["runs"][record["main"]]["events"])
    if split:
        st.subheader("Draft work per round: hidden under the target, or exposed")
        frame = pd.DataFrame(split).set_index("round")[["hidden_s", "exposed_s"]] * 1e3
        st.bar_chart(frame.rename(columns={"hidden_s": "hidden ms", "exposed_s": "exposed ms"}),
                     color=["#81c784", "#e57373"])


record = page.stored_run("Pick γ, κ, the exit and a mode, then press **Run Mirror-SD**.")
if record is not None:
    vp.show_run(page, record, "vanilla SD")
    show_round(record)
    show_split(record)
