"""specviz dashboard page: the analytic models, evaluated on what verification costs on this machine.

Every speculative method trades draft work for fewer target calls; what a call over n tokens costs here
decides what pays. The page measures (once per machine, cached) and draws that verify-cost curve with
every matmul kernel the engine tried, then lays Leviathan et al.'s chain model and the draft-tree model
on it, with sliders. The measured runs of this session (the other pages) appear as points where they fit.
"""

from __future__ import annotations

import streamlit as st

from app import live as lv
from app.engine_cache import model_picker
from specviz.notation import notation_table
from specviz.theory import heldout_topk_agreement, rank_probabilities
from specviz.views.chain import chain_theory_on_curve_figure, kernel_curves_figure
from specviz.views.ppsd_theory import formula_figure, formula_readout
from specviz.views.session_points import chain_run_point, predicted_vs_measured_figure
from specviz.views.tree_budget import tree_budget_figure

st.set_page_config(page_title="specviz — theory on this machine", page_icon="📐", layout="wide")
st.title("📐 Theory, on this machine")

with st.sidebar:
    dtype, engine = model_picker("theory:")
with st.expander("Notation (the same in the notebooks and docs/notation.md)"):
    st.markdown(notation_table())
with st.spinner("Measuring what a target forward over 1…16 tokens costs here (once per machine and dtype)…"):
    curve = engine.verify_cost()

st.header("What verifying n tokens costs")
st.markdown(
    "Speculative decoding assumes that checking several tokens in one target forward costs about as much as "
    "producing one. Whether that holds depends on the machine: the engine times a forward over n = 1…16 new "
    "tokens with every matmul kernel it knows and keeps the fastest per n (`specviz verify-cost`). Methods "
    "size their drafts from this curve (`gamma=auto`, `total_tokens=auto`).")
st.plotly_chart(kernel_curves_figure(curve))
st.caption(f"{engine.name} · {engine.dtype} · {curve.threads} threads · {curve.prefix} tokens already cached · "
           f"one token {curve.cost(1) * 1e3:.1f} ms, 16 tokens {curve.relative(16):.2f}× that · bandwidth "
           f"{curve.bandwidth_gb_s:.0f} GB/s over {curve.weight_bytes / 1e6:.0f} MB of weights: at most "
           f"{curve.ceiling_tokens_per_s:.0f} tokens/s, against {1 / curve.cost(1):.0f} for one-token forwards here.")

st.header("A chain of γ drafts (Leviathan et al.)")
left, right = st.columns(2)
alpha = left.slider("a: chance each draft token is accepted (per-token acceptance)", 0.0, 0.95, 0.6, 0.05,
                    key="theory:alpha")
cost = right.slider("c: one draft step ÷ one target step", 0.0, 0.5, 0.1, 0.01, key="theory:c")
st.latex(r"\tau = \frac{1-a^{\gamma+1}}{1-a},\qquad "
         r"\text{speedup} = \frac{\tau\cdot \mathrm{cost}(1)}{\gamma c\,\mathrm{cost}(1) + \mathrm{cost}(\gamma+1)}")
st.plotly_chart(chain_theory_on_curve_figure(alpha, cost, curve))

st.subheader("This session's runs on the model")
session_runs = list(st.session_state.get(lv.SESSION_RUNS, {}).values())
same_dtype = [r for r in session_runs if r["events"][0].dtype == engine.dtype]  # finished runs open with RunStart
points = [p for p in (chain_run_point(r["events"], r["ar_events"], curve, r["label"]) for r in same_dtype) if p]
if points:
    st.markdown("Each chain run of this session (Run and Compare pages) measured its own a (accepted ÷ positions "
                "the target judged), c (draft time per drafted token ÷ `ar`'s time per token) and mean γ (tokens "
                "drafted per round, averaged over its rounds); the model predicts its speedup from those on the curve above. "
                "On the diagonal the model is right; "
                "away from it the run gained or lost time the model does not count: bookkeeping and sampling, "
                "drafts of uneven length (`pld` drafts only as far as its match goes), a short run's noise.")
    st.plotly_chart(predicted_vs_measured_figure(points))
    st.dataframe([{k: round(v, 2) if isinstance(v, float) else v for k, v in p.items()} for p in points],
                 hide_index=True)
