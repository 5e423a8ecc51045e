"""Every lossless method must commit exactly the tokens autoregressive greedy decoding commits (fp32)."""

import pytest

PROMPTS = [
    "Write a short story about a robot learning to paint.",
    "Summarize: The city council met on Tuesday to discuss the new park. The park will have a playground, "
    "a pond and a small library. The council approved the park, and the park opens next spring.",
    "What is 17 times 23? Think step by step.",
]
CASES = [
    ("sps", {"gamma": 1, "draft_layers": 4}),
    ("sps", {"gamma": 3, "draft_layers": 8}),
    pytest.param("sps", {"gamma": 6, "draft_layers": 20}, marks=pytest.mark.slow),  # a 20-layer draft, 20 s
    ("pld", {"gamma": 3}),
    ("pld", {"gamma": 10, "max_ngram": 2}),
    ("eesd", {"gamma": 2, "exit_layer": 4}),
    pytest.param("eesd", {"gamma": 5, "exit_layer": 24}, marks=pytest.mark.slow),  # a 24-layer exit, 15 s
    ("pld", {"gamma": "auto"}),
    ("sps", {"draft": "suffix"}),
    pytest.param("eagle", {"merge_suffix": True}, marks=pytest.mark.slow),  # the tiny-model test covers merging
    ("sps", {"gamma": "auto", "draft": "eagle"}),
    ("eesd", {"gamma": "auto", "exit_layer": 8, "head": "layer"}),
    ("eagle", {}),
    ("eagle", {"draft": "tiny", "depth": 3, "topk": 3, "total_tokens": 8}),
    ("eagle", {"draft": "exit@8-norm", "total_tokens": 12}),
    ("cats", {}),
    ("cats", {"gamma": 3, "acceptance": "sample"}),
]
NEW_TOKENS = 32


@pytest.fixture(scope="module")
def references(real_engine):
    return {p: real_engine.run(p, "ar", max_new_tokens=NEW_TOKENS) for p in PROMPTS}


@pytest.mark.parametrize("method,options", CASES, ids=lambda v: v if isinstance(v, str) else str(v))
def test_greedy_token_identical_to_ar(real_engine, references, method, options):
    for prompt in PROMPTS:
        result = real_engine.run(prompt, method, max_new_tokens=NEW_TOKENS, **options)
        expected = references[prompt].token_ids
        assert result.token_ids == expected, first_divergence(real_engine, prompt, result.token_ids, expected)
        assert result.stats.new_tokens == len(expected)
        assert result.stats.target_calls <= references[prompt].stats.target_calls


def first_divergence(engine, prompt, got, expected):
    i = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b) if got[:len(expected)] != expected else 0
    return f"diverges at token {i}: {engine.detokenize(got[:i + 1])!r} vs {engine.detokenize(expected[:i + 1])!r}"


def test_speculation_saves_target_calls_when_drafts_are_good(real_engine, references):
    """A deep self-draft agrees often enough that the target runs fewer times than in AR."""
    prompt = PROMPTS[1]
    result = real_engine.run(prompt, "sps", max_new_tokens=NEW_TOKENS, gamma=4, draft_layers=28)
    assert result.token_ids == references[prompt].token_ids
    assert result.stats.mean_accepted_length > 1.5
    assert result.stats.target_calls < references[prompt].stats.target_calls


def test_hf_draft_model_from_path(real_engine, references, tmp_path):
    """sps accepts any Hugging Face causal LM with the same tokenizer, here a 4-layer cut of the target."""
    from transformers import LlamaForCausalLM

    config = real_engine.model.config.to_dict()
    config["num_hidden_layers"] = 4
    draft = LlamaForCausalLM(type(real_engine.model.config)(**config))
    state = {k: v for k, v in real_engine.model.state_dict().items()}
    draft.load_state_dict(state, strict=False)
    draft.save_pretrained(tmp_path / "draft")
    real_engine.tokenizer.save_pretrained(tmp_path / "draft")
    prompt = PROMPTS[0]
    result = real_engine.run(prompt, "sps", max_new_tokens=NEW_TOKENS, gamma=3, draft=str(tmp_path / "draft"))
    assert result.token_ids == references[prompt].token_ids
    assert result.events[0].config["draft"] == str(tmp_path / "draft")


def test_eos_ends_generation(real_engine):
    result = real_engine.run("Reply with just the word yes.", "sps", max_new_tokens=64, gamma=3)
    assert result.events[-1].stop_reason == "eos"
    assert result.token_ids[-1] in real_engine.eos_ids
    assert len(result.token_ids) < 64
