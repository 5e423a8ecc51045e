"""Mirror-SD and SSD: the speculation cache, batched branch rollouts, the same tokens in every mode, the
events the views read, and clear errors for bad input.

Tiny random models keep these fast (sampling exactness: the rules in ``test_verification_rules.py``, their
routing in ``test_draft_routing.py``); the real-model checks are at the end. Speed is never asserted here: ``specviz bench`` measures it.
"""

from __future__ import annotations

import math

import pytest
import torch

from engines import Engine
from engines.core.sampling import Sampler
from engines.drafters.streaming import StreamingDraft, StreamingDrafter
from engines.model.layers import LayerStack
from engines.programs.verdict.branch_rollout import BranchDrafter
from engines.programs.verdict.guesser import mirror_roots
from engines.programs.verdict.speculation_cache import (
    Root,
    SpeculationCache,
    Window,
    acceptance_law,
    fit_power_law,
    geometric_fanout,
    predicted_hit_rate,
    saguaro,
    uniform_fanout,
)
from tests.conftest import tiny_llama
from tests.lane_processes import lane_workers

PROMPT = [1, 5, 9, 3, 7]


@pytest.fixture(scope="module")
def engine():
    engine = Engine(tiny_llama(vocab=64, layers=4, seed=3))
    engine.add_draft("other", tiny_llama(vocab=64, layers=1, seed=4))
    yield engine
    engine.close()
    assert lane_workers() == []


# --- the cache and its fan-out ----------------------------------------------------------------------
def test_cache_hands_back_the_window_filed_under_the_verdict():
    cache = SpeculationCache()
    cache.put(Root(2, 17, 0), Window([4, 5, 6]))
    cache.put(Root(0, 17, 1), Window([7, 8, 9]))
    assert cache.lookup(2, 17).tokens == [4, 5, 6]
    assert cache.lookup(0, 17).tokens == [7, 8, 9]
    assert cache.lookup(1, 17) is None and len(cache) == 2


def test_geometric_fanout_follows_the_lagrangian_optimum_within_budget():
    a_p, r, lookahead, budget = 0.6, 0.5, 5, 40
    fan = geometric_fanout(lookahead, budget, a_p, r)
    assert sum(fan) == budget and len(fan) == lookahead + 1
    law = acceptance_law(a_p, lookahead)
    ideal = [p ** (1 / (1 + r)) for p in law]
    exact = [budget * w / sum(ideal) for w in ideal]
    assert all(abs(f - x) < 1 for f, x in zip(fan, exact))  # largest remainder never moves a slot by a whole unit
    assert fan[0] > fan[1] > fan[2]  # more guesses where the verdict is likelier
    assert predicted_hit_rate(fan, a_p, r) > predicted_hit_rate(uniform_fanout(lookahead, budget // 6), a_p, r)


def test_power_law_fit_recovers_the_exponent_of_synthetic_ranks():
    generator = torch.Generator().manual_seed(0)
    r_true = 0.7
    # P(rank >= F) = P(U^(-1/r) > F) = F^-r  with  rank = ceil(U^(-1/r)) − 1, U uniform
    u = torch.rand(20000, generator=generator)
    ranks = (u ** (-1 / r_true)).ceil().long().sub(1).tolist()
    c, r = fit_power_law(ranks, max_fanout=32)
    assert r == pytest.approx(r_true, abs=0.08)
    assert c == pytest.approx(1.0, abs=0.15)
    assert fit_power_law([0, 1]) == (1.0, 0.0)  # too little data: no claim


def test_saguaro_moves_mass_off_the_top_f_and_stays_a_distribution():
    probs = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05])
    shaped, moved = saguaro(probs, 2, 0.5)
    assert float(shaped.sum()) == pytest.approx(1.0)
    assert float(shaped[0] / shaped[2]) == pytest.approx(0.5 * 0.5 / 0.15)  # top-F scaled by C relative to the rest
    assert moved == pytest.approx(0.7 - float(shaped[:2].sum()))
    assert saguaro(probs, 2, 1.0)[0] is probs  # C = 1: plain sampling


