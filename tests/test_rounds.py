"""Round-by-round views (specviz.views.rounds) and the refusal the engine records (engines.core.rejection_view), on
tiny random models: every refused draft token is the one the round drafted at the first unaccepted
position, its p and q are the ones the rule compared, and the views strike it through."""

from __future__ import annotations

import math

import pytest
import torch

from engines.core.rejection_view import rejection_view
from engines.core.sampling import Sampler
from engines.core.trace import Commit, DraftTree, StageSpan, Verification
from specviz.views import rounds
from tests.conftest import tiny_llama


def one_token(token: int) -> str:
    return f"<{token}>"


def test_rejection_view_greedy_shows_softmax_and_the_refused_token_even_outside_the_top():
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0])
    view = rejection_view(logits, Sampler(0.0), {6: 0.4}, k=3)
    assert view["tokens"] == [0, 1, 2, 6] and view["refused"] == [6]
    expected = torch.softmax(logits, -1)
    assert view["p"] == pytest.approx(expected[[0, 1, 2, 6]].tolist())
    assert view["q"] == [None, None, None, 0.4], "a model draft's q is known for its token only when greedy"
    assert "T = 1" in view["p_source"]


def test_rejection_view_point_mass_and_sampling_distribution():
    logits = torch.tensor([0.0, 2.0, 1.0])
    lookup = rejection_view(logits, Sampler(0.0), {2: 1.0}, k=2)
    assert lookup["q"] == [0.0, 1.0], "a copied draft is a point mass on its token"
    q = torch.tensor([0.2, 0.3, 0.5])
    sampled = rejection_view(logits, Sampler(0.7, top_p=0.9), {2: 0.5}, draft_probs=q, k=3)
    assert sampled["p"] == pytest.approx(Sampler(0.7, top_p=0.9).probs(logits[None])[0][sampled["tokens"]].tolist())
    assert sampled["q"] == pytest.approx(q[sampled["tokens"]].tolist())
    with pytest.raises(ValueError, match="refused"):
        rejection_view(logits, Sampler(0.0), {})


@pytest.mark.parametrize("method,options", [("sps", dict(draft="other", gamma=4)), ("pld", dict(gamma=4)),
                                            ("eagle", dict(draft="other", depth=3, topk=2, total_tokens=6))])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_engine_records_each_refusal_and_the_views_strike_it_through(tiny_engine, method, options, temperature):
    tiny_engine.add_draft("other", tiny_llama(vocab=16, layers=1, seed=2))
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    run = tiny_engine.run(prompt, method, max_new_tokens=24, temperature=temperature, seed=3, **options)
    views = [v for v in rounds.round_views(run.events) if v.round > 0]
    commits = [e for e in run.events if isinstance(e, Commit) and e.round > 0]
    assert [v.round for v in views] == [c.round for c in commits]
    refused = [v for v in views if v.rejection]
    assert refused, "a random 1-layer draft gets refused"
    for view, commit in zip(views, commits):
        kept = [t for t, fate in view.drafted if fate == "accepted"]
        assert kept + [view.next_token] == commit.tokens == view.committed
        if view.next_fate == "correction" and view.rejection:
            assert [t for t, fate in view.drafted if fate == "refused"] == view.rejection["refused"]
            assert view.next_token not in view.rejection["refused"], "a correction is never the refused token"
            assert all(0 <= p <= 1 for p in view.rejection["p"])
            if temperature == 0:  # the target's argmax is the correction
                top = max(range(len(view.rejection["p"])), key=view.rejection["p"].__getitem__)
                assert math.isclose(view.rejection["p"][top], max(view.rejection["p"]))
        if view.next_fate == "bonus":
            assert view.rejection is None and all(fate == "accepted" for _, fate in view.drafted)
    html = rounds.rounds_html(views, one_token)
    assert html.count("line-through") >= len(refused)
    figure = rounds.rejection_figure(refused[0], one_token)
    assert [trace.name for trace in figure.data] == ["target p", "draft q"]


