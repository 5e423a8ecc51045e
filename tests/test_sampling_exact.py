"""Speculative sampling must leave the target's output distribution exactly unchanged.

On a tiny random model (vocabulary 8) the distribution of three generated tokens can be enumerated
exactly; thousands of seeded speculative runs must match it (chi-square). The same test with a
deliberately wrong residual rule must fail, proving the test has the power to catch one.
"""

import itertools

import pytest
import torch
from scipy.stats import chisquare

import engines.verify as verify
from engines import Engine
from tests.conftest import tiny_llama

PROMPT = [1, 2, 3]
N_TOKENS = 3
N_RUNS = 3000


def exact_distribution(model) -> dict[tuple, float]:
    vocab = model.config.vocab_size
    dist = {}
    with torch.inference_mode():
        for seq in itertools.product(range(vocab), repeat=N_TOKENS):
            logits = model(torch.tensor([PROMPT + list(seq)])).logits[0, len(PROMPT) - 1:-1]
            probs = torch.softmax(logits.double(), -1)
            dist[seq] = float(torch.prod(probs[torch.arange(N_TOKENS), torch.tensor(seq)]))
    return dist


def chi_square_pvalue(engine: Engine, dist: dict, method: str, **options) -> float:
    counts = {seq: 0 for seq in dist}
    for seed in range(N_RUNS):
        result = engine.run(PROMPT, method, max_new_tokens=N_TOKENS, temperature=1.0, seed=seed,
                            instrument=False, **options)
        counts[tuple(result.token_ids)] += 1
    # pool rare sequences so every chi-square cell expects at least 5 samples
    common = [s for s in dist if dist[s] * N_RUNS >= 5]
    rare = [s for s in dist if dist[s] * N_RUNS < 5]
    observed = [counts[s] for s in common] + [sum(counts[s] for s in rare)]
    expected = [dist[s] * N_RUNS for s in common] + [sum(dist[s] for s in rare) * N_RUNS]
    return float(chisquare(observed, expected).pvalue)


@pytest.fixture(scope="module")
def setup():
    target = tiny_llama(vocab=8, layers=2, seed=1, logit_scale=4.0)
    engine = Engine(target)
    engine.add_draft("other", tiny_llama(vocab=8, layers=1, seed=2, logit_scale=4.0))
    return engine, exact_distribution(target)


def test_sps_sampling_matches_target_distribution(setup):
    engine, dist = setup
    assert chi_square_pvalue(engine, dist, "sps", gamma=2, draft="other") > 0.001


def test_sps_auto_gamma_sampling_matches_target_distribution(setup):
    """Draft lengths chosen from measured timings and past acceptance: still the target's distribution."""
    engine, dist = setup
    assert chi_square_pvalue(engine, dist, "sps", gamma="auto", draft="other") > 0.001


def test_pld_point_mass_sampling_matches_target_distribution(setup):
    engine, dist = setup
    assert chi_square_pvalue(engine, dist, "pld", gamma=2) > 0.001


def test_broken_residual_rule_is_caught(setup, monkeypatch):
    """Resampling from p instead of norm(max(p − q, 0)) after a rejection biases the output: detected."""
    engine, dist = setup
    monkeypatch.setattr(verify, "residual_distribution", lambda p, q: p)
    assert chi_square_pvalue(engine, dist, "sps", gamma=2, draft="other") < 1e-6


@pytest.fixture(scope="module")
def deep_setup():
    """A target whose second layer really changes the output (its projections scaled up): the exit after
    layer 1 then drafts from a different distribution (α ≈ 0.7, not 0.9), so a wrong rule shows."""
    target = tiny_llama(vocab=8, layers=2, seed=1, logit_scale=4.0)
    with torch.no_grad():
        target.model.layers[1].mlp.down_proj.weight.mul_(8)
        target.model.layers[1].self_attn.o_proj.weight.mul_(8)
    return Engine(target), exact_distribution(target)


def test_ppsd_sampling_matches_target_distribution(deep_setup):
    """PPSD judges each draft on the last stage with min(1, p/q) against the exact q stage 1 shipped."""
    engine, dist = deep_setup
    assert chi_square_pvalue(engine, dist, "ppsd", exit_layer=1, head="none", mode="serial") > 0.001


