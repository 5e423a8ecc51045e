"""How many tokens a unit of verification commits, for the model-free drafters' ways of sizing a draft: one table.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/draft_cut_replay.py [--dtype bfloat16] [--limit 36]

Why a replay and not a bench: under greedy decoding every lossless method commits ``ar``'s answer, so once that
answer is known, what a drafter would propose at every position, and how much of it the target would accept, is
known too, with no model call. The script decodes each turn of ``data/prompts.jsonl`` once with ``ar``, then
walks each answer round by round under each policy: a round that verifies k drafted tokens commits the accepted
prefix plus one and costs t(k + 1) ÷ t(1) from this machine's verify-cost curve (``specviz verify-cost``; the
cached curve when there is one). The figure is tokens per unit of verification, the speedup a run would show if
drafting and Python cost nothing (the suffix drafter's c is 0.01–0.02 in a bench). Policies:

- ``γ = g``: a fixed length (``sps``'s default is 5, ``pld``'s 10);
- ``one α``: ``gamma=auto`` with one acceptance estimate for all tokens (:meth:`DraftLength.choose`);
- ``evidence``: ``gamma=auto`` as it runs now, each token judged by its kind of match (:meth:`DraftLength.cut`);
- ``oracle``: exactly the tokens that will be accepted, the bound of any cut of these drafts.

The suffix drafter's corpus holds the answers of the turns replayed before (as a bench's run of ``ar`` leaves it),
never the answer of the prompt being replayed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from engines.core.draft_length import DraftLength  # noqa: E402
from engines.drafters.prompt_lookup import PromptLookupDrafter  # noqa: E402
from engines.drafters.suffix import SuffixCorpus, SuffixDrafter, evidence  # noqa: E402
from engines.engine import Engine  # noqa: E402
from specviz.prompts import load_prompts  # noqa: E402

LONGEST = 16  # what gamma=auto may propose (DraftLength's max_gamma)


def answers(engine: Engine, limit: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, ar's answer) for every turn of the first ``limit`` prompts, later turns after earlier answers."""
    turns = []
    for prompt in load_prompts()[:limit]:
        messages = []
        for turn in prompt.turns:
            messages.append({"role": "user", "content": turn})
            answer = engine.run(list(messages), "ar", max_new_tokens=128).token_ids
            turns.append((engine.encode(list(messages)), answer))
            messages.append({"role": "assistant", "content": engine.detokenize(answer)})
    return turns


def proposals(turns, drafter: str) -> list[list[tuple[list, int]]]:
    """Per turn, per position of the answer: the longest draft's evidence and how many of its tokens ar's answer
    accepts there."""
    corpus, replayed = SuffixCorpus(), []
    for prompt, answer in turns:
        suffix, lookup = SuffixDrafter(corpus=corpus), PromptLookupDrafter()
        suffix.begin(prompt)
        positions = []
        for at in range(len(answer)):
            context = prompt + answer[:at]
            draft = (suffix if drafter == "suffix" else lookup).propose(context, LONGEST, None)
            tokens, kinds = draft.tokens, draft.evidence or []
            accepted = 0
            while accepted < len(tokens) and at + accepted < len(answer) and tokens[accepted] == answer[at + accepted]:
                accepted += 1
            positions.append((kinds, accepted))
        replayed.append(positions)
        corpus.add(prompt, answer)
    return replayed


def replay(replayed, cost, choose, learn=None) -> float:
    """Tokens committed per unit of verification when each round verifies ``choose(evidence)`` tokens."""
    tokens = spent = 0.0
    for positions in replayed:
        at = 0
        while at < len(positions):
            kinds, right = positions[at]
            k = min(choose(kinds, right), len(kinds), len(positions) - at - 1)
            accepted = min(right, k)
            if learn:
                learn(kinds[:k], accepted)
            tokens += accepted + 1
            spent += cost(k + 1)
            at += accepted + 1
    return tokens / spent


def table(replayed, cost, fixed: list[int]) -> dict[str, float]:
    rows = {f"γ = {g}": replay(replayed, cost, lambda kinds, right, g=g: g) for g in fixed}
    one = DraftLength(cost, LONGEST)
    rows["one α"] = replay(replayed, cost, lambda kinds, right: one.choose(LONGEST),
                           lambda kinds, accepted: one.update(len(kinds), accepted, 0.0))
    cut = DraftLength(cost, LONGEST)
    rows["evidence"] = replay(replayed, cost, lambda kinds, right: cut.cut(kinds),
                              lambda kinds, accepted: cut.update(len(kinds), accepted, 0.0, kinds))
    rows["oracle"] = replay(replayed, cost, lambda kinds, right: right)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--limit", type=int, default=36, help="prompts of data/prompts.jsonl (all 36 by default)")
    args = parser.parse_args()
    if args.limit < 1:
        parser.error(f"--limit must be at least 1 (prompts to replay), got {args.limit}")
    engine = Engine.load(dtype=args.dtype)
    curve = engine.verify_cost()
    one_step = curve.cost(1)
    cost = lambda n: curve.cost(n) / one_step  # noqa: E731
    print(f"{engine.step_description}; curve t(n)/t(1): "
          + " ".join(f"{n}:{cost(n):.2f}" for n in (2, 3, 4, 6, 8, 12, 16)))
    turns = answers(engine, args.limit)
    print(f"{len(turns)} turns replayed")
    for drafter, fixed in (("suffix", [1, 2, 3, 5]), ("lookup", [1, 2, 3, 10])):
        rows = table(proposals(turns, drafter), cost, fixed)
        print(f"{drafter}: " + " · ".join(f"{name} {value:.3f}" for name, value in rows.items()))


if __name__ == "__main__":
    main()
