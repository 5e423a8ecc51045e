"""specviz dashboard page: Mixture of Attentions (MoA), a drafter that reads every layer, over a simulated link.

``app/main.py`` (``streamlit run app/main.py``) lists this page in the sidebar. The sidebar holds the drafter (MoA at TLI 0/1/3, the −LSA ablation, EAGLE,
EAGLE trained on MoA's budget, the tiny independent draft), the link (none, local, base, 5G, 4G), its packet loss
and the disconnection point (after how many new tokens), the generation settings and the model; the page holds the Table 7 explorer, the
prompt, the live client · link · server Gantt, the text, the metrics, the draft split and the message sizes
measured against Table 7.

Decisions:
- The engine and its lock come from ``engine_cache``, shared with the other pages.
- Client–server runs are timed on the ``wall+link`` clock: compute measured here, the link's seconds simulated
  and added (never waited), so a 4G run takes no longer to watch than a local one. The page says so.
- A run with ``disconnect_after`` is lossy: the page says LOSSY beside its text and in every figure's title.
- Drafters that are not shipped in ``data/drafts`` are not offered.
- The network controls map one to one onto the link options of ``engines/methods/link_config.py`` (``network``,
  ``packet_loss``, ``disconnect_after``), which ``moa`` and ``eagle`` share.
- The Gantt redraws at most every 0.4 s while a run streams, from the partial event list.
"""

from __future__ import annotations

import uuid

import pandas as pd
import streamlit as st

from app import moa_page as mh
from app.engine_cache import engine_lock, model_picker
from app.lanes_page import LiveThrottle
from app.prompt_picker import example_prompts, prompt_picker
from specviz.views import moa_messages, moa_runs
from specviz.views.draft_trees import round_events, tree_figure
from specviz.views.tokens import legend_html, token_stream_html

P = "moa:"  # widget key prefix
st.set_page_config(page_title="specviz — MoA", page_icon="🧩", layout="wide")

# --- explanation --------------------------------------------------------------------------------
st.title("🧩 MoA: a drafter that reads every layer, across a network")
st.markdown(
    "An EAGLE drafter sees one vector per token, the target's last hidden state. **Mixture of Attentions** reads "
    "the target's keys/values at *every* layer: the server runs **LSA** (a small transformer over the layer axis) "
    "once per cycle on the newly verified tokens and keeps the mean over layers as memory; the client drafts with "
    "**SA** (causal self-attention over its own tokens), **CA** (cross-attention into that memory) and optionally "
    "**TLI**, the target's own last layers. Verification is the ordinary lossless tree verification. In "
    "client–server mode the client sends its draft tree up (4n bytes) and the server sends the verdict and the new "
    "memory rows down (3A + 2A·E_kv·(TLI+1) bytes, Table 7). The link here is **simulated**: real bytes, seconds "
    "from the profile's delay, bandwidth and losses, added to the measured compute (clock `wall+link`).")

# --- sidebar ------------------------------------------------------------------------------------
method_box, settings_box, model_box = st.sidebar.container(), st.sidebar.container(), st.sidebar.container()
with model_box:
    dtype, engine = model_picker(P)
