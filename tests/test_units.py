"""Unit tests of the small pieces: verification rules, prompt lookup, sampling warpers, theory."""

import pytest
import torch

from engines.core.acceptance import judge_chain, residual_distribution
from engines.core.sampling import Sampler
from engines.drafters import lookup
from engines.drafters.heads import SharedHead
from engines.model.layers import LayerStack
from specviz.theory import expected_speedup, expected_tokens_per_round, optimal_gamma
from tests.conftest import tiny_llama


def one_hot_logits(tokens, vocab=6):
    logits = torch.full((len(tokens), vocab), -10.0)
    logits[torch.arange(len(tokens)), torch.tensor(tokens)] = 10.0
    return logits


def test_greedy_chain_accepts_matching_prefix_then_corrects():
    greedy = Sampler(0.0)
    verdict = judge_chain([1, 2, 3], None, one_hot_logits([1, 2, 4, 5]), greedy)
    assert (verdict.n_accepted, verdict.next_token, verdict.next_fate) == (2, 4, "correction")
    verdict = judge_chain([1, 2], None, one_hot_logits([1, 2, 5]), greedy)
    assert (verdict.n_accepted, verdict.next_token, verdict.next_fate) == (2, 5, "bonus")
    assert judge_chain([], None, one_hot_logits([3]), greedy).next_token == 3


def test_residual_distribution():
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.6, 0.2])
    assert torch.allclose(residual_distribution(p, q), torch.tensor([1.0, 0.0, 0.0]))
    assert torch.equal(residual_distribution(p, p), p)  # nothing left: fall back to p


def test_point_mass_rejected_when_target_gives_zero():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.2, 0.3, 0.5]])
    verdict = judge_chain([0], None, p.log(), Sampler(1.0, seed=0))
    assert (verdict.n_accepted, verdict.next_token) == (0, 1)


def test_sampler_top_p_keeps_smallest_nucleus():
    sampler = Sampler(temperature=1.0, top_p=0.6)
    probs = sampler.probs(torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])))
    assert torch.allclose(probs, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    assert Sampler(0.0).next_token(torch.tensor([0.1, 3.0, 0.2])) == 1


def test_prompt_lookup_prefers_longest_latest_match():
    ids = [1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert lookup(ids, max_ngram=3, min_ngram=1, gamma=2) == ([7, 8], 4)
    assert lookup([1, 2, 3], 3, 1, 4) == ([], -1)


def test_leviathan_formulas():
    assert expected_tokens_per_round(0.0, 5) == 1.0
    assert expected_tokens_per_round(1.0, 5) == 6.0
    assert expected_tokens_per_round(0.5, 2) == pytest.approx(1.75)
    assert expected_speedup(0.8, 4, 0.0) == pytest.approx((1 - 0.8 ** 5) / 0.2)
    assert expected_speedup(0.8, 4, 0.25) == pytest.approx((1 - 0.8 ** 5) / 0.2 / 2)
    assert optimal_gamma(0.9, 0.05) > optimal_gamma(0.5, 0.05)
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens_per_round(1.5, 3)


def test_exit_agreement_is_one_at_the_top_and_a_fraction_below(tiny_engine):
    from specviz.experiments.forward_costs import exit_agreement

    sequences = [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10]]
    agreement = exit_agreement(tiny_engine.target, sequences, layers=[1, 2, 3])
    assert agreement[3] == 1.0  # the last layer is the model itself
    assert all(0.0 <= agreement[layer] <= 1.0 for layer in (1, 2))
    assert agreement[1] < 1.0  # a random 3-layer model's first layer disagrees somewhere


def test_shared_head_gathers_its_rows_once_and_follows_a_new_vocabulary():
    stack = LayerStack(tiny_llama(vocab=32, layers=2))
    head = SharedHead(stack, torch.tensor([3, 5, 7]))
    hidden = torch.randn(4, stack.config.hidden_size)
    weight = stack.model.lm_head.weight.detach()
    assert torch.allclose(head(hidden), hidden @ weight[[3, 5, 7]].T)
    assert head.rows(hidden.dtype) is head.rows(hidden.dtype)  # cached, not gathered per call
    head.vocab_ids = torch.tensor([1, 2])
    assert torch.allclose(head(hidden), hidden @ weight[[1, 2]].T)
    head.double()
    assert head(hidden.double()).dtype == torch.float64 and head.rows(torch.float64).shape == (2, weight.shape[1])


def test_top_indices_find_the_k_largest_entries_largest_first():
    """The chunked top-k stands in for torch.topk on long CPU vectors: the same values, in the same order, with
    a ragged tail, with ties, and where every largest entry sits in one chunk."""
    from engines.core.sampling import TOP_CHUNK, top_indices

    generator = torch.Generator().manual_seed(1)
    cases = [torch.randn(49152, generator=generator), torch.randn(16 * TOP_CHUNK + 77, generator=generator),
             torch.randint(0, 20, (5000,), generator=generator).float(), torch.randn(300, generator=generator)]
    clustered = torch.randn(8192, generator=generator)
    clustered[TOP_CHUNK * 3:TOP_CHUNK * 3 + 16] += 100  # the 16 largest in one chunk
    cases.append(clustered)
    tail = torch.randn(16 * TOP_CHUNK + 5, generator=generator)
    tail[-3:] += 100  # the largest in the ragged tail
    cases.append(tail)
    for values in cases:
        for k in (1, 5, 16):
            found = top_indices(values, k)
            assert len(set(found)) == k and torch.equal(values[found], values.topk(k).values)


def test_greedy_tokens_pick_what_torch_argmax_picks():
    """NumPy's argmax stands in for torch's on CPU fp32 (12× faster a row): the same index, ties and all."""
    from engines.core.sampling import greedy_token, greedy_tokens

    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(0))
    logits[1, 7] = logits[1, 200] = logits[1].max() + 1  # a tie: the first of equal maxima
    logits[2, :] = 0.0
    for rows in (logits, logits[:, 3:], logits.to(torch.bfloat16)):
        assert greedy_tokens(rows) == rows.argmax(-1).tolist()
    assert greedy_tokens(logits)[1] == 7 and greedy_token(logits[1]) == 7 and greedy_token(logits[4]) == int(logits[4].argmax())
