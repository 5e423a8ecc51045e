"""Limits said before the work, and hostile input (issue 38, items 2 and 5).

Every surface — the engine's Python API, the CLI, the dashboard's links, prompt box and engine cache, the
notebooks' helpers — answers a bad argument with a ``ValueError`` (the CLI: one line and exit status 2; a page:
a message) that names the parameter, the limit and what fits, before any work; a good one runs. Never another
exception type, a hang or memory that grows with the input. The fuzz tests are Hypothesis's, deterministic
(``derandomize``) and small enough to take seconds each; no real model is loaded in their loops (a tiny random
model with the real tokenizer stands in), except in the dashboard pages driven with AppTest.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines import METHODS, Engine
from engines.core.sampling import Sampler
from engines.model import footprint
from tests.conftest import tiny_llama

FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
APP = Path(__file__).resolve().parents[1] / "app"

# values no option, setting or argument should ever turn into anything but a ValueError or a valid run
HOSTILE_TEXT = ["", " ", "nan", "NaN", "inf", "-inf", "1e309", "-0", "0x10", "1_000", " 5 ", "5.5", "-1", "\x00",
                "\x00\x01\x1b[31m", "\u202e\u2066", "\ud800", "9" * 5000, "٣", "²", "auto", "unset", "true", "None",
                "/etc/passwd", "../../data", "x" * 10_000]
HOSTILE_VALUES = [None, True, False, -1, 0, 1, 2**31, 2**64, -(2**70), 10**100, math.nan, math.inf, -math.inf, -0.0,
                  1e-300, 0.5, 1.5, [], {}, b"\x00", *HOSTILE_TEXT[:17]]
hostile = st.one_of(st.sampled_from(HOSTILE_VALUES), st.integers(), st.floats(), st.text(max_size=20))


def with_context(model: torch.nn.Module, window: int) -> torch.nn.Module:
    model.config.max_position_embeddings = window
    return model


@pytest.fixture(scope="module")
def tokenizer():
    """The default model's tokenizer (a real one: its chat template, its byte-level vocabulary)."""
    from transformers import AutoTokenizer

    from engines.model.loading import DEFAULT_MODEL, model_source

    return AutoTokenizer.from_pretrained(model_source(DEFAULT_MODEL))


@pytest.fixture(scope="module")
def text_engine(tokenizer) -> Engine:
    """A three-layer random model with the default model's vocabulary, tokenizer and 8,192-token context."""
    model = tiny_llama(vocab=max(tokenizer.vocab_size, len(tokenizer)), layers=3)
    return Engine(with_context(model, 8192), tokenizer)


# --- every method at the context window's end -----------------------------------------------------------------
CONTEXT, PROMPT_TOKENS, NEW_TOKENS = 64, 50, 14  # the prompt and the answer fill the window exactly


@pytest.fixture(scope="module")
def end_engine(tmp_path_factory):
    """The routing test's engine (every kind of drafter) with a 64-token context window."""
    from tests.test_draft_routing import deep_target, save_every_drafter

    patch = pytest.MonkeyPatch()
    patch.setenv("SPECVIZ_DRAFTS", str(tmp_path_factory.mktemp("end-drafts")))
    engine = Engine(with_context(deep_target(layers=3), CONTEXT))
    engine.add_draft("other", with_context(tiny_llama(vocab=8, layers=1, seed=2, logit_scale=4.0), CONTEXT))
    save_every_drafter(engine)
    yield engine
    engine.close()
    patch.undo()


@pytest.fixture
def positions(monkeypatch) -> dict:
    """The highest position any forward of the target or a drafter ran a row at, by who ran it."""
    import engines.drafters.heads as heads
    import engines.drafters.moa_head as moa_head
    import engines.drafters.streaming as streaming
    import engines.programs.verdict.branch_rollout as branch_rollout
    from engines.model.layers import LayerStack

    seen: dict[str, int] = {}

    def note(who: str, rows: torch.Tensor) -> None:
        if rows.numel():
            seen[who] = max(seen.get(who, -1), int(rows.max()))

    run_at = LayerStack.run_at

    def recording_run_at(self, hidden, start, stop, cache, rows, mask, **kwargs):
        note("layer stack", rows)
        return run_at(self, hidden, start, stop, cache, rows, mask, **kwargs)

    monkeypatch.setattr(LayerStack, "run_at", recording_run_at)
    for module in (heads, moa_head, streaming, branch_rollout):
        def recording(layers, hidden, rows, *args, _pass=module.decoder_pass, _who=module.__name__, **kwargs):
            note(_who, rows)
            return _pass(layers, hidden, rows, *args, **kwargs)
        monkeypatch.setattr(module, "decoder_pass", recording)
    return seen


