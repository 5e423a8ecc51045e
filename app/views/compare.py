"""specviz dashboard page: two to four configurations on one prompt, one after another, side by side.

The sidebar holds the configurations (each a method and its options, the widgets generated from the method's
``Config`` exactly as on the Run page, so every method in the registry is offered), the generation settings
and the dtype; the page holds the prompt, one token-stream column per configuration, the table and the
overlaid figures.

Decisions:
- Runs are serialized on the engine's lock (``engine_cache.engine_lock``), one configuration at a time, so
  no run times another's work; then ``ar`` runs on the same prompt and settings (``engine_cache.ar_baseline``,
  cached in the session and shared with the other pages) and every speedup is against it.
- A configuration the engine refuses (bad combination of options) shows the engine's message in its column;
  the others still run.
- **Stop** ends the configuration in progress at its next commit (``live.Batch``); the ones not reached are
  marked so, the ones done keep their numbers.
- The configurations, prompt and settings live in the URL (``?c1=pld&c2=sps(gamma=3,draft=tiny)&prompt_id=7``).
"""

from __future__ import annotations

import streamlit as st

from app import compare_page as ch
from app import live as lv
from app import method_options as mo
from app import option_widgets as ow
from app import run_summary as rs
from app import url_state as us
from app.engine_cache import ar_baseline, engine_lock, model_picker
from app.prompt_picker import example_prompts, prompt_picker
from specviz.views.chain import accepted_length_histogram, draft_depth_acceptance_figure
from specviz.views.compare import cumulative_tokens_figure, speedup_bar_figure
from specviz.views.tokens import legend_html, token_stream_html

P = "cmp:"  # widget keys of this page
st.set_page_config(page_title="specviz — compare", page_icon="⚖️", layout="wide")

st.title("⚖️ Compare configurations")
st.markdown(
    "Pick two to four configurations in the sidebar (a method and its options each) and one prompt. **Compare** "
    "runs them one after another on the same model, then `ar` on the same prompt and settings, and lays them side "
    "by side: their token streams, tokens/s and speedup over that `ar`, τ (tokens per target call), α (accepted ÷ "
    "drafted), and whether each wrote exactly what `ar` wrote.")
st.markdown(legend_html(), unsafe_allow_html=True)

# --- sidebar: configurations, generation settings, model ----------------------------------------
url = ow.url_once(f"{P}url")
ignored: list[str] = []
url_configs, bad = us.compare_configs_from_params(url)
ignored += bad
configs_box, settings_box, model_box = st.sidebar.container(), st.sidebar.container(), st.sidebar.container()

with model_box:
    ow.apply_url_dtype(P, url, ignored)
    dtype, engine = model_picker(P)

with configs_box:
    st.header("Configurations")
    if url_configs:
        st.session_state[f"{P}n"] = min(max(len(url_configs), 2), us.MAX_CONFIGS)
    st.session_state.setdefault(f"{P}n", 2)
    n = int(st.number_input("how many", 2, us.MAX_CONFIGS, key=f"{P}n"))
    configs = []
    for i in range(n):
        pending_method, pending_options = url_configs[i] if i < len(url_configs) else (None, None)
        with st.expander(f"Configuration {i + 1}", expanded=True):
            method = ow.method_select(f"{P}{i}:method", ch.DEFAULT_METHODS[i], pending_method, ignored)
            options = ow.option_widgets(f"{P}{i}:", method, engine.target.n_layers, pending_options, ignored)
            if mo.untrained_self_draft(method, options):
                st.caption("An untrained self-draft: expect α near 0 on this model.")
        configs.append((method, options))

with settings_box:
    st.header("Generation")
    settings = ow.settings_widgets(P, url, ignored)

# --- prompt and buttons ---------------------------------------------------------------------------
prompts = example_prompts()
if url:
    ow.apply_url_prompt(prompts, P, url, ignored)
    known = {"prompt", "prompt_id", "dtype", *us.SETTINGS, *(f"c{i}" for i in range(1, us.MAX_CONFIGS + 1))}
    ignored += [f"unknown parameter {name!r}" for name in url if name not in known]
prompt = prompt_picker(prompts, P)
ow.show_ignored(ignored)
ow.write_url({**us.compare_params(configs), **us.prompt_params(prompts, *ow.prompt_state(P)),
              **us.settings_params(settings, st.session_state.get(f"{P}dtype", "auto"))})
