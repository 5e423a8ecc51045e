"""The chunked distillation corpus: prompts the target writes, chunk files, resumable reading (no model)."""

from __future__ import annotations

import json

import pytest

from engines.training.corpus import read_corpus
from engines.storage import write_lines_atomic
from engines.training.corpus_chunks import chunk_path, read_jsonl_gz, summary
from engines.training.prompt_synthesis import CATEGORIES, compose, plan
from specviz.cli import parse_chunks

TOPICS = ["volcanoes", "the water cycle", "a rainy market"]
SOURCES = {"French": ["Il pleut sur la ville depuis ce matin."], "German": ["Morgen fahre ich mit dem Rad."]}


def test_a_prompt_is_planned_from_its_seed_and_index_alone():
    assert plan(7, TOPICS, seed=1, translations=SOURCES) == plan(7, TOPICS, seed=1, translations=SOURCES)
    assert [plan(i, TOPICS, 0, SOURCES).category for i in range(6)] == list(CATEGORIES)
    assert plan(1, TOPICS, 0, SOURCES).write in [t for texts in SOURCES.values() for t in texts]
    with pytest.raises(ValueError, match="translations"):
        plan(1, TOPICS, 0)  # a translation prompt needs source texts
    assert len({plan(i, TOPICS, 0, SOURCES).topic for i in range(60)}) > len(TOPICS)  # angles multiply the topics
    with pytest.raises(ValueError, match="topics"):
        plan(0, [], 0)


@pytest.mark.parametrize("category, written, usable", [
    ("qa", "Why do volcanoes erupt so violently?\nSome more text", True),
    ("qa", "Volcanoes are mountains.", False),  # not a question
    ("multi_turn", "How does the water cycle start?", True),
    ("rag", "Paragraph 1: Volcanoes form at plate edges.\nParagraph 2: Lava cools into rock.\n"
            "Question: Where do volcanoes form?", True),
    ("rag", "Volcanoes form at plate edges.", False),
    ("summarization", "A new study of volcanoes found that eruptions can be predicted days ahead.", True),
    ("translation", "", False),
    ("summarization", "the the the the the the the the the the the the", False),  # looping on itself
])
def test_the_targets_text_becomes_a_prompt_or_is_skipped(category, written, usable):
    index = CATEGORIES.index(category)
    prompt = compose(plan(index, TOPICS, 0, SOURCES), written)
    assert (prompt is not None) == usable
    if usable:
        assert prompt["category"] == category and all(turn.strip() for turn in prompt["turns"])
        assert len(prompt["turns"]) == (2 if category == "multi_turn" else 1)


def test_chunks_parse_and_reject_nonsense():
    assert parse_chunks("3") == [3]
    assert parse_chunks("0-2,5") == [0, 1, 2, 5]
    for bad in ("", "a", "-1", "2-x"):
        with pytest.raises(ValueError, match="chunks"):
            parse_chunks(bad)


def test_a_folder_of_finished_chunks_reads_as_one_corpus(tmp_path):
    records = [{"id": f"s-{i:06d}", "category": "qa", "mode": "greedy", "turn": 0, "prompt_ids": [1, 2],
                "answer_ids": list(range(i + 1))} for i in range(4)]
    write_lines_atomic(chunk_path(tmp_path, 0), (json.dumps(r) for r in records[:2]))
    write_lines_atomic(chunk_path(tmp_path, 1), (json.dumps(r) for r in records[2:]))
    (tmp_path / "chunk-002.partial.jsonl").write_text(json.dumps(records[0]) + "\n")  # unfinished: not read
    assert read_corpus(tmp_path) == records
    assert read_corpus(chunk_path(tmp_path, 1)) == records[2:]  # one chunk alone: a slice of a folder in a mix
    made = summary(tmp_path)
    assert made["chunks"] == 2 and made["answers"] == 4 and made["answer_tokens"] == 1 + 2 + 3 + 4


class ByteTokenizer:
    """Bytes as tokens and 256 as EOS: enough tokenizer for a tiny random model to write and answer prompts."""

    eos_token_id = 256
    chat_template = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode()[:40])

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return bytes(i for i in ids if i < 256).decode(errors="replace")


def test_lengths_batch_within_rows_and_tokens():
    from engines.training.corpus import length_batches

    assert length_batches([10, 10, 20, 40], batch_size=3) == [(0, 3), (3, 4)]
    assert length_batches([10, 10, 20, 40], batch_size=4, max_tokens=40) == [(0, 2), (2, 3), (3, 4)]
    assert length_batches([100], batch_size=4, max_tokens=10) == [(0, 1)]  # too long: it still goes, alone
    with pytest.raises(ValueError, match="batch_size"):
        length_batches([1], batch_size=0)


def test_chunks_made_together_keep_their_own_prompts_answers_and_resume(tmp_path):
    """Two chunks written and answered in shared batches: each chunk file holds its own prompts' answers in
    every mode, and a chunk's partial answers from an earlier run are kept, not redone."""
    from engines import Engine
    from engines.training.corpus import Mode
    from engines.training.corpus_chunks import build_chunks, prompt_index
    from tests.conftest import tiny_llama

    engine = Engine(tiny_llama(vocab=257, layers=2, seed=1), tokenizer=ByteTokenizer())
    modes = [Mode("greedy", 0.0), Mode("sample", 0.8)]
    kept = {"id": "s-000001", "category": "translation", "mode": "greedy", "turn": 0, "temperature": 0.0,
            "seed": -1, "prompt_ids": [1], "answer_ids": [2, 256]}
    (tmp_path / "chunk-000.partial.jsonl").write_text(json.dumps(kept) + "\n")
    paths = build_chunks(engine, tmp_path, [0, 1], 12, modes, TOPICS, batch_size=8, max_new_tokens=6,
                         progress=False, translations=SOURCES, max_batch_tokens=64)
    assert [p.name for p in paths] == ["chunk-000.jsonl.gz", "chunk-001.jsonl.gz"]
    assert not list(tmp_path.glob("*.partial.jsonl"))
    for k, path in enumerate(paths):
        prompts = read_jsonl_gz(tmp_path / f"chunk-{k:03d}.prompts.jsonl.gz")
        assert prompts and all(prompt_index(p) // 12 == k for p in prompts)
        records = read_jsonl_gz(path)
        assert {(r["id"], r["mode"]) for r in records} == {(p["question_id"], m.key) for p in prompts for m in modes}
    assert kept in read_jsonl_gz(paths[0])  # the earlier run's answer survives