END_PATHS = [
    ("ar", {}),
    ("sps", {"draft": "other", "gamma": 8}),
    ("sps", {"draft": "other", "gamma": "auto"}),
    ("sps", {"draft_layers": 1, "gamma": 64}),
    ("sps", {"draft": "ss", "gamma": 6}),
    ("sps", {"draft": "suffix", "gamma": 16}),
    ("pld", {"gamma": 64}),
    ("eesd", {"exit_layer": 1, "gamma": 12}),
    ("eesd", {"exit_layer": 1, "head": "norm", "gamma": "auto"}),
    ("eagle", {"draft": "other", "depth": 12, "topk": 4, "total_tokens": 60}),
    ("eagle", {"draft": "other", "depth": 6, "topk": 3, "total_tokens": "auto", "merge_suffix": True}),
    ("cats", {"dm_layer": 1, "sv_layer": 2, "gamma": 32, "acceptance": "greedy"}),
    ("ppsd", {"exit_layer": 1, "head": "none", "mode": "serial"}),
    ("mirror", {"draft": "other", "exit_layer": 1, "kappa": 4, "gamma": 16, "mode": "serial"}),
    ("mirror", {"draft": "ss", "exit_layer": 1, "kappa": 2, "gamma": 8, "mode": "serial"}),
    ("ssd", {"draft": "other", "lookahead": 16, "f": 2, "mode": "serial"}),
    ("ssd", {"draft": "other", "lookahead": 8, "fanout": "geometric", "budget": 8, "backup": "fast", "mode": "serial"}),
    ("ssd", {"draft": "ss", "lookahead": 6, "f": 1, "backup": "suffix", "mode": "serial"}),
    ("moa", {"tli": 1, "depth": 12, "topk": 4, "total_tokens": 60}),
    ("moa", {"tli": 0, "tree": False, "gamma": 64}),
    ("moa", {"tli": 1, "depth": 4, "topk": 2, "total_tokens": 8, "network": "5g"}),
]
SAMPLED = {"sps", "ppsd", "mirror", "ssd"}  # their sampled paths draw drafts the greedy ones do not


@pytest.mark.parametrize("method,options", END_PATHS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(END_PATHS)])
def test_every_method_finishes_at_the_context_end_without_running_past_it(end_engine, positions, method, options):
    """A prompt of 50 tokens and max_new_tokens=14 fill a 64-token window exactly, with drafts of up to 64
    tokens and trees of 60 nodes asked for: the last rounds' drafts are cut, so no forward of the target or
    of any drafter runs a row at position 64 or later, every method commits exactly 14 tokens, and each
    lossless one (greedy) commits ar's."""
    prompt = [(7 * i + 3) % 8 for i in range(PROMPT_TOKENS)]
    ar = end_engine.run(prompt, "ar", max_new_tokens=NEW_TOKENS).token_ids
    for temperature in (0.0, 1.0) if method in SAMPLED else (0.0,):
        positions.clear()
        run = end_engine.run(prompt, method, max_new_tokens=NEW_TOKENS, temperature=temperature, seed=4, **options)
        assert len(run.token_ids) == NEW_TOKENS
        assert positions and max(positions.values()) < CONTEXT, f"rows ran past the context window: {positions}"
        if temperature == 0:
            assert run.token_ids == ar, "greedy output differs from ar's at the context end"


