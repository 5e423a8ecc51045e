"""specviz.views.draft_trees and the tree theory: figures and predictions from hand-made events, then one real run.

The synthetic round below is small enough to check by hand: six sent nodes and one pruned, an accepted
path 0 → 2, a correction after it. The real-model test checks the pictures against the engine's own
tree helpers (the mask) and the run's own statistics (τ).
"""

from __future__ import annotations

import math

import pytest
import torch

from engines.core.draft_tree import DraftTreeNodes, TreeNode
from engines.core.trace import Commit, DraftTree, RunEnd, RunStart, Verification
from engines.model.layers import tree_mask
from specviz.experiments.tree_size_sweep import tree_size_sweep
from specviz.theory import (
    best_tree_paths,
    expected_tokens_per_round,
    expected_tree_tokens,
    full_tree_nodes,
    heldout_topk_agreement,
    rank_probabilities,
    tree_speedup,
)
from specviz.views.draft_trees import (
    mean_tree_size,
    node_outcomes,
    root_token,
    round_events,
    run_row,
    showcase_round,
    token_label,
    tree_figure,
    tree_layout,
    tree_mask_figure,
    tree_nodes,
    verify_parents,
)
from specviz.views.tree_budget import predicted_tau, tau_vs_tree_size, tree_budget_figure, verify_cost_figure
from specviz.widgets.theory_explorers import tree_theory_readout


def node(id_, parent, token, depth, score, rank, sent=True):
    return {"id": id_, "parent": parent, "token": token, "logprob": score, "depth": depth, "score": score,
            "rank": rank, "sent": sent, "source": "draft"}


NODES = [node(0, -1, 10, 1, -0.5, 0), node(1, -1, 11, 1, -1.5, 1), node(2, 0, 20, 2, -1.0, 0),
         node(3, 0, 21, 2, -2.5, 1), node(4, 1, 22, 2, -2.0, 0), node(5, 2, 30, 3, -1.2, 0),
         node(6, 2, 31, 3, -3.0, 1, sent=False)]
TOKENS = {10: " The", 11: " A", 20: " sky", 21: "\n", 22: " cat", 30: " is", 31: " was", 40: " blue", 99: ""}


def detokenize(ids):
    return "".join(TOKENS[i] for i in ids)


def round_pair(round_=1, accepted=(0, 2), nodes=NODES, sampled=False):
    """A DraftTree and the greedy walk's Verification over it (every child of an accepted node tried)."""
    tree = DraftTree(t=0.0, round=round_, drafter="test", nodes=[dict(n) for n in nodes])
    sent = [n for n in nodes if n["sent"]]
    tried = [n["id"] for n in sent if n["parent"] < 0 or n["parent"] in accepted]
    records = [{"id": i, "outcome": "accepted" if i in accepted else "rejected"} for i in tried]
    if sampled:
        for record in records:
            record.update(p=0.3, q=1.0, draw=0.25)
    verification = Verification(t=0.0, round=round_, accepted=list(accepted),
                                rejected=[n["id"] for n in sent if n["id"] not in accepted], next_token=40,
                                next_fate="correction", nodes=records)
    return tree, verification


def run_events(pairs, temperature=0.0):
    """A minimal event stream: start, then per round its tree, verification and commit, then the end."""
    events = [RunStart(t=0.0, method="eagle", config={}, model="m", device="cpu", dtype="float32", lanes={},
                       lossless=True, prompt_tokens=3, max_new_tokens=32, temperature=temperature),
              Commit(t=0.0, round=0, tokens=[5], fates=["target"], pieces=["x"], drafted=0, accepted=0)]
    for tree, verification in pairs:
        sent = sum(n.get("sent", True) for n in tree.nodes)
        events += [tree, verification, Commit(t=0.0, round=tree.round, tokens=[1] * (len(verification.accepted) + 1),
                                              fates=["accepted"] * len(verification.accepted) + ["correction"],
                                              pieces=["y"] * (len(verification.accepted) + 1), drafted=sent,
                                              accepted=len(verification.accepted), draft_depth=3)]
    rounds = max(len(pairs), 1)
    events.append(RunEnd(t=1.0, token_ids=[], text="", stop_reason="max_new_tokens", stats={
        "tokens_per_s": 20.0, "mean_accepted_length": sum(len(v.accepted) + 1 for _, v in pairs) / rounds,
        "rounds": rounds}))
    return events


class FakeCurve:
    """A verify-cost curve: one token costs 10 ms, each further token 1 ms."""

    seconds = {n: 0.010 + 0.001 * (n - 1) for n in range(1, 17)}

    def cost(self, n: int) -> float:
        return 0.010 + 0.001 * (n - 1)


