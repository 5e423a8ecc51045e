"""The dashboard's CATS page, driven headlessly with Streamlit's AppTest on the real default model.

As in ``test_app_trees.py``: short runs (8–10 new tokens) at a fast emulated flash, nothing mocked, timings
only checked for being positive.
"""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from app import cats_page as ch
from app.run_summary import strip_html

APP = Path(__file__).resolve().parents[1] / "app"
PAGE = APP / "views" / "cats.py"

METRIC_LABELS = ["tok/s", "τ (mean accepted length)", "BPT (MB per token)", "speedup vs ar (same budget)",
                 "bytes streamed (MB)"]
PROMPT = "List three primary colours, then three secondary colours."
FAST_FLASH = 5000.0  # MB/s: streaming stays real but quick


def new_page() -> AppTest:
    at = AppTest.from_file(str(PAGE), default_timeout=300).run()
    # AppTest treats the second run of a script under views/ as a page change and drops widget values
    # set before it, so run once more before touching any widget.
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def run_cats(at: AppTest, max_new_tokens: int = 10, prompt: str = PROMPT, **widgets) -> AppTest:
    at.number_input(key="cats:max_new_tokens").set_value(max_new_tokens)
    at.number_input(key="cats:flash").set_value(FAST_FLASH)
    if "acceptance" in widgets:
        at.selectbox(key="cats:acceptance").set_value(widgets["acceptance"])
    if "gamma" in widgets:
        at.number_input(key="cats:gamma").set_value(widgets["gamma"])
    if "use_budget" in widgets:
        at.checkbox(key="cats:use_budget").set_value(widgets["use_budget"])
    at.text_area(key="cats:prompt_text").set_value(prompt)
    at.button(key="cats:generate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def check_run(at: AppTest, max_new_tokens: int, budget: bool = True) -> dict:
    run = at.session_state["cats_run"]
    assert 0 < run["stats"]["new_tokens"] <= max_new_tokens
    stream = [md.value for md in at.markdown if "font-family:monospace" in md.value]
    assert len(stream) == 1 and "".join(run["text"].split()) in "".join(strip_html(stream[0]).split())
    values = metrics(at)
    assert list(values) == METRIC_LABELS
    assert float(values["tok/s"]) > 0 and float(values["τ (mean accepted length)"]) >= 1.0
    assert values["speedup vs ar (same budget)"].endswith("×")
    if budget:
        assert float(values["BPT (MB per token)"]) > 0 and float(values["bytes streamed (MB)"]) > 0
        assert run["memory"]["flash_mb_s"] == FAST_FLASH
        assert run["ar"]["stats"]["bytes_streamed"] > 0, "the baseline ran under the same budget"
    else:
        assert values["BPT (MB per token)"] == "—" and run["memory"] == {}
    assert len(at.get("plotly_chart")) == 4, "the cycle's tree, its mask, its Gantt and the confusion matrix"
    assert any(c.value.startswith("Cycle ") for c in at.caption)
    return run


def test_cats_page_runs_under_a_budget_and_steps_through_cycles():
    at = new_page()
    assert at.title[0].value.startswith("🪜 CATS")
    at.selectbox(key="cats:dtype").set_value("float32").run()  # fp32: greedy cats writes exactly what ar writes
    assert at.selectbox(key="cats:dm_layer").options == [str(x) for x in ch.adapter_choices()[0]]
    assert all(int(x) > int(at.selectbox(key="cats:dm_layer").value) for x in at.selectbox(key="cats:sv_layer").options)
    assert at.slider(key="cats:temperature").disabled, "greedy acceptance fixes temperature 0"
    at = run_cats(at)
    run = check_run(at, 10)
    assert run["options"] == {"dm_layer": 3, "sv_layer": 15, "gamma": 5, "acceptance": "greedy"}
    start = run["events"][0]
    assert start.memory["resident_layers"] == 15 and start.memory["flash_mb_s"] == FAST_FLASH
    assert start.memory["memory_budget_mb"] == run["memory"]["memory_budget_mb"]
    assert any(c.value.startswith("budget ") for c in at.sidebar.caption), "the sidebar says what the budget is"
    assert run["ar_source"] == "measured just now"
    assert run["text"] == run["ar"]["text"], "greedy cats must write exactly what ar writes in float32"
    assert any("lossless" in c.value and "output equals ar: yes" in c.value for c in at.caption)

    rounds = run["stats"]["rounds"]
    assert rounds > 1, "10 tokens take more than one cycle"
    slider = at.slider(key="cats:cycle")
    assert (slider.min, slider.max) == (1, rounds)
    other = 1 if slider.value != 1 else 2
    slider.set_value(other).run()
    assert not at.exception
    assert any(c.value.startswith(f"Cycle {other}:") for c in at.caption)
    at.checkbox(key="cats:gantt_all").check().run()
    assert not at.exception and len(at.get("plotly_chart")) == 4

    at = run_cats(at)  # the same settings again: the baseline is reused
    assert at.session_state["cats_run"]["ar_source"] == "cached in this session"


def test_typical_acceptance_is_labelled_lossy_and_no_budget_streams_nothing():
    at = run_cats(new_page(), max_new_tokens=8, acceptance="typical", gamma=3)
    run = check_run(at, 8)
    assert run["options"]["acceptance"] == "typical" and run["settings"]["temperature"] == 0.7
    assert run["events"][0].lossless is False
    assert any("LOSSY" in w.value for w in at.warning)
    assert any("**LOSSY**" in c.value for c in at.caption)
    at = run_cats(at, max_new_tokens=8, acceptance="greedy", use_budget=False)
    run = check_run(at, 8, budget=False)
    assert run["stats"]["bytes_streamed"] == 0 and run["events"][0].memory is None


def test_bad_input_shows_the_engines_message():
    at = new_page()
    at.text_area(key="cats:prompt_text").set_value("   ")
    at.button(key="cats:generate").click().run()
    assert not at.exception, "bad input must not surface as a traceback"
    assert len(at.error) == 1 and "prompt must not be empty" in at.error[0].value
    assert "cats_run" not in at.session_state and not at.metric


def test_helpers():
    assert ch.sv_choices([5, 10, 15, 20], 10) == [15, 20]
    assert ch.generation_settings(8, "greedy", 0.7, 1)["temperature"] == 0.0
    assert ch.generation_settings(8, "sample", 0.7, 1)["temperature"] == 0.7
    assert ch.memory_options(None, False, 15, 1000.0, "deep") == {}
    values = ch.metric_values({"tokens_per_s": 10.0, "mean_accepted_length": 2.5, "bytes_streamed": 0},
                              [], {"tokens_per_s": 5.0})
    assert values["speedup vs ar (same budget)"] == "2.00×" and values["BPT (MB per token)"] == "—"
    assert set(values) == set(ch.METRIC_HELP)


def test_the_main_app_lists_the_page():
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=300).run()
    assert not at.exception
    at.switch_page("views/cats.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value.startswith("🪜 CATS")