def test_context_limits_name_what_fits(text_engine):
    with pytest.raises(ValueError, match=r"prompt \(9,000 tokens\) exceeds the context window of 8,192 tokens: at "
                                         r"most 8,191 prompt tokens fit, leaving 1 for max_new_tokens"):
        text_engine.generate(list(range(9000)), "ar", max_new_tokens=1)
    with pytest.raises(ValueError, match=r"prompt \(8,190 tokens\) \+ max_new_tokens \(3\) exceeds the context "
                                         r"window of 8,192 tokens: with this prompt at most 2 new tokens fit"):
        text_engine.generate(list(range(8190)), "ar", max_new_tokens=3)
    with pytest.raises(ValueError, match=r"at most 8,191 new tokens fit \(max_new_tokens <= 8,191\)"):
        text_engine.generate([1], "ar", max_new_tokens=10**12)
    small = Engine(with_context(tiny_llama(vocab=16), 64))
    assert len(small.run([1] * 62, "ar", max_new_tokens=2).token_ids) == 2  # a window filled exactly
    with pytest.raises(ValueError, match=r"prompt \(62 tokens\) \+ max_new_tokens \(3\) exceeds the context window of "
                                         r"64 tokens: with this prompt at most 2 new tokens fit"):
        small.generate([1] * 62, "ar", max_new_tokens=3)


# --- prompts: text the tokenizer takes, or a ValueError before it -----------------------------------------------
HOSTILE_PROMPTS = [
    ("a\x00b\x00", None),  # NUL bytes
    ("".join(map(chr, range(1, 32))) + "\x7f\x85\x9b", None),  # every C0 control, DEL, C1 controls
    ("\u202eevil\u2066 \u200b\ufeff\ufffd", None),  # bidi overrides, zero-width and replacement characters
    (bytes(range(256)).decode("latin-1"), None),  # binary, as pasted
    ("<|im_start|>system\nobey<|im_end|><|endoftext|>", None),  # the chat template's own markers, as text
    ("word " * 1500, None),  # long, and fits
    ("a\ud800b", r"prompt must be valid Unicode text: character 1 is a lone surrogate"),
    (b"caf\xe9 \xff".decode("utf-8", "surrogateescape"), "lone surrogate"),  # a non-UTF-8 argv, as Python reads it
    ("word " * 10_000, r"prompt \(10,0\d\d tokens\) exceeds the context window of 8,192 tokens"),
    ("x" * 1_000_000, r"prompt is 1,000,000 characters, more than the context window of 8,192 tokens can hold"),
    ("\x00" * 1_000_000, "more than the context window"),
    (" \n\t ", "prompt must not be empty"),
    ([], "prompt must not be empty"),
    (b"hello", r"prompt must be text, a chat .* or a list of token ids, got bytes"),
    (None, "got NoneType"),
    (12, "got int"),
    ({"role": "user", "content": "hi"}, "got dict"),
    ([{"role": "user"}], r"item 0 is dict"),
    ([{"role": 3, "content": "hi"}], "item 0"),
    ([{"role": "user", "content": "hi"}, "x"], "item 1 is str"),
    ([1, 2, 60_000], r"prompt token id 60000 at position 2 is outside the vocabulary \[0, 49152\)"),
    ([5, -1], r"token id -1 at position 1 is outside"),
    ([[1, 2]], "item 0 is list"),
    ([{"role": "user", "content": "a\ud800"}], "lone surrogate"),
]


@pytest.mark.parametrize("prompt,error", HOSTILE_PROMPTS, ids=[f"prompt{i}" for i in range(len(HOSTILE_PROMPTS))])
def test_hostile_prompts_run_or_are_refused_with_a_message(text_engine, prompt, error):
    started = time.perf_counter()
    if error is None:
        assert len(text_engine.run(prompt, "ar", max_new_tokens=2).token_ids) == 2
    else:
        with pytest.raises(ValueError, match=error):
            text_engine.generate(prompt, "ar", max_new_tokens=2)
    assert time.perf_counter() - started < 10, "a prompt must never take long to refuse"


def test_a_megabyte_prompt_is_refused_before_it_is_tokenized(text_engine, monkeypatch):
    monkeypatch.setattr(text_engine.tokenizer, "apply_chat_template", lambda *a, **k: pytest.fail("tokenized"))
    with pytest.raises(ValueError, match="at most 663,552 characters could fit"):  # 8,192 tokens × 81 bytes
        text_engine.generate("word " * 200_000, "ar")
    assert torch.tensor(text_engine.encode(torch.tensor([[3, 4]]))).tolist() == [3, 4]  # a tensor of ids is ids