else:
    skipped = len(session_runs) - len(same_dtype)
    st.info("No chain run yet in this session" + (f" in {engine.dtype} ({skipped} in another dtype)" if skipped else "")
            + ": generate with `sps`, `pld` or `eesd` on the Run or Compare page, and each run appears here as a "
            "point, its measured speedup against the one the model predicts from its measured a, c and γ.")

st.header("A draft tree (EAGLE-2)")
st.markdown("At every position the target's token is the drafter's rank-j choice with probability rⱼ (measured "
            "for the shipped `eagle` head on held-out answers); the best tree of n nodes is the n most probable "
            "paths, and a round commits 1 + Σ P(path).")
left, middle, right = st.columns(3)
depth = left.slider("d: depth", 1, 8, 5, key="theory:depth")
topk = middle.slider("k: candidates per node", 1, 8, 4, key="theory:topk")
tree_cost = right.slider("c: one draft level ÷ one target step", 0.0, 0.5, 0.1, 0.01, key="theory:tree_c")
probs = rank_probabilities(heldout_topk_agreement("eagle"), topk)
st.plotly_chart(tree_budget_figure(probs, depth, tree_cost, curve))

st.header("Early exit: drafting with the target's own first layers (EESD, PPSD)")
st.markdown("A self-draft runs the target's first ℓ of L layers (and an exit head); EESD drafts γ tokens, then "
            "verifies them with all L layers. PPSD (paper 003) pipelines the layers instead, one stage of ℓ layers "
            "per core, so an accepted token costs one tick and a rejected one a whole pipeline of P = ⌈L/ℓ⌉ ticks. "
            "The paper's N, E, α, ρ (EESD) and its starred ρ (PPSD) are L, ℓ, a, S_EESD and S_PPSD here. "
            "Costs are in layers, so the models hold on any machine where layers cost alike.")
left, middle, right = st.columns(3)
exit_alpha = left.slider("a: chance each draft token is accepted", 0.0, 1.0, 0.6, 0.05, key="theory:exit_alpha")
exit_layer = middle.slider("ℓ: exit layer", 1, engine.target.n_layers - 1, 8, key="theory:exit_layer")
exit_gamma = right.slider("γ: EESD draft length", 1, 10, 5, key="theory:exit_gamma")
st.latex(r"S_{\mathrm{EESD}} = \frac{(1-a^{\gamma+1})\,L}{(1-a)(\gamma \ell + L)}\ \text{(Eq. 4)},\qquad "
         r"S_{\mathrm{PPSD}} = \frac{L}{a\ell + (1-a)\lceil L/\ell\rceil \ell}\ \text{(Eq. 6)}")
st.markdown(formula_readout(exit_alpha, exit_layer, exit_gamma, engine.target.n_layers), unsafe_allow_html=True)
st.plotly_chart(formula_figure(exit_alpha, exit_layer, exit_gamma, engine.target.n_layers))

st.header("The other papers' models, beside their measurements")
st.markdown("These models need times only a run measures (a drafting pass, a link, a stream of weights), so "
            "each lives on its method's page with sliders, next to the live run it explains:")
PAPER_MODELS = [  # (the page's URL path, the paper, its model)
    ("CATS", "CATS (paper 004)", "speedup = τ·T_AR ÷ T_cycle, with T_cycle = γ·t_draft + t_shallow verify + "
     "t_reforward + max(deep weight bytes ÷ bandwidth, deep compute)"),
    ("Mirror_SD", "Mirror-SD (paper 000)", "T_step = T^{1:ℓ} + T_rv + max(T^{ℓ+1:L}, T_gen); it beats SD iff "
     "T_rv < min(T^{ℓ+1:L}, T_gen)"),
    ("SSD", "SSD (paper 002)", "speedup over SD = (T_d(γ) + T_v) ÷ (T_v + (1 − h)·T_backup), γ the lookahead and h the hit rate"),
    ("MoA", "MoA client–server (paper 001)", "T_cycle = T_draft + RTT + 8·(bytes up + bytes down) ÷ bandwidth + "
     "T_verify + T_LSA"),
]
st.markdown("\n".join(f"- **[{paper}]({path})**: {formula}" for path, paper, formula in PAPER_MODELS))
