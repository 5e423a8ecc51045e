"""Kernel plans and the verify-cost curve, on tiny random models (the real curve is measured by the CLI)."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engines import Engine
from engines.model.kernels import KERNELS, KernelPlan, PlannedLinear, available_kernels, install, uninstall
from engines.model.layers import LayerStack
from engines.model.verify_cost import VerifyCost, load_curve, measure, save_curve
from tests.conftest import tiny_llama


@pytest.mark.parametrize("kernel", available_kernels("cpu"))
@pytest.mark.parametrize("rows", [1, 2, 5, 17])
def test_every_kernel_computes_the_linear_product(kernel, rows):
    torch.manual_seed(0)
    x, weight, bias = torch.randn(1, rows, 24), torch.randn(40, 24), torch.randn(40)
    expected = F.linear(x, weight, bias)
    assert torch.allclose(KERNELS[kernel](x, weight, bias), expected, atol=1e-5)
    assert torch.allclose(KERNELS[kernel](x, weight, None), F.linear(x, weight), atol=1e-5)


@pytest.mark.parametrize("kernel", available_kernels("cpu"))
def test_every_kernel_passes_gradients(kernel):
    """Drafter heads train through the tuned kernels (SharedHead takes the target's plan)."""
    x = torch.randn(3, 8, requires_grad=True)
    weight = torch.randn(5, 8, requires_grad=True)
    KERNELS[kernel](x, weight, None).square().sum().backward()
    x_ref, weight_ref = x.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    F.linear(x_ref, weight_ref).square().sum().backward()
    assert torch.allclose(x.grad, x_ref.grad, atol=1e-5) and torch.allclose(weight.grad, weight_ref.grad, atol=1e-5)


def test_plan_picks_kernel_by_rows_and_extends_the_largest():
    plan = KernelPlan({1: "onednn", 2: "weight_first", 4: "linear"})
    assert plan.kernel(1) is KERNELS["onednn"]
    assert plan.kernel(2) is KERNELS["weight_first"]
    assert plan.kernel(3) is KERNELS["linear"]  # not tuned: the default
    assert plan.kernel(99) is KERNELS["linear"]  # beyond the largest tuned: its kernel
    assert KernelPlan().kernel(5) is F.linear
    with pytest.raises(ValueError, match="kernel must be one of"):
        KernelPlan({1: "cublas"})


def test_installed_plan_keeps_the_model_output():
    model = tiny_llama(vocab=16)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        before = model(ids).logits
        install(model, KernelPlan({n: "weight_first" for n in range(1, 8)}))
        assert any(isinstance(m, PlannedLinear) for m in model.modules())
        after = model(ids).logits
        uninstall(model)
    assert torch.allclose(before, after, atol=1e-5)
    assert not any(isinstance(m, PlannedLinear) for m in model.modules())


def test_measure_gives_a_curve_for_every_n_and_installs_its_kernels():
    stack = LayerStack(tiny_llama(vocab=16))
    curve = measure(stack, "tiny", max_tokens=4, prefix=8, repeats=2)
    assert sorted(curve.seconds) == [1, 2, 3, 4]
    assert set(curve.by_kernel) == set(available_kernels("cpu"))
    for n, kernel in curve.kernels.items():
        assert curve.seconds[n] == min(times[n] for times in curve.by_kernel.values())
        assert curve.by_kernel[kernel][n] == curve.seconds[n]
    assert all(m.plan.by_rows == curve.kernels for m in stack.model.modules() if isinstance(m, PlannedLinear))
    assert curve.weight_bytes > 0 and curve.bandwidth_gb_s > 0
    with pytest.raises(ValueError, match="max_tokens"):
        measure(stack, "tiny", max_tokens=0)
    with pytest.raises(ValueError, match="context window"):
        measure(stack, "tiny", max_tokens=16, prefix=120)


def test_forwards_are_timed_inside_one_runs_trust_as_a_decode_run_makes_them(monkeypatch):
    """The native step's per-call checks (layers, cache) are paid once per run, not per forward: the curve
    times forwards the same way, and the trust ends with the timing."""
    from engines.model.verify_cost import time_forwards

    stack = Engine(tiny_llama(vocab=16)).target
    if stack.native is None:
        pytest.skip("the native step does not build here")
    runs = []
    forward = stack.forward

    def recording(*args, **kwargs):
        runs.append(stack.native._run)
        return forward(*args, **kwargs)

    monkeypatch.setattr(stack, "forward", recording)
    seconds = time_forwards(stack, 4, [1, 3], 2)
    assert set(seconds) == {1, 3} and all(s > 0 for s in seconds.values())
    assert runs and all(run is not None for run in runs) and len({id(run) for run in runs}) == 1
    assert stack.native._run is None


def test_cost_interpolates_and_extrapolates_never_downhill():
    curve = VerifyCost("k", {1: 1.0, 2: 1.5, 4: 2.0}, {1: "linear", 2: "linear", 4: "linear"})
    assert curve.cost(3) == pytest.approx(1.75)
    assert curve.cost(6) == pytest.approx(2.5)  # slope fitted through the upper half (2, 4)
    assert curve.relative(4) == 2.0
    flat = VerifyCost("k", {1: 1.0, 2: 0.9}, {1: "linear", 2: "linear"})
    assert flat.cost(2) == pytest.approx(1.0) and flat.cost(10) == pytest.approx(1.0)  # a dip is noise
    noisy = VerifyCost("k", {n: 1.0 + 0.1 * n - (0.3 if n == 7 else 0) for n in range(1, 9)}, {})
    assert noisy.cost(7) >= noisy.cost(6)
    assert noisy.cost(16) == pytest.approx(noisy.cost(8) + 0.8, rel=0.2)
    with pytest.raises(ValueError, match="n must be"):
        curve.cost(0)


def test_curve_round_trips_through_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    curve = VerifyCost("model-x", {1: 0.01, 2: 0.012}, {1: "onednn", 2: "linear"}, {"linear": {1: 0.02, 2: 0.012}},
                       prefix=8, threads=2, bandwidth_gb_s=10.0, weight_bytes=10**9)
    save_curve(curve)
    loaded = load_curve("model-x")
    assert loaded.to_dict() == curve.to_dict()
    assert loaded.ceiling_tokens_per_s == pytest.approx(10.0)
    assert load_curve("other") is None


def test_engine_measures_a_custom_model_once_and_keeps_it_in_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    engine = Engine(tiny_llama(vocab=16))
    assert engine.verify_cost(measure_if_missing=False) is None
    curve = engine.verify_cost()
    assert engine.verify_cost() is curve
    assert not (tmp_path / "verify_cost").exists()  # a model built in memory is not cached on disk
    assert engine.run([1, 2, 3], "ar", max_new_tokens=4).token_ids  # still decodes with the tuned kernels


def test_draft_length_follows_the_machine_and_the_acceptance():
    from engines.core.draft_length import DraftLength

    flat, steep = (lambda n: 1.0), (lambda n: float(n))
    confident = DraftLength(flat, max_gamma=16)
    confident.update(drafted=10, accepted=9, draft_seconds=0.0)
    assert confident.choose(limit=99) == 16  # free verification, good drafts: draft the most
    assert confident.choose(limit=3) == 3  # never beyond what the budget can commit
    assert confident.choose(limit=0) == 0
    costly = DraftLength(steep, max_gamma=16)
    costly.update(drafted=10, accepted=9, draft_seconds=0.0)
    assert costly.choose(limit=99) < 5  # each verified token costs a whole step: draft little
    doubtful = DraftLength(flat, max_gamma=16)
    doubtful.update(drafted=5, accepted=0, draft_seconds=5.0)  # drafts rejected and as slow as a target step
    assert doubtful.choose(limit=99) == 1  # the least that still measures α
    assert doubtful.alpha == pytest.approx(1 / 3) and doubtful.seconds_per_draft_token == 1.0


def test_a_draft_with_evidence_is_cut_where_its_doubtful_tokens_begin():
    from engines.core.draft_length import DraftLength
    from engines.drafters.base import Draft, point_masses

    curve = lambda n: 1.0 + 0.2 * (n - 1)  # noqa: E731
    length = DraftLength(curve, max_gamma=16)
    assert length.limit(99) == 16  # nothing judged yet: the drafter proposes all it can
    for _ in range(20):  # "sure" tokens always accepted; "doubtful" ones never, once reached
        length.update(drafted=3, accepted=2, draft_seconds=0.0, evidence=["sure", "sure", "doubtful"])
    overall = 41 / 62  # every kind together, from the prior of one hit in two
    assert length.alpha == pytest.approx(overall)
    assert length.alpha_for("sure") == pytest.approx((40 + 2 * overall) / 42)  # its record, shrunk to the run's
    assert length.alpha_for("doubtful") == pytest.approx(2 * overall / 22)
    assert length.alpha_for("never judged") == pytest.approx(overall)  # tried at what the drafter is worth so far
    assert length.cut(["sure", "sure", "doubtful", "sure"]) == 2
    assert length.cut(["doubtful", "sure"]) == 0  # a doubtful first token: verify nothing, one step's cost
    assert length.cut([]) == 0
    assert length.cut(["doubtful", "sure"], free=1) == 1  # sent anyway: kept, but a doubtful one makes the next dear
    assert length.cut(["sure", "sure"], free=1) == 2
    assert length.cut(["sure"]) == 1 and length.cut(["sure"], expected=5.0) == 0  # a row a rich round need not pay
    length.update(drafted=3, accepted=0, draft_seconds=0.0, evidence=["sure", "doubtful", "doubtful"])
    assert length.by_evidence["doubtful"][1] == 20  # positions after the rejection were never judged
    hopeless = DraftLength(curve, max_gamma=16)
    for _ in range(20):
        hopeless.update(drafted=4, accepted=0, draft_seconds=0.0, evidence=["bad"] * 4)
    assert hopeless.limit(99) == 1 and length.limit(99) > 4  # no kind pays a long proposal: propose one
    draft = point_masses([4, 5, 6], ["a", "b", "c"]).prefix(2)
    assert (draft.tokens, draft.logprobs, draft.evidence) == ([4, 5], [0.0, 0.0], ["a", "b"])
    with pytest.raises(ValueError, match="early-exit"):
        Draft([1, 2], hidden=torch.zeros(1, 2, 4)).prefix(1)


def test_chain_model_on_a_flat_curve_is_leviathans():
    from specviz.theory import expected_speedup
    from specviz.views.chain import chain_speedup_on_curve, kernel_curves_figure

    flat = VerifyCost("k", {n: 0.02 for n in range(1, 17)}, {n: "linear" for n in range(1, 17)},
                      {"linear": {n: 0.02 for n in range(1, 17)}}, weight_bytes=10**8, bandwidth_gb_s=10.0)
    assert chain_speedup_on_curve(0.7, 5, 0.1, flat) == pytest.approx(expected_speedup(0.7, 5, 0.1))
    steep = VerifyCost("k", {n: 0.02 * n for n in range(1, 17)}, {})
    assert chain_speedup_on_curve(0.7, 5, 0.1, steep) < 1.0  # verifying 6 tokens costs 6 steps: never pays
    assert len(kernel_curves_figure(flat).data) == 1  # one curve measured (fused layers): drawn once
    tuned = VerifyCost("k", flat.seconds, flat.kernels, {**flat.by_kernel, "onednn": flat.seconds})
    assert len(kernel_curves_figure(tuned).data) == 3  # each kernel tried, and the one kept


def test_stock_kernels_restores_the_plan():
    from engines.model.kernels import stock_kernels

    model = tiny_llama(vocab=16)
    plan = KernelPlan({1: "weight_first"})
    install(model, plan)
    with stock_kernels(model):
        assert not any(isinstance(m, PlannedLinear) for m in model.modules())
    assert all(m.plan is plan for m in model.modules() if isinstance(m, PlannedLinear))


def test_the_draft_cut_replay_prices_rounds_by_the_curve():
    """scripts/draft_cut_replay.py's arithmetic, on hand-made positions: the figures docs/verify-cost.md quotes
    stand on it. One answer of 6 tokens; at each position the drafter proposes 3 tokens of one kind, and ar's
    answer accepts ``right`` of them."""
    from tests.source_files import load_source

    replay = load_source("draft_cut_replay", Path(__file__).resolve().parents[1] / "scripts" / "draft_cut_replay.py")
    positions = [[(["k"] * 3, right) for right in (3, 0, 0, 0, 0, 0)]]
    flat = lambda n: 1.0  # noqa: E731
    # γ = 3 on a flat curve: position 0 commits 3 + 1 (to 4); position 4 verifies the 1 token left room for and
    # commits the target's own; position 5, the last, drafts nothing: 6 tokens in 3 rounds of one step each
    assert replay.replay(positions, flat, lambda kinds, right: 3) == pytest.approx(6 / 3)
    steep = lambda n: float(n)  # noqa: E731  every verified token costs a whole step: nothing beats ar
    rows = replay.table(positions, steep, [1, 3])
    assert rows["γ = 3"] == pytest.approx(6 / 7)  # 4 tokens for 4 steps, then a refused token's wasted step
    assert rows["oracle"] == pytest.approx(1.0) and rows["evidence"] <= rows["oracle"]