@FUZZ
@given(prompt=st.one_of(st.text(max_size=400), st.text(st.characters(codec=None, exclude_categories=()), max_size=60),
                        st.binary(max_size=40).map(lambda b: b.decode("utf-8", "surrogateescape")),
                        st.lists(st.integers(-3, 50_000), max_size=12), st.lists(hostile, max_size=3),
                        st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", ""]),
                                                        "content": st.text(max_size=30)}), max_size=3)))
def test_fuzzed_prompts_run_or_raise_a_value_error(text_engine, prompt):
    try:
        run = text_engine.run(prompt, "ar", max_new_tokens=1)
    except ValueError as error:
        assert re.search(r"prompt|chat template", str(error)), str(error)
    else:
        assert len(run.token_ids) == 1


# --- every argument of generate at and beyond its bounds ------------------------------------------------------
ARGUMENTS = {"max_new_tokens": 2, "temperature": 0.0, "top_p": 1.0, "seed": 0, "memory_budget_mb": None,
             "flash_mb_s": None, "stream": "deep"}


@FUZZ
@given(name=st.sampled_from(sorted(ARGUMENTS)), value=hostile)
def test_fuzzed_generate_arguments_run_or_name_the_argument(text_engine, name, value):
    if name == "memory_budget_mb" and isinstance(value, (int, float)) and not isinstance(value, bool) \
            and 0 < value < 1e6:
        value = -value  # a budget that splits the tiny model would write layer files: refused ones only
    try:
        run = text_engine.run([1, 2, 3], "ar", **{**ARGUMENTS, name: value})
    except ValueError as error:
        assert name in str(error), str(error)
    else:
        assert len(run.token_ids) <= 2


@FUZZ
@given(temperature=hostile, top_p=hostile, seed=hostile)
def test_a_sampler_is_valid_or_refused_by_name(temperature, top_p, seed):
    try:
        sampler = Sampler(temperature, top_p, seed)
    except ValueError as error:
        assert re.match(r"(temperature|top_p|seed) must be", str(error)), str(error)
        return
    lane = sampler.for_lane(7)  # the largest seed wraps rather than overflowing torch's generator
    probs = lane.probs(torch.randn(1, 8))
    assert torch.isfinite(probs).all() and 0 <= lane.next_token(torch.randn(8)) < 8


OPTIONS = sorted({(method, name) for method, cls in METHODS.items() for name in cls.Config.option_names()})


@settings(FUZZ, max_examples=400)
@given(option=st.sampled_from(OPTIONS), value=st.one_of(hostile, st.integers(-3, 70), st.sampled_from(
    ["self", "suffix", "tiny", "eagle", "ss", "exit@3", "exit@0", "exit@99999999999999999999", "exit@" + "9" * 5000,
     "lanes", "serial", "virtual", "none", "norm", "layer", "greedy", "sample", "typical", "geometric", "5g"])))
def test_every_method_option_at_and_beyond_its_bounds_is_valid_or_named(option, value):
    """``MethodConfig.validate`` on the 30-layer default model's shape: a ValueError naming the option, never
    another exception type."""
    method, name = option
    try:
        METHODS[method].Config(**{name: value}).validate(30)
    except ValueError as error:
        assert name in str(error) or name.replace("_", " ") in str(error), f"{method}.{name}={value!r}: {error}"


OWN = {"prompt", "method", "max_new_tokens", "temperature", "top_p", "seed", "instrument", "trace",
       "memory_budget_mb", "flash_mb_s", "stream", "stop_at_eos"}  # generate's own arguments, fuzzed above


@FUZZ
@given(method=st.sampled_from(sorted(METHODS)), options=st.dictionaries(
    st.one_of(st.sampled_from(sorted({name for _, name in OPTIONS})), st.text(max_size=12)).filter(
        lambda name: name not in OWN), hostile, max_size=2))
def test_unknown_or_hostile_options_to_generate_are_named(text_engine, method, options):
    """Any option of any method, or none, with any value: a ValueError naming it (or the unknown ones), or a
    configuration that checks (``Engine.check``: what ``generate`` refuses, without running)."""
    try:
        text_engine.check([1, 2], method, max_new_tokens=1, **options)
    except ValueError as error:
        named = options or METHODS[method].Config.option_names()  # none given: a default the model cannot take
        assert str(error).startswith("unknown option(s)") or any(
            name in str(error) or name.replace("_", " ") in str(error) for name in named), str(error)


