"""The suffix drafter (engines/drafters/suffix.py): its index on small token lists, greedy equality with ``ar``
wherever it drafts (sps, a merged eagle tree, ssd's backup), one statistical exactness test of its trees
under sampling, and the view of what it matched."""

from __future__ import annotations

import pytest

from engines import Engine
from engines.core.draft_tree import DraftTreeNodes, TreeNode
from engines.core.sampling import Sampler
from engines.drafters.suffix import NgramTable, SuffixConfig, SuffixCorpus, SuffixDrafter, SuffixIndex, graft
from tests.conftest import tiny_llama
from tests.exactness import PASS_P, REJECT_P, TableModel, chi_square, critical_value, sample_sequences
from tests.test_verification_rules import LENGTH, _point_mass_residual_keeps_the_token, models, walk


# --- the index --------------------------------------------------------------------------------------------
def test_the_longest_matching_ngram_decides_and_counts_rank_its_continuations():
    ids = [1, 2, 3, 1, 2, 4, 1, 2, 3, 1, 2]
    index = SuffixIndex(SuffixConfig(max_ngram=3), prompt_len=len(ids))
    index.sync(ids)
    (token, match), = index.candidates(ids)  # (3, 1, 2) was followed once, by 4: the trigram wins over (1, 2)
    assert token == 4 and (match.length, match.count, match.total, match.position) == (3, 1, 1, 5)
    short = SuffixIndex(SuffixConfig(max_ngram=2), prompt_len=len(ids))
    short.sync(ids)
    found = short.candidates(ids)  # (1, 2) → 3 twice (last at 8), 4 once
    assert [(t, m.count, m.total, m.position) for t, m in found] == [(3, 2, 3, 8), (4, 1, 3, 5)]
    assert SuffixIndex(SuffixConfig(), 0).candidates([7, 8]) == []


def test_the_live_index_grows_with_committed_tokens_and_tells_prompt_from_answer():
    drafter = SuffixDrafter(SuffixConfig(max_ngram=2))
    drafter.begin([5, 6, 7])
    assert drafter.propose([5, 6, 7], 3).tokens == []  # nothing has been followed yet by anything after 7
    draft = drafter.propose([5, 6, 7, 5, 6], 3)  # 5 6 → 7 (prompt), then 6 7 → 5 (answer: position 3)
    assert draft.tokens == [7, 5, 6] and draft.probs is None and draft.logprobs == [0.0] * 3
    assert [m.origin for _, m in drafter.last] == ["prompt", "answer", "answer"]
    with pytest.raises(ValueError, match="shrank"):
        drafter.propose([5], 1)


def test_a_tree_holds_the_most_frequent_continuations_parents_first():
    ids = [1, 2, 1, 3, 1, 2, 1, 2, 1]  # after 1: 2 three times, 3 once
    index = SuffixIndex(SuffixConfig(max_ngram=1), prompt_len=len(ids))
    index.sync(ids)
    tree, matches = index.tree(ids, depth=2, max_nodes=3, branching=2)
    assert [(n.token, n.parent, n.depth, n.rank) for n in tree.nodes] == [(2, -1, 1, 0), (1, 0, 2, 0), (3, -1, 1, 1)]
    assert tree.nodes[0].score == tree.nodes[1].score > tree.nodes[2].score  # best first: 3/4, 3/4 · 3/3, 1/4
    assert all(n.q is None and n.logprob == 0.0 and n.source == "suffix" for n in tree.nodes)
    assert [m.count for m in matches] == [3, 3, 1]


def test_the_corpus_leaves_out_this_prompt_and_forgets_the_oldest():
    corpus = SuffixCorpus(max_documents=2)
    corpus.add([1], [4, 5, 6])
    corpus.add([1], [4, 5, 6])  # the same answer again (every lossless method's greedy answer): once
    corpus.add([2], [4, 5, 7])
    assert len(corpus) == 2 and corpus.answers([1], "others") == [(4, 5, 7)]
    assert corpus.answers([1], "all") == [(4, 5, 6), (4, 5, 7)] and corpus.answers([1], "none") == []
    drafter = SuffixDrafter(SuffixConfig(max_ngram=2), corpus)
    drafter.begin([1])
    assert drafter.propose([1, 4, 5], 2).tokens == [7]
    assert [(m.origin, m.document, m.position) for _, m in drafter.last] == [("corpus", 0, 2)]
    corpus.add([3], [9])
    assert corpus.answers([1], "all") == [(4, 5, 7), (9,)]