config = engine.target.config
HIDDEN = config.hidden_size
KV_WIDTH = config.num_key_value_heads * (getattr(config, "head_dim", None)
                                          or config.hidden_size // config.num_attention_heads)

with method_box:
    st.header("MoA")
    drafters = mh.available_drafters()
    if not drafters:
        st.error("No MoA or EAGLE drafter is shipped in data/drafts (`specviz train moa`).")
        st.stop()
    drafter = st.selectbox("drafter", drafters, format_func=lambda k: f"{k} · {mh.DRAFTERS[k][2]}", key=f"{P}drafter")
    network = st.selectbox("network", list(mh.NETWORKS), index=list(mh.NETWORKS).index("5g"),
                           format_func=mh.NETWORK_LABELS.get, key=f"{P}network",
                           help="none: one device. Otherwise the client (drafter) and server (target) talk over a "
                                "simulated link.")
    linked = network != "none"
    loss = st.number_input("packet loss % (empty: the profile's)", min_value=0.0, max_value=50.0, value=None,
                           step=0.5, key=f"{P}loss", disabled=not linked,
                           help="Per 1500-byte packet; a message with a lost packet is resent after 200 ms.")
    budget = st.number_input("disconnect after this many new tokens (empty: never)", min_value=1, max_value=256, value=None,
                             step=1, key=f"{P}disconnect", disabled=not linked,
                             help="After that many new tokens the server vanishes and the client writes alone: LOSSY.")
    seed = int(st.number_input("link seed", 0, 10_000, 0, key=f"{P}seed", disabled=not linked))

with settings_box:
    st.header("Generation")
    max_new_tokens = int(st.number_input("max new tokens", 1, 256, 48, step=8, key=f"{P}max_new_tokens"))
    st.caption("Greedy decoding (temperature 0).")

method, options = mh.run_options(drafter, network, loss if linked else None, budget if linked else None, seed)
if linked and budget is not None:
    st.warning(f"disconnect_after = {budget}: this run is **LOSSY**. After {budget} new tokens the client writes "
               "alone, and its text may differ from what the target would have written.")

# --- the formulas -------------------------------------------------------------------------------
with st.expander("Table 7: bytes per message, and one cycle's time", expanded=False):
    left, right = st.columns([1, 2])
    with left:
        x_a = st.slider("τ: tokens per cycle (A accepted drafts + 1)", 1, 12, 3, key=f"{P}x:a")
        x_m = st.slider("n: tree nodes sent", 1, 60, 16, key=f"{P}x:m")
        x_tli = st.slider("TLI", 0, 8, 0, key=f"{P}x:tli")
        x_b = st.selectbox("bytes per value", [1, 2, 4], key=f"{P}x:b", help="1: int8 as the paper (and this engine)")
        x_draft = st.slider("T_draft ms (client)", 1.0, 200.0, 30.0, 1.0, key=f"{P}x:draft")
        x_verify = st.slider("T_verify ms (server)", 1.0, 300.0, 60.0, 1.0, key=f"{P}x:verify")
        x_lsa = st.slider("T_LSA ms (server)", 0.0, 50.0, 3.0, 0.5, key=f"{P}x:lsa")
    with right:
        st.plotly_chart(moa_messages.message_size_figure(x_a, x_m, x_tli, HIDDEN, KV_WIDTH, x_b), key=f"{P}x:sizes")
        st.plotly_chart(moa_messages.cycle_time_figure(x_draft / 1e3, x_verify / 1e3, x_lsa / 1e3, x_a, x_m, x_tli, HIDDEN,
                                             KV_WIDTH, x_b, tau=float(x_a)), key=f"{P}x:cycle")
        st.caption(f"E = {HIDDEN}, E_kv = {KV_WIDTH} (this model; E the hidden size, E_kv one layer's key width). T_cycle = T_draft + RTT "
                   "+ (bytes_up + bytes_down)/B + T_verify + T_LSA [derived: docs/moa.md; B the link's bandwidth in bytes/s]; tokens/s = τ/T_cycle, "
                   "τ the ids a verdict carries (A accepted drafts + the server's token).")

# --- prompt -------------------------------------------------------------------------------------
prompt = prompt_picker(example_prompts(), P, "qa")
generate = st.button(f"Run {mh.run_title(method, options)}", type="primary", key=f"{P}generate")
status_area, text_area, gantt_area = st.empty(), st.empty(), st.empty()


# --- running ------------------------------------------------------------------------------------
def run() -> list:
    events: list = []
    throttle, drawn = LiveThrottle(), 0
    status_area.caption(f"running {mh.run_title(method, options)}…")
    with engine_lock(dtype):
        for event in engine.generate(prompt, method, max_new_tokens=max_new_tokens, **options):
            events.append(event)
            if throttle.due():
                text_area.markdown(token_stream_html(events), unsafe_allow_html=True)
                gantt_area.plotly_chart(moa_runs.client_server_gantt(events), key=f"{P}live:gantt:{drawn}")
                drawn += 1
    status_area.empty()
    return events


if generate:
    st.session_state.pop("moa_run", None)
    try:
        st.session_state["moa_run"] = {"id": uuid.uuid4().hex, "events": run(), "method": method, "options": options}
    except (ValueError, OSError) as error:  # the engine names the problem (bad input, a missing drafter)
        status_area.empty()
        text_area.empty()
        gantt_area.empty()
        st.error(str(error))


# --- results ------------------------------------------------------------------------------------
def show_text(events: list) -> None:
    text_area.markdown(token_stream_html(events) + f"<div style='margin-top:4px'>{legend_html()}</div>",
                       unsafe_allow_html=True)
    if moa_runs.is_lossy(events):
        st.warning("This run is LOSSY: after the server left, the client wrote alone (the tokens in black), so the "
                   "text may differ from what the target would have written.")


def show_metrics(events: list) -> None:
    metrics = moa_runs.moa_metrics(events)
    items = list(mh.metric_values(metrics).items())
    for row in (items[:4], items[4:]):  # two rows: seven numbers in one would be cut short
        for column, (label, value) in zip(st.columns(4), row):
            column.metric(label, value, help=mh.METRIC_HELP[label])
    st.caption(mh.run_caption(events))


def show_views(events: list) -> None:
    st.subheader("Where the client's drafting time goes, beside the server's LSA")
    st.plotly_chart(moa_runs.draft_split_figure(events), key=f"{P}split")
    st.subheader("Message sizes: measured against Table 7")
    sizes = moa_messages.measured_message_sizes(events, HIDDEN, KV_WIDTH)
    if sizes["up"] is None:
        st.info("No client–server messages: pick a network to split the run into client and server.")
    else:
        tli = sizes["tli"] if sizes["family"].startswith("moa") else 0
        st.plotly_chart(moa_messages.message_size_figure(max(1, round(sizes["accepted"])), max(1, round(sizes["nodes"])), tli,
                                               HIDDEN, KV_WIDTH, measured={moa_runs.run_name(events): events}),
                        key=f"{P}sizes")
        st.dataframe(pd.DataFrame(mh.message_table(sizes)).set_index("message"), key=f"{P}size_table")
        st.caption("The wire adds a 4-byte header to every message and a 2-byte scale to every 8-bit activation row; "
                   "with those, the prediction is exact.")
    shown = moa_runs.showcase_round(events)
    if shown is not None:
        st.subheader(f"One cycle's draft tree (round {shown}: the longest accepted path)")
        tree, verification = round_events(events, shown)
        st.plotly_chart(tree_figure(tree, verification, engine.detokenize), key=f"{P}tree")


record = st.session_state.get("moa_run")
if record is None:
    if not generate:
        gantt_area.info("Pick a drafter and a network, then press **Run**.")
else:
    events = record["events"]
    show_text(events)
    gantt_area.plotly_chart(moa_runs.client_server_gantt(events), key=f"{P}gantt")
    show_metrics(events)
    show_views(events)
