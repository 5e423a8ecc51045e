"""Suffix drafting: a model-free drafter that copies what usually came next, from everything seen so far.

Prompt lookup (:mod:`engines.drafters.prompt_lookup`) copies the continuation of the *latest* earlier
occurrence of the last n-gram in the context. This drafter keeps a count instead (llama.cpp's
``common/ngram-cache``, SuffixDecoding's suffix tree): for every n-gram of orders ``min_ngram`` ..
``max_ngram`` it knows how often each token followed it, and where it was last seen, in

- the **prompt** and the **answer so far** — one live sequence, indexed incrementally as tokens are
  committed (a drafter only ever sees committed tokens, so drafts never feed back into the counts);
- a :class:`SuffixCorpus` of **earlier answers** of the same bench run or dashboard session, held by the
  :class:`~engines.engine.Engine` (every run's answer is added when it ends), never a global.

Each draft token comes from the longest n-gram ending the context that has a continuation seen at least
``min_count`` times, and is its most frequent continuation (ties: the live sequence, then the latest).
:meth:`SuffixDrafter.propose` makes a chain of those; :meth:`SuffixDrafter.propose_tree` a tree of the
``branching`` most frequent continuations at each node, grown best-first by the product of continuation
frequencies, as the tree program verifies it; :func:`graft` merges such a tree into a model's draft tree.

Every proposal is deterministic given the counts, so it is a point mass (q = δ) and the one acceptance rule
(:mod:`engines.core.acceptance`) keeps the target's distribution exactly; the frequencies only rank. Where
each token was found goes into the trace as a :class:`~engines.core.trace.SuffixMatch` event
(``specviz/views/suffix_match.py`` draws it).

Answers to the prompt being decoded are left out of the corpus by default (``corpus="others"``): in a bench
``ar`` answers each prompt first, and its answer would be an oracle for the same prompt's drafts.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import asdict, dataclass
from typing import Sequence

from engines.core.context import DecodeContext
from engines.core.draft_length import DraftLength, running_mean
from engines.core.draft_tree import DraftTreeNodes, TreeNode
from engines.core.options import require_choice, require_int
from engines.core.sampling import Sampler
from engines.core.trace import SuffixMatch
from engines.drafters.base import Draft, point_masses
from engines.model.kv_cache import KVCache

CORPUS_USES = ("others", "all", "none")  # earlier answers: to other prompts only, all of them, none
SOURCE = "suffix"  # the TreeNode source of a suffix node in a merged tree
MAX_CORPUS_DOCUMENTS = 256  # the oldest answers are forgotten beyond this (a long dashboard session)
# Grafted into a model's tree (eagle(merge_suffix=true)), the chain's length: it costs no model step, so it is
# not the tree's depth (docs/trees-and-cats.md, "The trees' shape, re-fitted": lengths 4–8 tie, 6 commits more)
SUFFIX_CHAIN_DEPTH = 6


@dataclass(frozen=True)
class SuffixConfig:
    """How the index matches and what it proposes. Validated on construction."""

    max_ngram: int = 4  # the longest n-gram matched (the first tried)
    min_ngram: int = 1  # the shortest tried before giving up
    min_count: int = 1  # a continuation must have followed its n-gram this often to be proposed
    branching: int = 3  # trees: continuations proposed per node
    max_nodes: int = 16  # trees: nodes per proposal
    corpus: str = "others"  # which earlier answers are indexed (CORPUS_USES)

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        require_int("max_ngram", self.max_ngram, 1, 16)
        require_int("min_ngram", self.min_ngram, 1, self.max_ngram)
        require_int("min_count", self.min_count, 1)
        require_int("branching", self.branching, 1, 16)
        require_int("max_nodes", self.max_nodes, 1, 60)
        require_choice("corpus", self.corpus, CORPUS_USES)


@dataclass(frozen=True)
class Match:
    """Where a proposed token was found: ``origin`` prompt | answer | corpus, ``position`` of the token there
    (in the live sequence, or in corpus ``document``), after an n-gram of ``length`` tokens that it followed
    ``count`` of ``total`` times."""

    origin: str
    position: int
    document: int
    length: int
    count: int
    total: int


class NgramTable:
    """n-gram → {next token: [count, last position, document]} over orders ``min_n`` .. ``max_n``."""

    def __init__(self, min_n: int, max_n: int):
        self.min_n, self.max_n = min_n, max_n
        self.grams: dict[tuple[int, ...], dict[int, list[int]]] = {}

    def add(self, ids: Sequence[int], start: int = 0, document: int = -1) -> None:
        """Count the continuations at positions ``start`` .. ``len(ids) − 1`` of ``ids``."""
        for i in range(start, len(ids)):
            token = ids[i]
            for n in range(self.min_n, min(self.max_n, i) + 1):
                entry = self.grams.setdefault(tuple(ids[i - n:i]), {}).setdefault(token, [0, i, document])
                entry[0] += 1
                entry[1], entry[2] = i, document

    def get(self, gram: tuple[int, ...]) -> dict[int, list[int]]:
        return self.grams.get(gram, {})


class SuffixCorpus:
    """Earlier answers of one bench run or dashboard session, by the prompt they answered.

    The engine adds every finished run's answer (:meth:`add`); a suffix drafter asks for the n-gram table
    of the answers it may use (:meth:`table`), built once per prompt and configuration until an answer is added.
    """

    def __init__(self, max_documents: int = MAX_CORPUS_DOCUMENTS):
        self.max_documents = max_documents
        self.documents: list[tuple[tuple[int, ...], tuple[int, ...]]] = []  # (prompt, answer), oldest first
        self._tables: dict[tuple, NgramTable] = {}

    def __len__(self) -> int:
        return len(self.documents)

    def add(self, prompt: Sequence[int], answer: Sequence[int]) -> None:
        """Remember ``answer`` to ``prompt`` (an answer already held is not counted twice: under greedy
        decoding every lossless method gives the same one)."""
        document = (tuple(prompt), tuple(answer))
        if not answer or document in self.documents:
            return
        self.documents.append(document)
        del self.documents[: -self.max_documents]
        self._tables.clear()

    def answers(self, prompt: Sequence[int], use: str) -> list[tuple[int, ...]]:
        """The answers a drafter for ``prompt`` may index, under ``use`` (one of CORPUS_USES)."""
        if use == "none":
            return []
        prompt = tuple(prompt)
        return [answer for asked, answer in self.documents if use == "all" or asked != prompt]

    def table(self, prompt: Sequence[int], config: SuffixConfig) -> NgramTable:
        key = (tuple(prompt), config.corpus, config.min_ngram, config.max_ngram)
        if key not in self._tables:
            self._tables[key] = corpus_table(self.answers(prompt, config.corpus), config)
        return self._tables[key]


def corpus_table(answers: Sequence[Sequence[int]], config: SuffixConfig) -> NgramTable:
    """The n-gram table of ``answers``, document ``i`` the i-th."""
    table = NgramTable(config.min_ngram, config.max_ngram)
    for document, answer in enumerate(answers):
        table.add(answer, 0, document)
    return table


class SuffixIndex:
    """The live sequence's table (prompt + committed answer, extended by :meth:`sync`) beside a corpus table."""

    def __init__(self, config: SuffixConfig, prompt_len: int, corpus: NgramTable | None = None):
        self.config = config
        self.prompt_len = prompt_len
        self.corpus = corpus
        self.live = NgramTable(config.min_ngram, config.max_ngram)
        self.indexed = 0

    def sync(self, committed: Sequence[int]) -> None:
        """Count the tokens committed since the last call (committed tokens are final: they only grow)."""
        if len(committed) < self.indexed:
            raise ValueError("the committed sequence shrank: start a new index for a new run")
        self.live.add(committed, self.indexed)
        self.indexed = len(committed)

    def candidates(self, context: Sequence[int]) -> list[tuple[int, Match]]:
        """Continuations of the longest n-gram ending ``context`` that has any seen ``min_count`` times, most
        frequent first (ties: the live sequence, then the latest position)."""
        config = self.config
        for n in range(min(config.max_ngram, len(context)), config.min_ngram - 1, -1):
            gram = tuple(context[len(context) - n:])
            live = self.live.get(gram)
            stored = self.corpus.get(gram) if self.corpus is not None else {}
            if not live and not stored:
                continue
            counts = {token: live.get(token, (0,))[0] + stored.get(token, (0,))[0]
                      for token in live.keys() | stored.keys()}
            total = sum(counts.values())
            found = []
            for token, count in counts.items():
                if count < config.min_count:
                    continue
                if token in live:
                    _, position, _ = live[token]
                    origin = "prompt" if position < self.prompt_len else "answer"
                    found.append((token, Match(origin, position, -1, n, count, total)))
                else:
                    _, position, document = stored[token]
                    found.append((token, Match("corpus", position, document, n, count, total)))
            if found:
                found.sort(key=lambda f: (-f[1].count, f[1].origin == "corpus", -f[1].position, f[0]))
                return found
        return []

    def chain(self, context: Sequence[int], gamma: int) -> tuple[list[int], list[Match]]:
        """Up to ``gamma`` tokens, each the most frequent continuation of the context extended by those before."""
        tail = list(context[-self.config.max_ngram:])
        tokens, matches = [], []
        while len(tokens) < gamma:
            found = self.candidates(tail + tokens)
            if not found:
                break
            tokens.append(found[0][0])
            matches.append(found[0][1])
        return tokens, matches

    def tree(self, context: Sequence[int], depth: int, max_nodes: int,
             branching: int) -> tuple[DraftTreeNodes, list[Match]]:
        """Up to ``max_nodes`` nodes at most ``depth`` deep, grown best-first by the product of continuation
        frequencies along the path (the score, never rising with depth: the nodes come parents-first)."""
        tree, matches = DraftTreeNodes(drafter=SOURCE), []
        heap: list = []
        order = itertools.count()

        def push_children(parent: int, level: int, score: float, tail: list[int]) -> None:
            for rank, (token, match) in enumerate(self.candidates(tail)[:branching]):
                value = score + math.log(match.count / match.total)
                heapq.heappush(heap, (-value, next(order), parent, level, rank, token, match, tail))

        push_children(-1, 1, 0.0, list(context[-self.config.max_ngram:]))
        while heap and len(tree) < max_nodes:
            negative, _, parent, level, rank, token, match, tail = heapq.heappop(heap)
            node = tree.add(TreeNode(token, parent, level, 0.0, -negative, rank, SOURCE))
            matches.append(match)
            if level < depth:
                push_children(node, level + 1, -negative, (tail + [token])[-self.config.max_ngram:])
        return tree, matches


