"""The dashboard's Mirror-SD and SSD pages, driven headlessly with Streamlit's AppTest on the real default model.

As in ``test_app_ppsd.py``: short runs (8 new tokens), nothing mocked, timings only checked for being positive.
Runs use ``serial`` mode, which starts no worker process.
"""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from app import verdict_page as vh
from engines.core.trace import CacheBuild, EeMessage, RunEnd, RunStart

APP = Path(__file__).resolve().parents[1] / "app"
MIRROR = APP / "views" / "mirror_sd.py"
SSD = APP / "views" / "ssd.py"

PROMPT = "Why does the sky appear blue during the day?"
N_LAYERS = 30  # SmolLM2-135M


def new_page(page: Path) -> AppTest:
    at = AppTest.from_file(str(page), default_timeout=300).run()
    # AppTest treats the second run of a script under views/ as a page change and drops widget values
    # set before it, so run once more before touching any widget.
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def run_page(at: AppTest, prefix: str, max_new_tokens: int = 8, compare: bool = False) -> AppTest:
    at.selectbox(key=f"{prefix}mode").set_value("serial")
    at.number_input(key=f"{prefix}max_new_tokens").set_value(max_new_tokens)
    at.checkbox(key=f"{prefix}compare").set_value(compare)
    at.text_area(key=f"{prefix}prompt_text").set_value(PROMPT)
    at.button(key=f"{prefix}generate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def specs(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def gantts(at: AppTest) -> list[dict]:
    """The two-lane Gantts shown: target lane above draft lane."""
    return [s for s in specs(at) if [str(t).split(" ·")[0] for t in s["layout"].get("yaxis", {}).get("ticktext", [])]
            == ["target", "draft"]]


def heatmaps(at: AppTest) -> list[dict]:
    """The hypothesis grid or cache table (the explorers draw no heatmap)."""
    return [s for s in specs(at) if any(t["type"] == "heatmap" for t in s["data"])]


def check_metrics(at: AppTest, run: dict) -> dict:
    values = {m.label: m.value for m in at.metric}
    assert list(vh.METRIC_HELP) == [label for label in values if label in vh.METRIC_HELP]
    assert float(values["tok/s"]) > 0
    assert 1.0 <= float(values["τ (tokens / round)"]) <= 9.0
    law, measured = values["law tok/s vs measured (steady)"].split(" vs ")
    assert float(law) > 0, "the law at the measured costs is filled in"
    assert 0.0 <= float(values["hit rate"]) <= 1.0
    events = run["events"]
    assert isinstance(events[0], RunStart) and isinstance(events[-1], RunEnd)
    assert 0 < events[-1].stats["new_tokens"] <= 8
    return values


def test_mirror_page_serial_run_beside_sps():
    at = new_page(MIRROR)
    assert at.title[0].value.startswith("🪞 Mirror-SD")
    assert at.selectbox(key="mirror:exit_layer").value == 15 and at.selectbox(key="mirror:exit_head").value == "model"
    assert at.get("plotly_chart"), "the law explorer's figure"
    at = run_page(at, "mirror:", compare=True)
    record = at.session_state["mirror_run"]
    assert list(record["runs"]) == ["mirror serial", vh.SD_BASELINE] and record["main"] == "mirror serial"
    run = record["runs"]["mirror serial"]
    assert run["options"] == {"gamma": 3, "kappa": 4, "exit_layer": 15, "exit_head": "model", "draft": "ss",
                              "rule": "sample", "mode": "serial"}
    assert record["runs"][vh.SD_BASELINE]["options"] == {"gamma": 3, "draft": "ss"}
    assert run["events"][0].config["mode"] == "serial"
    check_metrics(at, run)
    assert len(gantts(at)) == 1
    if any(isinstance(e, EeMessage) for e in run["events"]):
        assert len(heatmaps(at)) == 1, "the hypothesis grid"
    law, costs = at.dataframe[0].value, at.dataframe[1].value
    assert "law" in law.columns and "measured" in law.columns
    assert any(q.startswith("speedup over SD") for q in law.index), "with sps beside it, the speedup is known"
    assert costs["measured ms"].notna().any()
    assert any(c.value.startswith("mirror(gamma=3") for c in at.caption)


def test_ssd_page_serial_run():
    at = new_page(SSD)
    assert at.title[0].value.startswith("🔮 SSD")
    assert at.get("plotly_chart"), "the fan-out explorer's figure"
    at = run_page(at, "ssd:")
    record = at.session_state["ssd_run"]
    assert list(record["runs"]) == ["ssd serial"]
    run = record["runs"]["ssd serial"]
    assert run["options"]["draft"] == "tiny" and run["options"]["fanout"] == "uniform"
    check_metrics(at, run)
    assert len(gantts(at)) == 1
    if any(isinstance(e, CacheBuild) for e in run["events"]):
        assert len(heatmaps(at)) == 1, "the cache table"
    assert len(specs(at)) >= 5, "explorer, Gantt, cache, k histogram and miss curve"
    assert "law" in at.dataframe[0].value.columns


def test_bad_input_shows_the_engines_message():
    at = new_page(SSD)
    at.text_area(key="ssd:prompt_text").set_value("   ")
    at.button(key="ssd:generate").click().run()
    assert not at.exception, "bad input must not surface as a traceback"
    assert len(at.error) == 1 and "prompt must not be empty" in at.error[0].value
    assert "ssd_run" not in at.session_state and not [m for m in at.metric if m.label == "tok/s"]


def test_helpers():
    assert vh.effective_mode("lanes", 2) == ("lanes", None)
    mode, why = vh.effective_mode("lanes", 1)
    assert mode == "serial" and "2 lanes" in why
    assert vh.effective_mode("serial", 1) == ("serial", None)
    names = ["exit@15-norm", "exit@3-norm", "exit@6-layer", "ss", "tiny"]
    assert vh.norm_exit_layers(names) == [3, 15]
    assert vh.exit_layer_choices("model", N_LAYERS) == list(range(1, N_LAYERS))
    assert vh.exit_layer_choices("norm", N_LAYERS, names) == [3, 15]
    assert vh.default_exit_layer(list(range(1, 30)), 30) == 15 and vh.default_exit_layer([3, 10, 21], 30) == 10
    options = vh.mirror_options(5, 4, 15, "model", "ss", "sample", "lanes")
    assert vh.run_plan("mirror", options, compare=True) == {"mirror lanes": ("mirror", options),
                                                            vh.SD_BASELINE: ("sps", {"gamma": 5, "draft": "ss"})}
    ssd = vh.ssd_options(3, "geometric", 2, 8, 0.5, "fast", "serial")
    assert ssd["draft"] == "tiny" and ssd["c"] == 0.5
    assert list(vh.run_plan("ssd", ssd, compare=False)) == ["ssd serial"]
    assert vh.run_plan("ssd", ssd, compare=True)[vh.SD_BASELINE] == ("sps", {"gamma": 3, "draft": "tiny"})
    assert vh.needs_warmup("mirror", {"mode": "lanes"}) and not vh.needs_warmup("ssd", {"mode": "serial"})
    assert vh.pin_to_one_core("sps", {}, True) and not vh.pin_to_one_core("ssd", {"mode": "lanes"}, True)
    assert vh.draft_gen_by_gamma(0.004, 2.0, 4) == {1: 0.004, 2: 0.004, 3: 0.008, 4: 0.008}
    x = vh.mirror_explorer(20, 20, 4, 1.0, 5, 1, 0.0)
    assert x["fits"] and abs(x["t_mirror_ms"] - 41.0) < 1e-9 and abs(x["t_sd_ms"] - 60.0) < 1e-9
    assert abs(x["speedup"] - 60 / 41) < 1e-12 and abs(x["speedup_with_ff"] - x["speedup"]) < 1e-12
    y = vh.ssd_explorer(30, 12, 25, 0, 12, 1.0)
    assert y["hidden"] and abs(y["ratio"] - 42 / 30) < 1e-12 and abs(y["bound"] - 1.4) < 1e-12
    metrics = {"method": "ssd", "tokens_per_s": 10.0, "steady_tokens_per_s": 12.0, "tau": 1.5, "acceptance": 0.2,
               "hit_rate": 0.5, "hidden_draft_ms": 3.0, "exposed_draft_ms": 1.0, "verify_ms": 30.0,
               "backup_ms": 12.0, "message_ms_by_kind": {"verdict": 0.5},
               "law": {"tokens_per_s": 13.0, "ratio": 12 / 13, "step_ms": 115.0, "no_overlap_tokens_per_s": 9.0,
                       "formula": "f"}}
    values = vh.metric_values(metrics)
    assert list(values) == list(vh.METRIC_HELP) and values["law tok/s vs measured (steady)"] == "13.0 vs 12.0"
    rows = {row["cost"].split(":")[0]: row["measured ms"] for row in vh.cost_rows(metrics)}
    assert rows["T_v"] == 30.0 and rows["verdict message hop (target → draft)"] == 0.5
    assert [row["unit"] for row in vh.law_rows(metrics)] == ["ms / round", "tok/s", "tok/s", "ratio"]


def test_the_main_app_lists_the_pages():
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=300).run()
    assert not at.exception
    for page, title in (("views/mirror_sd.py", "🪞 Mirror-SD"), ("views/ssd.py", "🔮 SSD")):
        at.switch_page(page).run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.title[0].value.startswith(title)
