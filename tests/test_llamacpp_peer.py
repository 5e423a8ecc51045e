"""llama.cpp as a peer in the bench: its rows parse, are skipped with a note where `make peers` has not run, refuse
sampling, and are marked as another program's in the report. No llama.cpp build here: the one test that decodes
with it runs only where `make peers` has brought it (and is marked slow)."""

from __future__ import annotations

import json

import pytest

from specviz.bench import llamacpp_peer
from specviz.bench import recorded_runs as br
from specviz.bench import runner as bench
from specviz.bench.llamacpp_peer import PEER_METHODS, PeerUnavailable
from specviz.bench.method_specs import parse_method, split_methods
from specviz.bench.report import to_markdown
from specviz.bench.runner import run_bench


@pytest.fixture
def no_llama_cpp(monkeypatch):
    """As on a machine without the extra: the bindings are not there."""
    def missing():
        raise PeerUnavailable("llama-cpp-python is not installed")

    monkeypatch.setattr(llamacpp_peer, "_import_llama_cpp", missing)


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": ["x"]}) + "\n")
    return path


def test_peer_methods_parse():
    assert split_methods("ar,llamacpp_ar,pld,llamacpp_lookup") == ["ar", "llamacpp_ar", "pld", "llamacpp_lookup"]
    for name in PEER_METHODS:
        spec = parse_method(name)
        assert (spec.name, spec.options, spec.threads) == (name, {}, None) and bench.is_peer(name)
    assert parse_method("llamacpp_ar(threads=1)").threads == 1
    with pytest.raises(ValueError, match="takes no options"):
        parse_method("llamacpp_lookup(gamma=5)")
    assert not bench.is_peer("ar") and not bench.is_peer("hf_ar")


def test_peer_refuses_temperature_above_zero(tiny_engine):
    for method in PEER_METHODS:
        with pytest.raises(ValueError, match="temperature=0.7"):
            llamacpp_peer.peer_generate(tiny_engine, [1, 2], method, 4, temperature=0.7)
    with pytest.raises(ValueError, match="temperature"):  # the bench refuses before running anything
        bench.skip_unavailable_peers(tiny_engine, [parse_method("llamacpp_ar")], temperature=1.0)


def test_unavailable_reasons(no_llama_cpp, monkeypatch, tmp_path):
    assert llamacpp_peer.unavailable_reason() == "llama-cpp-python is not installed"
    assert "float16" in llamacpp_peer.unavailable_reason(dtype="float16")
    assert "default model" in llamacpp_peer.unavailable_reason("custom")
    monkeypatch.setattr(llamacpp_peer, "_import_llama_cpp", lambda: None)  # bindings there, weights not converted
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    assert llamacpp_peer.unavailable_reason(dtype="bfloat16").startswith("no bf16 GGUF of SmolLM2-135M-Instruct")
    assert llamacpp_peer.gguf_path(dtype="float32") == tmp_path / "peers" / "gguf" / "SmolLM2-135M-Instruct-f32.gguf"


def test_bench_skips_peer_rows_with_a_note(tiny_engine, prompts, monkeypatch, capsys):
    """Without llama.cpp the rows are left out, said once, and recorded: the bench still runs and succeeds."""
    monkeypatch.setattr(bench, "machine_ceiling", lambda engine: None)
    monkeypatch.setattr(tiny_engine, "encode", lambda prompt: [1, 2, 3])  # the tiny model has no tokenizer
    results = run_bench(tiny_engine, prompts, ["llamacpp_ar", "pld", "llamacpp_lookup"], max_new_tokens=2,
                        progress=False)
    assert list(results["methods"]) == ["ar", "pld"]
    skipped = results["setup"]["skipped"]
    assert list(skipped) == ["llamacpp_ar", "llamacpp_lookup"]
    assert all(note.startswith("skipped — run `make peers`") for note in skipped.values())
    assert "llamacpp_ar: skipped — run `make peers`" in capsys.readouterr().out
    assert "peer" not in results["setup"]
    report = to_markdown(results)
    assert "- `llamacpp_lookup`: skipped — run `make peers`" in report
    assert br.skipped_notes(results)[0].startswith("llamacpp_ar: skipped — run `make peers`")


def test_default_methods_include_the_peer_only_when_it_runs(monkeypatch):
    monkeypatch.setattr(llamacpp_peer, "unavailable_reason", lambda *a, **k: "llama-cpp-python is not installed")
    assert not set(PEER_METHODS) & set(bench.default_methods())
    monkeypatch.setattr(llamacpp_peer, "unavailable_reason", lambda *a, **k: None)
    assert bench.default_methods()[-2:] == list(PEER_METHODS)


def test_peer_rows_output_equal_to_ar_is_informational():
    summary = {"tokens_per_s": 40.0, "speedup": 1.0, "tau": 1.0, "alpha": None, "equals_ar": 1.0, "turns": 1}
    peer = {**summary, "tokens_per_s": 30.0, "speedup": 0.75, "equals_ar": 0.5, "peer": "llama.cpp"}
    info = llamacpp_peer.peer_info("SmolLM2-135M-Instruct", "bfloat16")
    results = {"setup": {"model": "m", "dtype": "bfloat16", "device": "cpu", "threads": 2, "n_prompts": 1,
                         "prompts": "p", "max_new_tokens": 8, "temperature": 0.0, "peer": info},
               "methods": {"ar": {"qa": summary, "overall": summary}, "llamacpp_ar": {"qa": peer, "overall": peer}}}
    report = to_markdown(results)
    assert "| llamacpp_ar | 30.0 | 0.75× |" in report
    assert "SmolLM2-135M-Instruct-bf16.gguf" in report and "for information" in report
    rows = br.method_rows(results)
    assert rows[0]["output = ar"] == "100%" and rows[1]["output = ar"] == "50% (other program, for information)"
    assert "0c1e57098" in br.peer_line(results)


def test_bench_refuses_peers_under_a_memory_budget(tiny_engine):
    with pytest.raises(ValueError, match="llamacpp_ar cannot run under memory_budget_mb"):
        bench.check_memory_budget(tiny_engine, [parse_method("llamacpp_ar")], {"memory_budget_mb": 1.0})


@pytest.mark.slow
def test_peer_decodes_four_tokens_from_the_engines_prompt_ids(real_engine):
    reason = llamacpp_peer.unavailable_reason(real_engine.name, real_engine.dtype)
    if reason:
        pytest.skip(f"llama.cpp peer not here: {reason} (make peers)")
    ids = real_engine.encode("Say hi.")
    for method in PEER_METHODS:
        out = llamacpp_peer.peer_generate(real_engine, ids, method, 4)
        assert 0 < out["new_tokens"] == len(out["token_ids"]) <= 4
        assert out["decode_seconds"] > 0 and out["prefill_seconds"] > 0 and out["target_calls"] >= 2
        assert (out["drafted"] is None) == (method == "llamacpp_ar")
