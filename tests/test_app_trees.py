"""The dashboard's draft-trees page, driven headlessly with Streamlit's AppTest on the real default model.

As in ``test_app.py``: short runs (a dozen new tokens), nothing mocked, timings only checked for being
positive.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.run_summary import strip_html
from app.tree_page import parse_sizes
from engines.methods.eagle import EagleConfig
from engines.programs.tree import MAX_AUTO_DEPTH, TREE_DEPTH

APP = Path(__file__).resolve().parents[1] / "app"
PAGE = APP / "views" / "draft_trees.py"

METRIC_LABELS = ["tok/s", "τ (mean accepted length)", "mean tree size", "levels a round", "speedup vs ar"]
PROMPT = "List three primary colours, then three secondary colours."


def new_page() -> AppTest:
    at = AppTest.from_file(str(PAGE), default_timeout=300).run()
    # AppTest treats the second run of a script under views/ as a page change and drops widget values
    # set before it, so run once more before touching any widget.
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def grow(at: AppTest, prompt: str = PROMPT, max_new_tokens: int = 12, total_tokens: int | None = 8,
         draft: str = "eagle") -> AppTest:
    at.selectbox(key="tree:draft").set_value(draft)
    at.number_input(key="tree:max_new_tokens").set_value(max_new_tokens)
    if total_tokens is None:
        at.checkbox(key="tree:auto").check()
    else:
        at.checkbox(key="tree:auto").uncheck().run()
        at.number_input(key="tree:total_tokens").set_value(total_tokens)
    at.text_area(key="tree:prompt_text").set_value(prompt)
    at.button(key="tree:generate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def check_run(at: AppTest, max_new_tokens: int, largest_tree: int) -> dict:
    assert not at.error, [e.value for e in at.error]
    run = at.session_state["tree_run"]
    assert 0 < run["stats"]["new_tokens"] <= max_new_tokens
    stream = [md.value for md in at.markdown if "font-family:monospace" in md.value]
    assert len(stream) == 1 and "".join(run["text"].split()) in "".join(strip_html(stream[0]).split())
    values = metrics(at)
    assert list(values) == METRIC_LABELS
    assert float(values["tok/s"]) > 0
    assert float(values["τ (mean accepted length)"]) >= 1.0
    assert 0 < float(values["mean tree size"]) <= largest_tree
    depth = run["options"]["depth"]
    assert 1 <= float(values["levels a round"]) <= (depth if isinstance(depth, int) else MAX_AUTO_DEPTH)
    assert values["speedup vs ar"].endswith("×") and float(values["speedup vs ar"][:-1]) > 0
    assert len(at.get("plotly_chart")) == 2, "the round's tree beside its mask"
    assert any(c.value.startswith("Round ") for c in at.caption)
    return run


def test_tree_page_grows_trees_shows_rounds_and_sweeps():
    at = new_page()
    assert at.title[0].value.startswith("🌳 Draft trees")
    at.selectbox(key="tree:dtype").set_value("float32").run()  # fp32: greedy eagle writes exactly what ar writes
    at = grow(at)
    run = check_run(at, 12, 8)
    defaults = EagleConfig()
    assert run["options"] == {"depth": TREE_DEPTH, "topk": defaults.topk, "total_tokens": 8, "draft": "eagle"}
    assert run["ar_source"] == "measured just now"
    assert run["text"] == run["ar"]["text"], "greedy eagle must write exactly what ar writes in float32"
    assert any("output equals ar: yes" in c.value for c in at.caption)

    rounds = run["stats"]["rounds"]
    assert rounds > 1, "12 tokens take more than one round"
    slider = at.slider(key="tree:round")
    assert (slider.min, slider.max) == (1, rounds)
    other = 1 if slider.value != 1 else 2
    slider.set_value(other).run()
    assert not at.exception
    assert any(c.value.startswith(f"Round {other}:") for c in at.caption)
    at.checkbox(key="tree:show_pruned").uncheck().run()
    assert not at.exception and len(at.get("plotly_chart")) == 2

    at.text_input(key="tree:sweep_sizes").set_value("2, 1")
    at.number_input(key="tree:sweep_tokens").set_value(4)
    at.checkbox(key="tree:sweep_auto").uncheck()
    at.button(key="tree:sweep").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    sweep = at.session_state["tree_sweep"]
    assert [p["total_tokens"] for p in sweep["points"]] == [1, 2]
    assert sweep["predict_from"] == 2 and all(p["speedup"] > 0 for p in sweep["points"])
    assert len(at.get("plotly_chart")) == 3 and len(at.dataframe) == 1

    at = grow(at, max_new_tokens=8, total_tokens=4)  # same prompt, other settings: a new ar baseline
    check_run(at, 8, 4)
    assert at.session_state["tree_run"]["ar_source"] == "measured just now"
    assert len(at.get("plotly_chart")) == 2, "a sweep belongs to the run it was made for"


def test_auto_sized_auto_deep_trees_of_the_tiny_drafter():
    at = new_page()
    at.checkbox(key="tree:auto_depth").check()
    at = grow(at, total_tokens=None, draft="tiny")
    run = check_run(at, 12, 60)
    assert run["options"]["total_tokens"] == "auto" and run["options"]["depth"] == "auto"
    assert run["options"]["draft"] == "tiny"
    assert at.number_input(key="tree:total_tokens").disabled and at.number_input(key="tree:depth").disabled


def test_bad_input_shows_the_engines_message():
    at = new_page()
    at.text_area(key="tree:prompt_text").set_value("   ")
    at.button(key="tree:generate").click().run()
    assert not at.exception, "bad input must not surface as a traceback"
    assert len(at.error) == 1 and "prompt must not be empty" in at.error[0].value
    assert "tree_run" not in at.session_state and not at.metric


def test_sweep_sizes_are_checked():
    assert parse_sizes("8, 2 4,,2") == [2, 4, 8]
    for text, message in (("", "whole numbers"), ("2, x", "whole numbers"), ("0, 4", "between 1 and 60"),
                          ("61", "between 1 and 60"), ("-3", "whole numbers")):
        with pytest.raises(ValueError, match=message):
            parse_sizes(text)


def test_the_main_app_lists_the_page():
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=300).run()
    assert not at.exception
    at.switch_page("views/draft_trees.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value.startswith("🌳 Draft trees")