class SuffixDrafter:
    """The suffix index as a drafter (:mod:`engines.drafters.base`): chains for chain methods, trees for the
    tree program, and a report of where each token of its last proposal came from."""

    evidence_per_token = True  # each token's match is its evidence (gamma=auto verifies the prefix that pays)

    def __init__(self, config: SuffixConfig | None = None, corpus: SuffixCorpus | None = None, name: str = SOURCE,
                 chain_depth: int = SUFFIX_CHAIN_DEPTH):
        self.config = config or SuffixConfig()
        self.corpus = corpus
        self.name = name
        self.chain_depth = chain_depth  # grafted into a model's tree: the chain's length
        self.index: SuffixIndex | None = None
        self.last: list[tuple[int, Match]] = []  # (node id in the round's DraftTree, match) of the last proposal

    def start(self, ctx: DecodeContext, target_cache: KVCache | None = None) -> None:
        self.begin(ctx.prompt_ids)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """A new run: a fresh live index, and the corpus answers this prompt may use."""
        table = self.corpus.table(prompt_ids, self.config) if self.corpus is not None else None
        self.index = SuffixIndex(self.config, len(prompt_ids), table)
        self.last = []

    def propose(self, committed: list[int], gamma: int, sampler: Sampler | None = None) -> Draft:
        self.index.sync(committed)
        tokens, matches = self.index.chain(committed, gamma)
        self.last = list(enumerate(matches))
        return point_masses(tokens, [evidence(match) for match in matches])

    def propose_tree(self, committed: list[int], depth: int, max_nodes: int | None = None,
                     branching: int | None = None) -> DraftTreeNodes:
        """A tree of the most frequent continuations (``branching`` 1: the chain, as a tree to graft)."""
        self.index.sync(committed)
        tree, matches = self.index.tree(committed, depth, max_nodes or self.config.max_nodes,
                                        branching or self.config.branching)
        self.last = list(enumerate(matches))
        return tree

    def report(self, stage: str, t: float, round_: int) -> list:
        """After drafting: the :class:`SuffixMatch` event of the proposal (nothing after an observation)."""
        return [match_event(t, round_, self.last)] if stage == "draft" and self.last else []


