"""specviz dashboard page: EAGLE-2 draft trees, live, one round at a time.

``app/main.py`` (``streamlit run app/main.py``) lists this page in the sidebar. The sidebar holds the tree's shape (drafter, depth, top-k, total
tokens), the sampling settings and the dtype; the page holds the prompt, the live token stream, the
metrics, one round's tree beside its attention mask, and the τ-vs-tree-size sweep.

Decisions:
- The engine and its lock come from ``engine_cache``, shared with the Run page: one engine per dtype,
  and runs from either page never time each other's work.
- Speedup is measured as on the Run page: an ``ar`` run of the same prompt and settings right after the
  tree run, cached in the session under the same key (``ar_cache``), so a baseline measured on either
  page is reused by the other.
- The round slider starts at a round worth looking at (an accepted path of two or more nodes).
- The sweep always decodes greedily: its prediction reads each round's outcome off the tree, which only
  greedy decoding allows (:func:`specviz.views.tree_budget.predicted_tau`).
"""

from __future__ import annotations

import uuid

import streamlit as st

from app import method_options as mo
from app import run_summary as rs
from app import tree_page as th
from app.engine_cache import ar_baseline, engine_lock, load_engine, model_picker
from app.prompt_picker import example_prompts, prompt_picker
from engines.core.trace import Commit
from engines.drafters.registry import TREE
from engines.drafters.trained import drafters_for
from engines.methods.eagle import EagleConfig
from engines.programs.tree import TREE_DEPTH
from specviz.experiments.tree_size_sweep import tree_size_sweep
from specviz.views.draft_trees import (
    STATUS_COLOURS,
    STATUS_LABELS,
    root_token,
    round_events,
    showcase_round,
    token_label,
    tree_figure,
    tree_mask_figure,
    tree_rounds,
)
from specviz.views.tokens import legend_html, token_stream_html
from specviz.views.tree_budget import tau_vs_tree_size

st.set_page_config(page_title="specviz — draft trees", page_icon="🌳", layout="wide")


# --- explanation --------------------------------------------------------------------------------
st.title("🌳 Draft trees (EAGLE-2), live")
st.markdown(
    "A chain drafts the drafter's top guess at every position, and the target's first disagreement ends "
    "the round. A **draft tree** offers several candidates per position instead, grown where the drafter is "
    "confident (EAGLE-2: expand the `topk` most probable paths per level for `depth` levels, then send the "
    "`total tokens` best nodes). The target checks every branch in **one** forward under a tree attention "
    "mask, keeps the longest branch it agrees with and adds one token of its own. The output is still "
    "exactly the target's."
)
swatches = " ".join(f'<span style="color:{STATUS_COLOURS[s]}">●</span> {STATUS_LABELS[s]}'
                    for s in ("accepted", "rejected", "unreached", "pruned"))
st.markdown(f"{legend_html()}<br><small>Tree nodes: {swatches} · ◆ the target's own token.</small>",
            unsafe_allow_html=True)

# --- sidebar: the tree, generation settings, model ----------------------------------------------
tree_box, settings_box, model_box = st.sidebar.container(), st.sidebar.container(), st.sidebar.container()

with model_box:
    dtype, engine = model_picker("tree:")

with tree_box:
    st.header("Draft tree")
    draft = st.selectbox("drafter", drafters_for(TREE), key="tree:draft",
                         help="eagle: EAGLE's feature head (one decoder layer on the target's hidden state); "
                              "tiny: a small 4-layer draft model; exit@ℓ-norm: the target's first ℓ layers with a "
                              "trained exit head. All are trained and shipped in data/drafts.")
    auto_depth = st.checkbox("depth: auto", value=False, key="tree:auto_depth",
                             help="Grow another level only while it is expected to pay, from this machine's "
                                  "verify-cost curve, the drafter's measured time and the acceptance seen so far "
                                  "(the engine's default). Unticked, every round grows the same number of levels, "
                                  "which draws the clearest trees.")
    depth = st.number_input("depth", 1, 12, TREE_DEPTH, step=1, key="tree:depth", disabled=auto_depth,
                            help="Levels the tree grows: the longest path one round can accept.")
    topk = st.number_input("topk", 1, 16, EagleConfig.topk, step=1, key="tree:topk",
                           help="Children each expanded node proposes, and nodes expanded per level (EAGLE-2's k).")
    auto = st.checkbox("total tokens: auto", value=True, key="tree:auto",
                       help="Choose the number of nodes sent each round from this machine's verify-cost curve "
                            "and the acceptance seen so far.")
    total_tokens = st.number_input("total tokens", 1, th.MAX_TOTAL_TOKENS, 16, step=1, key="tree:total_tokens",
                                   disabled=auto, help="Nodes sent to the target per round after the rerank.")
    options = th.tree_options(draft, depth, topk, auto, total_tokens, auto_depth)