def test_graft_merges_suffix_branches_into_a_model_tree():
    model = DraftTreeNodes([TreeNode(4, -1, 1), TreeNode(5, -1, 1, rank=1), TreeNode(6, 0, 2), TreeNode(8, 1, 2)])
    chain = DraftTreeNodes([TreeNode(4, -1, 1), TreeNode(7, 0, 2), TreeNode(9, 1, 3)])
    merged, sent, placed = graft(model, [0, 1, 2], chain, limit=5)
    assert merged.nodes[:4] == model.nodes and placed == {0: 0, 1: 4, 2: 5}
    assert (merged.nodes[4].token, merged.nodes[4].parent, merged.nodes[4].rank, merged.nodes[4].source) == (7, 0, 1,
                                                                                                             "suffix")
    assert sent == [0, 1, 2, 4, 5]
    pruned = DraftTreeNodes([TreeNode(5, -1, 1), TreeNode(8, 0, 2)])  # proposes model node 3, which was pruned
    _, sent, placed = graft(model, [0, 1], pruned, limit=3)
    assert sent == [0, 1, 3] and placed == {0: 1, 1: 3}
    _, sent, _ = graft(model, [0, 1, 2], chain, limit=3)  # no room left: nothing new is sent
    assert sent == [0, 1, 2]


@pytest.mark.parametrize("options,message", [
    ({"max_ngram": 0}, r"max_ngram must be in \[1, 16\]"), ({"min_ngram": 5}, r"min_ngram must be in \[1, 4\]"),
    ({"branching": "2"}, "branching must be an integer"), ({"corpus": "every"}, "corpus must be one of"),
])
def test_a_bad_config_names_the_parameter_and_its_allowed_values(options, message):
    with pytest.raises(ValueError, match=message):
        SuffixConfig(**options)


def test_ngram_table_keeps_the_latest_position():
    table = NgramTable(1, 2)
    table.add([1, 2, 1, 2], 0, document=3)
    assert table.get((1,)) == {2: [2, 3, 3]} and table.get((2, 1)) == {2: [1, 3, 3]}


# --- greedy equality with ar on a tiny model --------------------------------------------------------------
PROMPTS = ([1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 4, 6, 7, 1, 2], [9, 8, 1, 2, 3, 4, 9, 8, 1])


@pytest.fixture(scope="module")
def engine() -> Engine:
    engine = Engine(tiny_llama(vocab=16, layers=3, seed=1))
    engine.add_draft("other", tiny_llama(vocab=16, layers=1, seed=2))
    return engine


@pytest.mark.parametrize("method,options", [
    ("sps", {"draft": "suffix", "gamma": 4}),
    ("sps", {"draft": "suffix", "gamma": "auto"}),
    ("pld", {"gamma": "auto"}),
    ("eagle", {"draft": "exit@1", "merge_suffix": True, "total_tokens": 4}),
    ("eagle", {"draft": "other", "merge_suffix": True}),
    ("ssd", {"backup": "suffix", "draft": "other", "mode": "serial", "f": 1}),
], ids=["sps", "sps-auto", "pld-auto", "eagle-merged", "eagle-merged-auto", "ssd-backup"])
def test_greedy_equals_ar(engine, method, options):
    for prompt in PROMPTS:  # the second prompt's run also copies from the first's answer (the engine's corpus)
        expected = engine.run(prompt, "ar", max_new_tokens=24).token_ids
        assert engine.run(prompt, method, max_new_tokens=24, **options).token_ids == expected
    assert len(engine.suffix_corpus) >= 2


