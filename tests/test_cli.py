"""The console script end to end on the real model: generate (text and --json), bench, errors."""

import json
import os
import pathlib
import platform
import subprocess
import sys

import pytest

from engines.core.stats import compute_stats
from engines.core.trace import Commit
from engines.training.data import held_out
from specviz.bench.method_specs import parse_method, split_methods
from specviz.bench.report import pooled_speedups, to_markdown
from specviz.bench.runner import project_relative, run_bench
from specviz.bench.tallies import Tally
from specviz.prompts import DEFAULT_PROMPTS

ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def specviz(*args):
    return subprocess.run([sys.executable, "-m", "specviz.cli", *args], capture_output=True, text=True, env=ENV,
                          timeout=600)


def specviz_here(capsys, *args) -> tuple[int, str]:
    """The command's exit status and stderr, run in this process: a refusal needs no fresh interpreter (one
    costs ~6 s of imports; the console script itself is run end to end by the tests above)."""
    from specviz.cli import main

    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as stop:  # argparse's own refusals
        code = stop.code
    return code, capsys.readouterr().err


def test_generate_json(tmp_path):
    trace = tmp_path / "trace.jsonl"
    done = specviz("generate", "--method", "sps", "--gamma", "3", "--draft-layers", "4", "--prompt", "Say hi.",
                   "--max-new-tokens", "12", "--dtype", "float32", "--json", "--trace", str(trace))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["method"] == "sps" and out["config"] == {"gamma": 3, "draft": "self", "draft_layers": 4, "full_vocab": False}
    assert 0 < out["stats"]["new_tokens"] == len(out["token_ids"]) <= 12
    assert set(out["stats"]) == {"tokens_per_s", "mean_accepted_length", "acceptance_rate", "target_calls",
                                 "new_tokens", "clock"}
    assert out["stats"]["clock"] == "wall"
    assert out["text"]
    kinds = [json.loads(line)["kind"] for line in trace.read_text().splitlines()]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end" and "draft_tree" in kinds


def test_generate_streams_coloured_text_and_stats():
    done = specviz("generate", "--method", "pld", "--prompt", "Repeat: one two three, one two three.",
                   "--max-new-tokens", "16")
    assert done.returncode == 0, done.stderr
    assert "tok/s" in done.stdout and "τ =" in done.stdout and "\033[" in done.stdout


def test_generate_errors_are_clear(capsys):
    code, err = specviz_here(capsys, "generate", "--method", "medusa", "--prompt", "x")
    assert code == 2 and "known methods: ar, sps, pld, eesd" in err
    code, err = specviz_here(capsys, "generate", "--method", "eesd", "--exit-layer", "40", "--prompt", "x")
    assert code == 2 and "exit_layer must be in [1, 29]" in err


def test_train_errors_are_clear_before_the_model_loads(capsys, monkeypatch):
    import engines.engine

    def no_load(*args, **kwargs):
        raise AssertionError("the model loaded before the error")

    monkeypatch.setattr(engines.engine.Engine, "load", no_load)
    code, err = specviz_here(capsys, "train", "exit@8-middle")
    assert code == 2 and "shipped drafters' names (exit@8-layer, cats@3)" in err
    code, err = specviz_here(capsys, "train", "exit@8-layer", "--init-from", "nowhere")
    assert code == 2 and "init-from: " in err and "'nowhere'" in err


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the AVX2 build is x86-64's")
def test_verify_cost_names_the_native_build_and_keys_the_avx2_builds_curve_apart():
    done = specviz("verify-cost", "--dtype", "bfloat16", "--isa", "avx2")
    assert done.returncode == 0, done.stderr
    header, step, build = done.stdout.splitlines()[:3]
    if "native step" in step:
        assert "-avx2-bfloat16-cpu" in header  # the AVX2 build's own curve, never the native build's
        assert build.startswith("native build: ") and "-march=x86-64-v3" in build and build.endswith("ISA avx2")
    else:  # no compiler here: the line says why
        assert build.startswith("native build: none (")