run_column, stop_column, _ = st.columns([1, 1, 5])
pressed = run_column.button("Compare", type="primary", key=f"{P}run")
stop_slot = stop_column.empty()

# --- the batch: a new one, or the last one (after a Stop, wait for its script run to let go) ------
if pressed:
    batch = lv.Batch(configs, prompt, settings, engine.dtype)
    st.session_state[f"{P}batch"] = batch
else:
    batch = st.session_state.get(f"{P}batch")
    if batch is not None:
        batch.wait()

shown = batch.configs if batch is not None else configs
names = ch.labels(shown)
slots = []
for column, name in zip(st.columns(len(shown)), names):
    column.markdown(f"**{name}**")
    slots.append(column.empty())
status = st.empty()


def draw_stream(slot, events: list, name: str, stopped: bool = False) -> None:
    slot.markdown(rs.live_status(events, name, stopped) + token_stream_html(events), unsafe_allow_html=True)


def compare(batch: lv.Batch) -> None:
    """Every configuration under the engine's lock, streamed into its column, then the ar baseline."""
    lock = engine_lock(dtype)
    with batch.running():
        stop_slot.button("⏹ Stop", key=f"{P}stop", help="End the run in progress at its next token; "
                                                        "what the configurations produced stays here.")
        for i, (method, options) in enumerate(batch.configs):
            status.caption(f"Running {names[i]} ({i + 1} of {len(batch.configs)})…")
            with lock:
                record = batch.run(lambda: engine.generate(batch.prompt, method, **batch.settings, **options),
                                   lambda events: draw_stream(slots[i], events, names[i]))
            if "error" in record:
                slots[i].error(record["error"])
        if batch.done:  # every configuration refused (a prompt past the context window, …): ar would be too
            batch.ar, batch.ar_source = ar_baseline(
                engine, lock, batch.prompt, batch.settings,
                progress=lambda done, total: status.caption(f"ar baseline for the speedups: {done}/{total} tokens"))
        status.empty()
    stop_slot.empty()


if pressed:
    compare(batch)

# --- results --------------------------------------------------------------------------------------
if batch is None:
    for slot in slots:
        slot.info("Press **Compare** to run the configurations one after another.")
else:
    for i, (slot, name) in enumerate(zip(slots, names)):
        record = batch.runs[i] if i < len(batch.runs) else None
        if record is None:
            slot.caption("not run (stopped before it)" if batch.stopped else "not run")
        elif "error" in record:
            slot.error(record["error"])
        else:
            draw_stream(slot, record["events"], name, record["stopped"])
    if batch.stopped:
        st.warning("⏹ Stopped: the numbers are for what each configuration produced before the Stop.")
        batch.use_cached_baseline(st.session_state.get("ar_cache", {}))
    lv.remember(st.session_state, batch, names)
    st.dataframe(ch.table_rows(batch), hide_index=True,
                 column_config={name: st.column_config.Column(help=text) for name, text in ch.COLUMN_HELP.items()})
    ar_note = (f"ar {batch.ar['stats']['tokens_per_s']:.1f} tok/s ({batch.ar_source})" if batch.ar
               else "no ar baseline (stopped before it ran)" if batch.stopped
               else "no ar baseline (no configuration ran)")
    length = ("new tokens at most" if batch.settings.get("stop_at_eos", True)
              else "new tokens, through end-of-text")
    st.caption(f"{batch.settings['max_new_tokens']} {length} · temperature {batch.settings['temperature']} · "
               f"{batch.dtype} · {ar_note}. Configurations run one after another on one engine, so each had the "
               "machine to itself.")
    runs = ch.figure_runs(batch)
    if runs:
        left, right = st.columns(2)
        left.plotly_chart(cumulative_tokens_figure(runs))
        rows = [r for r in ch.table_rows(batch) if r["tok/s"] is not None]
        if batch.ar is not None:
            right.plotly_chart(speedup_bar_figure([r["configuration"] for r in rows],
                                                  [r["speedup vs ar"] for r in rows],
                                                  hover=[f"{r['tok/s']} tok/s" for r in rows]))
        left, right = st.columns(2)
        left.plotly_chart(accepted_length_histogram(runs))
        drafting = ch.drafting_runs(batch)
        if drafting:
            right.plotly_chart(draft_depth_acceptance_figure(drafting))
