"""specviz dashboard: pick a method, a prompt and parameters; watch the real engine decode live.

The dashboard's first page (``streamlit run app/main.py``). Layout: the sidebar holds the method, its options (widgets
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
- The γ sweep always decodes greedily (``specviz.experiments.gamma_sweep.gamma_sweep`` runs its baseline greedily).
- Results live in ``st.session_state`` so they survive reruns (e.g. the sweep button) and are drawn
  from there; a failed run (bad input → ``ValueError``) shows the engine's message and clears them.
- The setup lives in the URL (``?method=sps&gamma=3&draft=tiny&prompt_id=7``, see ``url_state``): read on
  a session's first run, written on every change, so a link reproduces it. Only values the widgets offer
  are taken; every string option is a select of valid values (shipped drafters, layers with a trained
  head), so nothing typed in the browser names a file for the server to load.
- **Stop** appears while a run streams: it ends the run at its next commit (``live.Batch``): the engine's
  generator is closed, and what was produced stays on the page, marked stopped, with its numbers so far.
"""

from __future__ import annotations

import streamlit as st

from app import live as lv
from app import method_options as mo
from app import option_widgets as ow
from app import run_summary as rs
from app import url_state as us
from app.engine_cache import ar_baseline, engine_lock, load_engine, model_picker
from app.prompt_picker import example_prompts, prompt_picker
from engines import METHODS
from specviz.experiments.gamma_sweep import gamma_sweep
from specviz.views import rounds
from specviz.views.chain import (
    accepted_length_histogram,
    draft_depth_acceptance_figure,
    speedup_vs_gamma,
    token_stream_figure,
)
from specviz.views.suffix_match import match_summary, suffix_match_figure, suffix_matches
from specviz.views.tokens import legend_html, token_stream_html

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

for column, (page, label, icon) in zip(st.columns(3), (
        ("views/compare.py", "Compare configurations", "⚖️"),
        ("views/theory.py", "Theory on this machine", "📐"),
        ("views/results.py", "Recorded results (no model)", "📊"))):
    column.page_link(page, label=label, icon=icon)

# --- sidebar: method, options, generation settings, model ---------------------------------------
url = ow.url_once("url:run")  # the link's setup, on this session's first run of the page
ignored: list[str] = []
method_box, settings_box, model_box = st.sidebar.container(), st.sidebar.container(), st.sidebar.container()

with model_box:
    ow.apply_url_dtype("", url, ignored)
    dtype, engine = model_picker("")

with method_box:
    st.header("Method")
    method = ow.method_select("method", DEFAULT_METHOD, url.get("method"), ignored)
    st.caption(("lossless" if METHODS[method].lossless else "**lossy**") + " · " + METHODS[method].description)
    option_names = METHODS[method].Config.option_names()
    options = ow.option_widgets("", method, engine.target.n_layers,
                                {k: v for k, v in url.items() if k in option_names}, ignored)
    if not options:
        st.caption("No options: one target forward per token.")
    if mo.untrained_self_draft(method, options):
        st.caption(UNTRAINED_DRAFTS[method])

with settings_box:
    st.header("Generation")
    settings = ow.settings_widgets("", url, ignored)

# --- prompt -------------------------------------------------------------------------------------
prompts = example_prompts()
if url:
    ow.apply_url_prompt(prompts, "", url, ignored)
    known = {"method", "prompt", "prompt_id", "dtype", *us.SETTINGS, *option_names}
    ignored += [f"unknown parameter {name!r}" for name in url if name not in known]
prompt = prompt_picker(prompts, "")
ow.show_ignored(ignored)
ow.write_url({**us.run_params(method, options), **us.prompt_params(prompts, *ow.prompt_state("")),
              **us.settings_params(settings, st.session_state.get("dtype", "auto"))})
generate_column, stop_column, _ = st.columns([1, 1, 5])
generate = generate_column.button("Generate", type="primary", key="generate")
stop_slot = stop_column.empty()

stream_area = st.empty()


# --- running ------------------------------------------------------------------------------------
def settle_stopped_run() -> None:
    """A run this session's previous script run was doing when Stop (or any widget) interrupted it: wait
    for it to end at its next commit, and keep what it produced as the page's (stopped) result."""
    batch = st.session_state.pop("batch", None)
    if batch is not None:
        batch.wait()
        if batch.stopped and batch.done:
            st.session_state["last_run"] = lv.page_run(batch, st.session_state.get("ar_cache", {}))


