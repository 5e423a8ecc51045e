"""The dashboard's PPSD page, driven headlessly with Streamlit's AppTest on the real default model.

As in ``test_app_cats.py``: short runs (a few new tokens), nothing mocked, timings only checked for being
positive. Runs use ``serial`` and ``virtual`` mode, which start no worker process.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import ppsd_page as ph
from app.lanes_page import LiveThrottle
from app.run_summary import strip_html
from engines.core.trace import RunStart, StageCompute
from engines.lanes import lane_capacity
from engines.programs.pipeline import stage_count

APP = Path(__file__).resolve().parents[1] / "app"
PAGE = APP / "views" / "ppsd.py"

PROMPT = "Why does the sky appear blue during the day?"
N_LAYERS = 30  # SmolLM2-135M


def new_page() -> AppTest:
    at = AppTest.from_file(str(PAGE), default_timeout=300).run()
    # AppTest treats the second run of a script under views/ as a page change and drops widget values
    # set before it, so run once more before touching any widget.
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def run_ppsd(at: AppTest, mode: str = "serial", max_new_tokens: int = 8, compare: bool = False,
             exit_layer: int | None = None) -> AppTest:
    at.selectbox(key="ppsd:mode").set_value(mode)
    if exit_layer is not None:
        at.selectbox(key="ppsd:exit_layer").set_value(exit_layer)
    at.number_input(key="ppsd:max_new_tokens").set_value(max_new_tokens)
    at.checkbox(key="ppsd:compare").set_value(compare)
    at.text_area(key="ppsd:prompt_text").set_value(PROMPT)
    at.button(key="ppsd:generate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def figure(at: AppTest, index: int) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def gantt_bars(spec: dict) -> int:
    return sum(len(trace.get("y", [])) for trace in spec["data"] if trace["type"] == "bar")


def test_serial_run_beside_ar_and_eesd():
    at = new_page()
    assert at.title[0].value.startswith("🚰 PPSD")
    assert at.selectbox(key="ppsd:exit_layer").value == 15 and at.selectbox(key="ppsd:head").value == "layer"
    assert any(c.value.startswith("P = ⌈L/ℓ⌉ = ⌈30/15⌉ = 2 stages") for c in at.sidebar.caption)
    at = run_ppsd(at, compare=True)
    record = at.session_state["ppsd_run"]
    assert list(record["runs"]) == ["ar", "eesd γ=5", "ppsd serial"] and record["main"] == "ppsd serial"
    events = record["runs"]["ppsd serial"]["events"]
    start = events[0]
    assert isinstance(start, RunStart) and start.clock == "wall"
    assert start.config["exit_layer"] == 15 and start.config["head"] == "layer" and start.config["mode"] == "serial"
    assert record["runs"]["eesd γ=5"]["options"] == {"gamma": 5, "exit_layer": 15, "head": "layer"}
    assert 0 < events[-1].stats["new_tokens"] <= 8

    gantt = figure(at, 0)
    computes = sum(isinstance(e, StageCompute) for e in events)
    others = gantt_bars(gantt) - computes
    assert others > 0, "ar and eesd add their spans and prefills"
    rows = gantt["layout"]["yaxis"]["categoryarray"]
    assert rows == ["ar · cpu0", "eesd γ=5 · cpu0", "ppsd serial · cpu0/stage1", "ppsd serial · cpu0/stage2"]
    assert "clock=virtual" not in gantt["layout"]["title"]["text"]
    assert len(at.get("plotly_chart")) == 2, "the Gantt and the speedup surface with the measured runs"
    surface = figure(at, 1)
    assert any(t["name"].startswith("measured: ppsd serial") for t in surface["data"])

    values = {m.label: m.value for m in at.metric}
    assert list(values) == list(ph.METRIC_HELP)
    assert float(values["tok/s"]) > 0 and 0.0 <= float(values["α (acceptance rate)"]) <= 1.0
    assert 1.0 <= float(values["ticks / token"]) <= 3.0
    rho = values["S_PPSD (Eq. 6) vs measured speedup"]
    assert rho.endswith("×") and "—" not in rho, "with ar run beside it, the measured speedup is known"
    assert any(c.value.startswith("ppsd(exit_layer=15, head=layer, mode=serial)") for c in at.caption)
    table = at.dataframe[0].value
    assert list(table.index) == ["ar", "eesd γ=5", "ppsd serial"]
    strip = [md.value for md in at.markdown if "font-family:monospace" in md.value]
    assert len(strip) == 1
    kept = re.sub(r"<s [^>]*>.*?</s>", "", strip[0])  # struck-out drafts were never committed
    assert "".join(strip_html(kept).split()) == "".join(events[-1].text.split())


def test_lanes_with_too_few_cores_runs_virtual_and_says_so():
    at = new_page()
    exits = at.selectbox(key="ppsd:exit_layer").options
    too_deep = [int(e) for e in exits if stage_count(N_LAYERS, int(e)) > lane_capacity()]
    if not too_deep:
        pytest.skip("this machine has a core for every stage of every shipped exit")
    exit_layer = max(too_deep)  # the fewest stages that still do not fit: the quickest virtual run
    at.selectbox(key="ppsd:exit_layer").set_value(exit_layer).run()
    at.selectbox(key="ppsd:mode").set_value("lanes").run()
    assert any("virtual" in w.value for w in at.sidebar.warning)
    assert at.button(key="ppsd:generate").label == "Run PPSD (virtual mode)"
    at = run_ppsd(at, mode="lanes", max_new_tokens=6, exit_layer=exit_layer)
    record = at.session_state["ppsd_run"]
    events = record["runs"]["ppsd virtual"]["events"]
    assert events[0].clock == "virtual" and events[0].config["mode"] == "virtual"
    assert len(events[0].lanes) == stage_count(N_LAYERS, exit_layer)
    assert "clock=virtual" in figure(at, 0)["layout"]["title"]["text"]
    assert all(m.label.endswith("· clock=virtual") for m in at.metric)
    assert any("**clock=virtual**" in c.value for c in at.caption)


def test_bad_input_shows_the_engines_message():
    at = new_page()
    at.text_area(key="ppsd:prompt_text").set_value("   ")
    at.button(key="ppsd:generate").click().run()
    assert not at.exception, "bad input must not surface as a traceback"
    assert len(at.error) == 1 and "prompt must not be empty" in at.error[0].value
    assert "ppsd_run" not in at.session_state and not at.metric


def test_helpers():
    names = ["exit@15-layer", "exit@3-norm", "exit@6-layer", "eagle", "cats@3", "exit@10-layer"]
    assert ph.shipped_exits("layer", names) == [6, 10, 15] and ph.shipped_exits("norm", names) == [3]
    assert ph.default_exit([3, 6]) == 6 and ph.default_exit([3, 15]) == 15
    assert ph.effective_mode("lanes", 2, 2) == ("lanes", None)
    mode, why = ph.effective_mode("lanes", 5, 2)
    assert mode == "virtual" and "P = 5" in why and "clock=virtual" in why
    assert ph.effective_mode("serial", 10, 1) == ("serial", None)
    plan = ph.run_plan(6, "norm", "virtual", compare=True)
    assert plan == {"ar": ("ar", {}), ph.ONE_LANE_AR: ("ar", {}),
                    "eesd γ=5": ("eesd", {"gamma": 5, "exit_layer": 6, "head": "norm"}),
                    "ppsd virtual": ("ppsd", {"exit_layer": 6, "head": "norm", "mode": "virtual"})}
    assert list(ph.run_plan(15, "layer", "lanes", compare=False)) == ["ppsd lanes"]
    now = [0.0]
    throttle = LiveThrottle(0.5, clock=lambda: now[0])
    assert throttle.due() and not throttle.due()
    now[0] = 0.6
    assert throttle.due()
    assert ph.help_for("tok/s · clock=virtual") == ph.METRIC_HELP["tok/s"]
    assert ph.needs_warmup("ppsd", {"mode": "lanes"}) and not ph.needs_warmup("ppsd", {"mode": "serial"})
    assert ph.pin_to_one_core("ar", {}, True) and ph.pin_to_one_core("ppsd", {"mode": "serial"}, True)
    assert not ph.pin_to_one_core("ppsd", {"mode": "lanes"}, True) and not ph.pin_to_one_core("ar", {}, False)
    assert ph.stages_caption(30, 6, 2).startswith("P = ⌈L/ℓ⌉ = ⌈30/6⌉ = 5 stages")


def test_the_main_app_lists_the_page():
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=300).run()
    assert not at.exception
    at.switch_page("views/ppsd.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value.startswith("🚰 PPSD")
