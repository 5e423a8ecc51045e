"""specviz dashboard page: SSD with SAGUARO sampling (paper 002), the speculation cache filling live.

``app/main.py`` (``streamlit run app/main.py``) lists this page in the sidebar. The page is a lane-method page
(:mod:`app.lanes_page`: sidebar, prompt, live run, stored run); this script supplies what is SSD's own: its
options (the lookahead γ, the fan-out and its width f or budget F, SAGUARO's C, the backup, the draft), the
formula explorers (round time, fan-out), the cache table beside the live two-lane Gantt, the speculation cache
round by round, and the accepted-length histogram with the miss curve. The Gantt, the metrics with the law
beside them and (optionally) synchronous SD with the same draft for the speedup are shared with the Mirror-SD
page (:mod:`app.verdict_page`).

Decisions: as on the Mirror-SD page (one engine and lock for every page; lanes needs two cores, else serial;
a 1-token warm-up before a lanes run; redraws at most every 0.4 s from the partial event list; "one core per
lane" on by default).
"""

from __future__ import annotations

import streamlit as st

from app import verdict_page as vp
from app.lanes_page import LanePage
from engines.core.trace import CacheBuild, CacheLookup
from engines.methods.ssd import SsdConfig
from engines.programs.verdict.speculation_cache import fit_power_law
from specviz.views import ssd as ssd_views
from specviz.views.ppsd_runs import one_token

DEFAULTS = SsdConfig()  # the method's own defaults start the widgets
page = LanePage(
    "ssd", "SSD", "🔮", "🔮 SSD: speculate on the speculation, live",
    "Even with a fast draft, speculative decoding is serial: the draft cannot start the next window before it "
    "knows the verdict, A drafts accepted and the bonus token x*. **SSD** runs the draft on its own lane "
    "*during* verification. It guesses the likely verdicts (the top-F_A tokens of its own z_A for every A), "
    "pre-speculates a window after each into a **speculation cache**, and answers the real verdict from the "
    "cache (a *hit*) or with a **backup** on the critical path (a *miss*). Round time (§5.6): "
    "max(T_v, T_draftwork) + T_comm + (1 − h)·T_backup, h the hit rate. **SAGUARO** (C < 1) draws each draft token with its "
    "top tokens down-weighted, which pushes the target's residual onto the cached guesses; verification uses "
    "exactly that distribution, so the run stays lossless.",
    "starting the draft lane (a worker process that loads the draft once)…")
page.start()
P = page.prefix

# --- sidebar ------------------------------------------------------------------------------------
with page.method_box:
    lookahead = int(st.number_input("γ: lookahead", 1, 16, DEFAULTS.lookahead, key=f"{P}lookahead",
                                    help="Draft tokens per window (the option `lookahead`; the paper's K)."))
    fanout = st.selectbox("fan-out", list(vp.FANOUTS), key=f"{P}fanout",
                          help="uniform: f guesses for every A; geometric: F_A ∝ P(A)^{1/(1+r)} within the "
                               "budget F, with a and r refitted from the run's own log.")
    f = int(st.number_input("f: guesses per A (uniform)", 1, 64, DEFAULTS.f, key=f"{P}f", disabled=fanout != "uniform"))
    budget = int(st.number_input("F: cache budget (geometric)", 1, 256, DEFAULTS.budget, key=f"{P}budget",
                                 disabled=fanout != "geometric", help="Σ F_A ≤ F branches per round (the option `budget`)."))
    c = float(st.slider("C: SAGUARO down-weight", 0.05, 1.0, 1.0, 0.05, key=f"{P}c",
                        help="1 = off. Matters only when sampling (temperature > 0)."))
    backup = st.selectbox("backup", list(vp.BACKUPS), format_func=vp.BACKUP_LABELS.get, key=f"{P}backup")
    draft = st.selectbox("draft", ["tiny", "ss"], key=f"{P}draft", format_func=vp.DRAFT_LABELS.get,
                         help="tiny: the paper's setting, one token per draft forward; ss: 1 + 2 tokens per forward "
                              "(this project's extension).")
    vp.lane_options(page, "also run sps (same draft and γ)", "Synchronous SD: the measured speedup beside §5.6's formula.")
    st.caption("Draft: `tiny` (4 layers: the target's first two + two distilled).")
page.generation("0 = greedy; SAGUARO's C matters only when sampling (seed 0).")
options = vp.ssd_options(lookahead, fanout, f, budget, c, backup, page.mode, draft)