def evidence(match: Match) -> tuple:
    """The kind of match a token was proposed on, as ``gamma=auto`` tells kinds apart (its acceptance is
    learned per kind): how long the n-gram (4 or more alike), how often the token followed it (3 or more
    alike), whether it always did, and whether only earlier answers had it. On the 42 turns of
    ``data/prompts.jsonl`` a token after a 4-gram it always followed was accepted 0.84–0.99 of the time, one
    after a single token that other answers continued otherwise 0.05–0.11."""
    return ("suffix", min(match.length, 4), min(match.count, 3), match.count == match.total,
            match.origin == "corpus")


def match_event(t: float, round_: int, matches: list[tuple[int, Match]]) -> SuffixMatch:
    return SuffixMatch(t=t, round=round_, nodes=[{"id": node, **asdict(match)} for node, match in matches])


def graft(tree: DraftTreeNodes, sent_ids: list[int], branches: DraftTreeNodes,
          limit: int) -> tuple[DraftTreeNodes, list[int], dict[int, int]]:
    """Merge a suffix tree's ``branches`` into a model's draft ``tree`` of which ``sent_ids`` go to the target.

    A branch node whose token a sent node already proposes at the same place adds nothing; one a pruned
    model node proposes sends that node; any other joins the tree (source ``suffix``) after its model
    siblings, so it is tried after them. At most ``limit`` nodes are sent. Returns the merged tree (``tree``'s
    nodes first, unchanged), the ids to send, and where each branch node landed."""
    merged = DraftTreeNodes(list(tree.nodes), tree.drafter)
    kids = merged.children()
    sent = set(sent_ids)
    placed: dict[int, int] = {}
    for i, node in enumerate(branches.nodes):
        parent = -1 if node.parent < 0 else placed.get(node.parent)
        if parent is None:  # its parent did not fit
            continue
        siblings = kids.setdefault(parent, [])
        same = next((c for c in siblings if merged.nodes[c].token == node.token), None)
        if same is None or same not in sent:
            if len(sent) >= limit:
                continue
            if same is None:
                rank = 1 + max((merged.nodes[c].rank for c in siblings), default=-1)
                same = merged.add(TreeNode(node.token, parent, node.depth, 0.0, node.score, rank, SOURCE))
                siblings.append(same)
            sent.add(same)
        placed[i] = same
    return merged, sorted(sent), placed


