"""Every lossless verification rule keeps the target's distribution, and the test catches its broken twin.

The engine writes the rule once (:mod:`engines.core.acceptance`); one test per way the methods use it —
the chain (``judge_chain``, drafts drawn from q and point-mass lookups), token-by-token judging
(``judge_token``, PPSD's last stage), the multi-candidate tree walk (``judge``, sampled and point-mass
children), CATS's correction siblings, SAGUARO's shaped draft (SSD) and Mirror-SD's token match — each run on a table model (``tests/exactness.py``) for N decoded
sequences of ``LENGTH`` tokens and compared with their exact law. Each has a twin with one piece of the
rule broken (the residual, the point-mass residual, the q it is judged against, ...) that must be
rejected at p < 1e-6.

N per rule comes from its twin: ``scripts/size_exactness_tests.py`` measures each twin's output once over
20,000 runs and takes the smallest N whose expected statistic is twice what p < 1e-6 needs
(``tests.exactness.size_runs``). At that N, with this module's seed, measured on 2026-11-26:

| rule | its twin | N | twin's χ² against the p = 1e-6 critical value |
|---|---|---|---|
| chain, drafts drawn from q | residual = p | 302 | 89 against 43 (2.1×) |
| chain, point-mass lookups | residual = p | 351 | 109 against 51 (2.2×) |
| token by token | residual = p | 287 | 95 against 43 (2.2×) |
| tree, sampled children | residual = p | 133 | 58 against 33 (1.8×) |
| tree, point-mass children | refused token kept in p | 351 | 88 against 51 (1.7×) |
| CATS corrections | refused correction kept in p | 993 | 121 against 56 (2.1×) |
| SAGUARO σ | judged against the unshaped q | 247 | 53 against 41 (1.3×) |
| token match | a fresh draw committed on a mismatch | 498 | 92 against 51 (1.8×) |

A run costs ~0.3 ms, so the sixteen tests take a few seconds; the end-to-end runs they replace took
3,000 engine runs each.
How the engine's methods route a draft's q to these rules is proved run by run, deterministically, in
``tests/test_draft_routing.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch

import engines.core.acceptance as acceptance
from engines.core.acceptance import Verdict, judge, judge_chain, judge_token
from engines.core.draft_tree import DraftTreeNodes, TreeNode
from engines.core.sampling import Sampler
from engines.methods.cats import correction_tree
from engines.programs.verdict.speculation_cache import saguaro
from tests.exactness import PASS_P, REJECT_P, TableModel, chi_square, critical_value, sample_sequences

VOCAB = 4
LENGTH = 3  # committed tokens compared per run: 4³ = 64 sequences
GAMMA = 2
SEED = 1234


def models() -> tuple[TableModel, TableModel, TableModel]:
    """Target, draft and a shallow verifier (CATS): unrelated tables, so drafts are often refused. The
    verifier's table is flatter and disagrees with the draft often, so corrections are tried and refused
    often enough for the point-mass residual to matter (a verifier agreeing with the target's argmax makes
    a refused correction rare, and a broken one needs ~6× the runs to show)."""
    return TableModel(VOCAB, seed=1), TableModel(VOCAB, seed=2), TableModel(VOCAB, seed=4, scale=1.0)


def exact_chain(tokens: list[int], q: torch.Tensor | None, rows: torch.Tensor, sampler: Sampler) -> Verdict:
    """The engine's chain judgement on the table's probability rows (as logits: their logs)."""
    return judge_chain(tokens, q, rows.log(), sampler)


# --- one decoding loop per rule: rounds until LENGTH tokens are committed ---------------------------------
def decode_chain(target: TableModel, draft: TableModel, sampler: Sampler, shape: Callable | None = None,
                 judged_q: Callable | None = None, rule: Callable | None = None) -> tuple[int, ...]:
    """Draft γ tokens from q (or from SAGUARO's σ = ``shape(q)``), judge the chain against what they were
    drawn from (or against ``judged_q(q, σ)``: a twin), commit the accepted prefix and the next token."""
    out: list[int] = []
    while len(out) < LENGTH:
        tokens, drawn_from, plain = [], [], []
        for _ in range(GAMMA):
            q = draft.probs(out + tokens)
            sigma = shape(q) if shape is not None else q
            tokens.append(sampler.draw(sigma))
            drawn_from.append(sigma)
            plain.append(q)
        judged = [judged_q(q, s) for q, s in zip(plain, drawn_from)] if judged_q is not None else drawn_from
        rows = target.rows(tuple(out), [tokens[:i] for i in range(GAMMA + 1)])
        verdict = (rule or exact_chain)(tokens, torch.stack(judged), rows, sampler)
        out += tokens[: verdict.n_accepted] + [verdict.next_token]
    return tuple(out[:LENGTH])


def decode_lookup_chain(target: TableModel, draft: TableModel, sampler: Sampler) -> tuple[int, ...]:
    """Prompt lookup's case: the chain is picked deterministically (the draft table's argmax), q = None."""
    out: list[int] = []
    while len(out) < LENGTH:
        tokens: list[int] = []
        for _ in range(GAMMA):
            tokens.append(int(draft.probs(out + tokens).argmax()))
        rows = target.rows(tuple(out), [tokens[:i] for i in range(GAMMA + 1)])
        verdict = exact_chain(tokens, None, rows, sampler)
        out += tokens[: verdict.n_accepted] + [verdict.next_token]
    return tuple(out[:LENGTH])


def decode_token_by_token(target: TableModel, draft: TableModel, sampler: Sampler) -> tuple[int, ...]:
    """PPSD's last stage: each draft token is judged alone, as it arrives."""
    out: list[int] = []
    while len(out) < LENGTH:
        q = draft.probs(out)
        token = sampler.draw(q)
        committed, _ = judge_token(token, target.probs(out).log(), q, sampler)
        out.append(committed)
    return tuple(out)