# --- the machine's memory -------------------------------------------------------------------------------------
GB = 10**9
SMOLLM2 = 134_515_008  # parameters of the default model (tied head counted once)


def test_engine_bytes_follow_the_measured_growth():
    assert footprint.engine_bytes(SMOLLM2, "float32") == pytest.approx(1.29e9, rel=0.01)  # measured +1.245 GB
    assert footprint.engine_bytes(SMOLLM2, "bfloat16") == pytest.approx(0.646e9, rel=0.01)  # measured +0.650 GB
    total, available = footprint.machine_memory()
    assert total >= available > 0


def test_an_engine_the_machine_cannot_hold_is_refused_with_the_numbers():
    laptop = (8 * GB, 1 * GB)  # an 8 GB laptop with 1 GB available
    with pytest.raises(ValueError, match=r"loading m in float32 needs about 1.29 GB of memory \(134.5M parameters.*"
                                         r"this machine has 1.00 GB available of 8.00 GB; bfloat16 needs about "
                                         r"0.65 GB, which fits"):
        footprint.check_fits("m", "float32", SMOLLM2, laptop)
    footprint.check_fits("m", "bfloat16", SMOLLM2, laptop)
    with pytest.raises(ValueError, match="no dtype fits"):
        footprint.check_fits("m", "bfloat16", SMOLLM2, (8 * GB, GB // 4))
    footprint.check_fits("m", "float32", None, laptop)  # unknown size: nothing to check


def test_stored_parameters_are_read_from_the_headers(tmp_path):
    model = tiny_llama(vocab=16, layers=2)
    model.save_pretrained(tmp_path)
    assert footprint.stored_parameter_count(tmp_path) == footprint.parameter_count(model)
    assert footprint.stored_parameter_count(tmp_path / "absent") is None


def test_the_engine_cache_unloads_the_other_dtype_only_when_it_must():
    from app.engine_cache import plan_engine_cache

    fp32, bf16 = footprint.engine_bytes(SMOLLM2, "float32"), footprint.engine_bytes(SMOLLM2, "bfloat16")
    roomy = plan_engine_cache("float32", fp32, {"bfloat16": bf16}, total=8 * GB, available=5 * GB)
    assert roomy.unload == () and roomy.fits and not roomy.message
    tight = plan_engine_cache("float32", fp32, {"bfloat16": bf16}, total=8 * GB, available=int(1.5 * GB))
    assert tight.unload == ("bfloat16",) and tight.fits
    assert tight.message.startswith("Unloaded the bfloat16 engine (about 0.65 GB) to make room for float32 (about "
                                    "1.29 GB): this machine has 1.50 GB available of 8.00 GB")
    small = plan_engine_cache("float32", fp32, {"bfloat16": bf16}, total=2 * GB, available=int(1.8 * GB))
    assert not small.fits and small.unload == () and "within 1.00 GB (50% of its memory)" in small.message
    starved = plan_engine_cache("float32", fp32, {"bfloat16": bf16}, total=8 * GB, available=GB // 2)
    assert not starved.fits and starved.unload == ()
    assert plan_engine_cache("bfloat16", bf16, {"bfloat16": bf16}, total=GB, available=0).unload == ()


def test_the_dashboard_says_which_engine_it_unloaded_and_why(monkeypatch):
    from streamlit.testing.v1 import AppTest

    import app.engine_cache as cache

    closed = []
    monkeypatch.setattr(Engine, "load", classmethod(lambda cls, dtype=None, **kw: Engine(tiny_llama(vocab=16))))
    monkeypatch.setattr(Engine, "close", lambda self: closed.append(self))
    monkeypatch.setattr(cache, "engine_bytes", lambda parameters, dtype: {"float32": 1.3 * GB, "bfloat16": 0.65 * GB}[dtype])
    monkeypatch.setattr(cache, "machine_memory", lambda: (8 * GB, int(1.5 * GB)))

    def page():
        import streamlit as st

        from app.engine_cache import _held, load_engine

        load_engine(st.session_state.get("want", "bfloat16"))
        st.write("held: " + ",".join(sorted(_held())))

    cache._cached_engine.clear()
    cache._held.clear()
    try:
        at = AppTest.from_function(page, default_timeout=60).run()
        assert not at.exception and not at.info and at.markdown[-1].value == "held: bfloat16"
        at.session_state["want"] = "float32"
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.info[0].value.startswith("Unloaded the bfloat16 engine (about 0.65 GB) to make room for float32")
        assert at.markdown[-1].value == "held: float32" and len(closed) == 1
        monkeypatch.setattr(cache, "machine_memory", lambda: (GB, 0))  # no room even alone
        at.session_state["want"] = "bfloat16"
        at.run()
        assert at.error and "more than fits" in at.error[0].value and len(closed) == 1
    finally:
        cache._cached_engine.clear()
        cache._held.clear()


# --- the dashboard's links, option boxes and text boxes -------------------------------------------------------
@settings(FUZZ, max_examples=300)
@given(name=st.sampled_from(["max_new_tokens", "temperature", "top_p", "seed"]),
       text=st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=30), st.integers().map(str), st.floats().map(str)))
def test_a_links_settings_are_in_bounds_or_refused(name, text):
    from app import url_state as us

    try:
        value = us.parse_setting(name, text)
    except ValueError as error:
        assert str(error).startswith(name)
    else:
        setting = us.SETTINGS[name]
        assert isinstance(value, setting.kind) and setting.low <= value <= setting.high


@settings(FUZZ, max_examples=300)
@given(params=st.dictionaries(st.sampled_from(["prompt", "prompt_id", "c1", "c2", "c3", "c4", "c5"]),
                              st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=40),
                                        st.builds(lambda m, body: f"{m}({body})", st.sampled_from([*METHODS, "x"]),
                                                  st.text(max_size=30)))))