def test_mirror_roots_are_the_early_exits_top_kappa_less_each_drafted_token():
    """Position j's roots are its top-κ without window[j] (refused when the verdict lands at j), ranked anew;
    the last position (the bonus) keeps all κ; each root carries its early-exit log-probability."""
    ids = [[5, 7, 9], [7, 2, 4], [1, 3, 8]]  # γ = 2 drafts → 3 verified positions, κ = 3
    logprobs = torch.tensor([-0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7, -0.8, -0.9])
    roots = mirror_roots(ids, logprobs, [7, 4])
    assert [(r.k, r.token, r.rank) for r in roots] == [(0, 5, 0), (0, 9, 1), (1, 7, 0), (1, 2, 1),
                                                       (2, 1, 0), (2, 3, 1), (2, 8, 2)]
    assert [r.score for r in roots] == pytest.approx([-0.1, -0.3, -0.4, -0.5, -0.7, -0.8, -0.9])
    assert mirror_roots([], torch.empty(0), [1]) == []


# --- branch rollouts ---------------------------------------------------------------------------------
def sequential_greedy(model, ids: list[int], n: int) -> list[int]:
    out = list(ids)
    with torch.inference_mode():
        for _ in range(n):
            out.append(int(model(torch.tensor([out])).logits[0, -1].argmax()))
    return out[len(ids):]


def test_batched_branch_rollout_equals_each_branch_decoded_alone():
    model = tiny_llama(vocab=64, layers=2, seed=5, logit_scale=3.0)
    drafter = BranchDrafter(model, "other", 256)
    committed, window = [3, 1, 4, 1, 5], [9, 2, 6]
    with torch.inference_mode():
        z = drafter.glue(committed, window)
        roots = [(0, 7), (0, 8), (1, 11), (2, 12), (3, 13)]
        branches, stats = drafter.rollout(roots, 4, Sampler(0.0))
    assert stats.steps == 4 and stats.rows == [5, 5, 5, 5]
    for (k, token), branch in zip(roots, branches):
        assert branch.tokens == sequential_greedy(model, committed + window[:k] + [token], 4)
    # the glue's rows are the draft's view after k accepted tokens
    with torch.inference_mode():
        full = model(torch.tensor([committed + window])).logits[0, len(committed) - 1:]
    assert torch.allclose(z, full.float(), atol=1e-4)
    assert drafter.cache.length(0) == len(committed) + len(window)  # the tree rows are gone again


def test_streaming_rollout_equals_the_streaming_drafter_per_branch():
    """With lookahead streams a branch gains 1 + S tokens per forward, the same ones a lone drafter proposes."""
    target = LayerStack(tiny_llama(vocab=64, layers=4, seed=6, logit_scale=3.0))
    draft = StreamingDraft(target, torch.arange(64), n_layers=3, stream_layers=2, n_streams=2).eval()
    with torch.no_grad():
        draft.streams.normal_(0, 0.5)
    drafter = BranchDrafter(draft, "ss", 256)
    committed, window = [3, 1, 4, 1, 5], [9, 2, 6]
    roots = [(0, 7), (1, 11), (3, 13)]
    with torch.inference_mode():
        drafter.glue(committed, window)
        branches, stats = drafter.rollout(roots, 5, Sampler(0.0))
    assert stats.steps == math.ceil(5 / 3)
    for (k, token), branch in zip(roots, branches):
        alone = StreamingDrafter(draft)
        alone.cache = draft.stack.new_cache(256)
        alone.cached_ids = []
        with torch.inference_mode():
            assert branch.tokens == alone.propose(committed + window[:k] + [token], 5, Sampler(0.0)).tokens