def test_auto_verifies_only_the_prefix_its_evidence_pays_for(engine, monkeypatch):
    """With ``gamma=auto`` a suffix draft is cut token by token: on a curve where each verified token costs a
    whole step nothing pays and no round verifies a draft; on a flat one every proposed token is verified."""
    from engines.drafters.suffix import evidence

    steep = engine.verify_cost()
    monkeypatch.setattr(steep, "cost", lambda n: 0.01 * n)
    expected = engine.run(PROMPTS[0], "ar", max_new_tokens=24).token_ids
    cut = engine.run(PROMPTS[0], "sps", draft="suffix", gamma="auto", max_new_tokens=24)
    assert cut.token_ids == expected and cut.stats.drafted == 0
    monkeypatch.setattr(steep, "cost", lambda n: 0.01)
    whole = engine.run(PROMPTS[0], "sps", draft="suffix", gamma="auto", max_new_tokens=24)
    assert whole.token_ids == expected and whole.stats.drafted > 0
    drafter = SuffixDrafter(SuffixConfig(max_ngram=2))
    drafter.begin([5, 6, 7])
    draft = drafter.propose([5, 6, 7, 5, 6], 3)
    assert draft.evidence == [evidence(m) for _, m in drafter.last] and len(draft.evidence) == 3


def test_an_auto_sized_merged_tree_cuts_its_chain_by_evidence(engine, monkeypatch):
    """``total_tokens=auto`` with ``merge_suffix``: the grafted chain keeps only the prefix that pays beside the
    model's nodes (:class:`ChainCut`): where each row costs a whole step no chain token is sent, where rows are
    free some are; the output is ``ar``'s either way."""
    curve = engine.verify_cost()
    expected = engine.run(PROMPTS[0], "ar", max_new_tokens=24).token_ids

    def chain_nodes_sent(result) -> int:
        return sum(n["sent"] and n["source"] == "suffix" for e in result.events if e.kind == "draft_tree"
                   for n in e.nodes)

    monkeypatch.setattr(curve, "cost", lambda n: 0.01 * n)
    steep = engine.run(PROMPTS[0], "eagle", draft="exit@1", merge_suffix=True, max_new_tokens=24)
    monkeypatch.setattr(curve, "cost", lambda n: 0.01)
    flat = engine.run(PROMPTS[0], "eagle", draft="exit@1", merge_suffix=True, max_new_tokens=24)
    assert steep.token_ids == flat.token_ids == expected
    assert chain_nodes_sent(steep) == 0 < chain_nodes_sent(flat)


def test_a_sure_chain_skips_the_models_tree_where_rows_are_dear():
    """:meth:`ChainCut.alone`: with every chain token accepted so far and each row costing a whole step, a round
    drafts no model tree; with chains never accepted and rows nearly free, the model's tree is drafted; before the
    model's tree was ever priced, it is drafted."""
    from engines.drafters.suffix import ChainCut, evidence

    drafter = SuffixDrafter(SuffixConfig(max_ngram=2))
    drafter.begin([5, 6, 7])
    drafter.propose_tree([5, 6, 7, 5, 6], 3, max_nodes=3, branching=1)
    kinds = [evidence(match) for _, match in drafter.last]
    assert kinds
    sure, doubtful = ChainCut(lambda n: 0.01 * n), ChainCut(lambda n: 0.01 + 0.0001 * n)
    assert not sure.alone(drafter)
    for cut, accepted in ((sure, len(kinds)), (doubtful, 0)):
        for _ in range(20):
            cut.length.update(len(kinds), accepted, 0.0, kinds)
        cut.priced_model(gain=0.4, rows=1, seconds=0.001)
    assert sure.alone(drafter) and not doubtful.alone(drafter)


def test_the_grafted_chain_has_its_own_length(engine):
    """``suffix_depth``, not the model tree's ``depth``, bounds the chain a merged tree grafts in: a one-level
    tree carries chains deeper than one, never deeper than ``suffix_depth``, and the output stays ``ar``'s."""
    expected = engine.run(PROMPTS[0], "ar", max_new_tokens=24).token_ids
    result = engine.run(PROMPTS[0], "eagle", draft="exit@1", depth=1, merge_suffix=True, suffix_depth=5,
                        total_tokens=4, max_new_tokens=24)
    assert result.token_ids == expected
    depths = [n["depth"] for e in result.events if e.kind == "draft_tree" for n in e.nodes if n["source"] == "suffix"]
    assert 1 < max(depths) <= 5
    with pytest.raises(ValueError, match="suffix_depth"):
        engine.run(PROMPTS[0], "eagle", merge_suffix=True, suffix_depth=0, max_new_tokens=4)