def run_method(prompt: str) -> None:
    """Stream the chosen method into ``stream_area``, then get the ``ar`` baseline; the result goes to
    ``last_run`` (an error from the engine is shown instead)."""
    batch = lv.Batch([(method, options)], prompt, settings, engine.dtype)
    st.session_state["batch"] = batch
    label = mo.method_label(method, options)
    with batch.running():
        stop_slot.button("⏹ Stop", key="stop", help="End the run at its next token; what it produced stays here.")
        lock = engine_lock(dtype)
        with lock:
            record = batch.run(lambda: engine.generate(prompt, method, **settings, **options),
                               lambda events: stream_area.markdown(rs.live_status(events, label)
                                                                   + token_stream_html(events), unsafe_allow_html=True))
        if "error" in record:  # the engine validates before any work and names the problem
            stream_area.empty()
            st.error(record["error"])
        elif method == "ar":  # ar is its own baseline, and the pages' from now on
            baseline = {k: record[k] for k in ("events", "stats", "text", "token_ids")}
            st.session_state.setdefault("ar_cache", {})[rs.baseline_key(prompt, settings, engine.dtype)] = baseline
            batch.ar, batch.ar_source = baseline, "this run"
        else:
            note = st.empty()
            batch.ar, batch.ar_source = ar_baseline(
                engine, lock, prompt, settings,
                progress=lambda done, total: note.caption(f"ar baseline for the speedup: {done}/{total} tokens"))
            note.empty()
        if "error" not in record:
            st.session_state["last_run"] = lv.page_run(batch, st.session_state.get("ar_cache", {}))
            lv.remember(st.session_state, batch, [label])
    stop_slot.empty()
    st.session_state.pop("batch", None)


settle_stopped_run()
if generate:
    st.session_state.pop("last_run", None)
    run_method(prompt)


# --- results ------------------------------------------------------------------------------------
def show_metrics(run: dict) -> None:
    stats, ar = run["stats"], run["ar"]
    values = rs.metric_values(stats, ar["stats"] if ar else None)
    for column, (label, value) in zip(st.columns(len(values)), values.items()):
        column.metric(label, value, help=rs.METRIC_HELP[label])
    same = ""
    if ar and not run["stopped"] and run["settings"]["temperature"] == 0 and run["method"] != "ar":
        same = " · output equals ar: " + ("yes ✓" if run["text"] == ar["text"] else "**no**")
        if run["text"] != ar["text"] and run["dtype"] == "bfloat16":
            same += (" (in bfloat16, verifying many tokens in one call rounds differently from one-token steps, "
                     "so near-ties can flip; choose float32 for token-identical output)")
    stopped_by = "the Stop button ⏹" if run["stopped"] else run["stop_reason"].replace("_", " ")
    baseline = (f"ar baseline {ar['stats']['tokens_per_s']:.1f} tok/s ({run['ar_source']})" if ar
                else "no ar baseline (the run was stopped before it was measured)")
    st.caption(
        f"{stats['new_tokens']} new tokens (stopped by {stopped_by}) · prefill "
        f"{stats['prefill_seconds'] * 1000:.0f} ms for {run['events'][0].prompt_tokens} prompt tokens · decode "
        f"{stats['decode_seconds']:.2f} s · drafted {stats['drafted']}, accepted {stats['accepted']} · "
        f"{'lossless' if run['lossless'] else 'LOSSY'} · {baseline}{same}")


def show_sweep(run: dict) -> None:
    st.subheader("γ sweep")
    if not mo.has_gamma(run["method"]):
        st.caption("Autoregressive decoding drafts nothing: pick sps, pld or eesd to sweep γ.")
        return
    st.caption("Runs this method at several γ on this prompt (greedy) and lays the measurement beside "
               "Leviathan et al.'s model at the measured per-position acceptance a and draft cost c.")
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
        st.plotly_chart(speedup_vs_gamma(sweep["points"], sweep["a"], sweep["cost_ratio"]))
        st.dataframe([{"γ": p["gamma"], "speedup": round(p["speedup"], 2), "τ": round(p["tau"], 2),
                       "α": round(p["alpha"], 2), "tok/s": round(p["tokens_per_s"], 1)} for p in sweep["points"]],
                     hide_index=True)
        st.caption(f"{sweep['tokens']} tokens per run · ar {sweep['ar_tokens_per_s']:.1f} tok/s · pooled "
                   f"per-position acceptance a = {sweep['a']:.2f} · c = {sweep['cost_ratio']:.2f}")


