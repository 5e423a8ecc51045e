"""Training prompts written by the target itself, so the distillation corpus can grow past its seed material.

The hand-written seeds (data/distill/seeds.json) give 960 prompts before they repeat; drafters learn from
the target's answers, and ten times the answers need ten times the questions. Here the target writes the
material: a question about a topic, a short article to summarise, two passages and a question about them
(RAG), a word problem. A two-turn chat adds a fixed follow-up; translation takes the seeds' source texts.
Each is sampled from an instruction that names the topic, so the same topic yields new material every time. The material is sampled at T = 0.7 within the top 0.9 of the probability: at T = 1 over
the whole vocabulary a 135M model writes word salad, and a drafter learns nothing useful from the target's
answers to word salad. Topics are the seeds' subjects and scenes; no evaluation prompt (data/prompts.jsonl)
is used, and :func:`specviz.distill_prompts.check_no_overlap` rejects any accidental copy.

Everything is deterministic for a (seed, index): prompt ``i`` draws its category, topic and phrasing from
``random.Random(f"{seed}/{i}")`` and its sampled text from a generator seeded the same way per batch, so a
chunk of prompts can be rebuilt alone (engines/training/corpus_chunks.py).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Sequence

import torch

CATEGORIES = ("multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag")
# Translation prompts take their source text from the hand-written seeds (data/distill/seeds.json): a 135M
# model writes no usable French, German or Spanish of its own, so its "sources" would be word salad.

WRITE = {
    "qa": ("Write one question a curious person might ask about {topic}. Reply with the question only.",),
    "multi_turn": ("Write one question someone might ask a helpful assistant about {topic}. Reply with the "
                   "question only.",),
    "summarization": ("Write a short news article (about 100 words) about {topic}.",
                      "Write a short explanatory article (about 100 words) about {topic}."),
    "math_reasoning": ("Write a short math word problem about {topic} that uses whole numbers. Reply with the "
                       "problem only, without the answer.",),
    "rag": ("Write two short factual paragraphs about {topic}, then one question that the paragraphs answer. "
            "Label them Paragraph 1:, Paragraph 2: and Question:.",),
}
FOLLOW_UPS = ("Can you give me an example?", "Can you explain that more simply?", "Why is that important?",
              "What is a common misconception about this?", "Can you summarize that in one sentence?",
              "How would you explain this to a child?", "What should I read next to learn more?")
FRAMES = {
    "qa": ("{text}", "Answer the following question concisely: {text}", "{text} Please explain briefly."),
    "summarization": ("Summarize the following article in two sentences:\n\n{text}",
                      "Give a brief summary, under 50 words, of the following text:\n\n{text}",
                      "Article:\n{text}\n\nWrite a short summary of the article above."),
    "translation": ("Translate the following {language} text to English: {text}",
                    "Please translate the {language} below into natural, fluent English.\n\n{text}"),
    "math_reasoning": ("{text}\nShow your working and give the final answer on its own line.",
                       "Work through this word problem carefully, one step at a time:\n\n{text}"),
    "rag": ("Answer the question using only the passages below.\n\n{passages}\n\nQuestion: {question}",
            "Context:\n{passages}\n\nQuestion: {question}\nAnswer briefly."),
}
# An angle per prompt multiplies the seeds' 120 topics into 1,200 distinct subjects.
ANGLES = ("{t}", "the history of {t}", "common myths about {t}", "how {t} works", "{t} in everyday life",
          "the future of {t}", "{t} for beginners", "surprising facts about {t}", "{t} around the world",
          "mistakes people make with {t}")
MAX_TEXT_CHARS = 1200  # about 300 tokens: long prompts would crowd out the answers the drafters learn from


@dataclass(frozen=True)
class Plan:
    """What prompt ``index`` will be, before the target writes its material."""

    index: int
    category: str
    topic: str
    language: str
    write: str  # the instruction the target answers (translation: the seed source text itself)
    frame: int
    follow_up: str


def plan(index: int, topics: list[str], seed: int, translations: dict[str, list[str]] | None = None) -> Plan:
    if not topics:
        raise ValueError("topics must not be empty")
    rng = random.Random(f"{seed}/{index}")
    category = CATEGORIES[index % len(CATEGORIES)]
    topic = rng.choice(ANGLES).format(t=rng.choice(topics))
    language = rng.choice(sorted(translations)) if translations else ""
    if category == "translation":
        if not translations:
            raise ValueError("translations must name at least one language with source texts")
        write = rng.choice(translations[language])  # the source itself: nothing for the target to write
    else:
        write = rng.choice(WRITE[category]).format(topic=topic)
    return Plan(index, category, topic, language, write, rng.randrange(6), rng.choice(FOLLOW_UPS))


def _clean(text: str) -> str:
    text = text.strip().strip('"').strip()
    return text[:MAX_TEXT_CHARS].rsplit(" ", 1)[0] if len(text) > MAX_TEXT_CHARS else text


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0].strip('"') if lines else ""


def _rag_parts(text: str) -> tuple[list[str], str] | None:
    pieces = re.split(r"(?:Paragraph\s*\d\s*:|Question\s*:)", text)
    pieces = [p.strip() for p in pieces if p.strip()]
    return (pieces[:-1], pieces[-1]) if len(pieces) >= 3 else None


def compose(p: Plan, written: str) -> dict | None:
    """The Spec-Bench-format prompt from the target's text, or None when the text is unusable (empty, cut)."""
    written = _clean(written)
    words = written.split()
    if len(written) < 12 or len(set(words)) < 0.5 * len(words):  # too short, or looping on itself
        return None
    frames = FRAMES.get(p.category, ("{text}",))
    frame = frames[p.frame % len(frames)]
    if p.category in ("qa", "multi_turn"):
        question = _first_line(written)
        if not question.endswith("?") or len(question) < 12:
            return None
        turns = [frame.format(text=question)] if p.category == "qa" else [question, p.follow_up]
    elif p.category == "rag":
        parts = _rag_parts(written)
        if parts is None:
            return None
        passages, question = parts
        block = "\n\n".join(f"Passage {n}: {text}" for n, text in enumerate(passages, 1))
        turns = [frame.format(passages=block, question=_first_line(question))]
    else:
        turns = [frame.format(text=written, language=p.language)]
    return {"question_id": f"s-{p.index:06d}", "category": p.category, "turns": turns, "topic": p.topic,
            "written_by": "target"}