# --- the same tokens in every mode --------------------------------------------------------------------
CASES = [("ssd", {}), ("ssd", {"fanout": "geometric", "budget": 6}), ("ssd", {"backup": "fast", "f": 1}),
         ("ssd", {"c": 0.5, "lookahead": 3}), ("mirror", {"exit_layer": 1, "kappa": 3}),
         ("mirror", {"exit_layer": 3, "gamma": 2, "rule": "token_match"})]


@pytest.mark.parametrize("method,options", CASES)
def test_serial_greedy_equals_ar(engine, method, options):
    reference = engine.run(PROMPT, "ar", max_new_tokens=24).token_ids
    assert engine.run(PROMPT, method, max_new_tokens=24, draft="other", mode="serial", **options).token_ids == reference


@pytest.mark.parametrize("method", ["mirror", "ssd"])
def test_lanes_commit_what_serial_commits_greedy_and_sampling(engine, method):
    options = {"exit_layer": 2} if method == "mirror" else {"fanout": "geometric", "c": 0.7}
    reference = engine.run(PROMPT, "ar", max_new_tokens=20).token_ids
    assert engine.run(PROMPT, method, max_new_tokens=20, draft="other", mode="lanes", **options).token_ids == reference
    sampled = {mode: engine.run(PROMPT, method, max_new_tokens=20, draft="other", mode=mode, temperature=1.0, seed=5,
                                **options).token_ids for mode in ("serial", "lanes")}
    assert sampled["serial"] == sampled["lanes"]


def test_a_budget_of_one_token_ends_cleanly_in_lanes(engine):
    assert len(engine.run(PROMPT, "ssd", max_new_tokens=1, draft="other", mode="lanes").token_ids) == 1
    assert len(engine.run(PROMPT, "mirror", max_new_tokens=2, draft="other", mode="lanes", exit_layer=2).token_ids) == 2


# --- events -----------------------------------------------------------------------------------------
def kinds(events) -> set[str]:
    return {e.kind for e in events}


def test_mirror_events_carry_the_early_exit_and_each_reuse_decision(engine):
    result = engine.run(PROMPT, "mirror", max_new_tokens=24, draft="other", mode="serial", exit_layer=2, kappa=3,
                        gamma=3)
    assert {"ee_message", "branch_rollout", "reuse_decision", "cache_lookup", "backup", "fallback_rollout",
            "lane_message", "stage_span"} <= kinds(result.events)
    ee = next(e for e in result.events if e.kind == "ee_message")
    assert len(ee.ids) == 4 and all(len(row) == 3 for row in ee.ids) and ee.bytes > 0
    rollout = next(e for e in result.events if e.kind == "branch_rollout")
    assert len(rollout.roots) <= 4 * 3 and all(len(w) == 3 for w in rollout.windows)
    decisions = [e for e in result.events if e.kind == "reuse_decision"]
    lookups = [e for e in result.events if e.kind == "cache_lookup"]
    assert [d.outcome != "fallback" for d in decisions] == [lookup.hit for lookup in lookups]
    for d in decisions:
        assert d.outcome == "fallback" or d.outcome == ("root_hit" if d.accepted == 0 else "depth_hit")
    fallbacks = [e for e in result.events if e.kind == "fallback_rollout"]
    assert all(e.backup == "fallback" for e in fallbacks)
    assert len(fallbacks) == sum(d.outcome == "fallback" for d in decisions)
    stages = {(e.lane.split("/")[-1], e.stage) for e in result.events if e.kind == "stage_span"}
    assert {("target", "prefix"), ("target", "suffix"), ("target", "wait"), ("draft", "glue")} <= stages


