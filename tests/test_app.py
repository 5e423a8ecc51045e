"""The Streamlit dashboard, driven headlessly with Streamlit's AppTest on the real default model.

Runs are kept short (a dozen or so new tokens) because the model is real; nothing is mocked. Timing
numbers are only checked for being positive: speed is the benchmark's business, not the tests'.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engines import METHODS
from specviz.prompts import load_prompts

APP = Path(__file__).resolve().parents[1] / "app"
sys.path.insert(0, str(APP))
from dashboard_helpers import strip_html  # noqa: E402

METRIC_LABELS = ["tok/s", "τ (mean accepted length)", "α (acceptance rate)", "target calls", "speedup vs ar"]
PROMPT = "List three primary colours, then three secondary colours."


def new_app() -> AppTest:
    # AppTest resolves a relative path against the calling file, so hand it app/dashboard.py absolutely.
    at = AppTest.from_file(str(APP / "dashboard.py"), default_timeout=300).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def generate(at: AppTest, method: str, prompt: str = PROMPT, max_new_tokens: int = 16, **options) -> AppTest:
    at.selectbox(key="method").set_value(method).run()
    for name, value in options.items():
        at.number_input(key=f"opt:{method}:{name}").set_value(value)
    at.number_input(key="max_new_tokens").set_value(max_new_tokens)
    at.text_area(key="prompt_text").set_value(prompt)
    at.button(key="generate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def stream_text(at: AppTest) -> str:
    """The visible text of the rendered token stream (the markdown block holding the coloured spans)."""
    blocks = [md.value for md in at.markdown if "font-family:monospace" in md.value]
    assert len(blocks) == 1, "expected exactly one token-stream block"
    return strip_html(blocks[0])


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def check_run(at: AppTest, method: str, max_new_tokens: int) -> dict:
    run = at.session_state["last_run"]
    assert run["method"] == method
    assert run["text"].strip(), "the run produced no text"
    assert 0 < run["stats"]["new_tokens"] <= max_new_tokens
    assert squash(run["text"]) in squash(stream_text(at))
    values = metrics(at)
    assert list(values) == METRIC_LABELS
    assert float(values["tok/s"]) > 0
    assert float(values["τ (mean accepted length)"]) >= 1.0
    assert int(values["target calls"]) >= 1
    assert values["speedup vs ar"].endswith("×") and float(values["speedup vs ar"][:-1]) > 0
    # token stream and accepted-length histogram, + acceptance by draft depth for a method that drafts
    assert len(at.get("plotly_chart")) == (2 if method == "ar" else 3)
    return values


def test_sps_streams_text_and_metrics():
    at = new_app()
    at.selectbox(key="dtype").set_value("float32").run()  # fp32: greedy sps is token-identical to ar
    at = generate(at, "sps", gamma=3)
    values = check_run(at, "sps", 16)
    assert 0.0 <= float(values["α (acceptance rate)"]) <= 1.0
    run = at.session_state["last_run"]
    assert run["options"]["gamma"] == 3 and run["options"]["draft"] == "self"
    assert set(run["options"]) == set(METHODS["sps"].Config.option_names()), "a widget per Config field"
    assert run["ar_source"] == "measured just now"
    assert run["dtype"] == "float32"
    assert run["text"] == run["ar"]["text"], "greedy sps must write exactly what ar writes"
    assert any("output equals ar: yes" in c.value for c in at.caption)

    at = generate(at, "sps", gamma=2)  # same prompt and settings: the ar baseline is reused
    check_run(at, "sps", 16)
    assert at.session_state["last_run"]["ar_source"] == "cached in this session"


def test_pld_example_prompt_with_gamma_sweep_then_ar():
    at = new_app()
    examples = load_prompts()
    chosen = next(i for i, p in enumerate(examples) if p.category == "summarization")
    assert any(label.startswith("summarization · ") for label in at.selectbox(key="example").options)
    at.selectbox(key="example").set_value(chosen).run()
    prompt = at.text_area(key="prompt_text").value
    assert prompt == examples[chosen].turns[0], "choosing an example fills the prompt box"
    at = generate(at, "pld", prompt=prompt, max_new_tokens=12, gamma=4)
    check_run(at, "pld", 12)
    assert at.session_state["example"] != -1, "the example stays selected while its text is unchanged"

    at.slider(key="sweep_max_gamma").set_value(2)
    at.number_input(key="sweep_tokens").set_value(4)
    at.button(key="sweep").click().run()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 4  # + speedup vs γ
    sweep = at.session_state["sweep_result"]
    assert [p["gamma"] for p in sweep["points"]] == [1, 2]
    assert all(p["speedup"] > 0 for p in sweep["points"])
    assert len(at.dataframe) == 1

    at = generate(at, "ar", prompt=prompt, max_new_tokens=12)  # ar is its own baseline
    values = check_run(at, "ar", 12)
    assert values["speedup vs ar"] == "1.00×"
    assert values["α (acceptance rate)"] == "—"
    assert values["τ (mean accepted length)"] == "1.00"


@pytest.mark.parametrize("method, options, message", [
    ("sps", {}, "prompt must not be empty"),
    ("pld", {"max_ngram": 2, "min_ngram": 3}, "min_ngram must be in [1, 2], got 3"),
    ("sps", {"draft": "/no/such/draft-model"}, "/no/such/draft-model"),  # an OSError from transformers
])
def test_bad_input_shows_the_engines_message(method, options, message):
    at = new_app()
    at.selectbox(key="method").set_value(method).run()
    for name, value in options.items():
        widget = at.text_input if isinstance(value, str) else at.number_input
        widget(key=f"opt:{method}:{name}").set_value(value)
    if not options:
        at.text_area(key="prompt_text").set_value("   ")
    at.button(key="generate").click().run()
    assert not at.exception, "bad input must not surface as a traceback"
    assert len(at.error) == 1 and message in at.error[0].value
    assert "last_run" not in at.session_state
    assert not at.metric
