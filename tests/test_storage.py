"""Nothing lost (engines/storage.py): a file is whole or not at all, a killed writer leaves the old one, and a damaged
record, corpus chunk, model cache or drafter is said once by name and made again, or refused with what to do.
Tiny files and a tiny random model only; the whole file runs in seconds."""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from engines import storage
from engines.storage import (read_json_record, staged_directory, write_bytes_atomic, write_json_atomic,
                             write_lines_atomic, write_text_atomic)


@pytest.fixture(autouse=True)
def fresh_reports(monkeypatch, caplog):
    """No path reported yet in this process, and the reports captured."""
    monkeypatch.setattr(storage, "_reported", set())
    caplog.set_level(logging.WARNING, logger=storage.__name__)


def reports(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == storage.__name__]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def dead_pid() -> int:
    """The id of a process that has ended (as a killed earlier run's has)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


# --- writing ----------------------------------------------------------------------------------------------------
def test_a_write_that_fails_midway_leaves_the_old_file_whole(tmp_path):
    path = write_text_atomic(tmp_path / "results.json", "old\n")

    def lines():
        yield "half of the new"
        raise RuntimeError("the run stops here")

    with pytest.raises(RuntimeError, match="the run stops here"):
        write_lines_atomic(path, lines())
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C inside a writer's own block
        with storage.staged_file(path) as staging:
            staging.write_text("partial")
            raise KeyboardInterrupt
    assert path.read_text() == "old\n" and leftovers(tmp_path) == []
    write_json_atomic(path, {"new": 1}, indent=1)
    assert json.loads(path.read_text()) == {"new": 1} and path.read_text().endswith("\n")
    write_lines_atomic(tmp_path / "lines.jsonl.gz", ['{"a": 1}', '{"a": 2}\n'])
    assert gzip.open(tmp_path / "lines.jsonl.gz", "rt").read() == '{"a": 1}\n{"a": 2}\n'


WRITER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("storage", sys.argv[1])  # alone: no torch to import
storage = importlib.util.module_from_spec(spec)
spec.loader.exec_module(storage)
size, n = int(sys.argv[3]), 0
while True:
    n += 1
    storage.write_bytes_atomic(sys.argv[2], bytes([65 + n % 2]) * size)
"""


@pytest.mark.skipif(os.name == "nt", reason="SIGKILL")
def test_a_writer_killed_at_any_moment_leaves_the_old_file_or_the_new_never_half(tmp_path):
    path, size = tmp_path / "record.bin", 4 << 20
    write_bytes_atomic(path, b"O" * size)
    for delay in (0.0, 0.013, 0.029, 0.047):  # a few moments into a loop of 4 MB writes
        writer = subprocess.Popen([sys.executable, "-c", WRITER, storage.__file__, str(path), str(size)])
        started = time.monotonic()
        while path.read_bytes()[:1] == b"O" and time.monotonic() - started < 20:
            time.sleep(0.002)  # until its first write has landed, then a little more
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        data = path.read_bytes()
        assert len(data) == size and data in (b"A" * size, b"B" * size)
        write_bytes_atomic(path, b"O" * size)  # the next writer clears what the killed one left
        assert leftovers(tmp_path) == []


def test_a_staged_folder_appears_whole_or_leaves_the_old_one(tmp_path):
    target = tmp_path / "drafter"
    with staged_directory(target) as staging:
        (staging / "model.safetensors").write_text("weights 1")
        (staging / "card.json").write_text("card 1")
    with pytest.raises(RuntimeError):
        with staged_directory(target) as staging:
            (staging / "model.safetensors").write_text("weights 2")
            raise RuntimeError("killed before the card")
    assert sorted(p.name for p in target.iterdir()) == ["card.json", "model.safetensors"]
    assert (target / "model.safetensors").read_text() == "weights 1" and leftovers(tmp_path) == []
    with staged_directory(target) as staging:  # a new save replaces the old one whole
        (staging / "card.json").write_text("card 2")
    assert [p.name for p in target.iterdir()] == ["card.json"]
    with staged_directory(target, replace=False) as staging:  # a cache someone else made first stays
        (staging / "card.json").write_text("card 3")
    assert (target / "card.json").read_text() == "card 2" and leftovers(tmp_path) == []


