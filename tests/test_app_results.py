"""The dashboard's Results page (recorded ``specviz bench`` runs, no model) with AppTest, and the reader behind it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engines import Engine
from specviz.bench import recorded_runs as br
from specviz.bench.report import write_results

PAGE = Path(__file__).resolve().parents[1] / "app" / "views" / "results.py"


@pytest.fixture
def no_model(monkeypatch):
    """The page must work on a machine that never loads the model: loading it fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("the Results page loaded a model")

    monkeypatch.setattr(Engine, "load", refuse)


def new_page(params: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(PAGE), default_timeout=60)
    at.query_params.update(params or {})
    at.run()
    at.run()  # AppTest's second run of a page script is a page change (see test_app_trees.py)
    assert not at.exception, [e.value for e in at.exception]
    return at


def records(at: AppTest, index: int) -> list[dict]:
    rows = at.dataframe[index].value.to_dict("records")
    return [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()} for row in rows]


def test_results_page_browses_recorded_runs_without_a_model(no_model):
    at = new_page()
    runs = br.find_runs()
    assert at.selectbox(key="results:run").value == br.default_run(runs) == br.DEFAULT_RUN
    results = br.load_results(runs[br.DEFAULT_RUN])
    assert "36 prompts" in at.caption[0].value and "bfloat16" in at.caption[0].value

    per_method = records(at, 0)
    assert [r["method"] for r in per_method] == list(results["methods"])
    ar = next(r for r in per_method if r["method"] == "ar")
    assert ar["speedup"] == 1.0 and ar["output = ar"] == "100%"
    pld = next(r for r in per_method if r["method"] == "pld")
    assert pld["speedup"] == round(results["methods"]["pld"]["overall"]["speedup"], 2)
    per_category = records(at, 1)
    assert list(per_category[0]) == ["method", *br.categories(results), "overall"]
    bars = at.get("plotly_chart")
    assert len(bars) == 1
    assert dict(at.query_params) == {"run": br.DEFAULT_RUN}

    at.radio(key="results:category").set_value("qa").run()
    qa = records(at, 0)
    assert next(r for r in qa if r["method"] == "pld")["speedup"] == round(
        results["methods"]["pld"]["qa"]["speedup"], 2)
    at.radio(key="results:metric").set_value("tau").run()
    assert records(at, 1)[0]["overall"] == 1.0, "ar's τ"
    assert dict(at.query_params) == {"run": br.DEFAULT_RUN, "category": "qa", "metric": "tau"}

    at.selectbox(key="results:run").set_value("bf16/trees-auto-qa-math").run()
    assert not at.exception
    assert at.radio(key="results:category").options == ["overall", "qa", "math_reasoning"]
    assert at.radio(key="results:category").value == "qa", "a category the new run has too stays chosen"


def test_results_url_round_trip(no_model):
    params = {"run": "greedy", "category": "translation", "metric": "alpha"}
    at = new_page(params)
    assert at.selectbox(key="results:run").value == "greedy"
    assert at.radio(key="results:category").value == "translation"
    assert at.radio(key="results:metric").value == "alpha"
    assert dict(at.query_params) == params

    at = AppTest.from_file(str(PAGE), default_timeout=60)
    at.query_params.update({"run": "../../etc/passwd", "category": "nope"})
    at.run()
    assert not at.exception and "etc/passwd" in at.warning[0].value
    assert at.selectbox(key="results:run").value == br.DEFAULT_RUN


def test_only_bench_runs_are_listed():
    runs = br.find_runs()
    assert "bf16/engine-after" in runs and "greedy" in runs
    skipped = {"bf16/agreement-heldout", "bf16/lanes-physics", "bf16/moa-disconnection/disconnection",
               "bf16/cats-model200"}
    assert not skipped & set(runs), "agreement tables, lane physics, sweeps are not bench runs"
    for path in runs.values():
        br.load_results(path)
    with pytest.raises(ValueError, match="not a specviz bench result"):
        br.load_results(br.BENCH_DIR / "bf16" / "lanes-physics.json")


def test_reader_reads_what_the_bench_writes(tmp_path):
    """A run written by ``specviz.bench.report.write_results`` (a virtual-clock row included) reads back."""
    summary = {"tokens_per_s": 50.0, "speedup": 1.0, "tau": 1.0, "alpha": 0.0, "equals_ar": 1.0, "draft_cost": None,
               "new_tokens": 100, "decode_seconds": 2.0, "turns": 2, "clock": "wall"}
    virtual = {**summary, "tokens_per_s": 80.0, "speedup": 2.0, "tau": 1.6, "alpha": 0.4, "clock": "virtual"}
    results = {"setup": {"model": "m", "dtype": "float32", "device": "cpu", "threads": 2, "prompts": "p.jsonl",
                         "n_prompts": 2, "max_new_tokens": 50, "temperature": 0.0, "complete": False},
               "methods": {"ar": {"qa": summary, "overall": summary},
                           "ar(threads=1)": {"qa": summary, "overall": summary},
                           "ppsd": {"qa": virtual, "overall": virtual}}}
    write_results(results, tmp_path / "mine")
    (tmp_path / "other.json").write_text(json.dumps({"not": "a bench run"}))
    runs = br.find_runs(tmp_path)
    assert list(runs) == ["mine"]
    loaded = br.load_results(runs["mine"])
    assert br.report_path(runs["mine"]).name == "results.md"
    rows = br.method_rows(loaded)
    assert rows[2]["method"] == "ppsd · clock=virtual" and rows[2]["speedup"] == 2.0
    assert br.category_rows(loaded, "alpha")[2] == {"method": "ppsd", "qa": 0.4, "overall": 0.4}
    labels, speedups, notes = br.speedups(loaded, "qa")
    assert labels[2] == "ppsd · virtual" and "ar(threads=1)" in notes[2]
    assert "partial" in br.setup_line(loaded)
    with pytest.raises(ValueError):
        br.category_rows(loaded, "nope")
