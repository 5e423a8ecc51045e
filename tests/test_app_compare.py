"""The dashboard's Compare page, driven headlessly with Streamlit's AppTest on the real default model, and the
page's Streamlit-free helpers (labels, table, the Stop mechanics of ``live.Batch``).

As in ``test_app.py``: short runs (a dozen new tokens), nothing mocked, timings only checked for being positive.
"""

from __future__ import annotations

import inspect
import math
import threading
from pathlib import Path

import pytest
from streamlit.runtime.scriptrunner_utils.exceptions import StopException
from streamlit.testing.v1 import AppTest

from app import compare_page as ch
from app import live as lv
from app import url_state as us
from app.run_summary import strip_html
from engines import METHODS
from engines.core.trace import Commit
from specviz.views.compare import cumulative_tokens, cumulative_tokens_figure, speedup_bar_figure
from tests.lane_processes import lane_workers

APP = Path(__file__).resolve().parents[1] / "app"
PAGE = APP / "views" / "compare.py"


PROMPT = "List three primary colours, then three secondary colours."
SETTINGS = {"max_new_tokens": 12, "temperature": 0.0, "seed": 0, "top_p": 1.0}


def new_page(params: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(PAGE), default_timeout=300)
    at.query_params.update(params or {})
    at.run()
    # AppTest treats the second run of a script under views/ as a page change and drops widget values set
    # before it, so run once more before touching any widget.
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def streams(at: AppTest) -> list[str]:
    return [md.value for md in at.markdown if "font-family:monospace" in md.value]


def table(at: AppTest) -> list[dict]:
    """The comparison table's rows, with pandas' NaN read back as None."""
    rows = at.dataframe[0].value.to_dict("records")
    return [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()} for row in rows]