def test_what_a_killed_run_left_is_cleared_and_an_old_copy_put_back(tmp_path):
    pid = dead_pid()
    target = tmp_path / "layers"
    (tmp_path / f".layers.staging-{pid}-0").mkdir()  # killed while building
    (tmp_path / f".layers.old-{pid}-1").mkdir()  # killed between moving the old copy aside and the new in
    (tmp_path / f".layers.old-{pid}-1" / "manifest.json").write_text("{}")
    (tmp_path / f".results.json.{pid}-2.tmp").write_text("half")
    alive = tmp_path / f".results.json.{os.getpid()}-99.tmp"  # a writer still at work is left alone
    alive.write_text("busy")
    write_text_atomic(tmp_path / "results.json", "{}")
    with staged_directory(tmp_path / "other"):
        pass
    with staged_directory(target, replace=False) as staging:
        (staging / "manifest.json").write_text('{"new": true}')
    assert (target / "manifest.json").read_text() == "{}"  # the old copy, put back, was whole: it stays
    assert leftovers(tmp_path) == [alive.name]


# --- reading ----------------------------------------------------------------------------------------------------
def test_a_record_cut_in_half_is_reported_once_by_name_and_set_aside(tmp_path, caplog):
    path = tmp_path / "curve.json"
    assert read_json_record(path, "the curve") is None and reports(caplog) == []  # none yet: nothing to say
    path.write_text('{"key": "x", "seconds": {"1": 0.0')
    assert read_json_record(path, "the curve", then="it will be measured again") is None
    (line,) = reports(caplog)
    assert line.startswith(f"specviz: the curve {path} is damaged (not whole JSON: ")
    assert line.endswith("set aside as curve.json.corrupt, it will be measured again")
    assert not path.exists() and (tmp_path / "curve.json.corrupt").exists()
    path.write_text("[1, 2]")  # damaged again in the same process: set aside, not said again
    assert read_json_record(path, "the curve") is None and len(reports(caplog)) == 1 and not path.exists()
    write_json_atomic(path, {"key": "x"})
    assert read_json_record(path, "the curve") == {"key": "x"}