MATERIAL_TEMPERATURE, MATERIAL_TOP_P = 0.7, 0.9


def write_material(engine, plans: list[Plan], seed: int, batch_size: int = 64, max_new_tokens: int = 160) -> list[str]:
    """The target's sampled text for each plan's instruction, batch by batch."""
    from engines.training.corpus import Mode, _generate_batch

    eos_id = min(engine.eos_ids)
    texts: list[str] = []
    for start in range(0, len(plans), batch_size):
        batch = plans[start:start + batch_size]
        ids = [engine.encode([{"role": "user", "content": p.write}]) for p in batch]
        answers = _generate_batch(engine.model, ids, max_new_tokens, Mode("sample", MATERIAL_TEMPERATURE),
                                  seed * 1_000_003 + batch[0].index, eos_id, top_p=MATERIAL_TOP_P)
        texts += [engine.detokenize([t for t in a if t != eos_id]) for a in answers]
    return texts


def synthesize(engine, indices: Sequence[int], topics: list[str], seed: int, batch_size: int = 64,
               translations: dict[str, list[str]] | None = None) -> list[dict]:
    """Prompts for ``indices`` (those whose material came out unusable are skipped, deterministically)."""
    plans = [plan(i, topics, seed, translations) for i in indices]
    written = [p for p in plans if p.category != "translation"]
    with torch.inference_mode():
        texts = dict(zip((p.index for p in written), write_material(engine, written, seed, batch_size)))
    return [prompt for p in plans
            if (prompt := compose(p, p.write if p.category == "translation" else texts[p.index])) is not None]


def seed_topics(seeds: dict) -> list[str]:
    """Every subject and scene the hand-written seeds name (multi_turn.topics), in a stable order."""
    topics = seeds["multi_turn"]["topics"]
    found: list[str] = []
    for group in topics.values():
        for items in (group.values() if isinstance(group, dict) else [group]):
            found += [t for t in items if isinstance(t, str)]
    return list(dict.fromkeys(found))