with settings_box:
    st.header("Generation")
    settings = {
        "max_new_tokens": int(st.number_input("max new tokens", 1, 1024, 48, step=8, key="tree:max_new_tokens")),
        "temperature": float(st.slider("temperature", 0.0, 1.5, 0.0, 0.05, key="tree:temperature",
                                       help="0 = greedy decoding. Under sampling, hover a tried node for p, q "
                                            "and the uniform draw that decided it.")),
        "seed": int(st.number_input("seed", 0, 2**31 - 1, 0, key="tree:seed", help="Used when temperature > 0.")),
        "top_p": 1.0,
    }

# --- prompt -------------------------------------------------------------------------------------
prompts = example_prompts()
prompt = prompt_picker(prompts, "tree:", "math_reasoning")
generate = st.button("Grow trees", type="primary", key="tree:generate")
stream_area = st.empty()


# --- running ------------------------------------------------------------------------------------
def run_tree(prompt: str) -> dict:
    """Stream ``eagle`` into ``stream_area``, then get the ``ar`` baseline as the Run page does."""
    label = mo.method_label("eagle", options)
    lock = engine_lock(dtype)
    with lock:
        events = []
        for event in engine.generate(prompt, "eagle", **settings, **options):  # ValueError on bad input
            events.append(event)
            if isinstance(event, Commit):
                stream_area.markdown(rs.live_status(events, label) + token_stream_html(events), unsafe_allow_html=True)
    end = events[-1]
    run = {"id": uuid.uuid4().hex, "options": dict(options), "settings": dict(settings), "dtype": engine.dtype,
           "prompt": prompt, "events": events, "stats": end.stats, "text": end.text, "label": label}
    run["ar"], run["ar_source"] = ar_baseline(engine, lock, prompt, settings)
    return run


if generate:
    st.session_state.pop("tree_run", None)
    try:
        run = run_tree(prompt)
        st.session_state["tree_run"] = run
        if tree_rounds(run["events"]):
            st.session_state["tree:round"] = showcase_round(run["events"])
    except (ValueError, OSError) as error:  # the engine validates before any work and names the problem
        stream_area.empty()
        st.error(str(error))


# --- results ------------------------------------------------------------------------------------
def show_metrics(run: dict) -> None:
    stats, ar = run["stats"], run["ar"]
    values = th.metric_values(stats, run["events"], ar["stats"])
    for column, (label, value) in zip(st.columns(len(values)), values.items()):
        column.metric(label, value, help=th.METRIC_HELP[label])
    same = ""
    if run["settings"]["temperature"] == 0:
        same = " · output equals ar: " + ("yes ✓" if run["text"] == ar["text"] else "**no**")
    st.caption(f"{stats['new_tokens']} new tokens in {stats['rounds']} rounds · {stats['drafted']} nodes verified, "
               f"{stats['accepted']} accepted · decode {stats['decode_seconds']:.2f} s · ar baseline "
               f"{ar['stats']['tokens_per_s']:.1f} tok/s ({run['ar_source']}){same}")