def test_a_damaged_verify_cost_curve_is_measured_again(tmp_path, monkeypatch, caplog):
    from engines.model.verify_cost import VerifyCost, curve_path, load_curve, save_curve

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    curve = VerifyCost("m-key", {1: 0.01, 2: 0.012}, {1: "native", 2: "native"})
    save_curve(curve)
    whole = curve_path("m-key").read_text()
    curve_path("m-key").write_text(whole[: len(whole) // 2])
    assert load_curve("m-key") is None
    curve_path("m-key").write_text(json.dumps({**curve.to_dict(), "seconds": {}}))  # whole JSON, but no curve
    assert load_curve("m-key") is None
    assert len(reports(caplog)) == 1 and "the verify-cost curve" in reports(caplog)[0]
    save_curve(curve)
    assert load_curve("m-key").seconds == {1: 0.01, 2: 0.012}


def test_a_damaged_dtype_choice_is_measured_again(tmp_path, monkeypatch, caplog):
    from engines.model import step_choice

    monkeypatch.setattr(step_choice, "_path", lambda model: tmp_path / "step_choice" / f"{model}.json")
    measured = []

    def measure(model, progress=None):
        measured.append(model)
        choice = step_choice.StepChoice("float32", {"float32/pytorch": 10.0, "bfloat16/pytorch": 12.0}, "a CPU", 2,
                                        "2026-01-01")
        write_json_atomic(step_choice._path(model), asdict(choice))
        return choice

    monkeypatch.setattr(step_choice, "measure", measure)
    write_json_atomic(step_choice._path("m"), {"dtype": "float32", "ms_per_token": {}, "machine": "a CPU",
                                               "threads": 2, "measured_at": "x"})  # whole, but no timings
    assert step_choice.default_dtype("m") == "float32" and measured == ["m"]
    step_choice._path("m").write_text('{"dtype": "bfloa')
    assert step_choice.default_dtype("m") == "float32" and measured == ["m", "m"]
    assert step_choice.default_dtype("m") == "float32" and measured == ["m", "m"]  # the new record is read
    assert [line.split(" is damaged")[0] for line in reports(caplog)] == \
        [f"specviz: the dtype and step choice {step_choice._path('m')}"]  # said once, by name


def test_a_model_cache_cut_short_is_found_before_loading(tmp_path):
    from safetensors.torch import save_file

    from engines.model.loading import cache_problem

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer_config.json").write_text("{}")
    save_file({"w": torch.zeros(64, 64)}, str(tmp_path / "model.safetensors"))
    assert cache_problem(tmp_path) is None
    whole = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(whole[: len(whole) - 100])  # the body cut short
    assert "model.safetensors: " in cache_problem(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(whole[:6])  # the header cut short
    assert "model.safetensors: " in cache_problem(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(whole)
    (tmp_path / "config.json").write_text('{"vocab')
    assert cache_problem(tmp_path).startswith("config.json does not read")


# --- the corpus -------------------------------------------------------------------------------------------------
RECORD = {"id": "s-000000", "category": "qa", "mode": "greedy", "turn": 0, "prompt_ids": [1], "answer_ids": [2]}


def test_a_corpus_file_cut_mid_line_resumes_from_its_whole_records(tmp_path, caplog):
    from engines.training.corpus import _resume, read_corpus

    path = tmp_path / "chunk-000.partial.jsonl"
    second = {**RECORD, "id": "s-000001"}
    path.write_text(json.dumps(RECORD) + "\n" + json.dumps(second) + "\n" + json.dumps(RECORD)[:20])
    assert read_corpus(path) == [RECORD, second]  # a reader skips the cut record
    assert _resume(path) == [RECORD, second]
    assert path.read_text() == json.dumps(RECORD) + "\n" + json.dumps(second) + "\n"  # appends start on a new line
    (line,) = reports(caplog)
    assert str(path) in line and "line 3 not a whole record" in line
    path.write_text(json.dumps(RECORD))  # whole, but the kill came before its newline
    assert _resume(path) == [RECORD] and path.read_text().endswith("\n")


def test_a_truncated_chunk_is_named_skipped_and_made_again(tmp_path, monkeypatch, caplog):
    from engines.training import corpus_chunks
    from engines.training.corpus import read_corpus

    chunk = corpus_chunks.chunk_path(tmp_path, 0)
    write_lines_atomic(tmp_path / "chunk-000.prompts.jsonl.gz", [json.dumps({"question_id": "s-000000"})])
    write_lines_atomic(chunk, [json.dumps(RECORD)] * 200)
    whole = chunk.read_bytes()
    chunk.write_bytes(whole[: len(whole) // 2])
    assert read_corpus(tmp_path) == [] and corpus_chunks.summary(tmp_path)["chunks"] == 0
    (line,) = reports(caplog)
    assert line.startswith(f"specviz: the corpus chunk {chunk} is damaged (") and "set aside" in line
    answered = []

    def build_corpus(engine, prompts, out, *args, route, **kwargs):
        answered.extend(p["question_id"] for p in prompts)
        route(prompts[0]).write_text(json.dumps(RECORD) + "\n")

    monkeypatch.setattr(corpus_chunks, "build_corpus", build_corpus)
    monkeypatch.setattr(corpus_chunks, "synthesize", lambda *a, **k: pytest.fail("the prompts were whole"))
    corpus_chunks.build_chunks(None, tmp_path, [0], 1, [], ["volcanoes"], progress=False)
    assert answered == ["s-000000"] and read_corpus(tmp_path) == [RECORD]


# --- drafters ---------------------------------------------------------------------------------------------------
def test_a_drafter_whose_weights_are_not_its_cards_is_refused_with_what_to_do(tmp_path, monkeypatch, caplog):
    from engines import Engine
    from engines.drafters.trained import build_module, drafters_for, load_trained, save_trained, set_vocab
    from tests.conftest import tiny_llama

    monkeypatch.setenv("SPECVIZ_DRAFTS", str(tmp_path))
    stack = Engine(tiny_llama(vocab=8, layers=2)).target
    card = {"name": "exit@1-norm", "kind": "exit_norm", "exit_layer": 1, "target_layers": 2, "hidden_size": 32,
            "vocab_size": 8, "draft_vocab_size": 4}
    for name, seed in (("exit@1-norm", 0), ("other", 1)):
        torch.manual_seed(seed)
        head = build_module({**card, "name": name}, stack)
        with torch.no_grad():
            for p in head.parameters():
                p.add_(torch.randn_like(p))
        set_vocab(head, torch.tensor([0, 1, 2, 3]))
        save_trained(name, head, {**card, "name": name})
    folder = tmp_path / "exit@1-norm"
    saved = json.loads((folder / "card.json").read_text())["weights"]
    assert saved["bytes"] == (folder / "model.safetensors").stat().st_size and len(saved["sha256"]) == 64
    load_trained("exit@1-norm", stack)
    shutil.copyfile(tmp_path / "other" / "model.safetensors", folder / "model.safetensors")  # same shapes
    with pytest.raises(ValueError, match=r"drafter 'exit@1-norm': model.safetensors in .*exit@1-norm is not the "
                                         r"file its card describes .* different saves.*specviz train"):
        load_trained("exit@1-norm", stack)
    (folder / "card.json").write_text(json.dumps({**card, "weights": None}))  # a card from before `weights`
    whole = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=r"model.safetensors does not read .*git checkout -- data/drafts/exit@1-norm"):
        load_trained("exit@1-norm", stack)
    (folder / "card.json").write_text(json.dumps(card)[:30])
    with pytest.raises(ValueError, match=r"drafter 'exit@1-norm': .*card.json does not read"):
        load_trained("exit@1-norm", stack)
    assert "exit@1-norm" not in drafters_for("exit") and "other" in drafters_for("exit")
    assert len([r for r in reports(caplog) if "exit@1-norm" in r]) == 1