# --- reading events ---------------------------------------------------------------------------------
def test_outcomes_of_a_tree_round():
    tree, verification = round_pair()
    assert node_outcomes(tree, verification) == {0: "accepted", 1: "rejected", 2: "accepted", 3: "rejected",
                                                 4: "unreached", 5: "rejected", 6: "pruned"}
    assert node_outcomes(tree, None) == {**{i: "sent" for i in range(6)}, 6: "pruned"}


def test_a_chain_reads_as_a_tree():
    """sps's nodes have no sent/score/rank and its verification lists no tried nodes."""
    chain = DraftTree(t=0.0, round=1, drafter="eagle", nodes=[
        {"id": i, "parent": i - 1, "token": 10 + i, "logprob": -0.5, "depth": i + 1} for i in range(4)])
    verification = Verification(t=0.0, round=1, accepted=[0, 1], rejected=[2, 3], next_token=40, next_fate="correction")
    assert node_outcomes(chain, verification) == {0: "accepted", 1: "accepted", 2: "rejected", 3: "unreached"}
    assert [n["score"] for n in tree_nodes(chain)] == [-0.5, -1.0, -1.5, -2.0]
    assert all(n["sent"] and n["rank"] == 0 for n in tree_nodes(chain))
    assert verify_parents(chain) == [-1, 0, 1, 2, 3]
    tree_figure(chain, verification)  # draws without the tree-only fields
    predicted = predicted_tau(run_events([(chain, verification)]), [1, 2, 4])
    assert [(p["size"], p["tau"]) for p in predicted] == [(1, 2.0), (2, 3.0), (4, 3.0)]


def test_layout_puts_depth_on_x_and_siblings_by_rank():
    position = tree_layout(tree_nodes(round_pair()[0]))
    assert position[-1][0] == 0 and all(position[n["id"]][0] == n["depth"] for n in NODES)
    assert position[0][1] < position[1][1], "the drafter's favourite sibling is drawn first (on top)"
    assert position[2][1] < position[3][1] and position[5][1] < position[6][1]
    leaves = [3, 4, 5, 6]
    assert len({position[i][1] for i in leaves}) == len(leaves), "every leaf has a row of its own"
    assert position[2][1] == (position[5][1] + position[6][1]) / 2, "a parent is centred on its children"


def test_showcase_round_and_sizes():
    short = round_pair(1, accepted=(0,))
    long = round_pair(2, accepted=(0, 2))
    events = run_events([short, long])
    assert showcase_round(events) == 2
    assert showcase_round(events, min_accepted=1) == 1
    assert round_events(events, 2)[0] is long[0]
    with pytest.raises(ValueError, match="round 7"):
        round_events(events, 7)
    assert mean_tree_size(events) == 6.0
    assert root_token(events, 1) == 5 and root_token(events, 2) == 1, "the last token committed before the round"
    row = run_row("eagle", events, ar_tokens_per_s=10.0)
    assert row["speedup"] == 2.0 and row["mean tree size"] == 6.0 and row["τ"] == 2.5


# --- figures ----------------------------------------------------------------------------------------
def test_tree_figure_colours_labels_and_next_token():
    tree, verification = round_pair(sampled=True)
    fig = tree_figure(tree, verification, detokenize, root_text="root!")
    traces = {t.name: t for t in fig.data if t.name}
    assert list(traces["accepted path"].text) == ["␣The", "␣sky"]
    assert list(traces["tried, rejected"].text) == ["␣A", "↵", "␣is"]
    assert list(traces["sent, never reached"].text) == ["␣cat"]
    assert traces["pruned by the rerank (not sent)"].marker.symbol == "circle-open"
    assert list(traces["correction: the target's own token"].text) == ["␣blue"]
    assert "root!" in traces["root"].text
    hover = traces["tried, rejected"].hovertext[0]
    assert "score -1.50" in hover and "rank 1" in hover and "p = 0.300" in hover and "u = 0.250" in hover
    assert "2 accepted + 1 correction" in fig.layout.title.text
    without_pruned = {t.name for t in tree_figure(tree, verification, show_pruned=False).data if t.name}
    assert "pruned by the rerank (not sent)" not in without_pruned


def test_next_token_gets_a_row_of_its_own():
    tree, verification = round_pair()
    fig = tree_figure(tree, verification)
    points = {(x, y) for t in fig.data if t.mode and "markers" in t.mode for x, y in zip(t.x, t.y)}
    marker_count = sum(len(t.x) for t in fig.data if t.mode and "markers" in t.mode)
    assert len(points) == marker_count, "no two markers overlap"


def test_token_labels():
    assert token_label(21, detokenize) == "↵"
    assert token_label(99, detokenize) == "#99", "a token with no visible text shows its id"
    assert token_label(7) == "#7"
    assert token_label(10, lambda ids: "a" * 30, width=5) == "aaaa…"