# --- the formulas -------------------------------------------------------------------------------
with st.expander("The round time (§5.6) and the cache's shape (§5.3): move the knobs", expanded=False):
    left, right = st.columns(2)
    with left:
        st.markdown("**Round time**")
        t_v = st.slider("T_v: verify ms", 1.0, 100.0, 30.0, 0.5, key=f"{P}x:verify")
        t_d = st.slider("T_d(γ): SD's draft ms", 0.0, 100.0, 12.0, 0.5, key=f"{P}x:draft")
        t_dw = st.slider("T_draftwork: glue + tree ms", 0.0, 150.0, 25.0, 0.5, key=f"{P}x:draftwork")
        t_comm = st.slider("T_comm ms", 0.0, 20.0, 1.0, 0.1, key=f"{P}x:comm")
        t_b = st.slider("T_backup ms", 0.0, 100.0, 12.0, 0.5, key=f"{P}x:backup")
        hit = st.slider("h: hit rate", 0.0, 1.0, 0.5, 0.01, key=f"{P}x:hit")
        x = vp.ssd_explorer(t_v, t_d, t_dw, t_comm, t_b, hit)
        cols = st.columns(3)
        cols[0].metric("SD vs SSD round", f"{x['t_sd_ms']:.1f} vs {x['t_round_ms']:.1f} ms",
                       help="T_d(γ) + T_v against max(T_v, T_draftwork) + T_comm + (1 − h)·T_backup.")
        cols[1].metric("SSD / SD", f"{x['ratio']:.2f}×")
        cols[2].metric("bound at h = 1", f"{x['bound']:.2f}×", help="1 + T_d(γ)/T_v.")
        st.caption("The draft work is " + ("hidden under T_v." if x["hidden"] else
                                           "longer than T_v: it sets the pace, hits or not."))
    with right:
        st.markdown("**Fan-out**")
        a_p = st.slider("a: per-token acceptance probability", 0.05, 0.95, 0.6, 0.01, key=f"{P}x:a_p")
        r = st.slider("r: miss exponent", 0.05, 2.0, 0.5, 0.05, key=f"{P}x:r")
        x_budget = st.slider("F: budget", 1, 64, 24, key=f"{P}x:budget")
        x_k = st.slider("γ: lookahead", 1, 10, 7, key=f"{P}x:k")
        st.plotly_chart(ssd_views.fanout_figure(a_p, r, x_budget, x_k), key=f"{P}fanout_figure")

# --- prompt, running ----------------------------------------------------------------------------
page.controls(live_areas=2)  # the Gantt, the cache table
token_text = one_token(page.engine.detokenize)
vp.run(page, options, lambda events: ssd_views.ssd_cache_table(events, token_text=token_text), "cache")


# --- results ------------------------------------------------------------------------------------
def show_cache(record: dict) -> None:
    events = record["runs"][record["main"]]["events"]
    chosen = vp.round_slider(events, CacheBuild, "The speculation cache, round by round", f"{P}round")
    if chosen is None:
        return
    st.plotly_chart(ssd_views.ssd_cache_table(events, chosen, token_text=token_text), key=f"{P}cache")


def show_fits(record: dict) -> None:
    events = record["runs"][record["main"]]["events"]
    lookups = [e for e in events if isinstance(e, CacheLookup)]
    if not lookups:
        return
    st.subheader("What the fan-out should be: accepted lengths and the miss curve")
    left, right = st.columns(2)
    left.plotly_chart(ssd_views.k_histogram(events), key=f"{P}k_histogram")
    right.plotly_chart(ssd_views.hit_rate_vs_fanout(events), key=f"{P}miss_curve")
    a_p = ssd_views.fit_acceptance(events)
    beta_fit, r_fit = fit_power_law([x.rank for x in lookups])
    beta_fit = min(beta_fit, 1.0)  # a fitted miss rate above 1 at F = 1 means nothing: cap β at 1
    builds = [e for e in events if isinstance(e, CacheBuild)]
    if a_p is not None and builds and r_fit > 0:
        k = len(builds[-1].fanout) - 1
        shown_budget = max(sum(builds[-1].fanout), 1)
        st.plotly_chart(ssd_views.fanout_figure(a_p, r_fit, shown_budget, k, c=beta_fit), key=f"{P}fitted_fanout")
        st.caption(f"The §5.3 optimum at this run's fitted a = {a_p:.2f} and r = {r_fit:.2f} (β = {beta_fit:.2f}), "
                   f"for its own budget of {shown_budget} guesses; measured hit rate "
                   f"{sum(x.hit for x in lookups) / len(lookups):.2f} over {len(lookups)} lookups.")


record = page.stored_run("Pick γ, the fan-out, C, the backup and a mode, then press **Run SSD**.")
if record is not None:
    vp.show_run(page, record, "synchronous SD")
    show_cache(record)
    show_fits(record)
