"""Prompt files in Spec-Bench's JSON-lines format: ``question_id``, ``category``, ``turns``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PROMPTS = Path(__file__).resolve().parent.parent / "data" / "prompts.jsonl"


@dataclass
class Prompt:
    question_id: int | str
    category: str
    turns: list[str]


def load_prompts(path: str | Path = DEFAULT_PROMPTS) -> list[Prompt]:
    path = Path(path)
    if not path.exists():
        raise ValueError(f"prompts file {path} does not exist")
    prompts = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            prompt = Prompt(record["question_id"], record["category"], list(record["turns"]))
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ValueError(f"{path}:{n}: not a Spec-Bench record with question_id, category, turns ({error})")
        if not prompt.turns or not all(isinstance(t, str) and t.strip() for t in prompt.turns):
            raise ValueError(f"{path}:{n}: turns must be a non-empty list of non-empty strings")
        prompts.append(prompt)
    if not prompts:
        raise ValueError(f"prompts file {path} holds no prompts")
    return prompts
