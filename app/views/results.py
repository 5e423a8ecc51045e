"""specviz dashboard page: the recorded benchmark runs in ``data/bench``, browsable without a model.

For a machine too slow to run the methods live: pick a recorded ``specviz bench`` run, and see its setup,
a bar chart of every method's speedup over ``ar`` (overall or for one prompt category), the per-method table
for that category, and one number per method and category. Nothing here loads the model; the files are read
with :mod:`specviz.bench.recorded_runs`. The chosen run, category and metric live in the URL
(``?run=bf16/engine-after&category=qa&metric=tau``).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app import option_widgets as ow
from specviz.bench import recorded_runs as runs_on_disk
from specviz.views.compare import speedup_bar_figure

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
    return {name: str(path) for name, path in runs_on_disk.find_runs().items()}


@st.cache_data
def results_of(path: str) -> dict:
    return runs_on_disk.load_results(Path(path))


runs = recorded_runs()
if not runs:
    st.info(f"No recorded bench runs in {runs_on_disk.BENCH_DIR}: record one with `make bench` or `specviz bench --out …`.")
    st.stop()

url = ow.url_once(f"{P}url")
ignored: list[str] = []
if url.get("run") in runs:
    st.session_state[f"{P}run"] = url["run"]
elif "run" in url:
    ignored.append(f"no recorded run {url['run']!r}")
st.session_state.setdefault(f"{P}run", runs_on_disk.default_run(runs))
name = st.selectbox("recorded run", list(runs), key=f"{P}run",
                    format_func=lambda n: runs_on_disk.run_title(n, results_of(runs[n])))
results = results_of(runs[name])
st.caption(runs_on_disk.setup_line(results) + f" · file `{Path(runs[name]).relative_to(runs_on_disk.BENCH_DIR.parent.parent)}`")
for note in runs_on_disk.skipped_notes(results):  # e.g. llama.cpp's rows where `make peers` had not brought it
    st.info(note)
if runs_on_disk.peer_line(results):
    st.caption(runs_on_disk.peer_line(results))

categories = ["overall", *runs_on_disk.categories(results)]
if url.get("category") in categories:
    st.session_state[f"{P}category"] = url["category"]
elif "category" in url:
    ignored.append(f"no category {url['category']!r} in this run")
if st.session_state.get(f"{P}category") not in categories:
    st.session_state[f"{P}category"] = "overall"
category = st.radio("prompt category", categories, key=f"{P}category", horizontal=True)

labels, speedups, notes = runs_on_disk.speedups(results, category)
st.plotly_chart(speedup_bar_figure(labels, speedups, hover=notes, title=f"Speedup over ar — {category}"))
st.subheader(f"Per method — {category}")
st.dataframe(runs_on_disk.method_rows(results, category), hide_index=True)

st.subheader("Per prompt category")
if url.get("metric") in runs_on_disk.METRICS:
    st.session_state[f"{P}metric"] = url["metric"]
elif "metric" in url:
    ignored.append(f"metric must be one of {', '.join(runs_on_disk.METRICS)}")
st.session_state.setdefault(f"{P}metric", "speedup")
metric = st.radio("number", list(runs_on_disk.METRICS), key=f"{P}metric", format_func=runs_on_disk.METRICS.get, horizontal=True)
st.dataframe(runs_on_disk.category_rows(results, metric), hide_index=True)

report = runs_on_disk.report_path(Path(runs[name]))
if report is not None:
    with st.expander(f"The report as recorded ({report.name})"):
        st.markdown(report.read_text())
ow.show_ignored(ignored)
ow.write_url({"run": name, **({"category": category} if category != "overall" else {}),
              **({"metric": metric} if metric != "speedup" else {})})
