"""A distillation corpus built a chunk at a time: ten times the data without one ten-hour run.

Chunk k holds prompts k·P … (k+1)·P − 1 (written by the target, engines/training/prompt_synthesis.py)
and the target's answers to them in every mode. A chunk is rebuilt alone from (seed, k), so chunks can be
made on different days, on a CPU or a lent GPU, and a stopped chunk resumes: its prompts are kept once
written, its answers are appended batch by batch (engines/training/corpus.py) and only a finished chunk is
compressed to ``chunk-NNN.jsonl.gz``, whole or not at all (:mod:`engines.storage`). Readers (``read_corpus``)
take the folder and see every finished chunk; a chunk damaged since (cut short) is said once, set aside and
skipped, and the next run for it makes it again.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections import Counter
from pathlib import Path
from typing import Callable

from engines.storage import discard_damaged, write_lines_atomic
from engines.training.corpus import Mode, build_corpus, whole_records
from engines.training.prompt_synthesis import synthesize

CHUNK = "chunk-{:03d}"


def chunk_path(folder: Path, k: int) -> Path:
    return folder / f"{CHUNK.format(k)}.jsonl.gz"


def read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as source:
        return [json.loads(line) for line in source if line.strip()]


def read_chunk(path: Path, what: str = "corpus chunk") -> list[dict] | None:
    """The records of a compressed chunk (or its prompts), or ``None`` where there is none or it is damaged
    (cut short, not gzip, a line that is not JSON): then it is said once by name and set aside, so the next
    ``specviz corpus`` run makes it again and readers go on without it."""
    if not path.exists():
        return None
    try:
        return read_jsonl_gz(path)
    except (OSError, EOFError, zlib.error, ValueError) as error:  # BadGzipFile is an OSError, bad JSON a ValueError
        discard_damaged(path, f"the {what}", f"{type(error).__name__}: {error}",
                        then="the next `specviz corpus` run for it makes it again")
        return None


def finished_chunks(folder: Path) -> list[Path]:
    return sorted(Path(folder).glob("chunk-[0-9][0-9][0-9].jsonl.gz"))


def build_chunk(engine, folder: Path, k: int, prompts_per_chunk: int, modes: list[Mode], topics: list[str],
                seed: int = 0, batch_size: int = 64, max_new_tokens: int = 160,
                check: Callable[[list[dict]], None] | None = None, progress: bool = True,
                translations: dict[str, list[str]] | None = None, max_batch_tokens: int | None = None) -> Path:
    """Make chunk ``k`` unless it is finished; ``check`` vets the prompts (e.g. no evaluation prompt)."""
    return build_chunks(engine, folder, [k], prompts_per_chunk, modes, topics, seed, batch_size, max_new_tokens,
                        check, progress, translations, max_batch_tokens)[0]


def build_chunks(engine, folder: Path, ks: list[int], prompts_per_chunk: int, modes: list[Mode], topics: list[str],
                 seed: int = 0, batch_size: int = 64, max_new_tokens: int = 160,
                 check: Callable[[list[dict]], None] | None = None, progress: bool = True,
                 translations: dict[str, list[str]] | None = None,
                 max_batch_tokens: int | None = None) -> list[Path]:
    """Make chunks ``ks`` together: their prompts are written in shared batches and their answers too, so a
    GPU's batch of a thousand rows is full, while each chunk keeps its own prompt file and partial answers
    and is finished (compressed) on its own. Chunk k's prompts are prompts k·P … (k+1)·P − 1 either way."""
    if prompts_per_chunk < 1 or not ks or min(ks) < 0:
        raise ValueError(f"prompts_per_chunk must be >= 1 and chunks >= 0, got {prompts_per_chunk} and {ks}")
    folder.mkdir(parents=True, exist_ok=True)
    todo = [k for k in ks if read_chunk(chunk_path(folder, k)) is None]  # missing, or damaged and set aside
    prompts_file = {k: folder / f"{CHUNK.format(k)}.prompts.jsonl.gz" for k in todo}
    prompts_of = {k: read_chunk(prompts_file[k], "prompts of a corpus chunk") for k in todo}
    unwritten = [k for k in todo if prompts_of[k] is None]
    if unwritten:
        indices = [i for k in unwritten for i in range(k * prompts_per_chunk, (k + 1) * prompts_per_chunk)]
        written = synthesize(engine, indices, topics, seed, batch_size, translations)
        if check is not None:
            check(written)
        for k in unwritten:
            prompts_of[k] = [p for p in written if prompt_index(p) // prompts_per_chunk == k]
            write_lines_atomic(prompts_file[k], (json.dumps(p) for p in prompts_of[k]))
    _answer_chunks(engine, folder, todo, prompts_of, modes, seed, batch_size, max_new_tokens, progress,
                   max_batch_tokens)
    return [chunk_path(folder, k) for k in ks]


def _answer_chunks(engine, folder: Path, todo: list[int], prompts_of: dict[int, list[dict]], modes: list[Mode],
                   seed: int, batch_size: int, max_new_tokens: int, progress: bool,
                   max_batch_tokens: int | None) -> None:
    """The target's answers to chunks ``todo``'s written prompts, appended per chunk (resumable), then each chunk
    compressed whole: the one path every prompt goes through, whoever wrote it."""
    chunk_of = {p["question_id"]: k for k in todo for p in prompts_of[k]}
    prompts = [p for k in todo for p in prompts_of[k]]
    partial = {k: folder / f"{CHUNK.format(k)}.partial.jsonl" for k in todo}
    if prompts:
        build_corpus(engine, prompts, partial[todo[0]], modes, max_new_tokens, batch_size,
                     seed + 104_729 * todo[0], progress, route=lambda p: partial[chunk_of[p["question_id"]]],
                     max_batch_tokens=max_batch_tokens)
    for k in todo:  # build_corpus left each partial file whole, line by line
        records = whole_records(partial[k])[0] if partial[k].exists() else []
        write_lines_atomic(chunk_path(folder, k), (json.dumps(record) for record in records))
        partial[k].unlink(missing_ok=True)


def build_prompt_chunks(engine, folder: Path, ks: list[int], prompts: list[dict], prompts_per_chunk: int,
                        modes: list[Mode], seed: int = 0, batch_size: int = 64, max_new_tokens: int = 160,
                        check: Callable[[list[dict]], None] | None = None, progress: bool = True,
                        max_batch_tokens: int | None = None) -> list[Path]:
    """Chunks of prompts someone else wrote (people: engines/training/human_prompts.py): chunk k holds
    ``prompts[k·P:(k+1)·P]`` and the target's answers in every mode, made, resumed and finished exactly as the
    target-written chunks are. A chunk's prompts are written once, so it stays what it was if the list grows."""
    if prompts_per_chunk < 1 or not ks or min(ks) < 0:
        raise ValueError(f"prompts_per_chunk must be >= 1 and chunks >= 0, got {prompts_per_chunk} and {ks}")
    if max(ks) * prompts_per_chunk >= len(prompts):
        raise ValueError(f"chunks must lie within the {len(prompts)} prompts ({-(-len(prompts) // prompts_per_chunk)} "
                         f"chunks of {prompts_per_chunk}), got {ks}")
    folder.mkdir(parents=True, exist_ok=True)
    todo = [k for k in ks if read_chunk(chunk_path(folder, k)) is None]
    prompts_of = {}
    for k in todo:
        prompts_file = folder / f"{CHUNK.format(k)}.prompts.jsonl.gz"
        prompts_of[k] = read_chunk(prompts_file, "prompts of a corpus chunk")
        if prompts_of[k] is None:
            prompts_of[k] = prompts[k * prompts_per_chunk:(k + 1) * prompts_per_chunk]
            if check is not None:
                check(prompts_of[k])
            write_lines_atomic(prompts_file, (json.dumps(p) for p in prompts_of[k]))
    _answer_chunks(engine, folder, todo, prompts_of, modes, seed, batch_size, max_new_tokens, progress,
                   max_batch_tokens)
    return [chunk_path(folder, k) for k in ks]


def prompt_index(prompt: dict) -> int:
    """The synthesis index of a written prompt (question id ``s-NNNNNN``)."""
    return int(prompt["question_id"].removeprefix("s-"))


def summary(folder: Path) -> dict:
    """Size and make-up of the finished chunks (docs/training.md's table)."""
    records = prompts = tokens = chunks = 0
    by_category: Counter = Counter()
    by_mode: Counter = Counter()
    for path in finished_chunks(folder):
        chunk = read_chunk(path)
        if chunk is None:
            continue
        chunks += 1
        for record in chunk:
            n = len(record["answer_ids"])
            records += 1
            tokens += n
            by_category[record["category"]] += n
            by_mode[record["mode"]] += n
        prompts_file = path.with_name(path.name.replace(".jsonl.gz", ".prompts.jsonl.gz"))
        prompts += len(read_chunk(prompts_file, "prompts of a corpus chunk") or [])
    return {"chunks": chunks, "prompts": prompts, "answers": records, "answer_tokens": tokens,
            "tokens_by_category": dict(by_category), "tokens_by_mode": dict(by_mode)}