def test_mask_figure_is_the_engines_mask():
    tree, verification = round_pair()
    engine_tree = DraftTreeNodes(nodes=[TreeNode(n["token"], n["parent"], n["depth"], score=n["score"]) for n in NODES])
    sent = engine_tree.subset([n["id"] for n in NODES if n["sent"]])
    assert verify_parents(tree) == sent.verify_parents() == [-1, 0, 0, 1, 1, 2, 3]
    fig = tree_mask_figure(tree, verification, detokenize)
    z = fig.data[0].z
    allowed = (tree_mask(0, sent.verify_parents(), torch.float32, "cpu")[0, 0] == 0).tolist()
    assert [[cell > 0 for cell in row] for row in z] == allowed
    assert list(z[6]) == [1, 1, 0, 1, 0, 0, 1], "node 5 sees the root, its ancestors 0 and 2, and itself"
    assert list(z[3]) == [2, 2, 0, 2, 0, 0, 0], "the accepted path (root, 0, 2) is marked among itself"
    assert len(z) == 7, "root + the six sent nodes, no prefix, no pruned node"
    assert list(fig.layout.yaxis.ticktext)[:2] == ["root", "<b>␣The ✓</b>"]


def test_tau_vs_tree_size_figure():
    points = [{"total_tokens": 4, "tree_size": 4.0, "tau": 1.4, "tokens_per_s": 30.0, "speedup": 1.1},
              {"total_tokens": "auto", "tree_size": 7.5, "tau": 1.6, "tokens_per_s": 33.0, "speedup": 1.2}]
    predicted = [{"size": m, "tau": 1 + m / 10, "rounds": 3} for m in range(1, 9)]
    fig = tau_vs_tree_size(points, predicted, predict_from=8)
    by_name = {(t.name, t.xaxis): t for t in fig.data}
    assert list(by_name[("τ predicted from the run at 8", "x")].x) == list(range(1, 9))
    assert list(by_name[("measured, auto size", "x")].x) == [7.5], "auto is drawn at its mean tree size"
    assert list(by_name[("measured, fixed size", "x2")].y) == [1.1]
    no_baseline = tau_vs_tree_size([{**p, "speedup": None} for p in points])
    assert no_baseline.layout.annotations[1].text == "tokens/s"


# --- predicting τ from one run's trees --------------------------------------------------------------
def test_predicted_tau_counts_the_accepted_path_among_the_best_nodes():
    # Round 1 ranks its sent nodes 0, 2, 5, 1, 4, 3 by score: its path (0, 2) is the two best.
    # Round 2 accepted nothing. Round 3 accepted 0 only.
    events = run_events([round_pair(1), round_pair(2, accepted=()), round_pair(3, accepted=(0,))])
    tau = {p["size"]: p["tau"] for p in predicted_tau(events)}
    assert tau[1] == pytest.approx((2 + 1 + 2) / 3)
    assert tau[2] == pytest.approx((3 + 1 + 2) / 3)
    assert tau[6] == tau[2], "beyond the path's last node a larger tree adds nothing to these rounds"
    assert tau[6] == pytest.approx(events[-1].stats["mean_accepted_length"]), "at the run's own size: its τ"
    assert sorted(tau) == list(range(1, 7))


def test_prediction_refuses_sampled_runs():
    with pytest.raises(ValueError, match="greedy"):
        predicted_tau(run_events([round_pair()], temperature=0.7))
    with pytest.raises(ValueError, match="no verified trees"):
        predicted_tau(run_events([]))


# --- theory -----------------------------------------------------------------------------------------
def test_rank_probabilities_spread_coverage():
    coverage = {1: 0.4, 2: 0.5, 4: 0.7, 8: 0.8}
    probs = rank_probabilities(coverage, 8)
    assert probs[:4] == pytest.approx([0.4, 0.1, 0.1, 0.1])
    assert probs[4:] == pytest.approx([0.025] * 4)
    assert sum(rank_probabilities(coverage, 3)) == pytest.approx(0.6)
    assert sum(rank_probabilities(coverage, 12)) == pytest.approx(0.8), "nothing beyond the last measured k"
    with pytest.raises(ValueError):
        rank_probabilities({2: 0.5}, 2)


def test_tree_formulas():
    probs = [0.5, 0.2]
    # depth 2, two children each: paths 0.5, 0.2, 0.25, 0.1, 0.1, 0.04
    assert best_tree_paths(probs, 2, 3) == pytest.approx([0.5, 0.25, 0.2])
    assert expected_tree_tokens(probs, 2, 3) == pytest.approx(1.95)
    assert full_tree_nodes(2, 2) == 6
    assert expected_tree_tokens(probs, 2) == pytest.approx(1 + 0.7 + 0.49)
    assert expected_tree_tokens(probs, 2, 6) == pytest.approx(expected_tree_tokens(probs, 2))
    assert expected_tree_tokens([0.4], 5) == pytest.approx(expected_tokens_per_round(0.4, 5)), "a chain"
    assert expected_tree_tokens(probs, 2, 100) == pytest.approx(expected_tree_tokens(probs, 2)), "at most the full tree"
    curve = FakeCurve()
    # τ·cost(1) / (D·c·cost(1) + cost(N+1)) = 2·0.010 / (2·0.5·0.010 + 0.013)
    assert tree_speedup(2.0, 3, 2, 0.5, curve.cost) == pytest.approx(0.02 / 0.023)