def test_the_match_view_builds_from_a_run(engine, monkeypatch):
    from specviz.views.suffix_match import NOT_VERIFIED, match_summary, suffix_match_figure, suffix_matches

    engine.run(PROMPTS[0], "ar", max_new_tokens=24)  # an earlier answer for the corpus
    result = engine.run(PROMPTS[0] + [3], "sps", draft="suffix", gamma=4, max_new_tokens=24)
    rows = suffix_matches(result.events)
    committed = [e for e in result.events if e.kind == "commit"]
    assert sum(r["outcome"] == "accepted" for r in rows) == sum(c.accepted for c in committed) > 0
    assert {r["origin"] for r in rows} <= {"prompt", "answer", "corpus"} and all(r["length"] >= 1 for r in rows)
    summary = match_summary(rows)
    assert sum(s["drafted"] for s in summary.values()) == len(rows)
    figure = suffix_match_figure(result.events)
    assert len(figure.data) >= 5 and "copied from" in figure.layout.annotations[0].text
    assert "No suffix drafts" in suffix_match_figure(engine.run(PROMPTS[0], "ar", max_new_tokens=4).events).layout.title.text
    assert NOT_VERIFIED not in [trace.name for trace in figure.data]  # γ = 4: every proposed token was sent
    monkeypatch.setattr(engine.verify_cost(), "cost", lambda n: 0.01 * n)  # nothing pays: every draft is cut
    cut = engine.run(PROMPTS[0] + [3], "sps", draft="suffix", gamma="auto", max_new_tokens=24)
    assert cut.stats.drafted == 0 and any(r["outcome"] == "unsent" for r in suffix_matches(cut.events))
    assert NOT_VERIFIED in [trace.name for trace in suffix_match_figure(cut.events).data]


# --- exactness under sampling -----------------------------------------------------------------------------
TABLE_PROMPT = [0, 1, 2, 0, 1, 3, 0, 1, 2, 3, 1, 0]
TABLE_CORPUS = SuffixCorpus()
TABLE_CORPUS.add([9], [0, 1, 3, 2, 0, 1, 2])
TABLE_CORPUS.add([8], [1, 1, 0, 2, 3, 3])
SEED = 4321
RUNS = 247  # sized from the twin, see the test's docstring


def decode_suffix(target: TableModel, sampler: Sampler) -> tuple[int, ...]:
    """Suffix trees (two continuations a node, point masses) over prompt + output + corpus, walked by the
    engine's rule until LENGTH tokens are committed."""
    drafter = SuffixDrafter(SuffixConfig(max_ngram=3, branching=2, max_nodes=5), TABLE_CORPUS)
    drafter.begin(TABLE_PROMPT)
    out: list[int] = []
    while len(out) < LENGTH:
        out += walk(target, out, drafter.propose_tree(TABLE_PROMPT + out, depth=2), sampler)
    return tuple(out[:LENGTH])


def test_suffix_trees_keep_the_target_distribution_and_a_broken_residual_is_caught(monkeypatch):
    """χ² of the first three committed tokens against the table target's exact law. The twin keeps a refused
    point mass in the residual (a refused suffix token could be drawn again). N = 247 from
    ``tests.exactness.size_runs`` on 20,000 twin runs (seed 99, 0.3 ms a run); at N, with SEED, measured on
    2026-11-26: the twin's χ² 72 against the p = 1e-6 critical value 41 (1.8×), the correct rule's p = 0.80."""
    target = models()[0]
    law = target.law(LENGTH)
    _, pvalue, _ = chi_square(sample_sequences(lambda s=Sampler(1.0, seed=SEED): decode_suffix(target, s), RUNS), law)
    assert pvalue > PASS_P
    _point_mass_residual_keeps_the_token(monkeypatch)
    statistic, pvalue, dof = chi_square(
        sample_sequences(lambda s=Sampler(1.0, seed=SEED): decode_suffix(target, s), RUNS), law)
    assert pvalue < REJECT_P, f"the broken twin passed: χ² {statistic:.0f} against {critical_value(dof):.0f}"
