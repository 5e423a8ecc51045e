"""The rest of the lossless sampling paths leave the target's distribution unchanged (engine issue item 3):
early-exit self-speculation on a shared cache, nucleus sampling (top-p < 1), a drafter that reads out only
part of the vocabulary, and the lookahead tokens of a speculative-streaming draft.

Same harness as ``test_sampling_exact.py`` (three tokens of a vocabulary-8 model enumerated exactly, 3000
seeded runs, chi-square); every path has a twin with a broken rule that must be caught.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import engines.drafters.base as drafter_base
import engines.verify as verify
from engines import Engine
from engines.drafters.trained import build_module, save_trained, set_vocab
from engines.sampling import Sampler
from tests.conftest import tiny_llama
from scipy.stats import chisquare

from tests.test_sampling_exact import N_RUNS, N_TOKENS, PROMPT, chi_square_pvalue

TOP_P = 0.8
DRAFT_VOCAB = [0, 2, 3, 5, 6]  # the draft never proposes 1, 4 or 7: those come only from corrections and bonuses


def warped_distribution(model, top_p: float) -> dict[tuple, float]:
    """The exact law of three sampled tokens when every step is warped as :meth:`Sampler.probs` warps it."""
    sampler = Sampler(1.0, top_p)
    dist = {}
    with torch.inference_mode():
        for seq in itertools.product(range(model.config.vocab_size), repeat=N_TOKENS):
            logits = model(torch.tensor([PROMPT + list(seq)])).logits[0, len(PROMPT) - 1:-1].double()
            probs = sampler.probs(logits)
            dist[seq] = float(torch.prod(probs[torch.arange(N_TOKENS), torch.tensor(seq)]))
    return dist


def deep_target(layers: int = 2):
    """Its last layer really changes the output, so an early exit drafts from another distribution."""
    target = tiny_llama(vocab=8, layers=layers, seed=1, logit_scale=4.0)
    with torch.no_grad():
        target.model.layers[-1].mlp.down_proj.weight.mul_(8)
        target.model.layers[-1].self_attn.o_proj.weight.mul_(8)
    return target


def card_for(stack, name: str, kind: str, **fields) -> dict:
    return {"name": name, "kind": kind, "target_layers": stack.n_layers, "hidden_size": stack.config.hidden_size,
            "vocab_size": stack.config.vocab_size, "draft_vocab_size": len(DRAFT_VOCAB), **fields}


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """A deep target with two drafters saved as shipped ones: an exit head at layer 1 restricted to
    ``DRAFT_VOCAB`` and a speculative-streaming draft (one layer, two lookahead streams)."""
    root = tmp_path_factory.mktemp("exact-drafts")
    patch = pytest.MonkeyPatch()
    patch.setenv("SPECVIZ_DRAFTS", str(root))
    target = deep_target()
    engine = Engine(target)
    stack = engine.target
    vocab = torch.tensor(DRAFT_VOCAB)
    generator = torch.Generator().manual_seed(5)
    head_card = card_for(stack, "exit@1-norm", "exit_norm", exit_layer=1)
    head = build_module(head_card, stack)
    set_vocab(head, vocab)
    save_trained(head_card["name"], head, head_card)
    ss_card = card_for(stack, "ss", "ss", layers=1, stream_layers=1, streams=2, trained_layers=[0])
    streaming = build_module(ss_card, stack)
    set_vocab(streaming, vocab)
    with torch.no_grad():  # distinct lookahead streams, so stream tokens are drawn from their own q
        streaming.streams.copy_(torch.randn(streaming.streams.shape, generator=generator))
    save_trained(ss_card["name"], streaming, ss_card)
    yield engine, warped_distribution(target, 1.0), warped_distribution(target, TOP_P)
    patch.undo()


def test_eesd_on_the_shared_cache_matches_the_target(paths):
    engine, dist, _ = paths
    assert chi_square_pvalue(engine, dist, "eesd", exit_layer=1, gamma=2) > 0.001


def test_eesd_broken_residual_is_caught(paths, monkeypatch):
    engine, dist, _ = paths
    monkeypatch.setattr(verify, "residual_distribution", lambda p, q: p)
    assert chi_square_pvalue(engine, dist, "eesd", exit_layer=1, gamma=2) < 1e-6


@pytest.mark.parametrize("method,options", [("sps", {"draft_layers": 1, "gamma": 2}), ("pld", {"gamma": 2}),
                                            ("eesd", {"exit_layer": 1, "gamma": 2})])
def test_top_p_below_one_matches_the_warped_target(paths, method, options):
    """Draft and target are warped alike; the output is the target's nucleus-sampled law."""
    engine, _, nucleus = paths
    assert chi_square_pvalue(engine, nucleus, method, top_p=TOP_P, **options) > 0.001