def two_level_tree(out: list[int], draft: TableModel, sampler: Sampler, children: str) -> DraftTreeNodes:
    """Two children under the root, one under each: drawn independently from q (``sampled``) or q's top-2
    (``point_mass``, q = None: deterministic picks)."""
    tree = DraftTreeNodes()
    q_root = draft.probs(out)
    firsts = [sampler.draw(q_root) for _ in range(2)] if children == "sampled" else q_root.topk(2).indices.tolist()
    for rank, token in enumerate(firsts):
        tree.add(TreeNode(token, -1, 1, rank=rank, q=q_root if children == "sampled" else None))
    for parent in range(2):
        q = draft.probs(out + [tree.nodes[parent].token])
        token = sampler.draw(q) if children == "sampled" else int(q.argmax())
        tree.add(TreeNode(token, parent, 2, q=q if children == "sampled" else None))
    return tree


def walk(target: TableModel, out: list[int], tree: DraftTreeNodes, sampler: Sampler) -> list[int]:
    """The target's rows for [root] + nodes, the multi-candidate walk, and the tokens it commits."""
    rows = target.rows(tuple(out), [[]] + [[tree.nodes[i].token for i in tree.path_to(n)] for n in range(len(tree))])
    verdict = judge(tree, rows.log(), sampler)
    return [tree.nodes[i].token for i in verdict.path] + [verdict.next_token]


def decode_tree(target: TableModel, draft: TableModel, sampler: Sampler, children: str) -> tuple[int, ...]:
    out: list[int] = []
    while len(out) < LENGTH:
        out += walk(target, out, two_level_tree(out, draft, sampler, children), sampler)
    return tuple(out[:LENGTH])


def decode_cats(target: TableModel, draft: TableModel, verifier: TableModel, sampler: Sampler) -> tuple[int, ...]:
    """CATS: a chain drawn from q, a correction sibling (a point mass on the shallow verifier's argmax)
    wherever the verifier disagrees, and one walk over the tree."""
    out: list[int] = []
    while len(out) < LENGTH:
        tokens, qs = [], []
        for _ in range(GAMMA):
            q = draft.probs(out + tokens)
            tokens.append(sampler.draw(q))
            qs.append(q)
        checked = [int(verifier.probs(out + tokens[:i]).argmax()) for i in range(GAMMA)]
        tree, _ = correction_tree(tokens, torch.stack(qs), [0.0] * GAMMA, checked, "dm")
        out += walk(target, out, tree, sampler)
    return tuple(out[:LENGTH])


def token_match_redrawing(draft: list[int], target_probs: torch.Tensor, sampler: Sampler) -> Verdict:
    """Broken twin of Mirror-SD's token match: on a mismatch it commits a *fresh* draw, not the one compared."""
    for i, token in enumerate(draft):
        if sampler.draw(target_probs[i]) != token:
            return Verdict(list(range(i)), sampler.draw(target_probs[i]), "correction")
    return Verdict(list(range(len(draft))), sampler.draw(target_probs[len(draft)]), "bonus")