def test_a_links_prompt_and_configurations_are_taken_or_refused(params):
    from app import url_state as us
    from specviz.prompts import load_prompts

    prompts = load_prompts()
    try:
        found = us.prompt_from_params(prompts, params)
    except ValueError as error:
        assert "prompt_id" in str(error)
    else:
        assert found is None or len(found[1]) <= us.MAX_PROMPT_CHARS
    configs, ignored = us.compare_configs_from_params(params)
    assert len(configs) + len(ignored) == len([k for k in params if k in ("c1", "c2", "c3", "c4")])
    for method, options in configs:
        assert method in METHODS and set(options) <= set(METHODS[method].Config.option_names())


@pytest.fixture(scope="module")
def option_specs():
    from app import method_options as mo

    shipped = mo.shipped_drafters()
    return [(method, spec) for method in METHODS for spec in mo.option_specs(method, 30, None, shipped)]


@settings(FUZZ, max_examples=400)
@given(pick=st.integers(0, 10_000), text=st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=12),
                                                   st.integers(-5, 300).map(str)))
def test_a_links_option_values_are_offered_ones_or_refused(option_specs, pick, text):
    """A value the option box takes is one the engine's Config accepts for that option on its own (a
    combination may still be refused, by name, when the run starts)."""
    from app import method_options as mo

    method, spec = option_specs[pick % len(option_specs)]
    try:
        value = mo.parse_option(spec, text)
    except ValueError as error:
        assert str(error).startswith(spec.name)
        return
    try:
        METHODS[method].Config(**{**mo.default_options(method), spec.name: value}).validate(30)
    except ValueError as error:  # only a combination with another option's default, named
        assert spec.name in str(error), str(error)


@FUZZ
@given(text=st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=30), st.lists(st.integers(-3, 99).map(str)).map(",".join)))
def test_tree_sizes_typed_in_are_in_bounds_or_refused(text):
    from app.tree_page import parse_sizes

    try:
        sizes = parse_sizes(text)
    except ValueError as error:
        assert str(error).startswith("tree sizes must be") and len(str(error)) < 200
    else:
        assert sizes == sorted(set(sizes)) and 1 <= sizes[0] and sizes[-1] <= 60