def show_suffix_matches(run: dict) -> None:
    """What the model-free suffix drafter copied, and from where (sps(draft=suffix), eagle(merge_suffix=true))."""
    rows = suffix_matches(run["events"])
    if not rows:
        return
    st.subheader("What the suffix drafter matched")
    summary = match_summary(rows)
    st.caption(" · ".join(f"{origin}: {s['accepted']} of {s['drafted']} drafted tokens kept"
                          + (f", matched on {s['mean_length']:.1f} tokens on average" if s["mean_length"] else "")
                          for origin, s in summary.items() if s["drafted"]))
    st.plotly_chart(suffix_match_figure(run["events"]), key=f"suffix:{run['id']}")


def show_rounds(run: dict) -> None:
    """Draft → verify round by round, replayable, with the target's p against the draft's q at the chosen
    round's refusal, and where each round's time went."""
    views = [view for view in rounds.round_views(run["events"]) if view.round > 0]
    if not views:
        return
    st.subheader("Draft → verify, round by round")
    refused = rounds.refused_rounds(views)
    numbers = [view.round for view in views]
    if len(numbers) > 1:
        chosen = st.select_slider("replay: rounds up to", numbers, value=refused[0] if refused else numbers[-1],
                                  key=f"replay:{run['id']}", help="Step through the run one target call at a time.")
    else:
        chosen = numbers[0]
    one_token = lambda token: engine.detokenize([token])  # noqa: E731
    left, right = st.columns([3, 2])
    with left:
        st.markdown(rounds.rounds_legend_html(), unsafe_allow_html=True)
        st.markdown('<div style="max-height:360px;overflow-y:auto">'
                    + rounds.rounds_html(views, one_token, last=chosen, highlight=chosen) + "</div>",
                    unsafe_allow_html=True)
    with right:
        view = next(v for v in views if v.round == chosen)
        if view.rejection:
            st.plotly_chart(rounds.rejection_figure(view, one_token), key=f"rejection:{run['id']}",
                            config={"displayModeBar": False})  # its title sits where the bar would
        elif run["method"] == "ar":
            st.caption("`ar` drafts nothing: every round is one target call and one token.")
        else:
            st.caption(f"Round {chosen} refused nothing" + (f" (rounds with a refusal: {', '.join(map(str, refused[:12]))}"
                                                            f"{'…' if len(refused) > 12 else ''})" if refused else "")
                       + ". At a refusal this shows the target's p against the draft's q.")
    summary = rounds.time_split_summary(run["events"])
    if summary:
        st.plotly_chart(rounds.time_split_figure(run["events"]), key=f"time:{run['id']}")
        st.caption("Share of decode time on the verifying lane: "
                   + " · ".join(f"{group} {share:.0%}" for group, share in summary.items())
                   + ". The draft's share per drafted token, against an `ar` step, is the draft cost c.")


run = st.session_state.get("last_run")
if run is None:
    if not generate:
        stream_area.info("Pick a method and a prompt, then press **Generate** to watch it decode.")
else:
    stream_area.markdown(rs.live_status(run["events"], mo.method_label(run["method"], run["options"]), run["stopped"])
                         + token_stream_html(run["events"]), unsafe_allow_html=True)
    if run["stopped"]:
        st.warning("⏹ Stopped: the numbers below are for the tokens produced before the Stop.")
    show_metrics(run)
    show_rounds(run)
    st.plotly_chart(token_stream_figure(run["events"]))
    hist, sweep_column = st.columns(2)
    with hist:
        st.subheader("Accepted length")
        label = mo.method_label(run["method"], run["options"])
        runs = {label: run["events"]}
        if run["method"] != "ar" and run["ar"]:
            runs["ar"] = run["ar"]["events"]
        st.plotly_chart(accepted_length_histogram(runs))
        if run["method"] != "ar":  # the diagnostic the benchmark's "acceptance by draft position" table gives
            st.plotly_chart(draft_depth_acceptance_figure({label: run["events"]}))
    with sweep_column:
        show_sweep(run)
    show_suffix_matches(run)
