"""The Streamlit dashboard, driven headlessly with Streamlit's AppTest on the real default model.

Runs are kept short (a dozen or so new tokens) because the model is real; nothing is mocked. Timing
numbers are only checked for being positive: speed is the benchmark's business, not the tests'.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import live as lv
from app import method_options as mo
from app import url_state as us
from app.run_summary import strip_html
from engines import METHODS, Engine
from engines.drafters.registry import MODEL_FREE, SPS
from engines.drafters.trained import available, drafters_for, exit_head_name
from specviz.prompts import load_prompts
from specviz.views import rounds
from specviz.views.suffix_match import suffix_matches

APP = Path(__file__).resolve().parents[1] / "app"

METRIC_LABELS = ["tok/s", "τ (mean accepted length)", "α (acceptance rate)", "target calls", "speedup vs ar"]
PROMPT = "List three primary colours, then three secondary colours."


def new_app() -> AppTest:
    # AppTest resolves a relative path against the calling file, so hand it app/main.py absolutely.
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=300).run()
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
    blocks = [md.value for md in at.markdown if "font-family:monospace" in md.value and 'data-view="rounds"' not in md.value]
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
    # where the time goes, the token stream and accepted-length histogram, + acceptance by draft depth for a
    # method that drafts, + the target's p against the draft's q when the replayed round refused a draft
    run = at.session_state["last_run"]
    views = [v for v in rounds.round_views(run["events"]) if v.round > 0]
    refusal = next((v for v in views if v.round == at.select_slider(key=f"replay:{run['id']}").value), None) \
        if len(views) > 1 else None
    suffix = bool(suffix_matches(run["events"]))  # + what the suffix drafter matched, when one drafted
    expected = (3 if method == "ar" else 4) + int(bool(refusal and refusal.rejection)) + int(suffix)
    assert len(at.get("plotly_chart")) == expected
    return values


def round_lines(at: AppTest) -> list[str]:
    block = next(md.value for md in at.markdown if 'data-view="rounds"' in md.value)
    return re.findall(r"round +(\d+) · ", block)


def test_run_page_replays_rounds_and_shows_a_struck_through_refusal():
    at = new_app()
    examples = load_prompts()
    chosen = next(i for i, p in enumerate(examples) if p.category == "summarization")
    at.selectbox(key="example").set_value(chosen).run()
    at = generate(at, "pld", prompt=at.text_area(key="prompt_text").value, max_new_tokens=24)
    run = at.session_state["last_run"]
    slider = at.select_slider(key=f"replay:{run['id']}")
    refused = rounds.refused_rounds(rounds.round_views(run["events"]))
    assert refused, "pld on a summary refuses some drafts"
    assert slider.value == refused[0], "the replay opens on the first refusal"
    block = next(md.value for md in at.markdown if 'data-view="rounds"' in md.value)
    assert "line-through" in block and "refused by the target" in block
    assert round_lines(at)[-1] == str(refused[0])
    charts = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    rejection = next(c for c in charts if c["layout"]["title"]["text"].startswith(f"Round {refused[0]}:"))
    assert [trace["name"] for trace in rejection["data"]] == ["target p", "draft q"]
    assert any(trace["name"] == "verify" for c in charts for trace in c["data"]), "the where-the-time-goes chart"

    last = slider.options[-1]
    slider.set_value(last).run()  # replay to the end: every round is listed
    assert not at.exception
    assert round_lines(at)[-1] == str(last) and len(round_lines(at)) == len(slider.options)


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


def test_a_suffix_run_shows_what_the_suffix_drafter_matched():
    at = new_app()
    at.selectbox(key="method").set_value("sps").run()
    at.selectbox(key="opt:sps:draft").set_value("suffix").run()
    at = generate(at, "sps", gamma=3)
    check_run(at, "sps", 16)
    assert at.session_state["last_run"]["options"]["draft"] == "suffix"
    assert any(h.value == "What the suffix drafter matched" for h in at.subheader)
    assert any("drafted tokens kept" in c.value for c in at.caption)


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
    assert len(at.get("plotly_chart")) == 6  # + speedup vs γ (pld refuses drafts on this summary)
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
])
def test_bad_input_shows_the_engines_message(method, options, message):
    at = new_app()
    at.selectbox(key="method").set_value(method).run()
    for name, value in options.items():
        at.number_input(key=f"opt:{method}:{name}").set_value(value)
    if not options:
        at.text_area(key="prompt_text").set_value("   ")
    at.button(key="generate").click().run()
    assert not at.exception, "bad input must not surface as a traceback"
    assert len(at.error) == 1 and message in at.error[0].value
    assert "last_run" not in at.session_state
    assert not at.metric


# --- valid choices only -------------------------------------------------------------------------------
N_LAYERS = 30  # the default model's (every shipped drafter's card says target_layers = 30)


def fixed_up(method: str, options: dict) -> dict:
    """``options`` with every dependent choice moved to an offered one, as the sidebar does when drawing."""
    options = dict(options)
    for name in mo.render_order(method):
        spec = next(s for s in mo.option_specs(method, N_LAYERS, options) if s.name == name)
        if spec.choices:
            options[name] = mo.nearest_choice(spec.choices, options[name])
    return options


@pytest.mark.parametrize("method", list(METHODS))
def test_every_offered_choice_is_valid(method):
    """Every string option is a select; each value a select offers (with what depends on it fixed up as the
    sidebar does) passes the engine's validation, and every drafter it names is shipped."""
    shipped = set(available())
    config = METHODS[method].Config
    specs = mo.option_specs(method, N_LAYERS)
    assert [s.name for s in specs] == config.option_names(), "a widget per Config field"
    assert all(s.choices for s in specs if s.kind is str), "no free-text option"
    for spec in specs:
        for choice in spec.choices:
            options = fixed_up(method, {**mo.default_options(method), spec.name: choice})
            config(**options).validate(N_LAYERS)
            for name in ("draft", "drafter"):
                if options.get(name) not in (None, "", "self", *MODEL_FREE):
                    assert options[name] in shipped, f"{method}: {name}={options[name]!r} is not shipped"