def test_compare_two_configurations_against_ar():
    at = new_page()
    at.selectbox(key="cmp:dtype").set_value("float32").run()  # fp32: greedy output is token-identical to ar's
    at.selectbox(key="cmp:0:method").set_value("pld").run()
    at.number_input(key="cmp:0:opt:pld:gamma").set_value(4)
    at.selectbox(key="cmp:1:method").set_value("sps").run()
    at.number_input(key="cmp:1:opt:sps:gamma").set_value(3)
    at.selectbox(key="cmp:1:opt:sps:draft").set_value("tiny")
    at.number_input(key="cmp:max_new_tokens").set_value(12)
    at.text_area(key="cmp:prompt_text").set_value(PROMPT)
    at.button(key="cmp:run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]

    batch = at.session_state["cmp:batch"]
    assert [m for m, _ in batch.configs] == ["pld", "sps"] and not batch.stopped
    assert batch.ar is not None and batch.ar_source == "measured just now"
    rows = table(at)
    assert list(rows[0]) == list(ch.COLUMNS)
    assert [r["configuration"] for r in rows] == ["pld(gamma=4)", "sps(gamma=3, draft=tiny)", "ar (baseline)"]
    for row, record in zip(rows, batch.runs):
        assert row["status"] == "done" and 0 < row["new tokens"] <= 12
        assert row["tok/s"] > 0 and row["speedup vs ar"] > 0 and row["τ"] >= 1.0 and 0 <= row["α"] <= 1
        assert row["target calls"] == record["stats"]["target_calls"]
        assert row["output = ar"] == "yes", "greedy decoding in float32 writes exactly what ar writes"
    assert rows[-1]["speedup vs ar"] == 1.0
    kept = list(at.session_state[lv.SESSION_RUNS].values())  # for the Theory page
    assert [r["label"] for r in kept] == ["pld(gamma=4)", "sps(gamma=3, draft=tiny)"]

    blocks = streams(at)  # one token-stream column per configuration
    assert len(blocks) == 2
    for block, record in zip(blocks, batch.runs):
        assert "".join(record["text"].split()) in "".join(strip_html(block).split())
    assert len(at.get("plotly_chart")) == 4  # tokens over time, speedup bars, accepted lengths, α by depth
    assert dict(at.query_params) == {"c1": "pld(gamma=4)", "c2": "sps(gamma=3,draft=tiny)", "prompt": PROMPT,
                                     "max_new_tokens": "12", "dtype": "float32"}

    at.number_input(key="cmp:n").set_value(3).run()  # the sidebar changes; the last comparison stays drawn
    assert not at.exception and len(streams(at)) == 2 and len(table(at)) == 3


def test_every_method_is_offered_in_every_configuration():
    at = new_page()
    at.number_input(key="cmp:n").set_value(4).run()
    for i in range(4):
        assert at.selectbox(key=f"cmp:{i}:method").options == [f"{m} — {METHODS[m].description}" for m in METHODS]
    assert [at.selectbox(key=f"cmp:{i}:method").value for i in range(4)] == list(ch.DEFAULT_METHODS)
    assert not at.text_input, "no free-text option anywhere in the sidebar"


def test_url_round_trip_and_what_it_refuses():
    params = {"c1": "eesd(exit_layer=8,head=norm)", "c2": "eagle(total_tokens=8,draft=tiny)", "c3": "ar",
              "prompt_id": "7", "max_new_tokens": "20", "temperature": "0.5"}
    at = new_page(params)
    assert not at.warning, [w.value for w in at.warning]
    assert at.number_input(key="cmp:n").value == 3
    assert at.selectbox(key="cmp:0:opt:eesd:head").value == "norm"
    assert at.selectbox(key="cmp:0:opt:eesd:exit_layer").value == 8
    assert at.selectbox(key="cmp:1:opt:eagle:draft").value == "tiny"
    assert at.number_input(key="cmp:1:opt:eagle:total_tokens").value == 8
    assert at.checkbox(key="cmp:1:opt:eagle:total_tokens:auto").value is False
    assert at.selectbox(key="cmp:2:method").value == "ar"
    assert at.slider(key="cmp:temperature").value == 0.5
    assert dict(at.query_params) == params

    at = AppTest.from_file(str(PAGE), default_timeout=300)
    at.query_params.update({"c1": "sps(draft=/etc/passwd)", "c2": "eesd(head=norm,exit_layer=7)", "c3": "nosuch(x=1)"})
    at.run()  # the warning is shown on the run that reads the link
    assert not at.exception, [e.value for e in at.exception]
    warning = at.warning[0].value
    assert "/etc/passwd" in warning and "exit_layer='7'" in warning and "nosuch" in warning
    assert at.selectbox(key="cmp:0:opt:sps:draft").value == "self"
    assert at.selectbox(key="cmp:1:opt:eesd:exit_layer").value == 15, "the default: it has a trained norm head"


def test_a_refused_configuration_does_not_stop_the_others():
    at = new_page({"c1": "cats", "c2": "pld", "max_new_tokens": "8", "temperature": "0.7"})
    at.text_area(key="cmp:prompt_text").set_value(PROMPT)
    at.button(key="cmp:run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.error) == 1 and "acceptance='greedy' needs temperature 0" in at.error[0].value
    rows = table(at)
    assert rows[0]["status"].startswith("error: acceptance='greedy'") and rows[0]["tok/s"] is None
    assert rows[1]["status"] == "done" and rows[1]["output = ar"] == "— (sampled)"
    assert len(streams(at)) == 1


def test_a_stopped_comparison_keeps_what_was_produced(real_engine):
    batch = lv.Batch([("pld", {}), ("ar", {})], PROMPT, {**SETTINGS, "max_new_tokens": 48}, real_engine.dtype)
    commits = []

    def redraw(events):
        commits.append(len(events))
        if len(commits) == 3:
            raise StopException()  # what Streamlit raises out of a redraw once Stop is pressed

    with pytest.raises(StopException), batch.running():
        batch.run(lambda: real_engine.generate(PROMPT, "pld", **batch.settings), redraw)
    at = new_page()
    at.session_state["cmp:batch"] = batch
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    rows = table(at)
    assert rows[0]["status"].startswith("stopped after ") and rows[0]["tok/s"] > 0
    assert rows[0]["output = ar"] == "— (no ar run)" and rows[0]["speedup vs ar"] is None
    assert rows[1]["status"] == "not run (stopped)" and len(rows) == 2
    assert "⏹ stopped" in streams(at)[0]
    assert any("Stopped" in w.value for w in at.warning)


# --- Streamlit-free helpers ----------------------------------------------------------------------------
@pytest.mark.parametrize("method, options", [("pld", {"gamma": 4}), ("eagle", {"total_tokens": 8}),
                                             ("mirror", {"mode": "lanes"})])
def test_stop_closes_the_engine_stream(real_engine, method, options):
    """The helper behind the Stop button: the exception Streamlit raises out of a redraw closes the engine's
    generator (its lanes shut down), keeps the partial run as a stopped record whose text is a prefix of the
    full run's, marks the batch stopped and finished, and the engine's lock is free for the next run."""
    settings = {**SETTINGS, "max_new_tokens": 32}
    batch, lock, streams_made = lv.Batch([(method, options)], PROMPT, settings, real_engine.dtype), threading.Lock(), []

    def start():
        streams_made.append(real_engine.generate(PROMPT, method, **settings, **options))
        return streams_made[0]

    def redraw(events):
        if sum(isinstance(e, Commit) for e in events) == 2:
            raise StopException()

    with pytest.raises(StopException), batch.running(), lock:
        batch.run(start, redraw)
    assert inspect.getgeneratorstate(streams_made[0]) == inspect.GEN_CLOSED
    assert batch.stopped and batch.finished.is_set() and not lock.locked()
    assert not lane_workers(), "a stopped lanes run leaves no worker behind"
    record = batch.runs[0]
    assert record["stopped"] and record["stop_reason"] == lv.STOPPED
    assert 0 < record["stats"]["new_tokens"] < 32 and record["stats"]["tokens_per_s"] > 0
    assert record["token_ids"] and len(record["token_ids"]) == record["stats"]["new_tokens"]
    try:
        full = real_engine.run(PROMPT, method, **settings, **options)
    finally:
        real_engine.close()  # a finished lanes run keeps its worker for the next one: not past this test
    assert full.token_ids[:len(record["token_ids"])] == record["token_ids"], "stopped, not garbled"


def test_a_refused_run_is_an_error_record_not_an_exception(real_engine):
    batch = lv.Batch([("pld", {"min_ngram": 5, "max_ngram": 2})], PROMPT, SETTINGS, real_engine.dtype)
    with batch.running():
        record = batch.run(lambda: real_engine.generate(PROMPT, "pld", **SETTINGS, min_ngram=5, max_ngram=2))
    assert "min_ngram" in record["error"] and not batch.stopped and batch.finished.is_set() and not batch.done


def test_labels_table_and_figures(real_engine):
    assert ch.labels([("pld", {"gamma": 10}), ("pld", {"gamma": 10}), ("pld", {"gamma": 4})]) == [
        "pld", "pld #2", "pld(gamma=4)"]
    batch = lv.Batch([("pld", {}), ("ar", {})], PROMPT, SETTINGS, real_engine.dtype)
    for method in ("pld", "ar"):
        batch.run(lambda: real_engine.generate(PROMPT, method, **SETTINGS))
    batch.ar, batch.ar_source = {k: batch.runs[1][k] for k in ("events", "stats", "text", "token_ids")}, "x"
    rows = ch.table_rows(batch)
    assert [r["output = ar"] for r in rows] == ["yes", "yes", "—"]
    assert rows[1]["α"] is None, "ar drafts nothing: no acceptance rate"
    assert ch.equals_ar({"text": "a", "token_ids": [1]}, {"text": "a", "token_ids": [2]}, 0.0) == "no"
    assert set(ch.figure_runs(batch)) == {"pld", "ar", ch.AR_LABEL} and set(ch.drafting_runs(batch)) <= {"pld"}

    seconds, tokens = cumulative_tokens(batch.runs[0]["events"])
    assert 0 <= seconds[0] < 0.05 and seconds == sorted(seconds) and tokens[-1] == batch.runs[0]["stats"]["new_tokens"]
    assert len(cumulative_tokens_figure(ch.figure_runs(batch)).data) == 3
    bars = speedup_bar_figure(["a", "b"], [1.5, None])
    assert list(bars.data[0].text) == ["1.50×", "—"]


def test_spec_strings_round_trip():
    options = {"gamma": 3, "draft": "tiny", "draft_layers": 4, "full_vocab": False}
    assert us.spec_string("sps", options) == "sps(gamma=3,draft=tiny)"
    assert us.parse_spec_string("sps(gamma=3,draft=tiny)") == ("sps", {"gamma": "3", "draft": "tiny"})
    assert us.parse_spec_string("ar") == ("ar", {})
    for bad in ("sps(nope=1)", "sps(gamma)", "rm -rf", "nosuch"):
        with pytest.raises(ValueError):
            us.parse_spec_string(bad)
    configs, ignored = us.compare_configs_from_params({"c1": "pld", "c3": "bad(", "c5": "ar"})
    assert configs == [("pld", {})] and len(ignored) == 1


def test_the_main_app_lists_the_compare_and_results_pages():
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=300).run()
    assert not at.exception
    for page, title in (("views/compare.py", "⚖️ Compare"), ("views/results.py", "📊 Recorded")):
        at.switch_page(page).run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.title[0].value.startswith(title)