def test_ppsd_broken_residual_rule_is_caught(deep_setup, monkeypatch):
    engine, dist = deep_setup
    monkeypatch.setattr(verify, "residual_distribution", lambda p, q: p)
    assert chi_square_pvalue(engine, dist, "ppsd", exit_layer=1, head="none", mode="serial") < 1e-6


# --- speculating on the verdict (Mirror-SD, SSD): the draft on its own lane ----------------------------------
@pytest.fixture(scope="module")
def verdict_setup(setup):
    engine, dist = setup
    yield engine, dist
    engine.close()


@pytest.mark.parametrize("method,options", [
    ("mirror", {"exit_layer": 1, "kappa": 2, "gamma": 2, "mode": "serial"}),
    ("mirror", {"exit_layer": 1, "kappa": 2, "gamma": 2, "rule": "token_match", "mode": "serial"}),
    ("ssd", {"lookahead": 2, "fanout": "geometric", "budget": 4, "c": 0.5, "mode": "serial"}),
    ("ssd", {"lookahead": 2, "f": 1, "c": 0.5, "backup": "fast", "mode": "serial"}),
    ("mirror", {"exit_layer": 1, "kappa": 2, "gamma": 2, "mode": "lanes"}),
    ("ssd", {"lookahead": 2, "f": 2, "c": 0.5, "mode": "lanes"}),
])
def test_verdict_speculation_sampling_matches_target_distribution(verdict_setup, method, options):
    """Whichever cached window the verdict picks (or the backup), each token is judged against the q it was
    drawn from — SAGUARO's σ, a lookup's point mass — so the output is the target's distribution."""
    engine, dist = verdict_setup
    assert chi_square_pvalue(engine, dist, method, draft="other", **options) > 0.001


def test_saguaro_judged_against_the_unshaped_q_is_caught(verdict_setup, monkeypatch):
    """Drawing from σ_{F,C} but verifying against the draft's plain q biases the output: detected."""
    from engines.branch_rollout import BranchDrafter

    def draw_shaped_report_plain(logits, depth, sampler, shape, branch):
        q = sampler.probs(logits[None])[0]
        shaped, _ = shape(depth, q)
        return sampler.draw_by_cdf(shaped), q

    monkeypatch.setattr(BranchDrafter, "_draw", staticmethod(draw_shaped_report_plain))
    engine, dist = verdict_setup
    assert chi_square_pvalue(engine, dist, "ssd", draft="other", lookahead=2, f=2, c=0.2, mode="serial") < 1e-6


# --- Mixture of Attentions: a drafter that reads every layer, single device and client–server ---------------
@pytest.fixture(scope="module")
def moa_setup(setup, tmp_path_factory):
    from engines.drafters.moa import moa_name
    from engines.drafters.trained import save_trained
    from tests.test_moa import random_moa

    engine, dist = setup
    root = tmp_path_factory.mktemp("moa-drafts")
    patch = pytest.MonkeyPatch()
    patch.setenv("SPECVIZ_DRAFTS", str(root))
    stack = engine.target
    for tli in (0, 1):
        card = {"name": moa_name(tli), "kind": "moa", "tli": tli, "lsa": True, "target_layers": stack.n_layers,
                "hidden_size": stack.config.hidden_size, "vocab_size": stack.config.vocab_size,
                "draft_vocab_size": stack.config.vocab_size}
        save_trained(card["name"], random_moa(stack, tli, seed=tli), card)
    yield engine, dist
    patch.undo()


@pytest.mark.parametrize("options", [
    {"tli": 1, "depth": 2, "topk": 2, "total_tokens": 4},
    {"tli": 0, "tree": False, "gamma": 2},
    {"tli": 1, "depth": 2, "topk": 2, "total_tokens": 4, "network": "5g"},
])
def test_moa_sampling_matches_target_distribution(moa_setup, options):
    """Tree (point-mass children), chain (drawn from q) and client–server with 8-bit activations."""
    engine, dist = moa_setup
    assert chi_square_pvalue(engine, dist, "moa", **options) > 0.001


def test_moa_chain_broken_residual_rule_is_caught(moa_setup, monkeypatch):
    engine, dist = moa_setup
    monkeypatch.setattr(verify, "residual_distribution", lambda p, q: p)
    assert chi_square_pvalue(engine, dist, "moa", tli=0, tree=False, gamma=2) < 1e-6