def test_layers_offered_only_where_a_head_is_trained():
    shipped = set(available())
    for head in ("norm", "layer", "cats"):
        layers = next(s for s in mo.option_specs("eesd", N_LAYERS, {"head": head}) if s.name == "exit_layer").choices
        assert layers and all(exit_head_name(layer, head) in shipped for layer in layers)
        assert len(layers) == sum(exit_head_name(layer, head) in shipped for layer in range(1, N_LAYERS))
    free = next(s for s in mo.option_specs("eesd", N_LAYERS, {"head": "none"}) if s.name == "exit_layer")
    assert not free.choices and (free.low, free.high) == (1, N_LAYERS - 1), "the model's own head: any layer"
    mirror = next(s for s in mo.option_specs("mirror", N_LAYERS, {"exit_head": "norm"}) if s.name == "exit_layer")
    assert all(f"exit@{layer}-norm" in shipped for layer in mirror.choices)
    sv = next(s for s in mo.option_specs("cats", N_LAYERS, {"dm_layer": 10}) if s.name == "sv_layer").choices
    assert sv and all(layer > 10 and f"cats@{layer}" in shipped for layer in sv)
    assert mo.render_order("eesd").index("head") < mo.render_order("eesd").index("exit_layer")


def test_the_draft_box_is_a_select_of_shipped_drafters():
    at = new_app()
    at.selectbox(key="method").set_value("sps").run()
    assert not at.text_input, "no free-text box in the sidebar"
    assert at.selectbox(key="opt:sps:draft").options == ["self", "suffix",
                                                          *sorted(drafters_for(SPS), key=mo.natural_order)]
    at.selectbox(key="method").set_value("eesd").run()
    at.selectbox(key="opt:eesd:head").set_value("norm").run()
    layers = at.selectbox(key="opt:eesd:exit_layer").options
    assert layers and all(f"exit@{layer}-norm" in available() for layer in layers)
    assert at.selectbox(key="opt:eesd:exit_layer").value == 15, "the chosen layer stays when it has a head"