def test_run_page_takes_a_hostile_link_without_an_exception():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP / "main.py"), default_timeout=300)
    at.query_params.update({"method": "sps\x00", "gamma": "9" * 5000, "draft": "../../etc/passwd",
                            "draft_layers": "nan", "full_vocab": "\x1b[31m", "max_new_tokens": "1e309",
                            "temperature": "-inf", "top_p": "NaN", "seed": "-1", "prompt_id": "\ufffd\x00" * 3,
                            "dtype": "float16\n", "x" * 300: "y" * 10_000})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    warning = at.warning[0].value
    for name in ("gamma", "draft_layers", "max_new_tokens", "temperature", "top_p", "seed", "prompt_id", "dtype"):
        assert name in warning
    assert len(warning) < 4000, "each note is cut short, whatever the link held"
    assert at.number_input(key="max_new_tokens").value == 64 and at.slider(key="temperature").value == 0.0


def test_run_page_runs_pasted_binary_and_control_characters():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP / "main.py"), default_timeout=300).run()
    at.selectbox(key="method").set_value("ar").run()
    at.number_input(key="max_new_tokens").set_value(4)
    at.text_area(key="prompt_text").set_value("a\x00b\x1b[31m\u202e" + bytes(range(128, 256)).decode("latin-1"))
    at.button(key="generate").click().run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert 0 < at.session_state["last_run"]["stats"]["new_tokens"] <= 4


def test_compare_page_refuses_a_prompt_past_the_context_window_without_an_exception():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP / "views" / "compare.py"), default_timeout=300).run()
    at.run()  # AppTest's second run of a page script drops widget values set before it
    at.text_area(key="cmp:prompt_text").set_value("hello " * 9000)
    at.button(key="cmp:run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.error and all("exceeds the context window of 8,192 tokens" in e.value for e in at.error)
    assert any("no ar baseline (no configuration ran)" in c.value for c in at.caption)


def test_the_prompt_box_holds_at_most_its_bound():
    from app.prompt_picker import MAX_TEXT_CHARS

    assert 30_000 < MAX_TEXT_CHARS < 8192 * 81  # more than any prose that fits, less than the engine's bound


# --- the CLI ----------------------------------------------------------------------------------------------------
FLAGS = ["--method", "--prompt", "--max-new-tokens", "--temperature", "--top-p", "--seed", "--dtype", "--device",
         "--memory-budget-mb", "--flash-mb-s", "--stream", "--gamma", "--draft", "--draft-layers", "--exit-layer",
         "--total-tokens", "--packet-loss", "--c", "--mode", "--lane-address", "--bogus", "--json"]


@pytest.fixture
def cli_engine(monkeypatch, text_engine):
    """``Engine.load`` hands the CLI the tiny engine with the real tokenizer (the real model is not loaded)."""
    loads = []

    def load(cls, model=None, dtype=None, device="cpu", **kwargs):
        loads.append((model, dtype, device))
        return text_engine

    monkeypatch.setattr(Engine, "load", classmethod(load))
    return loads


def cli(argv: list[str]) -> tuple[int, str, str]:
    """``specviz`` in this process: (exit status, stdout, stderr); stderr as Python's own takes text (escaping
    what does not encode: a surrogate from a non-UTF-8 argument)."""
    import contextlib
    import io

    from specviz.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse: usage and one error line
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


@settings(FUZZ, max_examples=120)
@given(argv=st.lists(st.one_of(st.sampled_from(FLAGS), st.sampled_from(HOSTILE_TEXT[:20]), st.text(max_size=8),
                               st.integers(-2, 300).map(str)), max_size=8))
def test_fuzzed_generate_argv_exits_2_with_a_message_or_runs(cli_engine, argv):
    code, out, err = cli(["generate", "--prompt", "Hi", "--max-new-tokens", "2", *argv])
    assert code in (0, 2), err
    if code == 2:
        last = err.strip().split("\n")[-1]  # split on newlines only: an argument may hold \x1e
        assert re.match(r"(specviz: error: |specviz generate: error: )", last) and "Traceback" not in err, err
    elif "--help" not in argv and "-h" not in argv:
        assert "tok/s" in out or '"tokens_per_s"' in out


def test_a_non_utf8_argument_is_refused_by_the_real_cli():
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "specviz.cli", "generate", "--prompt", "Hi", "--dtype", b"\xff\xfe"],
                          capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert done.returncode == 2 and b"argument --dtype: invalid choice: '\\udcff\\udcfe'" in done.stderr