def test_bench_writes_results(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        json.dumps({"question_id": 1, "category": "qa", "turns": ["What is the capital of France?"]}) + "\n"
        + json.dumps({"question_id": 2, "category": "multi_turn", "turns": ["Name a fruit.", "And a colour?"]}) + "\n")
    done = specviz("bench", "--prompts", str(prompts), "--methods", "hf_ar,pld,sps(gamma=2,draft_layers=2),hf_pld",
                   "--max-new-tokens", "8", "--dtype", "float32", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    methods = results["methods"]
    assert list(methods) == ["ar", "hf_ar", "pld", "sps(gamma=2,draft_layers=2)", "hf_pld"]
    for label, by_category in methods.items():
        assert set(by_category) == {"qa", "multi_turn", "overall"}
        assert by_category["overall"]["turns"] == 3 and by_category["overall"]["tokens_per_s"] > 0
    assert methods["ar"]["overall"]["speedup"] == 1.0 and methods["ar"]["overall"]["tau"] == 1.0
    assert methods["pld"]["overall"]["equals_ar"] == 1.0  # fp32 greedy: lossless
    assert methods["hf_ar"]["overall"]["equals_ar"] == 1.0  # the same model, decoded by transformers
    assert methods["hf_ar"]["overall"]["tau"] == 1.0  # counted from the target's forward calls: one per token
    assert methods["hf_pld"]["overall"]["tau"] >= 1.0 and methods["hf_pld"]["overall"]["alpha"] is None
    assert "| sps(gamma=2,draft_layers=2) |" in (tmp_path / "out" / "results.md").read_text()


def test_bench_checkpoints_after_each_prompt(real_engine, tmp_path):
    """A bench cut short keeps what it measured: partial results after every prompt but the last."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"question_id": i, "category": c, "turns": [t]}) + "\n" for i, (c, t) in
                               enumerate([("qa", "What is 2 + 2?"), ("rag", "Name a planet.")])))
    partials = []
    final = run_bench(real_engine, prompts, ["pld"], max_new_tokens=4, progress=False, checkpoint=partials.append)
    assert [p["setup"]["n_prompts"] for p in partials] == [1] and not partials[0]["setup"]["complete"]
    assert set(partials[0]["methods"]["pld"]) == {"qa", "overall"}
    assert final["setup"]["complete"] and set(final["methods"]["pld"]) == {"qa", "rag", "overall"}
    assert "Partial" in to_markdown(partials[0]) and "Partial" not in to_markdown(final)


def test_train_command_writes_a_card_with_measured_acceptance(tmp_path):
    """`specviz train` end to end on the real target: one step on a few corpus records, then the card (its
    acceptance measured on 6 new tokens a prompt: the 48 of a real card cost a minute here)."""
    lines = (pathlib.Path(__file__).parents[1] / "data" / "distill" / "corpus.jsonl").read_text().splitlines()
    heldout = [line for line in lines[:200] if held_out(json.loads(line))]
    records = lines[:3] + heldout[:1]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(records) + "\n")
    done = subprocess.run([sys.executable, "-m", "specviz.cli", "train", "exit", "--exit-layers", "4", "--heads", "norm",
                           "--max-steps", "1", "--batch-tokens", "256", "--corpus", str(corpus), "--dtype", "float32",
                           "--acceptance-tokens", "6"],
                          capture_output=True, text=True, env={**ENV, "SPECVIZ_DRAFTS": str(tmp_path)}, timeout=600)
    assert done.returncode == 0, done.stderr
    card = json.loads((tmp_path / "exit@4-norm" / "card.json").read_text())
    assert card["training"]["steps"] == 1 and card["training"]["device"] == "cpu"
    assert card["training"]["float32_matmul_precision"] == "highest"
    assert card["command"].startswith("specviz train exit") and "--max-steps 1" in card["command"]
    assert card["acceptance"]["device"] == "cpu" and 1.0 <= card["acceptance"]["greedy"]["tau"] <= 6.0
    assert "exit@4-norm: held-out agreement top-1" in done.stdout and ", top-4 " in done.stdout


def test_agreement_command_measures_shipped_drafters(tmp_path, capsys):
    """`specviz agreement` on the real target and two shipped drafters, over two held-out corpus answers."""
    lines = (pathlib.Path(__file__).parents[1] / "data" / "distill" / "corpus.jsonl").read_text().splitlines()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join([line for line in lines if held_out(json.loads(line))][:2]) + "\n")
    out = tmp_path / "agreement.json"
    done = specviz("agreement", "--drafters", "tiny,eagle", "--ks", "4,1", "--corpus", str(corpus), "--out", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["on"] == "heldout" and result["records"] == 2 and result["dtype"] == "float32"
    for name in ("tiny", "eagle"):
        row = result["agreement"][name]
        assert 0 < row["1"] <= row["4"] <= 1, (name, row)
        assert f"| {name} | {row['1']:.3f} | {row['4']:.3f} |" in done.stdout
    code, err = specviz_here(capsys, "agreement", "--ks", "one")
    assert code == 2 and "ks must be comma-separated integers" in err
    code, err = specviz_here(capsys, "agreement", "--drafters", "medusa", "--corpus", str(corpus))
    assert code == 2 and "no trained drafter 'medusa'" in err


def test_method_specs():
    assert split_methods("ar,sps(gamma=3,draft_layers=4),pld") == ["ar", "sps(gamma=3,draft_layers=4)", "pld"]
    spec = parse_method("sps(gamma=3,instrument=false)")
    assert (spec.name, spec.options, spec.instrument) == ("sps", {"gamma": 3}, False)
    for bad, message in [("sps(gama=3)", "unknown option"), ("hf_ar(gamma=2)", "takes no options"),
                         ("foo", "unknown method"), ("sps(3)", "option=value")]:
        try:
            parse_method(bad)
        except ValueError as error:
            assert message in str(error)
        else:
            raise AssertionError(f"{bad} was accepted")


def test_markdown_table_shape():
    summary = {"tokens_per_s": 10.0, "speedup": 1.0, "tau": 1.0, "alpha": None, "equals_ar": 1.0}
    results = {"setup": {"model": "m", "dtype": "float32", "device": "cpu", "threads": 2, "n_prompts": 1,
                         "prompts": "p", "max_new_tokens": 8, "temperature": 0.0},
               "methods": {"ar": {"qa": summary, "overall": summary}}}
    text = to_markdown(results)
    assert "| ar | 10.0 | 1.00× | 1.00 | — | — | 100% |" in text
    assert "by draft position" not in text  # nothing drafted, no position table
    forced = {**results["setup"], "machine": "x", "step": "s", "native_isa": "avx2"}
    assert "the AVX2 build, forced" in to_markdown({**results, "setup": forced})
    assert "AVX2" not in to_markdown({**results, "setup": {**forced, "native_isa": "native"}})


def test_recorded_prompt_paths_do_not_name_the_machine(tmp_path):
    assert project_relative(DEFAULT_PROMPTS) == "data/prompts.jsonl"
    assert project_relative(tmp_path / "mine.jsonl") == str(tmp_path / "mine.jsonl")


def test_bench_pools_acceptance_by_position_over_runs():
    """Counts are summed before dividing, so a long run weighs more than a short one."""
    def run(*rounds):  # (drafted, accepted) per round
        commits = [Commit(t=0.0, round=0, tokens=[0], fates=["target"], pieces=["a"], drafted=0, accepted=0)]
        commits += [Commit(t=0.1 * r, round=r, tokens=[0] * (a + 1), fates=["accepted"] * a + ["correction"],
                           pieces=["a"] * (a + 1), drafted=d, accepted=a) for r, (d, a) in enumerate(rounds, 1)]
        return compute_stats(commits)

    tally = Tally()
    tally.add(5, 1.0, True, run((2, 2), (2, 0)))  # position 1: 1 of 2, position 2: 1 of 1
    tally.add(3, 1.0, True, run((2, 0), (2, 0)))  # position 1: 0 of 2
    summary = tally.summary(10.0)
    assert summary["alpha_by_position"] == [1 / 4, 1.0] and summary["rounds_by_position"] == [4, 1]
    results = {"setup": {"model": "m", "dtype": "float32", "device": "cpu", "threads": 2, "n_prompts": 2,
                         "prompts": "p", "max_new_tokens": 8, "temperature": 0.0},
               "methods": {"pld": {"qa": summary, "overall": summary}}}
    assert "| pld | 0.25 | 1.00 |" in to_markdown(results)


def test_pooled_speedups_replace_a_category_with_its_rerun():
    def results(rows):
        return {"methods": {m: {c: {"new_tokens": t, "decode_seconds": s} for c, (t, s) in cats.items()} | {"overall": {}}
                            for m, cats in rows.items()}}

    first = results({"ar": {"qa": (100, 10), "rag": (100, 50)}, "x": {"qa": (100, 5), "rag": (100, 100)}})
    rerun = results({"ar": {"rag": (100, 10)}, "x": {"rag": (100, 5)}})
    pooled = pooled_speedups([(first, None, {"rag"}), (rerun, {"rag"}, set())])
    assert pooled["x"]["speedup"] == pytest.approx(2.0) and pooled["ar"]["tokens_per_s"] == pytest.approx(10.0)
    assert pooled["x"]["categories"] == ["qa", "rag"] and pooled["x"]["mean_draft_cost"] is None
    assert pooled_speedups([(first, None, set())])["x"]["speedup"] == pytest.approx((200 / 105) / (200 / 60))
    with pytest.raises(ValueError, match="include ar"):
        pooled_speedups([(results({"x": {"qa": (1, 1)}}), None, set())])
