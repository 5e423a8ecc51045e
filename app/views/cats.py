"""specviz dashboard page: CATS (paper 004) under a memory budget, live, one cycle at a time.

``app/main.py`` (``streamlit run app/main.py``) lists this page in the sidebar. The sidebar holds CATS's settings (the shipped draft and
shallow-verifier adapters, γ, the acceptance rule), the memory budget (resident layers, flash bandwidth,
stream mode), the generation settings and the dtype; the page holds the prompt, the live token stream, the
metrics, one cycle's tree, mask and io/compute Gantt, and the shallow verifier's confusion matrix.

Decisions:
- The engine and its lock come from ``engine_cache``, shared with the other pages: one engine per dtype,
  and runs from different pages never time each other's work.
- Speedup is measured against an ``ar`` run of the same prompt under the **same** budget, bandwidth and
  sampling settings, right after the CATS run; it is cached in the session (``ar_cache``) under a key that
  includes the budget, so a baseline is reused only for identical settings.
- The adapters offered are those shipped in ``data/drafts`` (listed on every rerun: adapters appear while
  training runs); the shallow verifiers offered are those above the chosen draft layer.
- Greedy acceptance forces temperature 0 (the slider is disabled); typical acceptance is labelled LOSSY.
"""

from __future__ import annotations

import uuid

import streamlit as st

from app import cats_page as ch
from app import method_options as mo
from app import run_summary as rs
from app.engine_cache import ar_baseline, engine_lock, model_picker
from app.prompt_picker import example_prompts, prompt_picker
from engines.core.trace import Commit
from specviz.views.cats_cycles import (
    STAGE_COLOURS,
    cats_cycles,
    confusion_figure,
    cycle_caption,
    cycle_mask_figure,
    cycle_tree_figure,
    gantt_figure,
    showcase_cycle,
)
from specviz.views.draft_trees import STATUS_COLOURS, STATUS_LABELS
from specviz.views.tokens import legend_html, token_stream_html

st.set_page_config(page_title="specviz — CATS", page_icon="🪜", layout="wide")


# --- explanation --------------------------------------------------------------------------------
st.title("🪜 CATS under a memory budget, live")
st.markdown(
    "When the model does not fit in memory, the layers that do not fit are read from flash on **every** forward, "
    "and a pass through them costs its bytes. **CATS** keeps layers 1..ℓ_SV resident and does its cheap work "
    "there: it **drafts** γ tokens with layers 1..ℓ_DM and an adapter, lets a **shallow verifier** (layers "
    "ℓ_DM+1..ℓ_SV and a second adapter) propose its own token wherever it disagrees with a draft, and "
    "**re-forwards** those corrections, all without flash traffic. Then one streamed pass through the deep "
    "layers **verifies** the chain and its correction siblings together. Here the budget is real: the streamed "
    "layers are read back from per-layer files through a reader throttled to the flash bandwidth."
)
swatches = " ".join(f'<span style="color:{STATUS_COLOURS[s]}">●</span> {STATUS_LABELS[s]}'
                    for s in ("accepted", "rejected", "unreached"))
stages = " ".join(f'<span style="color:{STAGE_COLOURS[s]}">■</span> {s}' for s in ("draft", "sv", "reforward", "verify"))
st.markdown(f"{legend_html()}<br><small>Tree nodes: {swatches} · ⬢ a correction sibling (the shallow verifier's "
            f"token) · ◆ the target's own token. Gantt: {stages} · <span style='color:#00897b'>■</span> a flash read "
            f"· ▮ a streamed layer's compute.</small>", unsafe_allow_html=True)

# --- sidebar: CATS, memory budget, generation, model --------------------------------------------
cats_box, memory_box, settings_box, model_box = (st.sidebar.container(), st.sidebar.container(),
                                                 st.sidebar.container(), st.sidebar.container())

with model_box:
    dtype, engine = model_picker("cats:")
    n_layers = engine.target.n_layers