def test_ssd_events_carry_the_cache_its_lookups_and_saguaro(engine):
    result = engine.run(PROMPT, "ssd", max_new_tokens=24, draft="other", mode="serial", lookahead=3,
                        fanout="uniform", f=2, c=0.5, temperature=1.0, seed=1)
    assert {"cache_build", "cache_lookup", "saguaro", "backup", "lane_message"} <= kinds(result.events)
    build = next(e for e in result.events if e.kind == "cache_build")
    assert build.fanout == [2, 2, 2, 2] and len(build.entries) <= 8
    assert all(0 <= rank < 2 for _, _, rank, _ in build.entries)
    assert all(m >= 0 for e in result.events if e.kind == "saguaro" for m in e.mass_moved)
    messages = {e.what for e in result.events if e.kind == "lane_message"}
    assert messages == {"start", "verdict", "window"}


# --- bad input ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("method,options,message", [
    ("mirror", {"kappa": 0}, "kappa must be in"),
    ("mirror", {"gamma": 40}, "gamma must be in"),
    ("mirror", {"exit_layer": 4}, r"exit_layer must be in \[1, 3\]"),
    ("mirror", {"exit_layer": 0}, r"exit_layer must be in \[1, 3\]"),
    ("mirror", {"exit_head": "deep"}, "exit_head must be one of"),
    ("mirror", {"rule": "typical"}, "rule must be one of"),
    ("ssd", {"lookahead": 0}, "lookahead must be in"),
    ("ssd", {"budget": 0}, "budget must be in"),
    ("ssd", {"c": 0}, r"c \(the SAGUARO down-weight\) must be in \(0, 1\]"),
    ("ssd", {"c": 1.5}, r"must be in \(0, 1\]"),
    ("ssd", {"fanout": "zipf"}, "fanout must be one of"),
    ("ssd", {"backup": "random"}, "backup must be one of"),
    ("ssd", {"mode": "virtual"}, "mode must be one of"),
    ("ssd", {"draft": "eagle"}, "draft must be one of the trained drafts"),
])
def test_bad_options_raise_a_value_error_naming_the_parameter(engine, method, options, message):
    with pytest.raises(ValueError, match=message):
        base = {"draft": "other", **({"exit_layer": 2} if method == "mirror" else {})}
        engine.run(PROMPT, method, max_new_tokens=4, **{**base, **options})


def test_a_draft_with_another_vocabulary_is_refused(engine):
    with pytest.raises(ValueError, match="vocabulary size"):
        engine.add_draft("wrong", tiny_llama(vocab=32, layers=1))
    with pytest.raises(ValueError, match=r"neither a trained drafter in .*\(there: .*\), a local model directory"):
        engine.run(PROMPT, "ssd", max_new_tokens=4, draft="no-such-draft", mode="serial")


def test_lanes_without_a_second_lane_is_refused_and_nothing_starts(monkeypatch):
    import engines.lanes.runtime as runtime

    monkeypatch.setattr(runtime, "usable_cores", lambda: [0])
    engine = Engine(tiny_llama(vocab=64, layers=4, seed=3))
    engine.add_draft("other", tiny_llama(vocab=64, layers=1, seed=4))
    before = lane_workers()
    for method in ("mirror", "ssd"):
        with pytest.raises(ValueError, match="needs a second lane"):
            engine.run(PROMPT, method, max_new_tokens=4, draft="other", mode="lanes",
                       **({"exit_layer": 2} if method == "mirror" else {}))
    assert lane_workers() == before


# --- the real model -----------------------------------------------------------------------------------
@pytest.mark.parametrize("method,options", [("mirror", {}), ("mirror", {"draft": "tiny", "exit_head": "norm"}),
                                            ("ssd", {"fanout": "geometric"})])
def test_real_model_is_token_identical_to_ar_in_fp32(real_engine, method, options):
    """fp32 greedy on SmolLM2 with the shipped drafts: both modes commit exactly ar's tokens."""
    prompt = "Explain why the sky is blue in two sentences."
    reference = real_engine.run(prompt, "ar", max_new_tokens=32).token_ids
    try:
        for mode in ("serial", "lanes"):
            assert real_engine.run(prompt, method, max_new_tokens=32, mode=mode, **options).token_ids == reference, mode
    finally:
        real_engine.close()