def test_chain_round_marks_the_first_refusal_and_the_unjudged_rest():
    tree = DraftTree(t=0, round=1, drafter="d", nodes=[{"id": i, "parent": i - 1, "token": 10 + i, "depth": i + 1}
                                                        for i in range(4)])
    verdict = Verification(t=0, round=1, accepted=[0], rejected=[1, 2, 3], next_token=99, next_fate="correction",
                           rejection={"tokens": [99, 11], "p": [0.6, 0.1], "q": [None, 0.5], "refused": [11],
                                      "p_source": "x"})
    commit = Commit(t=0, round=1, tokens=[10, 99], fates=["accepted", "correction"], pieces=["a", "b"], drafted=4,
                    accepted=1)
    [view] = rounds.round_views([tree, verdict, commit])
    assert view.drafted == [(10, "accepted"), (11, "refused"), (12, "unreached"), (13, "unreached")]
    html = rounds.round_html(view, one_token)
    assert html.index("&lt;11&gt;") < html.index("&lt;12&gt;") < html.index("&lt;99&gt;")
    assert "refused by the target" in html and "never judged" in html


def test_rejection_figure_needs_a_refusal():
    view = rounds.RoundView(round=2, drafted=[(1, "accepted")], next_token=2, next_fate="bonus")
    with pytest.raises(ValueError, match="round 2"):
        rounds.rejection_figure(view, one_token)


def test_time_split_adds_up_to_each_rounds_wall_time():
    events = [Commit(t=0.0, round=0, tokens=[1], fates=["target"], pieces=["a"], drafted=0, accepted=0),
              StageSpan(t=0.01, lane="cpu0", stage="draft", round=1, start=0.0, end=0.01),
              StageSpan(t=0.04, lane="cpu0", stage="verify", round=1, start=0.01, end=0.04),
              Commit(t=0.05, round=1, tokens=[2, 3], fates=["accepted", "bonus"], pieces=["b", "c"], drafted=2,
                     accepted=2),
              StageSpan(t=0.08, lane="cpu0", stage="verify", round=2, start=0.05, end=0.08),
              Commit(t=0.10, round=2, tokens=[4], fates=["correction"], pieces=["d"], drafted=1, accepted=0)]
    rows = rounds.time_split_rows(events)
    assert [r["round"] for r in rows] == [1, 2], "the prefill's token is not a round"
    assert rows[0]["draft"] == pytest.approx(10) and rows[0]["verify"] == pytest.approx(30)
    assert rows[0]["outside spans"] == pytest.approx(10) and rows[1]["outside spans"] == pytest.approx(20)
    summary = rounds.time_split_summary(events)
    assert sum(summary.values()) == pytest.approx(1.0)
    assert summary["verify"] == pytest.approx(0.6)
    figure = rounds.time_split_figure(events)
    assert {trace.name for trace in figure.data} == {"draft", "verify", "outside spans"}


class FlatCurve:
    """Verification free, as Leviathan et al. assume: any n tokens cost one step."""

    def cost(self, n: int) -> float:
        return 0.01


def test_a_chain_run_becomes_a_point_on_leviathans_model(tiny_engine):
    from specviz.theory import expected_speedup
    from specviz.views.session_points import chain_run_point, predicted_vs_measured_figure

    tiny_engine.add_draft("other", tiny_llama(vocab=16, layers=1, seed=2))
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    ar = tiny_engine.run(prompt, "ar", max_new_tokens=20)
    run = tiny_engine.run(prompt, "sps", max_new_tokens=20, draft="other", gamma=3)
    point = chain_run_point(run.events, ar.events, FlatCurve(), label="sps")
    assert point["γ"] == 3 and point["a"] == pytest.approx(run.stats.per_token_acceptance)
    assert point["measured"] == pytest.approx(run.stats.tokens_per_s / ar.stats.tokens_per_s)
    assert point["predicted"] == pytest.approx(expected_speedup(min(point["a"], 0.999), 3, point["c"]))
    assert point["c"] > 0
    assert chain_run_point(ar.events, ar.events, FlatCurve()) is None, "ar drafts no chain"
    tree = tiny_engine.run(prompt, "eagle", max_new_tokens=8, draft="other", depth=2, topk=2, total_tokens=4)
    assert chain_run_point(tree.events, ar.events, FlatCurve()) is None, "a tree is not Leviathan's chain"
    figure = predicted_vs_measured_figure([point])
    assert figure.data[1].x[0] == pytest.approx(point["predicted"])
    with pytest.raises(ValueError, match="points"):
        predicted_vs_measured_figure([])
