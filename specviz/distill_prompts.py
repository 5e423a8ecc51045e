"""Training prompts for self-distillation of draft models, kept apart from the evaluation prompts.

Drafters learn from the target's answers to these prompts, so they should cover the same six Spec-Bench
groups as ``data/prompts.jsonl`` (multi-turn chat, translation, summarization, QA, math reasoning, RAG)
without containing any evaluation prompt: a drafter trained on the benchmark's own prompts would make
the measured acceptance rates look better than they are.

The prompts are composed from original seed material in ``data/distill/seeds.json`` (topics, source
texts, articles, questions, math templates, passages) combined with several instruction phrasings per
category, so one seed yields several distinct prompts. Everything is deterministic for a given seed
and uses only the standard library. The output has Spec-Bench's JSON-lines format (``question_id``,
``category``, ``turns``) so the same loaders and the distillation corpus builder read it unchanged.

    python -m specviz.distill_prompts --out data/distill/prompts.jsonl
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import random
from collections import Counter
from pathlib import Path
from typing import Any, Hashable, Iterable, Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SEEDS = ROOT / "data" / "distill" / "seeds.json"
DEFAULT_EVAL = ROOT / "data" / "prompts.jsonl"

CATEGORIES = ("multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag")
ID_PREFIX = {"multi_turn": "mt", "translation": "tr", "summarization": "sum", "qa": "qa",
             "math_reasoning": "math", "rag": "rag"}

# About 350 SmolLM2 tokens: long prompts would crowd out the answer tokens the drafters learn from.
MAX_PROMPT_CHARS = 1400

# Several phrasings per category, so drafters do not overfit to one instruction wording.
TRANSLATION_TEMPLATES = (
    "Translate the following {language} text to English: {text}",
    "Translate this {language} passage into English:\n\n{text}",
    "Please translate the {language} below into natural, fluent English.\n\n{text}",
    "What does this {language} text say? Give an accurate English translation.\n\n{text}",
    "Translate from {language} to English, keeping the original tone: {text}",
    "{language}: {text}\nEnglish:",
)
SUMMARY_TEMPLATES = (
    "Summarize the following article in two sentences:\n\n{text}",
    "Summarize the following article in one sentence:\n\n{text}",
    "Read the article below and list its three main points as bullet points.\n\n{text}",
    "Write a headline and a one-sentence summary for this article:\n\n{text}",
    "Give a brief summary, under 50 words, of the following text:\n\n{text}",
    "Explain the main idea of this article to a twelve-year-old in a few sentences.\n\n{text}",
    "Article:\n{text}\n\nWrite a short summary of the article above.",
)
QA_TEMPLATES = (
    "{question}",
    "Answer the following question concisely: {question}",
    "Question: {question}\nAnswer in two or three sentences.",
    "{question} Please explain briefly.",
    "Give a clear, short answer: {question}",
)
QA_TOPIC_TEMPLATES = (
    "Explain {topic} in simple terms.",
    "What is the most important thing a beginner should understand about {topic}?",
    "Tell me three interesting things about {topic}.",
    "Why do people care about {topic}? Answer in a short paragraph.",
)
QA_TOPIC_EVERY = 4  # every fourth qa prompt is about a topic; the rest are the curated questions
MATH_TEMPLATES = (
    "Here is a word problem. Think it through in order and end with the answer.\n\n{problem}",
    "{problem}\nShow your working and give the final answer on its own line.",
    "Work through this word problem carefully, one step at a time:\n\n{problem}",
    "Math problem: {problem}\nExplain your reasoning before giving the answer.",
    "{problem}",
    "Solve this and explain each step briefly: {problem}",
)
# (whole prompt, one passage): the passage label style varies along with the instruction.
RAG_TEMPLATES = (
    ("Answer the question using only the passages below.\n\n{passages}\n\nQuestion: {question}", "Passage {n}: {text}"),
    ("Read the passages and answer the question. Base your answer only on what the passages say.\n\n"
     "{passages}\n\nQuestion: {question}", "Passage {n}: {text}"),
    ("{passages}\n\nUsing only the information above, answer this question: {question}", "[{n}] {text}"),
    ("Context:\n{passages}\n\nQuestion: {question}\nAnswer briefly and name the documents you used.",
     "Document {n}: {text}"),
    ("Here are some notes.\n\n{passages}\n\n{question} Answer in a few sentences, using the notes above.",
     "Note {n}: {text}"),
)


def load_seeds(path: str | Path = DEFAULT_SEEDS) -> dict:
    """Read seeds.json; a missing category fails here rather than as an obscure KeyError later."""
    seeds = json.loads(Path(path).read_text())
    missing = [c for c in CATEGORIES if c not in seeds]
    if missing:
        raise ValueError(f"{path}: seeds lack categories {missing}")
    return seeds


def build_prompts(n_per_category: int = 100, seed: int = 0, seeds_path: str | Path = DEFAULT_SEEDS) -> list[dict]:
    """Compose ``n_per_category`` prompts for each of the six categories, in Spec-Bench format.

    Each category draws from its own ``random.Random`` (derived from ``seed`` and the category name), so
    changing one category's seeds or count does not reshuffle the others. Prompts are unique (by their
    first turn, after whitespace/case normalisation) and at most ``MAX_PROMPT_CHARS`` per turn; a
    ValueError says so if the seeds cannot supply that many.
    """
    if n_per_category < 1:
        raise ValueError("n_per_category must be at least 1")
    seeds = load_seeds(seeds_path)
    builders = {"multi_turn": _multi_turn, "translation": _translation, "summarization": _summarization,
                "qa": _qa, "math_reasoning": _math, "rag": _rag}
    seen: set[str] = set()
    prompts = []
    for category in CATEGORIES:
        rng = random.Random(f"{seed}/{category}")
        candidates = builders[category](seeds[category], rng, n_per_category, seeds)
        for number, turns in enumerate(_collect(candidates, n_per_category, category, seen), 1):
            prompts.append({"question_id": f"d-{ID_PREFIX[category]}-{number:04d}", "category": category,
                            "turns": turns})
    return prompts


def check_no_overlap(prompts: Iterable[dict], eval_path: str | Path = DEFAULT_EVAL) -> None:
    """Raise ValueError if any prompt turn equals, contains or is contained in an evaluation turn.

    Comparison is after lower-casing and collapsing whitespace, so trivial reformatting of an evaluation
    prompt cannot slip into the training set.
    """
    eval_turns = []
    for line in Path(eval_path).read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            eval_turns += [(record["question_id"], _normalise(turn)) for turn in record["turns"]]
    clashes = []
    for prompt in prompts:
        for turn in prompt["turns"]:
            text = _normalise(turn)
            clashes += [(prompt["question_id"], qid) for qid, other in eval_turns if other in text or text in other]
    if clashes:
        shown = ", ".join(f"{mine} vs eval {theirs}" for mine, theirs in clashes[:10])
        raise ValueError(f"{len(clashes)} training turn(s) overlap evaluation prompts: {shown}")


def write_prompts(path: str | Path, prompts: Iterable[dict]) -> Path:
    """Write prompts as JSON lines (one Spec-Bench record per line), creating the folder if needed."""
    from engines.storage import write_lines_atomic  # here: the rest of this module needs no engine (no torch)

    return write_lines_atomic(path, (json.dumps(p, ensure_ascii=False) for p in prompts))


# --- shared helpers ---------------------------------------------------------------------------------

def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


def _spread(rng: random.Random, options: Sequence[tuple[Any, Sequence[Hashable]]]) -> Iterator[tuple[Any, Hashable]]:
    """Yield (item, variant) pairs that cover the seeds evenly.

    Items are visited round-robin in a shuffled order, so every seed is used once before any is used
    twice; each takes the least-used variant (template or topic) it has not been paired with yet, ties
    broken at random, so the phrasings are spread evenly too. Ends when every pair has been yielded.
    """
    order = list(range(len(options)))
    rng.shuffle(order)
    left = {i: list(options[i][1]) for i in order}
    uses: Counter = Counter()
    while any(left.values()):
        for i in order:
            if not left[i]:
                continue
            rng.shuffle(left[i])
            pick = min(left[i], key=lambda v: uses[v])
            left[i].remove(pick)
            uses[pick] += 1
            yield options[i][0], pick


def _collect(candidates: Iterable[list[str]], n: int, category: str, seen: set[str]) -> list[list[str]]:
    """Take the first ``n`` candidates whose turns fit the length limit and whose first turn is new."""
    taken = []
    for turns in candidates:
        key = _normalise(turns[0])
        if key in seen or any(len(turn) > MAX_PROMPT_CHARS for turn in turns):
            continue
        seen.add(key)
        taken.append(turns)
        if len(taken) == n:
            return taken
    raise ValueError(f"{category}: the seeds give only {len(taken)} distinct prompts, {n} were asked for")


# --- one builder per category: each yields candidate turn lists, best-spread first ------------------

def _multi_turn(section: dict, rng: random.Random, n: int, seeds: dict) -> Iterator[list[str]]:
    """A first turn about a topic, then a follow-up that refers back to the answer (as Spec-Bench's do)."""
    subjects = [t for group in section["topics"]["subjects"].values() for t in group]
    scenes = [t for group in section["topics"]["scenes"].values() for t in group]
    options = [(pair, subjects + scenes if pair["kind"] == "any" else subjects) for pair in section["pairs"]]
    for pair, topic in _spread(rng, options):
        yield [pair["first"].format(topic=topic), pair["follow_up"]]


def _translation(section: dict, rng: random.Random, n: int, seeds: dict) -> Iterator[list[str]]:
    """Source text in German, French or Spanish, to be translated into English."""
    options = [((language, text), TRANSLATION_TEMPLATES)
               for language, texts in section["sources"].items() for text in texts]
    for (language, text), template in _spread(rng, options):
        yield [template.format(language=language, text=text)]


def _summarization(section: dict, rng: random.Random, n: int, seeds: dict) -> Iterator[list[str]]:
    """An article under one of several summary instructions (length, bullets, headline, audience)."""
    options = [(article["text"], SUMMARY_TEMPLATES) for article in section["articles"]]
    for text, template in _spread(rng, options):
        yield [template.format(text=text)]


def _qa(section: dict, rng: random.Random, n: int, seeds: dict) -> Iterator[list[str]]:
    """Mostly the curated questions; a share of open explanatory questions about subject topics."""
    questions = _spread(rng, [(q, QA_TEMPLATES) for q in section["questions"]])
    subjects = [t for group in seeds["multi_turn"]["topics"]["subjects"].values() for t in group]
    topical = _spread(rng, [(t, QA_TOPIC_TEMPLATES) for t in subjects])
    count = 0
    while True:
        use_topic = count % QA_TOPIC_EVERY == QA_TOPIC_EVERY - 1
        source, fallback = (topical, questions) if use_topic else (questions, topical)
        pick = next(source, None) or next(fallback, None)
        if pick is None:
            return
        item, template = pick
        yield [template.format(question=item, topic=item)]
        count += 1


def _math(section: dict, rng: random.Random, n: int, seeds: dict) -> Iterator[list[str]]:
    """Word problems instantiated with fresh numbers, cycling through the templates."""
    templates = list(section["templates"])
    rng.shuffle(templates)
    for _ in range(50 * n):  # plenty of draws; duplicates are dropped by _collect
        for template in templates:
            values = {name: _draw(rng, spec) for name, spec in template["slots"].items()}
            for name, expression in template.get("derived", {}).items():
                values[name] = _evaluate(expression, values)
            problem = template["text"].format(**values)
            yield [rng.choice(MATH_TEMPLATES).format(problem=problem)]


def _rag(section: dict, rng: random.Random, n: int, seeds: dict) -> Iterator[list[str]]:
    """A question with its 2-3 related passages, shuffled so the answer is not always in passage 1."""
    options = [(item, range(len(RAG_TEMPLATES))) for item in section["items"]]
    for item, index in _spread(rng, options):
        template, label = RAG_TEMPLATES[index]
        passages = list(item["passages"])
        rng.shuffle(passages)
        block = "\n\n".join(label.format(n=k, text=text) for k, text in enumerate(passages, 1))
        yield [template.format(passages=block, question=item["question"])]


def _draw(rng: random.Random, spec: list | dict) -> int:
    """One slot value: ``[lo, hi]`` inclusive, ``{"min", "max", "step"}`` or ``{"choices": [...]}``."""
    if isinstance(spec, list):
        return rng.randint(spec[0], spec[1])
    if "choices" in spec:
        return rng.choice(spec["choices"])
    return rng.randrange(spec["min"], spec["max"] + 1, spec.get("step", 1))


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _evaluate(expression: str, values: dict[str, int]) -> int:
    """Integer arithmetic (+, -, *) over slot names, without eval(): seeds are data, not code."""
    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        raise ValueError(f"unsupported expression in math seed: {expression!r}")
    return walk(ast.parse(expression, mode="eval").body)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "data" / "distill" / "prompts.jsonl"))
    parser.add_argument("--n-per-category", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval", default=str(DEFAULT_EVAL), help="evaluation prompts that must not overlap")
    args = parser.parse_args(argv)
    prompts = build_prompts(args.n_per_category, args.seed)
    check_no_overlap(prompts, args.eval)
    path = write_prompts(args.out, prompts)
    counts = Counter(p["category"] for p in prompts)
    print(f"wrote {len(prompts)} prompts to {path}: " + ", ".join(f"{c} {counts[c]}" for c in CATEGORIES))


if __name__ == "__main__":
    main()
