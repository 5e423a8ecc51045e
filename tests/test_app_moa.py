"""The dashboard's MoA page, driven headlessly with Streamlit's AppTest on the real default model and the shipped
MoA drafters.

As in ``test_app_verdict.py``: short runs (8 new tokens), nothing mocked, timings only checked for being positive.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import moa_page as mh
from engines.core.trace import LinkSend, RunEnd, RunStart

APP = Path(__file__).resolve().parents[1] / "app"
PAGE = APP / "views" / "moa.py"

PROMPT = "Why does the sky appear blue during the day?"


def new_page() -> AppTest:
    at = AppTest.from_file(str(PAGE), default_timeout=300).run()
    # AppTest treats the second run of a script under views/ as a page change and drops widget values
    # set before it, so run once more before touching any widget.
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def run_page(at: AppTest, drafter: str = "moa-tli0", network: str = "5g", disconnect: int | None = None,
             max_new_tokens: int = 8) -> AppTest:
    at.selectbox(key="moa:drafter").set_value(drafter)
    at.selectbox(key="moa:network").set_value(network)
    at.number_input(key="moa:disconnect").set_value(disconnect)
    at.number_input(key="moa:max_new_tokens").set_value(max_new_tokens)
    at.text_area(key="moa:prompt_text").set_value(PROMPT)
    at.button(key="moa:generate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def specs(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def title(spec: dict) -> str:
    text = spec["layout"].get("title", {})
    return text.get("text", "") if isinstance(text, dict) else str(text)


def gantts(at: AppTest) -> list[dict]:
    """The client · link · server Gantts shown."""
    return [s for s in specs(at) if [str(t).split(" ·")[0] for t in s["layout"].get("yaxis", {}).get("ticktext", [])]
            == ["client", "link", "server"]]


def test_page_renders_with_the_formula_figures():
    at = new_page()
    assert at.title[0].value.startswith("🧩 MoA")
    assert at.selectbox(key="moa:network").value == "5g"
    assert "moa-tli0" in at.selectbox(key="moa:drafter").options[0]
    assert len(specs(at)) == 2, "the Table 7 and cycle-time figures of the explorer"
    assert any(title(s).startswith("Bytes per message (Table 7)") for s in specs(at))


def test_a_5g_run_shows_text_metrics_gantt_split_and_message_sizes():
    at = run_page(new_page())
    record = at.session_state["moa_run"]
    assert record["method"] == "moa" and record["options"] == {"tli": 0, "network": "5g", "link_seed": 0}
    events = record["events"]
    assert isinstance(events[0], RunStart) and isinstance(events[-1], RunEnd)
    assert events[0].clock == "wall+link" and events[0].lossless
    assert 0 < events[-1].stats["new_tokens"] <= 8
    values = {m.label: m.value for m in at.metric}
    assert list(values) == list(mh.METRIC_HELP)
    assert 1.0 <= float(values["τ (tokens / server call)"]) <= 9.0
    assert int(values["server calls"]) == events[-1].stats["target_calls"]
    assert float(values["tok/s (run's clock)"]) > 0
    up, down = (float(v) for v in values["link KB up · down"].split(" · "))
    sends = [e for e in events if isinstance(e, LinkSend)]
    assert up * 1e3 == pytest.approx(sum(e.bytes for e in sends if e.direction == "up"), abs=50)
    assert down > 0
    shown = gantts(at)
    assert len(shown) == 1 and "SIMULATED" in title(shown[0]) and "LOSSY" not in title(shown[0])
    titles = [title(s) for s in specs(at)]
    assert any("drafting time per round" in t for t in titles), "the draft split"
    assert sum(t.startswith("Bytes per message (Table 7)") for t in titles) == 2, "explorer + measured"
    table = at.dataframe[0].value
    up_row = next(i for i in table.index if i.startswith("up"))
    assert table.loc[up_row, "measured B"] == table.loc[up_row, "Table 7 + header + scales B"]
    assert any("clock wall+link" in c.value and "lossless" in c.value for c in at.caption)


def test_a_disconnected_run_says_lossy():
    at = run_page(new_page(), network="local", disconnect=3)
    record = at.session_state["moa_run"]
    assert record["options"]["disconnect_after"] == 3 and record["events"][0].lossless is False
    assert any("LOSSY" in w.value for w in at.warning)
    assert all("LOSSY" in title(s) for s in gantts(at))
    assert any("LOSSY" in c.value for c in at.caption)


def test_helpers():
    assert mh.available_drafters(["tiny", "moa-tli3", "eagle", "ss"]) == ["moa-tli3", "eagle", "tiny"]
    assert mh.run_options("moa-tli1", "none") == ("moa", {"tli": 1, "network": "none"})
    assert mh.run_options("moa-tli0-nolsa", "4g", 2.5, 10, 7) == (
        "moa", {"tli": 0, "lsa": False, "network": "4g", "link_seed": 7, "packet_loss": 0.025, "disconnect_after": 10})
    assert mh.run_options("tiny", "5g") == ("eagle", {"draft": "tiny", "network": "5g", "link_seed": 0})
    assert mh.run_options("eagle", "none", 5.0, 3) == ("eagle", {"draft": "eagle", "network": "none"})
    with pytest.raises(ValueError, match="drafter must be one of"):
        mh.run_options("moa-tli9", "5g")
    values = mh.metric_values({"tau": 2.5, "server_calls": 17, "tokens_per_s": 12.34, "clock": "wall+link",
                               "link_messages": 10, "link_bytes_up": 1200, "link_bytes_down": 34000,
                               "link_share": 0.4, "lsa_passes": 3, "lsa_seconds": 0.0123, "link_resends": 1})
    assert values == {"τ (tokens / server call)": "2.50", "server calls": "17", "tok/s (run's clock)": "12.3",
                      "link KB up · down": "1.2 · 34.0", "link share": "40%", "LSA ms": "12.3", "resends": "1"}
    rows = mh.message_table({"nodes": 4.0, "accepted": 2.0, "up": 20.0, "down": 800.0, "table7_up": 16.0,
                             "table7_down": 774.0, "predicted_up": 20.0, "predicted_down": 782.0, "prompt_bytes": 9000})
    assert [r["message"].split(" ")[0] for r in rows] == ["up", "down", "first"]
    assert rows[1]["Table 7 B"] == 774.0 and rows[2]["measured B"] == 9000


def test_the_main_app_lists_the_page():
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=300).run()
    assert not at.exception
    at.switch_page("views/moa.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value.startswith("🧩 MoA")