drafts, verifiers = ch.adapter_choices()
with cats_box:
    st.header("CATS")
    if not drafts or not verifiers:
        st.error(f"CATS needs a shipped draft adapter and a shallow-verifier adapter in data/drafts; found draft "
                 f"{drafts or 'none'}, shallow verifier {verifiers or 'none'} (`specviz train cats`).")
        st.stop()
    dm_layer = st.selectbox("ℓ_DM: draft layers", drafts, index=drafts.index(3) if 3 in drafts else 0,
                            key="cats:dm_layer", help="Layers 1..ℓ_DM plus the shipped DM adapter cats@ℓ_DM draft.")
    above = ch.sv_choices(verifiers, dm_layer)
    if not above:
        st.error(f"No shipped shallow verifier above ℓ_DM = {dm_layer} (shipped: {verifiers}).")
        st.stop()
    sv_layer = st.selectbox("ℓ_SV: shallow verifier", above, index=above.index(15) if 15 in above else len(above) - 1,
                            key="cats:sv_layer", help="Layers ℓ_DM+1..ℓ_SV plus the shipped SV adapter cats@ℓ_SV "
                                                      "check every draft in one parallel pass.")
    gamma = st.number_input("γ: drafts per cycle", 1, 10, 5, step=1, key="cats:gamma",
                            help="Drafting passes per cycle; one deep pass then commits between 1 and γ + 1 tokens.")
    acceptance = st.selectbox("acceptance", list(ch.ACCEPTANCE_LABELS), format_func=ch.ACCEPTANCE_LABELS.get,
                              key="cats:acceptance",
                              help="greedy: the target's argmax (lossless). sample: the multi-candidate rule, lossless "
                                   "at any temperature. typical: Medusa's typical acceptance, the paper's relaxed mode "
                                   "— LOSSY: it accepts tokens the target finds plausible, not only its own.")
    if acceptance == "typical":
        st.warning("Typical acceptance is **LOSSY**: the output may differ from what the target would write.")
    options = ch.cats_options(dm_layer, sv_layer, gamma, acceptance)

with memory_box:
    st.header("Memory budget")
    use_budget = st.checkbox("hold the target to a memory budget", value=True, key="cats:use_budget")
    resident = st.slider("resident layers (1..this)", 0, n_layers, 15, key="cats:resident", disabled=not use_budget,
                         help="The budget keeps layers 1..this in memory (the paper: 1..ℓ_SV); the rest stream from "
                              "their files on every forward. Embeddings and LM head always stay resident.")
    flash = st.number_input("flash bandwidth (MB/s)", 10.0, 20000.0, 1000.0, step=100.0, key="cats:flash",
                            disabled=not use_budget,
                            help="The throttle on the layer-file reader (MB = 10⁶ bytes). A Jetson's flash: ~2000. "
                                 "Below ~500 runs get slow: ar reads every streamed layer for every token.")
    stream_mode = st.selectbox("stream mode", list(ch.STREAM_LABELS), format_func=ch.STREAM_LABELS.get,
                               key="cats:stream", disabled=not use_budget,
                               help="The paper's two readings: Algorithm 1 pins layers 1..k; "
                                    "Fig. 4 streams the whole model once per cycle.")
    if use_budget:
        st.caption(ch.budget_caption(engine.target, resident))
    memory = ch.memory_options(engine.target, use_budget, resident, flash, stream_mode)

with settings_box:
    st.header("Generation")
    settings = ch.generation_settings(
        st.number_input("max new tokens", 1, 512, 24, step=8, key="cats:max_new_tokens"), acceptance,
        st.slider("temperature", 0.05, 1.5, 0.7, 0.05, key="cats:temperature", disabled=acceptance == "greedy",
                  help="Used by sample and typical acceptance (the paper's relaxed mode uses 0.7); greedy is 0."),
        st.number_input("seed", 0, 2**31 - 1, 0, key="cats:seed", help="Used when sampling."))

# --- prompt -------------------------------------------------------------------------------------
prompts = example_prompts()
prompt = prompt_picker(prompts, "cats:", "math_reasoning")
generate = st.button("Run CATS", type="primary", key="cats:generate")
stream_area = st.empty()