def shaped(q: torch.Tensor) -> torch.Tensor:
    """SAGUARO's σ_{F,C} with F = 1, C = 0.2: the draft's top token scaled down."""
    return saguaro(q, 1, 0.2)[0]


# --- the cases: the rule and its twin ---------------------------------------------------------------------
@dataclass
class Case:
    decode: Callable[[Sampler], tuple[int, ...]]  # one run of the correct rule
    twin: Callable[[pytest.MonkeyPatch], Callable[[Sampler], tuple[int, ...]]]  # breaks it; returns the decoder


def _residual_is_p(patch: pytest.MonkeyPatch) -> None:
    patch.setattr(acceptance, "residual_distribution", lambda p, q, token=None: p)


def _point_mass_residual_keeps_the_token(patch: pytest.MonkeyPatch) -> None:
    residual = acceptance.residual_distribution
    patch.setattr(acceptance, "residual_distribution", lambda p, q, token=None: p if q is None else residual(p, q))


def _patched(broken: Callable[[pytest.MonkeyPatch], None], decode: Callable):
    def twin(patch: pytest.MonkeyPatch):
        broken(patch)
        return decode
    return twin


def _replaced(decode: Callable):
    return lambda patch: decode


def case_table() -> dict[str, Case]:
    target, draft, verifier = models()

    def chain_with(rule):
        return lambda s: decode_chain(target, draft, s, rule=lambda d, q, p, smp: rule(d, p, smp))

    chain = lambda s: decode_chain(target, draft, s)  # noqa: E731
    lookup = lambda s: decode_lookup_chain(target, draft, s)  # noqa: E731
    one_by_one = lambda s: decode_token_by_token(target, draft, s)  # noqa: E731
    sampled_tree = lambda s: decode_tree(target, draft, s, "sampled")  # noqa: E731
    point_tree = lambda s: decode_tree(target, draft, s, "point_mass")  # noqa: E731
    cats = lambda s: decode_cats(target, draft, verifier, s)  # noqa: E731
    sigma = lambda s: decode_chain(target, draft, s, shape=shaped)  # noqa: E731
    sigma_judged_as_q = lambda s: decode_chain(target, draft, s, shape=shaped, judged_q=lambda q, σ: q)  # noqa: E731
    return {
        "chain (residual)": Case(chain, _patched(_residual_is_p, chain)),
        "chain, point-mass lookups": Case(lookup, _patched(_residual_is_p, lookup)),
        "token by token": Case(one_by_one, _patched(_residual_is_p, one_by_one)),
        "tree, sampled children": Case(sampled_tree, _patched(_residual_is_p, sampled_tree)),
        "tree, point-mass children": Case(point_tree, _patched(_point_mass_residual_keeps_the_token, point_tree)),
        "CATS corrections": Case(cats, _patched(_point_mass_residual_keeps_the_token, cats)),
        "SAGUARO σ": Case(sigma, _replaced(sigma_judged_as_q)),
        "token match": Case(chain_with(lambda d, p, smp: judge_chain(d, None, p.log(), smp, rule="token_match")),
                            _replaced(chain_with(token_match_redrawing))),
    }


# N per rule, printed by scripts/size_exactness_tests.py (the table in this module's docstring)
RUNS = {"chain (residual)": 302, "chain, point-mass lookups": 351, "token by token": 287, "tree, sampled children": 133,
        "tree, point-mass children": 351, "CATS corrections": 993, "SAGUARO σ": 247, "token match": 498}


def run_case(decode: Callable[[Sampler], tuple[int, ...]], runs: int, law: dict) -> tuple[float, float, int]:
    sampler = Sampler(1.0, seed=SEED)
    return chi_square(sample_sequences(lambda: decode(sampler), runs), law)


@pytest.fixture(scope="module")
def table():
    return case_table(), models()[0].law(LENGTH)


@pytest.mark.parametrize("name", list(RUNS))
def test_rule_keeps_the_target_distribution(table, name):
    cases, law = table
    _, pvalue, _ = run_case(cases[name].decode, RUNS[name], law)
    assert pvalue > PASS_P, f"{name}: p = {pvalue:.2g} over {RUNS[name]} runs"


@pytest.mark.parametrize("name", list(RUNS))
def test_broken_twin_is_caught(table, name, monkeypatch):
    cases, law = table
    statistic, pvalue, dof = run_case(cases[name].twin(monkeypatch), RUNS[name], law)
    assert pvalue < REJECT_P, (f"{name}: the broken twin passed (χ² {statistic:.0f} against {critical_value(dof):.0f}"
                               f" over {RUNS[name]} runs)")