def test_make_app_serves_on_localhost_only():
    makefile = (APP.parent / "Makefile").read_text()
    recipe = makefile.split("\napp:", 1)[1].split("\n\n", 1)[0]
    assert "--server.address localhost" in recipe


# --- the setup in the URL -------------------------------------------------------------------------------
def test_url_round_trip():
    at = new_app()
    examples = load_prompts()
    chosen = next(i for i, p in enumerate(examples) if p.category == "qa")
    at.selectbox(key="method").set_value("sps").run()
    at.number_input(key="opt:sps:gamma").set_value(3)
    at.selectbox(key="opt:sps:draft").set_value("tiny")
    at.checkbox(key="opt:sps:full_vocab").check()
    at.number_input(key="max_new_tokens").set_value(24)
    at.selectbox(key="example").set_value(chosen).run()
    assert not at.exception
    params = dict(at.query_params)
    assert params == {"method": "sps", "gamma": "3", "draft": "tiny", "full_vocab": "true",
                      "prompt_id": str(examples[chosen].question_id), "max_new_tokens": "24"}

    again = AppTest.from_file(str(APP / "main.py"), default_timeout=300)
    again.query_params.update(params)
    again.run()
    assert not again.exception and not again.warning
    assert again.selectbox(key="method").value == "sps"
    assert again.number_input(key="opt:sps:gamma").value == 3
    assert again.checkbox(key="opt:sps:gamma:auto").value is False
    assert again.selectbox(key="opt:sps:draft").value == "tiny"
    assert again.checkbox(key="opt:sps:full_vocab").value is True
    assert again.number_input(key="max_new_tokens").value == 24
    assert again.text_area(key="prompt_text").value == examples[chosen].turns[0]
    assert dict(again.query_params) == params, "reading the link writes the same link back"

    again.text_area(key="prompt_text").set_value("Say hi.").run()  # free text travels as text
    assert dict(again.query_params)["prompt"] == "Say hi." and "prompt_id" not in again.query_params


def test_url_values_the_page_does_not_offer_are_ignored():
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=300)
    at.query_params.update({"method": "sps", "draft": "/etc/passwd", "gamma": "999", "draft_layers": "2",
                            "temperature": "7", "prompt_id": "nope", "dtype": "float16", "bogus": "1"})
    at.run()
    assert not at.exception
    assert at.selectbox(key="opt:sps:draft").value == "self", "a path in the link is not a choice"
    assert at.number_input(key="opt:sps:gamma").value == 5 and at.number_input(key="opt:sps:draft_layers").value == 2
    assert at.slider(key="temperature").value == 0.0 and at.selectbox(key="dtype").value == "auto"
    warning = at.warning[0].value
    for name in ("/etc/passwd", "gamma", "temperature", "prompt_id", "dtype", "bogus"):
        assert name in warning
    assert "draft" not in at.query_params and at.query_params["draft_layers"] == "2"


# --- Stop -------------------------------------------------------------------------------------------
def stopped_batch(engine: Engine, method: str, options: dict, settings: dict, prompt: str, after: int) -> lv.Batch:
    """A batch whose run was ended after ``after`` commits the way the Stop button ends one: Streamlit's
    StopException raised out of the page's redraw."""
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    batch = lv.Batch([(method, options)], prompt, settings, engine.dtype)
    seen = []

    def redraw(events):
        seen.append(len(events))
        if len(seen) == after:
            raise StopException()

    with pytest.raises(StopException), batch.running():
        batch.run(lambda: engine.generate(prompt, method, **settings, **options), redraw)
    return batch


