"""Bad input gets a ValueError naming the parameter and what is allowed, before any work starts."""

import pytest

from engines.model.step_choice import validate_dtype_device

BAD_CALLS = [
    (dict(prompt=""), "prompt must not be empty"),
    (dict(prompt="   "), "prompt must not be empty"),
    (dict(prompt=[]), "prompt must not be empty"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=-3), "max_new_tokens"),
    (dict(temperature=-0.5), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(method="nope"), "known methods: ar, sps, pld, eesd"),
    (dict(method="sps", gamma=0), "gamma"),
    (dict(method="pld", gamma=-1), "gamma"),
    (dict(method="sps", gamma="often"), r"gamma must be 'auto' or an integer in \[1, 64\]"),
    (dict(method="eesd", exit_layer=0), r"exit_layer must be in \[1, 29\]"),
    (dict(method="eesd", exit_layer=30), r"exit_layer must be in \[1, 29\]"),
    (dict(method="sps", draft_layers=30), "draft_layers"),
    (dict(method="sps", exit_layer=3), "unknown option"),
    (dict(method="pld", max_ngram=2, min_ngram=3), "min_ngram"),
    (dict(method="eagle", depth=0), r"depth must be in \[1, 12\]"),
    (dict(method="eagle", topk=17), r"topk must be in \[1, 16\]"),
    (dict(method="eagle", total_tokens=61), r"total_tokens must be in \[1, 60\]"),
    (dict(method="eagle", total_tokens="many"), "total_tokens"),
    (dict(method="eagle", draft="self"), "draft must be one of"),
    (dict(method="eagle", draft="exit@30"), r"exit layer ℓ of draft exit@ℓ must be in \[1, 29\]"),
]


@pytest.mark.parametrize("kwargs,message", BAD_CALLS, ids=[m for _, m in BAD_CALLS])
def test_bad_input_raises_before_running(real_engine, kwargs, message):
    kwargs = {"prompt": "Hello", "method": "ar", **kwargs}
    with pytest.raises(ValueError, match=message):
        real_engine.generate(kwargs.pop("prompt"), kwargs.pop("method"), **kwargs)


def test_prompt_longer_than_context_window(real_engine):
    long_prompt = "word " * (real_engine.context_window + 10)
    with pytest.raises(ValueError, match="context window"):
        real_engine.generate(long_prompt, "ar", max_new_tokens=8)


def test_draft_with_another_tokenizer_is_refused(real_engine, tmp_path):
    from tests.conftest import tiny_llama

    tokenizer = real_engine.tokenizer
    tokenizer_copy = type(tokenizer).from_pretrained(_saved(tokenizer, tmp_path / "tok"))
    tokenizer_copy.add_tokens(["<specviz-extra-token>"])
    draft = tiny_llama(vocab=real_engine.model.config.vocab_size, layers=1)
    with pytest.raises(ValueError, match="different tokenizer"):
        real_engine.add_draft("foreign", draft, tokenizer_copy)
    with pytest.raises(ValueError, match="vocabulary size"):
        real_engine.add_draft("small", tiny_llama(vocab=16, layers=1))
    assert "foreign" not in real_engine._drafts


def _saved(tokenizer, path):
    tokenizer.save_pretrained(path)
    return path


def test_dtype_and_device_choices():
    with pytest.raises(ValueError, match="dtype must be one of"):
        validate_dtype_device("float16", "cpu")
    with pytest.raises(ValueError, match="device must be one of"):
        validate_dtype_device("float32", "tpu")
    assert validate_dtype_device(None, "cpu")[0] in ("float32", "bfloat16")


def test_stream_after_validation_is_complete(real_engine):
    """A valid call streams run_start … run_end and the commits add up to the result."""
    events = list(real_engine.generate("Hello", "pld", max_new_tokens=6))
    assert events[0].kind == "run_start" and events[-1].kind == "run_end"
    committed = [t for e in events if e.kind == "commit" for t in e.tokens]
    assert committed == events[-1].token_ids and len(committed) <= 6