# --- running ------------------------------------------------------------------------------------
def run_cats(prompt: str) -> dict:
    """Stream ``cats`` into ``stream_area``, then ``ar`` under the same budget for the speedup."""
    label = mo.method_label("cats", options)
    lock = engine_lock(dtype)
    with lock:
        events = []
        for event in engine.generate(prompt, "cats", **settings, **memory, **options):  # ValueError on bad input
            events.append(event)
            if isinstance(event, Commit):
                stream_area.markdown(rs.live_status(events, label) + token_stream_html(events), unsafe_allow_html=True)
    end = events[-1]
    run = {"id": uuid.uuid4().hex, "options": dict(options), "settings": dict(settings), "memory": dict(memory),
           "dtype": engine.dtype, "prompt": prompt, "events": events, "stats": end.stats, "text": end.text,
           "label": label}
    run["ar"], run["ar_source"] = ar_baseline(engine, lock, prompt, settings, memory)
    return run


if generate:
    st.session_state.pop("cats_run", None)
    try:
        run = run_cats(prompt)
        st.session_state["cats_run"] = run
        if cats_cycles(run["events"]):
            st.session_state["cats:cycle"] = showcase_cycle(run["events"])
    except (ValueError, OSError) as error:  # the engine validates before any work and names the problem
        stream_area.empty()
        st.error(str(error))


# --- results ------------------------------------------------------------------------------------
def show_metrics(run: dict) -> None:
    values = ch.metric_values(run["stats"], run["events"], run["ar"]["stats"])
    for column, (label, value) in zip(st.columns(len(values)), values.items()):
        column.metric(label, value, help=ch.METRIC_HELP[label])
    st.caption(ch.run_caption(run))


def show_cycle(run: dict) -> None:
    st.subheader("One cycle: the tree, the mask that verified it, and where the time went")
    events = run["events"]
    cycles = cats_cycles(events)
    if not cycles:
        st.caption("This run had no CATS cycle (one token was all it had to generate).")
        return
    if len(cycles) > 1:
        if st.session_state.get("cats:cycle") not in cycles:
            st.session_state["cats:cycle"] = showcase_cycle(events)
        cycle = st.slider("cycle", cycles[0], cycles[-1], key="cats:cycle",
                          help="Starts at a cycle whose correction sibling the target tried.")
    else:
        cycle = cycles[0]
    st.caption(cycle_caption(events, cycle, engine.detokenize))
    left, right = st.columns([3, 2])
    left.plotly_chart(cycle_tree_figure(events, cycle, engine.detokenize), key="cats:tree_figure")
    right.plotly_chart(cycle_mask_figure(events, cycle, engine.detokenize), key="cats:mask_figure")
    whole = st.checkbox("Gantt: show every cycle of the run", value=False, key="cats:gantt_all")
    st.plotly_chart(gantt_figure(events, None if whole else [cycle]), key="cats:gantt_figure")
    st.caption("Upper lane: each streamed layer's read from the emulated flash. Lower lane: the cycle's stages "
               "(draft, shallow verify, re-forward, verify), with each streamed layer's actual compute as a thin dark "
               "bar inside verify; where those bars leave gaps, the compute waits for the flash. Run without a budget, "
               "nothing streams and only the stages are drawn.")


def show_confusion(run: dict) -> None:
    st.subheader("The shallow verifier against the target")
    st.plotly_chart(confusion_figure(run["events"]), key="cats:confusion_figure")
    st.caption("Every draft position the target judged in this run (positions after the first refusal of a cycle are "
               "never judged). Disagreed × refused is where a correction sibling can save the cycle; the count of "
               "corrections the target took is in that cell.")


run = st.session_state.get("cats_run")
if run is None:
    if not generate:
        stream_area.info("Pick the adapters, a memory budget and a prompt, then press **Run CATS**.")
else:
    stream_area.markdown(rs.live_status(run["events"], run["label"]) + token_stream_html(run["events"]),
                         unsafe_allow_html=True)
    show_metrics(run)
    show_cycle(run)
    show_confusion(run)
