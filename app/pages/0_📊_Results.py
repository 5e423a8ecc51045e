"""specviz dashboard page: the recorded benchmark runs in ``data/bench``, browsable without a model.

For a machine too slow to run the methods live: pick a recorded ``specviz bench`` run, and see its setup,
a bar chart of every method's speedup over ``ar`` (overall or for one prompt category), the per-method table
for that category, and one number per method and category. Nothing here loads the model; the files are read
with :mod:`specviz.bench.recorded_runs`. The chosen run, category and metric live in the URL
(``?run=bf16/engine-after&category=qa&metric=tau``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

APP = Path(__file__).resolve().parent.parent
for path in (APP, APP.parent):  # app/ for the helpers, the project root for specviz/
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import option_widgets as ow  # noqa: E402

from specviz.bench import recorded_runs as br  # noqa: E402
from specviz.views.compare import speedup_bar_figure  # noqa: E402

P = "results:"
st.set_page_config(page_title="specviz — recorded results", page_icon="📊", layout="wide")
st.title("📊 Recorded benchmark results")
st.markdown(
    "Every method on the same prompts, model, dtype and machine, measured by `specviz bench` and recorded in "
    "`data/bench`. Speedup is against `ar` measured in the same run (a `clock=virtual` row: against "
    "`ar(threads=1)`, one lane's real speed); τ counts the bonus/correction token; α = accepted ÷ drafted; "
    "*output = ar* is the share of answers identical to `ar`'s (greedy runs only). No model is loaded on this page.")


@st.cache_data
def recorded_runs() -> dict[str, str]:
    return {name: str(path) for name, path in br.find_runs().items()}


@st.cache_data
def results_of(path: str) -> dict:
    return br.load_results(Path(path))


runs = recorded_runs()
if not runs:
    st.info(f"No recorded bench runs in {br.BENCH_DIR}: record one with `make bench` or `specviz bench --out …`.")
    st.stop()

url = ow.url_once(f"{P}url")
ignored: list[str] = []
if url.get("run") in runs:
    st.session_state[f"{P}run"] = url["run"]
elif "run" in url:
    ignored.append(f"no recorded run {url['run']!r}")
st.session_state.setdefault(f"{P}run", br.default_run(runs))
name = st.selectbox("recorded run", list(runs), key=f"{P}run",
                    format_func=lambda n: br.run_title(n, results_of(runs[n])))
results = results_of(runs[name])
st.caption(br.setup_line(results) + f" · file `{Path(runs[name]).relative_to(br.BENCH_DIR.parent.parent)}`")
for note in br.skipped_notes(results):  # e.g. llama.cpp's rows where `make peers` had not brought it
    st.info(note)
if br.peer_line(results):
    st.caption(br.peer_line(results))

categories = ["overall", *br.categories(results)]
if url.get("category") in categories:
    st.session_state[f"{P}category"] = url["category"]
elif "category" in url:
    ignored.append(f"no category {url['category']!r} in this run")
if st.session_state.get(f"{P}category") not in categories:
    st.session_state[f"{P}category"] = "overall"
category = st.radio("prompt category", categories, key=f"{P}category", horizontal=True)

labels, speedups, notes = br.speedups(results, category)
st.plotly_chart(speedup_bar_figure(labels, speedups, hover=notes, title=f"Speedup over ar — {category}"))
st.subheader(f"Per method — {category}")
st.dataframe(br.method_rows(results, category), hide_index=True)

st.subheader("Per prompt category")
if url.get("metric") in br.METRICS:
    st.session_state[f"{P}metric"] = url["metric"]
elif "metric" in url:
    ignored.append(f"metric must be one of {', '.join(br.METRICS)}")
st.session_state.setdefault(f"{P}metric", "speedup")
metric = st.radio("number", list(br.METRICS), key=f"{P}metric", format_func=br.METRICS.get, horizontal=True)
st.dataframe(br.category_rows(results, metric), hide_index=True)

report = br.report_path(Path(runs[name]))
if report is not None:
    with st.expander(f"The report as recorded ({report.name})"):
        st.markdown(report.read_text())
ow.show_ignored(ignored)
ow.write_url({"run": name, **({"category": category} if category != "overall" else {}),
              **({"metric": metric} if metric != "speedup" else {})})