def show_round(run: dict) -> None:
    st.subheader("One round: the tree and the mask that verified it")
    events = run["events"]
    rounds = [tree.round for tree, _ in tree_rounds(events)]
    if not rounds:
        st.caption("This run drafted no tree (one token was all it had to generate).")
        return
    if len(rounds) > 1:
        if st.session_state.get("tree:round") not in rounds:
            st.session_state["tree:round"] = showcase_round(events)
        round_ = st.slider("round", rounds[0], rounds[-1], key="tree:round",
                           help="Starts at a round whose accepted path is two nodes or longer.")
    else:
        round_ = rounds[0]
    show_pruned = st.checkbox("show the candidates the rerank did not send", value=True, key="tree:show_pruned")
    st.caption(th.round_caption(events, round_))
    tree, verification = round_events(events, round_)
    root = token_label(root_token(events, round_), engine.detokenize)
    left, right = st.columns([3, 2])  # the tree needs the width; the mask is square and small
    left.plotly_chart(tree_figure(tree, verification, engine.detokenize, show_pruned=show_pruned, root_text=root),
                      key="tree:tree_figure")
    right.plotly_chart(tree_mask_figure(tree, verification, engine.detokenize, root_text=root), key="tree:mask_figure")
    right.caption("Each row is a node's query, each column a key it may attend to. Every row also sees the whole "
                  "prefix (not drawn), so each node is scored after exactly its own path; green: the accepted path, "
                  "where the mask is the ordinary causal one.")


def show_sweep(run: dict) -> None:
    st.subheader("τ against tree size")
    st.caption("Runs eagle with this run's drafter, depth and topk at several fixed total tokens (greedy), plus "
               "auto, and lays τ beside the curve predicted from the largest run's trees: at size m a round "
               "would have committed 1 + (its accepted-path nodes among its m best-scoring nodes).")
    sizes_col, tokens_col, auto_col = st.columns([2, 1, 1])
    sizes_text = sizes_col.text_input("tree sizes (total tokens)", "2, 4, 8, 16", key="tree:sweep_sizes")
    tokens = int(tokens_col.number_input("tokens per run", 4, 256, 24, step=4, key="tree:sweep_tokens"))
    with_auto = auto_col.checkbox("also auto", value=True, key="tree:sweep_auto")
    if st.button("Run tree-size sweep", key="tree:sweep"):
        try:
            sizes = th.parse_sizes(sizes_text) + (["auto"] if with_auto else [])
            bar = st.progress(0.0, text="ar baseline, then each size")
            shape = {k: run["options"][k] for k in ("depth", "topk", "draft")}
            with engine_lock(run["dtype"]):
                result = tree_size_sweep(load_engine(run["dtype"]), run["prompt"], sizes, max_new_tokens=tokens,
                                         progress=lambda i, n: bar.progress(i / n, text=f"run {i} of {n} done"),
                                         **shape)
        except (ValueError, OSError) as error:
            st.error(str(error))
            return
        bar.empty()
        st.session_state["tree_sweep"] = {"run_id": run["id"], "tokens": tokens, **result}
    sweep = st.session_state.get("tree_sweep")
    if sweep and sweep["run_id"] == run["id"]:
        st.plotly_chart(tau_vs_tree_size(sweep["points"], sweep["predicted"], sweep["predict_from"]),
                        key="tree:sweep_figure")
        st.dataframe([{"total tokens": str(p["total_tokens"]), "nodes sent per round": round(p["tree_size"], 1),
                       "τ": round(p["tau"], 2), "tok/s": round(p["tokens_per_s"], 1),
                       "speedup": round(p["speedup"], 2)} for p in sweep["points"]], hide_index=True)
        st.caption(f"{sweep['tokens']} tokens per run · ar {sweep['ar_tokens_per_s']:.1f} tok/s · prediction from "
                   f"the run at {sweep['predict_from']} nodes")


run = st.session_state.get("tree_run")
if run is None:
    if not generate:
        stream_area.info("Pick a drafter, a tree shape and a prompt, then press **Grow trees**.")
else:
    stream_area.markdown(rs.live_status(run["events"], run["label"]) + token_stream_html(run["events"]),
                         unsafe_allow_html=True)
    show_metrics(run)
    show_round(run)
    show_sweep(run)