class ChainCut:
    """A suffix chain grafted into an auto-sized tree, cut by its evidence as ``sps(draft=suffix,gamma=auto)`` cuts
    its chain (:meth:`DraftLength.cut`): the round keeps the chain's prefix with the most expected tokens per
    second beside the model's nodes. Why: grafted whole, the chain sent about 4 rows a round that the model's
    tree did not, each priced by the verify-cost curve whether or not its kind of match is ever accepted. The
    chain's leading tokens that the sent model nodes already spell are kept and cost nothing more. What each
    kind of match is worth is learned on the run from how far the round's accepted path followed the chain.
    A round whose chain is expected to pay better alone drafts no model tree at all (:meth:`alone`)."""

    def __init__(self, verify_seconds):
        self.length = DraftLength(verify_seconds)
        self.tokens: list[int] = []  # the chain kept this round, and each token's kind of match
        self.kinds: list[tuple] = []
        self.model: tuple[float, float, float] | None = None  # running means of the model's tree: gain, rows, s

    def priced_model(self, gain: float, rows: int, seconds: float) -> None:
        """A round's model tree, as the sizer priced it: the tokens its sent nodes are expected to add, their
        rows, and the drafting's seconds (running means, for :meth:`alone`)."""
        now = (gain, float(rows), seconds)
        self.model = now if self.model is None else tuple(map(running_mean, self.model, now))

    def alone(self, suffix: SuffixDrafter) -> bool:
        """Whether this round's chain (``suffix``'s last proposal) is expected to commit more tokens per second
        without the model's tree. The model's nodes matter where the chain's first token is refused: they are
        priced at that chance times what they have been expected to add, against their drafting and their rows.
        Where the chain is sure, a round then costs what ``sps(draft=suffix,gamma=auto)``'s costs."""
        kinds = [evidence(match) for _, match in suffix.last]
        if self.model is None or not kinds:
            return False
        gain, rows, seconds = self.model
        keep = self.length.cut(kinds)
        chain = sum(self.length.reach(kinds[:keep]))
        miss = 1.0 - self.length.alpha_for(kinds[0])
        verify = self.length.verify_seconds
        alone = (1.0 + chain) / verify(1 + keep)
        beside = (1.0 + chain + miss * gain) / (seconds + verify(1 + keep + max(1, round(rows))))
        return alone >= beside

    def cut(self, suffix: SuffixDrafter, chain: DraftTreeNodes, tree: DraftTreeNodes, sent_ids: list[int],
            expected: float, seconds: float) -> DraftTreeNodes:
        """``chain`` (the drafter's last proposal, a chain) cut to the prefix that pays; ``expected``: the tokens
        the model's sent nodes are expected to commit, the bonus included; ``seconds``: the round's drafting."""
        kinds = [evidence(match) for _, match in suffix.last]
        tokens = [node.token for node in chain.nodes]
        keep = self.length.cut(kinds, expected, 1 + len(sent_ids), seconds, free=_spelled(tree, sent_ids, tokens))
        self.tokens, self.kinds = tokens[:keep], kinds[:keep]
        suffix.last = suffix.last[:keep]
        return chain.subset(list(range(keep)))

    def learn(self, path_tokens: list[int]) -> None:
        """After the verdict: how far the accepted path (its tokens, root excluded) followed the kept chain."""
        accepted = 0
        while accepted < min(len(self.tokens), len(path_tokens)) and self.tokens[accepted] == path_tokens[accepted]:
            accepted += 1
        self.length.update(len(self.tokens), accepted, 0.0, self.kinds)


def _spelled(tree: DraftTreeNodes, sent_ids: list[int], tokens: list[int]) -> int:
    """How many of ``tokens``, from the root, a path of sent nodes of ``tree`` already spells."""
    sent, at, n = set(sent_ids), -1, 0
    kids = tree.children()
    for token in tokens:
        at = next((c for c in kids.get(at, []) if c in sent and tree.nodes[c].token == token), None)
        if at is None:
            break
        n += 1
    return n