def test_a_stopped_run_stays_on_the_page(real_engine):
    settings = {"max_new_tokens": 64, "temperature": 0.0, "seed": 0, "top_p": 1.0}
    batch = stopped_batch(real_engine, "pld", {"gamma": 4, "max_ngram": 3, "min_ngram": 1}, settings, PROMPT, after=3)
    at = new_app()
    at.session_state["batch"] = batch  # as the interrupted script run leaves it for the next one
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    run = at.session_state["last_run"]
    assert run["stopped"] and run["stop_reason"] == lv.STOPPED and 0 < run["stats"]["new_tokens"] < 64
    assert "⏹ stopped" in [md.value for md in at.markdown if "font-family:monospace" in md.value][0]
    assert squash(run["text"]) in squash(stream_text(at))
    assert any("Stopped" in w.value for w in at.warning)
    assert any("stopped by the Stop button" in c.value for c in at.caption)
    assert float(metrics(at)["tok/s"]) > 0
    assert "batch" not in at.session_state


def test_url_state_helpers():
    prompts = load_prompts()
    assert us.prompt_params(prompts, 3, prompts[3].turns[0]) == {"prompt_id": str(prompts[3].question_id)}
    assert us.prompt_params(prompts, 3, "edited") == {"prompt": "edited"}, "an edited example travels as text"
    assert us.prompt_params(prompts, -1, "x" * (us.MAX_PROMPT_CHARS + 1)) == {}, "too long for a link"
    assert us.prompt_from_params(prompts, {"prompt_id": str(prompts[3].question_id)}) == (3, prompts[3].turns[0])
    assert us.prompt_from_params(prompts, {"prompt": "hi"}) == (-1, "hi")
    assert us.prompt_from_params(prompts, {}) is None
    with pytest.raises(ValueError, match="prompt_id"):
        us.prompt_from_params(prompts, {"prompt_id": "../x"})
    defaults = {name: s.default for name, s in us.SETTINGS.items()}
    assert us.settings_params(defaults) == {}
    assert us.settings_params({**defaults, "temperature": 0.7}, "float32") == {"temperature": "0.7", "dtype": "float32"}
    assert us.parse_setting("max_new_tokens", "24") == 24
    assert us.parse_setting("stop_at_eos", "0") is False and us.parse_setting("stop_at_eos", "True") is True
    assert us.settings_params({**defaults, "stop_at_eos": False}) == {"stop_at_eos": "false"}
    with pytest.raises(ValueError, match="stop_at_eos must be one of"):
        us.parse_setting("stop_at_eos", "maybe")
    for name, text in (("max_new_tokens", "0"), ("temperature", "nan"), ("seed", "1.5"), ("top_p", "2")):
        with pytest.raises(ValueError, match=name):
            us.parse_setting(name, text)
    assert us.run_params("eesd", {"gamma": "auto", "exit_layer": 8, "head": "norm"}) == {
        "method": "eesd", "gamma": "auto", "exit_layer": "8", "head": "norm"}
    spec = next(s for s in mo.option_specs("eagle", N_LAYERS) if s.name == "packet_loss")
    assert mo.parse_option(spec, "unset") is None and mo.parse_option(spec, "0.25") == 0.25
    for text in ("1.5", "inf", "x"):
        with pytest.raises(ValueError, match="packet_loss"):
            mo.parse_option(spec, text)


def test_every_method_draws_its_options():
    at = new_app()
    for method in METHODS:
        at.selectbox(key="method").set_value(method).run()
        assert not at.exception, (method, [e.value for e in at.exception])
        keys = {w.key for kind in (at.selectbox, at.number_input, at.checkbox) for w in kind}
        assert {f"opt:{method}:{name}" for name in METHODS[method].Config.option_names()} <= keys, method
        assert at.query_params["method"] == method