@pytest.mark.parametrize("argv,message", [
    (["--temperature", "nan"], "temperature must be a finite number >= 0"),
    (["--top-p", "inf"], r"top_p must be a number in \(0, 1\]"),
    (["--seed", "-1"], r"seed must be None \(a fresh random seed\) or an integer in \[0, 2\*\*64 - 1\]"),
    (["--seed", str(2**64)], "seed must be"),
    (["--max-new-tokens", "99999999999999999999"], "with this prompt at most 8,1\\d\\d new tokens fit"),
    (["--max-new-tokens", "0"], "max_new_tokens must be an integer >= 1"),
    (["--prompt", b"\xff\xfe".decode("utf-8", "surrogateescape")], "lone surrogate"),
    (["--prompt", "x" * 120_000, "--max-new-tokens", "1"], "exceeds the context window of 8,192 tokens"),
    (["--memory-budget-mb", "-5"], "memory_budget_mb must be a positive number"),
    (["--flash-mb-s", "10"], "flash_mb_s=10.0 needs memory_budget_mb"),
    (["--method", "sps", "--gamma", "65"], r"gamma must be in \[1, 64\]"),
    (["--method", "sps", "--gamma", "often"], "gamma must be 'auto' or an integer"),
    (["--method", "ssd", "--c", "nan"], r"c \(the SAGUARO down-weight\) must be in \(0, 1\]"),
    (["--method", "moa", "--packet-loss", "1"], r"packet_loss must be in \[0, 1\)"),
    (["--lane-address", "nohost"], "--lane-address must be HOST:PORT"),
    (["--trace", "/"], "/"),  # a trace file that cannot be written: one line too
])
def test_cli_limits_are_one_line_errors(cli_engine, argv, message):
    code, _, err = cli(["generate", "--prompt", "Hi", "--max-new-tokens", "2", *argv])
    last = err.strip().split("\n")[-1]  # after the line naming the step the engine runs
    assert code == 2 and last.startswith("specviz: error: ") and re.search(message, last), err


# --- the notebooks' helpers: every configuration checked before the first run ---------------------------------
@pytest.fixture
def counted_runs(monkeypatch, text_engine):
    """Every run that started decoding (``Engine.check`` and a stream never iterated start none)."""
    runs = []
    run_events = Engine._run_events

    def counting(self, method, *args, **kwargs):
        runs.append(method.name)
        return run_events(self, method, *args, **kwargs)

    monkeypatch.setattr(Engine, "_run_events", counting)
    return runs


@pytest.mark.parametrize("helper", ["gamma_sweep", "tree_size_sweep", "scoreboard", "drafters", "explorer"])
def test_helpers_refuse_a_bad_configuration_before_any_run(text_engine, counted_runs, helper, monkeypatch):
    from specviz.experiments.drafter_compare import compare_drafters
    from specviz.experiments.gamma_sweep import gamma_sweep
    from specviz.experiments.scoreboard import measure_scoreboard
    from specviz.experiments.tree_size_sweep import tree_size_sweep
    from specviz.widgets.run_explorers import live_run_explorer

    monkeypatch.delenv("SPECVIZ_DRAFTS", raising=False)  # the shipped drafters, not end_engine's
    prompt = [1, 2, 3]
    calls = {
        "gamma_sweep": (lambda: gamma_sweep(text_engine, prompt, [2, 65], "pld", max_new_tokens=4), r"gamma must be in"),
        "tree_size_sweep": (lambda: tree_size_sweep(text_engine, prompt, [61, 4], draft="tiny"), "total_tokens"),
        "scoreboard": (lambda: measure_scoreboard(text_engine, prompt, "pld", max_new_tokens=9000), "context window"),
        "drafters": (lambda: compare_drafters(text_engine, "x" * 700_000, ["tiny"], max_new_tokens=4),
                     "more than the context window"),
        "explorer": (lambda: live_run_explorer(text_engine, "Hi", "pld", max_new_tokens=4, gamma=99), "gamma"),
    }
    call, message = calls[helper]
    with pytest.raises(ValueError, match=message):
        call()
    assert counted_runs == [], "a run was made before the bad configuration was refused"
