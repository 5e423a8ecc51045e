"""specviz dashboard: pick a method, a prompt and parameters; watch the real engine decode live.

Run with ``streamlit run app/dashboard.py``. Layout: the sidebar holds the method, its options (widgets
generated from the method's ``Config`` dataclass), the sampling settings and the dtype; the page holds
the prompt, the live token stream, the metrics, and the figures.

Decisions:
- The default method is ``pld`` on a summarization prompt: without trained drafters it is the method
  that visibly speeds this model up (sps/eesd self-drafts are rarely accepted; the sidebar says so).
- The model is loaded once per server and dtype (``st.cache_resource``) and shared by all sessions;
  runs on it are serialized with a lock so two browser tabs never time each other's work.
- Speedup is measured against an ``ar`` run of the same prompt and settings on the same engine. The
  baseline runs after the method (so the method streams first) and is cached in the session by
  prompt/settings/dtype, so changing only the method's options reuses it. For ``ar`` itself the run
  is its own baseline (speedup 1.00×).
- The γ sweep always decodes greedily (``specviz.sweep.gamma_sweep`` runs its baseline greedily).
- Results live in ``st.session_state`` so they survive reruns (e.g. the sweep button) and are drawn
  from there; a failed run (bad input → ``ValueError``) shows the engine's message and clears them.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # also works from a checkout where the project isn't pip-installed
    sys.path.insert(0, str(ROOT))

import dashboard_helpers as dh  # noqa: E402  (app/ is on sys.path under `streamlit run` and AppTest)
from prompt_picker import example_prompts, prompt_picker  # noqa: E402
from engine_cache import ar_baseline, engine_lock, load_engine, model_picker  # noqa: E402
from engines import METHODS
from engines.trace import Commit
from specviz.figures import (accepted_length_histogram, draft_depth_acceptance_figure, speedup_vs_gamma,
                              token_stream_figure)
from specviz.sweep import gamma_sweep
from specviz.tokens import legend_html, token_stream_html

# pld is the default: without trained drafters it is the method that visibly speeds this model up
# (the self-drafts of sps/eesd are the target's early layers with its own head, rarely accepted).
DEFAULT_METHOD = "pld"
UNTRAINED_DRAFTS = {
    "sps": "With draft = 'self' the draft is the target's first layers with its own final head, untrained: "
           "on this model expect few accepted drafts (α near 0), so no speedup.",
    "eesd": "With head = 'none' the exit at layer ℓ reuses the model's final head, untrained: on this model "
            "expect few accepted drafts (α near 0) below the last layers.",
}

st.set_page_config(page_title="specviz — speculative decoding, live", page_icon="⚡", layout="wide")


# --- explanation --------------------------------------------------------------------------------
st.title("⚡ specviz — speculative decoding, live")
st.markdown(
    "Large language models write one token per forward pass, and on ordinary hardware each pass is "
    "bound by reading the weights, not by arithmetic, so checking several tokens at once costs about "
    "as much as producing one. **Speculative decoding** exploits that: a cheap *drafter* (a small model, "
    "the target's own first layers, or n-grams copied from the prompt) guesses the next γ tokens, and "
    "the *target* model checks them all in **one** call. It keeps the longest prefix it agrees with and "
    "adds one token of its own, so each target call commits τ ≥ 1 tokens, and the text is exactly what "
    "the target would have written alone (the methods here are lossless, though in bfloat16 the different "
    "rounding of a many-token call can flip near-ties)."
)
st.markdown(
    f"{legend_html()}<br><small>Grey: produced by the target alone (first token after the prompt, "
    "or autoregressive steps) · green: a drafted token the target accepted · red: the target's own "
    "token where it rejected a draft · blue: the free extra token when every draft was accepted. "
    "Hover a token to see its round.</small>",
    unsafe_allow_html=True,
)

# --- sidebar: method, options, generation settings, model ---------------------------------------
method_box, settings_box, model_box = st.sidebar.container(), st.sidebar.container(), st.sidebar.container()

with model_box:
    dtype, engine = model_picker("")

with method_box:
    st.header("Method")
    names = list(METHODS)
    method = st.selectbox("method", names, index=names.index(DEFAULT_METHOD) if DEFAULT_METHOD in names else 0,
                          key="method", format_func=lambda m: f"{m} — {METHODS[m].description}")
    st.caption(("lossless" if METHODS[method].lossless else "**lossy**") + " · " + METHODS[method].description)
    options = {}
    for spec in dh.option_specs(method, engine.target.n_layers):
        key = f"opt:{method}:{spec.name}"
        if spec.choices:
            options[spec.name] = st.selectbox(spec.label, spec.choices, key=key, help=spec.help,
                                              index=spec.choices.index(spec.default) if spec.default in spec.choices else 0)
        elif spec.kind is bool:
            options[spec.name] = st.checkbox(spec.label, value=spec.default, key=key, help=spec.help)
        elif spec.kind is int:
            automatic = spec.auto and st.checkbox(f"{spec.label}: auto", value=dh.auto_by_default(method, spec.name),
                                                  key=f"{key}:auto", help=dh.AUTO_HELP)
            number = int(st.number_input(spec.label, min_value=spec.low, max_value=spec.high, value=spec.default,
                                         step=1, key=key, help=spec.help, disabled=automatic))
            options[spec.name] = "auto" if automatic else number
        elif spec.kind is float:
            options[spec.name] = float(st.number_input(spec.label, value=float(spec.default), key=key,
                                                       help=spec.help))
        else:
            options[spec.name] = st.text_input(spec.label, value=str(spec.default), key=key, help=spec.help).strip()
    if not options:
        st.caption("No options: one target forward per token.")
    if dh.untrained_self_draft(method, options):
        st.caption(UNTRAINED_DRAFTS[method])

with settings_box:
    st.header("Generation")
    settings = {
        "max_new_tokens": int(st.number_input("max new tokens", 1, 1024, 64, step=8, key="max_new_tokens")),
        "temperature": float(st.slider("temperature", 0.0, 1.5, 0.0, 0.05, key="temperature",
                                       help="0 = greedy decoding.")),
        "seed": int(st.number_input("seed", 0, 2**31 - 1, 0, key="seed", help="Used when temperature > 0.")),
    }
    settings["top_p"] = float(st.slider("top-p", 0.05, 1.0, 1.0, 0.05, key="top_p",
                                        disabled=settings["temperature"] == 0, help="Used when temperature > 0."))

# --- prompt -------------------------------------------------------------------------------------
prompts = example_prompts()
prompt = prompt_picker(prompts, "")
generate = st.button("Generate", type="primary", key="generate")

stream_area = st.empty()


# --- running ------------------------------------------------------------------------------------
def run_method(prompt: str) -> dict:
    """Stream the chosen method into ``stream_area``, then get the ``ar`` baseline; returns the result."""
    lock = engine_lock(dtype)
    with lock:
        stream = engine.generate(prompt, method, **settings, **options)  # ValueError on bad input
        events = []
        for event in stream:
            events.append(event)
            if isinstance(event, Commit):
                stream_area.markdown(dh.live_status(events, dh.method_label(method, options))
                                     + token_stream_html(events), unsafe_allow_html=True)
    end = events[-1]
    run = {"id": uuid.uuid4().hex, "method": method, "options": dict(options), "settings": dict(settings),
           "dtype": engine.dtype, "prompt": prompt, "events": events, "stats": end.stats, "text": end.text,
           "stop_reason": end.stop_reason, "lossless": events[0].lossless}
    if method == "ar":
        record = {k: run[k] for k in ("events", "stats", "text")}  # ar is its own baseline, and the pages' from now on
        st.session_state.setdefault("ar_cache", {})[dh.baseline_key(prompt, settings, engine.dtype)] = record
        run["ar"], run["ar_source"] = record, "this run"
    else:
        run["ar"], run["ar_source"] = ar_baseline(engine, lock, prompt, settings)
    return run


if generate:
    st.session_state.pop("last_run", None)
    try:
        st.session_state["last_run"] = run_method(prompt)
    except (ValueError, OSError) as error:  # the engine validates before any work and names the problem
        stream_area.empty()
        st.error(str(error))


# --- results ------------------------------------------------------------------------------------
def show_metrics(run: dict) -> None:
    stats, ar = run["stats"], run["ar"]
    values = dh.metric_values(stats, ar["stats"])
    for column, (label, value) in zip(st.columns(len(values)), values.items()):
        column.metric(label, value, help=dh.METRIC_HELP[label])
    same = ""
    if run["settings"]["temperature"] == 0 and run["method"] != "ar":
        same = " · output equals ar: " + ("yes ✓" if run["text"] == ar["text"] else "**no**")
        if run["text"] != ar["text"] and run["dtype"] == "bfloat16":
            same += (" (in bfloat16, verifying many tokens in one call rounds differently from one-token steps, "
                     "so near-ties can flip; choose float32 for token-identical output)")
    st.caption(
        f"{stats['new_tokens']} new tokens (stopped by {run['stop_reason'].replace('_', ' ')}) · prefill "
        f"{stats['prefill_seconds'] * 1000:.0f} ms for {run['events'][0].prompt_tokens} prompt tokens · decode "
        f"{stats['decode_seconds']:.2f} s · drafted {stats['drafted']}, accepted {stats['accepted']} · "
        f"{'lossless' if run['lossless'] else 'LOSSY'} · ar baseline {ar['stats']['tokens_per_s']:.1f} tok/s "
        f"({run['ar_source']}){same}")


def show_sweep(run: dict) -> None:
    st.subheader("γ sweep")
    if not dh.has_gamma(run["method"]):
        st.caption("Autoregressive decoding drafts nothing: pick sps, pld or eesd to sweep γ.")
        return
    st.caption("Runs this method at several γ on this prompt (greedy) and lays the measurement beside "
               "Leviathan et al.'s model at the measured α and draft cost c.")
    left, right = st.columns(2)
    max_gamma = left.slider("largest γ", 2, 10, 6, key="sweep_max_gamma")
    tokens = int(right.number_input("tokens per run", 4, 256, 24, step=4, key="sweep_tokens"))
    if st.button("Run γ sweep", key="sweep"):
        gammas = list(range(1, max_gamma + 1))
        bar = st.progress(0.0, text=f"ar baseline, then γ = 1…{max_gamma}")
        options = {k: v for k, v in run["options"].items() if k != "gamma"}
        try:
            with engine_lock(run["dtype"]):
                result = gamma_sweep(load_engine(run["dtype"]), run["prompt"], gammas, run["method"], max_new_tokens=tokens,
                                     progress=lambda i, n: bar.progress(i / n, text=f"γ = {gammas[i - 1]} done ({i}/{n})"),
                                     **options)
        except (ValueError, OSError) as error:
            st.error(str(error))
            return
        bar.empty()
        result["points"] = [{k: v for k, v in p.items() if k != "events"} for p in result["points"]]
        st.session_state["sweep_result"] = {"run_id": run["id"], "tokens": tokens, **result}
    sweep = st.session_state.get("sweep_result")
    if sweep and sweep["run_id"] == run["id"]:
        st.plotly_chart(speedup_vs_gamma(sweep["points"], sweep["alpha"], sweep["cost_ratio"]))
        st.dataframe([{"γ": p["gamma"], "speedup": round(p["speedup"], 2), "τ": round(p["tau"], 2),
                       "α": round(p["alpha"], 2), "tok/s": round(p["tokens_per_s"], 1)} for p in sweep["points"]],
                     hide_index=True)
        st.caption(f"{sweep['tokens']} tokens per run · ar {sweep['ar_tokens_per_s']:.1f} tok/s · pooled "
                   f"α = {sweep['alpha']:.2f} (per position reached) · c = {sweep['cost_ratio']:.2f}")


run = st.session_state.get("last_run")
if run is None:
    if not generate:
        stream_area.info("Pick a method and a prompt, then press **Generate** to watch it decode.")
else:
    stream_area.markdown(dh.live_status(run["events"], dh.method_label(run["method"], run["options"]))
                         + token_stream_html(run["events"]), unsafe_allow_html=True)
    show_metrics(run)
    st.plotly_chart(token_stream_figure(run["events"]))
    hist, sweep_column = st.columns(2)
    with hist:
        st.subheader("Accepted length")
        label = dh.method_label(run["method"], run["options"])
        runs = {label: run["events"]}
        if run["method"] != "ar":
            runs["ar"] = run["ar"]["events"]
        st.plotly_chart(accepted_length_histogram(runs))
        if run["method"] != "ar":  # the diagnostic the benchmark's "α by draft position" table gives
            st.plotly_chart(draft_depth_acceptance_figure({label: run["events"]}))
    with sweep_column:
        show_sweep(run)