def test_shipped_eagle_agreement_and_theory_figures():
    coverage = heldout_topk_agreement("eagle")
    assert [round(coverage[k], 2) for k in (1, 2, 4, 8)] == [0.41, 0.54, 0.65, 0.74], "docs/drafters.md's numbers"
    with pytest.raises(ValueError, match="no agreement"):
        heldout_topk_agreement("nope")
    probs = rank_probabilities(coverage, 4)
    fig = tree_budget_figure(probs, 5, 0.1, FakeCurve(), nodes=12)
    assert {t.name for t in fig.data} >= {"best tree, k = 4", "your n = 12", "chain of depth 5 (n = 5)"}
    tau = next(t for t in fig.data if t.name == "best tree, k = 4" and t.xaxis == "x")
    assert tau.y[11] == pytest.approx(expected_tree_tokens(probs, 5, 12))
    assert len(verify_cost_figure(FakeCurve(), highlight=13).data) == 3
    readout = tree_theory_readout(coverage, 5, 4, 0.1, 12, FakeCurve())
    assert "1,364" in readout and f"{expected_tree_tokens(probs, 5, 12):.2f}" in readout


# --- the real model ---------------------------------------------------------------------------------
def test_real_eagle_run_draws_and_predicts(real_engine):
    prompt = "List three primary colours."
    run = real_engine.run(prompt, "eagle", max_new_tokens=20, total_tokens=8)
    trees = [e for e in run.events if isinstance(e, DraftTree)]
    commits = {e.round: e for e in run.events if isinstance(e, Commit)}
    assert trees and len(trees) == run.stats.rounds
    last, cut = max(commits), 0
    for tree in trees:
        tree_, verification = round_events(run.events, tree.round)
        outcomes = node_outcomes(tree_, verification)
        on_path = sum(o == "accepted" for o in outcomes.values())
        # max_new_tokens or an end-of-sequence token may cut the last round's accepted path short
        round_cut = on_path - commits[tree.round].accepted
        assert round_cut == 0 or (tree.round == last and round_cut > 0)
        cut += round_cut
        assert sum(o != "pruned" for o in outcomes.values()) == commits[tree.round].drafted
        fig = tree_figure(tree_, verification, real_engine.detokenize)
        accepted = next((t for t in fig.data if t.name == "accepted path"), None)
        pieces = commits[tree.round].pieces[:commits[tree.round].accepted]
        shown = list(accepted.text) if accepted else []  # the path the target accepted, cut or not
        assert shown[:len(pieces)] == [token_label(t, real_engine.detokenize) for t in
                                       commits[tree.round].tokens[:len(pieces)]]
        assert len(shown) == len(pieces) + round_cut
        mask = tree_mask_figure(tree_, verification, real_engine.detokenize)
        assert len(mask.data[0].z) == commits[tree.round].drafted + 1
    predicted = predicted_tau(run.events)
    full = predicted[-1]["tau"]
    # Every round commits what the prediction counts, but for the last round's cut.
    assert full == pytest.approx(1 + (run.stats.accepted + cut) / run.stats.rounds)
    assert all(a["tau"] <= b["tau"] for a, b in zip(predicted, predicted[1:])), "τ never falls as the tree grows"


def test_real_tree_size_sweep(real_engine):
    calls = []
    result = tree_size_sweep(real_engine, "Name two planets.", [1, 4], max_new_tokens=12,
                             progress=lambda i, n: calls.append((i, n)))
    assert calls == [(1, 3), (2, 3), (3, 3)], "ar, then each size (the largest doubles as the one to predict from)"
    assert [p["total_tokens"] for p in result["points"]] == [1, 4]
    assert all(p["tau"] >= 1 and p["speedup"] > 0 for p in result["points"])
    assert result["predict_from"] == 4 and [p["size"] for p in result["predicted"]] == [1, 2, 3, 4]
    assert result["points"][0]["tree_size"] <= 1.0
    assert math.isclose(result["predicted"][-1]["tau"], result["points"][1]["tau"], rel_tol=0.2)
    fig = tau_vs_tree_size(result["points"], result["predicted"], result["predict_from"])
    assert len(fig.data) == 3
    with pytest.raises(ValueError, match="sizes"):
        tree_size_sweep(real_engine, "x", ["big"])