def test_a_draft_judged_against_its_unwarped_q_is_caught(paths, monkeypatch):
    """Sampling a draft token from the nucleus but reporting q before the top-p cut biases the output."""
    def draw_warped_report_plain(logits, sampler):
        q = sampler.probs(logits[None])[0]
        return sampler.draw(q), torch.softmax(logits / sampler.temperature, -1)

    for module in ("engines.drafters.early_exit", "engines.drafters.model_draft"):
        monkeypatch.setattr(f"{module}.sample_draft_token", draw_warped_report_plain)
    monkeypatch.setattr(drafter_base, "sample_draft_token", draw_warped_report_plain)
    engine, _, nucleus = paths
    assert chi_square_pvalue(engine, nucleus, "eesd", exit_layer=1, gamma=2, top_p=TOP_P) < 1e-6


def test_a_draft_vocabulary_head_matches_the_target(paths):
    """q is zero outside the head's vocabulary: tokens there come only from the residual or the bonus."""
    engine, dist, _ = paths
    head = engine.trained_drafter("exit@1-norm")
    assert head.head.vocab_ids.tolist() == DRAFT_VOCAB
    assert chi_square_pvalue(engine, dist, "eesd", exit_layer=1, head="norm", gamma=2) > 0.001


def test_a_draft_vocabulary_head_with_a_broken_residual_is_caught(paths, monkeypatch):
    engine, dist, _ = paths
    monkeypatch.setattr(verify, "residual_distribution", lambda p, q: p)
    assert chi_square_pvalue(engine, dist, "eesd", exit_layer=1, head="norm", gamma=2) < 1e-6


def first_tokens_pvalue(engine: Engine, dist: dict, method: str, max_new_tokens: int, **options) -> float:
    """Chi-square of the first three tokens of longer runs (their marginal law is the target's too): with
    five new tokens the round after the prefill drafts γ = 3, so the lookahead streams' tokens are judged."""
    counts = dict.fromkeys(dist, 0)
    for seed in range(N_RUNS):
        result = engine.run(PROMPT, method, max_new_tokens=max_new_tokens, temperature=1.0, seed=seed,
                            instrument=False, **options)
        counts[tuple(result.token_ids[:N_TOKENS])] += 1
    common = [s for s in dist if dist[s] * N_RUNS >= 5]
    rare = [s for s in dist if dist[s] * N_RUNS < 5]
    observed = [counts[s] for s in common] + [sum(counts[s] for s in rare)]
    expected = [dist[s] * N_RUNS for s in common] + [sum(dist[s] for s in rare) * N_RUNS]
    return float(chisquare(observed, expected).pvalue)


def test_speculative_streaming_stream_tokens_match_the_target(paths):
    """γ = 3 takes the main token and both lookahead streams' tokens, each judged against its own q."""
    engine, dist, _ = paths
    assert first_tokens_pvalue(engine, dist, "sps", 5, draft="ss", gamma=3) > 0.001


def test_stream_tokens_judged_against_the_main_streams_q_are_caught(paths, monkeypatch):
    """Reporting, for every token of a window, the q of the window's first (main) token biases the output."""
    import engines.drafters.streaming as streaming

    window_q: list = []
    original = streaming.StreamingDrafter.propose

    def main_q_for_all(logits, sampler):
        q = sampler.probs(logits[None])[0]
        window_q.append(q)
        return sampler.draw(q), window_q[0]

    def propose(self, committed, gamma, sampler):
        window_q.clear()
        return original(self, committed, gamma, sampler)

    monkeypatch.setattr(streaming, "sample_draft_token", main_q_for_all)
    monkeypatch.setattr(streaming.StreamingDrafter, "propose", propose)
    engine, dist, _ = paths
    assert first_tokens_pvalue(engine, dist, "sps", 5, draft="ss", gamma=3) < 1e-6
