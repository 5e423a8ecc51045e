"""The boundary between Python and step.c: every wrong tensor is refused with a ValueError naming it, before C
reads a byte, and valid calls still compute after a refused one (the process survives them all: a tensor C
misread would crash it or scribble on memory). Tiny random Llamas; each test well under a second."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from engines import Engine
from engines.model.kv_cache import KVCache
from engines.model.native import step as native_step
from tests.conftest import tiny_llama

pytestmark = pytest.mark.skipif(not native_step.available(), reason="the native step does not build here")

# tiny_llama: d 32, 4 heads of 8 (q 32), 2 kv heads (k, v 16), intermediate 64
D, KV_HEADS, HEAD_DIM, INTER = 32, 2, 8, 64


@pytest.fixture
def stack():
    return Engine(tiny_llama(vocab=64, layers=2, seed=3)).target


def run(stack, n: int = 3, cache: KVCache | None = None, positions=None, mask=None, layers=None, hidden=None):
    """The stack's layers through the native step on ``n`` rows (a fresh 16-entry cache unless given)."""
    with torch.inference_mode():
        hidden = stack.embed(list(range(3, 3 + n))) if hidden is None else hidden
        cache = stack.new_cache(16) if cache is None else cache
        prefix = cache.lengths[0] if isinstance(cache, KVCache) else 0
        positions = torch.arange(prefix, prefix + n)[None] if positions is None else positions
        return stack.native.layers(list(stack.layers) if layers is None else layers, hidden, positions, mask, cache)


def expected(stack) -> torch.Tensor:
    """What a valid call gives (PyTorch's path): the result every refusal must leave reachable."""
    with torch.inference_mode():
        return stack.run_at(stack.embed([3, 4, 5]), 0, stack.n_layers, stack.new_cache(16),
                            torch.arange(3)[None], None)


def assert_still_works(stack, reference: torch.Tensor) -> None:
    assert torch.allclose(run(stack), reference, atol=1e-5)


# --- the cache ---------------------------------------------------------------------------------------------------
def test_a_cache_of_the_wrong_dtype_is_refused(stack):
    cache = KVCache(2, KV_HEADS, HEAD_DIM, 16, torch.bfloat16)
    with pytest.raises(ValueError, match=r"keys of layer 0 must be float32 \[1, 2, 16, 8\] contiguous on cpu, "
                                         r"got bfloat16 \[1, 2, 16, 8\] contiguous on cpu"):
        run(stack, cache=cache)


def test_a_cache_of_the_wrong_shape_is_refused(stack):
    with pytest.raises(ValueError,
                       match=r"keys of layer 0 must be float32 \[1, 2, 16, 8\].*got float32 \[1, 4, 16, 8\]"):
        run(stack, cache=KVCache(2, 4, HEAD_DIM, 16, torch.float32))
    cache = stack.new_cache(16)
    cache.values[1] = torch.zeros(1, KV_HEADS, 8, HEAD_DIM)  # fewer entries than the capacity it claims
    with pytest.raises(ValueError,
                       match=r"values of layer 1 must be float32 \[1, 2, 16, 8\].*got float32 \[1, 2, 8, 8\]"):
        run(stack, cache=cache)


def test_a_non_contiguous_cache_is_refused(stack):
    cache = stack.new_cache(16)
    cache.keys[0] = torch.zeros(1, KV_HEADS, HEAD_DIM, 16).transpose(2, 3)  # the right shape, the wrong layout
    with pytest.raises(ValueError, match=r"keys of layer 0 must be .* contiguous on cpu, got float32 \[1, 2, 16, 8\] "
                                         r"non-contiguous"):
        run(stack, cache=cache)


def test_a_cache_swapped_after_a_valid_call_is_checked_again(stack):
    cache = stack.new_cache(16)
    run(stack, cache=cache)
    cache.crop(0)
    cache.keys[1] = cache.keys[1].to(torch.bfloat16)  # a new tensor in a cache that was checked before
    with pytest.raises(ValueError, match="keys of layer 1 must be float32"):
        run(stack, cache=cache)


def test_a_cache_index_out_of_range_is_refused(stack):
    later = KVCache(1, KV_HEADS, HEAD_DIM, 16, torch.float32, first_layer=1)  # holds layer 1 only
    with pytest.raises(ValueError, match=r"cache index of layer 0 out of range: the cache holds layers 1..1"):
        run(stack, cache=later)  # index 0 - 1 = -1: Python would have read the last layer's cache
    with pytest.raises(ValueError, match=r"cache index of layer 1 out of range: the cache holds layers 0..0"):
        run(stack, cache=KVCache(1, KV_HEADS, HEAD_DIM, 16, torch.float32))
    with pytest.raises(ValueError, match="cache must be a KVCache or None, got a dict"):
        run(stack, cache={})


def test_a_capacity_overflow_and_uneven_lengths_are_refused(stack):
    cache = stack.new_cache(4)
    with pytest.raises(ValueError, match=r"KV cache capacity 4 exceeded at layer 0: 0 cached \+ 5 new"):
        run(stack, n=5, cache=cache)
    cache.lengths = [3, 3]
    with pytest.raises(RuntimeError, match="capacity 4 exceeded"):  # as KVCache.update raises on PyTorch's path
        run(stack, n=2, cache=cache)
    cache.lengths = [2, 1]
    with pytest.raises(ValueError, match=r"same length, got \[2, 1\]"):
        run(stack, n=1, cache=cache)
    cache.lengths = [-1, -1]
    with pytest.raises(ValueError, match=r"cache length of layer 0 must be in 0..4, got -1"):
        run(stack, n=1, cache=cache)


# --- positions, hidden states, mask ---------------------------------------------------------------------------
def test_positions_of_the_wrong_length_kind_or_sign_are_refused(stack):
    with pytest.raises(ValueError, match=r"positions must be 3 integers on cpu \(one per row of hidden\), "
                                         r"got int64 \[1, 2\]"):
        run(stack, positions=torch.arange(2)[None])
    with pytest.raises(ValueError, match="positions must be 3 integers on cpu.*got float32"):
        run(stack, positions=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="positions must be non-negative, got -5"):
        run(stack, positions=torch.tensor([[0, -5, 2]]))


def test_hidden_states_of_the_wrong_shape_or_dtype_are_refused(stack):
    with pytest.raises(ValueError,
                       match=r"hidden must be float32 \[1, n, 32\] \(n ≥ 1\) on cpu, got float32 \[2, 3, 32\]"):
        run(stack, hidden=torch.zeros(2, 3, 32))
    with pytest.raises(ValueError, match=r"hidden must be float32 .*got bfloat16 \[1, 3, 32\]"):
        run(stack, hidden=torch.zeros(1, 3, 32, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"hidden must be .*got float32 \[1, 3, 16\]"):
        run(stack, hidden=torch.zeros(1, 3, 16))
    with pytest.raises(ValueError, match="layers must name at least one layer"):
        run(stack, layers=[])


def test_a_non_contiguous_hidden_is_copied_not_misread(stack):
    reference = expected(stack)
    with torch.inference_mode():
        hidden = stack.embed([3, 4, 5])
        strided = hidden.transpose(1, 2).contiguous().transpose(1, 2)  # the same values, column-major
    assert not strided.is_contiguous()
    assert torch.allclose(run(stack, hidden=strided), reference, atol=1e-5)


def test_a_mask_of_the_wrong_shape_or_kind_is_refused(stack):
    with pytest.raises(ValueError, match=r"mask must cover 3 rows and 3 cached entries, got \(1, 1, 2, 3\)"):
        run(stack, mask=torch.zeros(1, 1, 2, 3))
    with pytest.raises(ValueError, match=r"mask must be an additive float mask \[1, 1, 3, 3\] on cpu, got bool"):
        run(stack, mask=torch.ones(1, 1, 3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must be an additive float mask"):
        run(stack, mask=torch.zeros(3, 3))


# --- the weights -------------------------------------------------------------------------------------------------
def test_weights_of_the_wrong_layout_dtype_or_shape_are_refused_and_valid_calls_work_after(stack):
    reference = expected(stack)
    q = stack.layers[1].self_attn.q_proj.weight
    original = q.data
    try:
        q.data = original.t()  # square [32, 32]: the right shape, transposed
        with pytest.raises(ValueError, match=r"self_attn.q_proj.weight of layer 1 must be float32 \[32, 32\] "
                                             r"contiguous on cpu, got float32 \[32, 32\] non-contiguous on cpu"):
            run(stack)
        q.data = original.to(torch.bfloat16)
        with pytest.raises(ValueError, match=r"self_attn.q_proj.weight of layer 1 must be float32 .*got bfloat16"):
            run(stack)
    finally:
        q.data = original
    assert_still_works(stack, reference)
    down = stack.layers[0].mlp.down_proj.weight
    original = down.data
    try:
        down.data = original.t().contiguous()  # [inter, d] where [d, inter] belongs: C would read past it
        with pytest.raises(ValueError, match=r"mlp.down_proj.weight of layer 0 must be float32 \[32, 64\].*"
                                             r"got float32 \[64, 32\]"):
            run(stack)
    finally:
        down.data = original
    norm = stack.layers[0].post_attention_layernorm.weight
    original = norm.data
    try:
        norm.data = torch.ones(16)
        with pytest.raises(ValueError, match=r"post_attention_layernorm.weight of layer 0 must be float32 \[32\]"):
            run(stack)
    finally:
        norm.data = original
    assert_still_works(stack, reference)


def test_a_streamed_weight_is_checked_again_when_its_pointer_changes(stack):
    """The memory budget's streamer swaps weights in and out under the same parameter: a validated layer whose
    weight is now the streamer's zero-stride stand-in (``full_shapes``) must be refused, not read."""
    reference = expected(stack)
    run(stack)  # checked once, remembered
    k = stack.layers[0].self_attn.k_proj.weight
    original = k.data
    try:
        k.data = torch.zeros(()).expand(KV_HEADS * HEAD_DIM, D)
        with pytest.raises(ValueError, match=r"self_attn.k_proj.weight of layer 0 must be .* got float32 \[16, 32\] "
                                             r"non-contiguous"):
            run(stack)
        k.data = original.clone()  # streamed back in: a new pointer, checked and accepted
        assert_still_works(stack, reference)
    finally:
        k.data = original


def test_inside_a_run_a_checked_layer_is_not_checked_again_and_a_swap_is_refused_once_the_run_ends(stack,
                                                                                                     monkeypatch):
    """``trusted_during``: the second step of a run reads no weight (the check the trust saves), a weight swapped
    mid-run reaches C only through what the run's memo holds (the old weights' bits, no crash), and a forward
    outside the run, or the next run, checks again and refuses the swap. A streamed layer is never trusted."""
    reference = expected(stack)
    native = stack.native
    looked_up = []
    original_weights = native_step._weights
    monkeypatch.setattr(native_step, "_weights", lambda layer: looked_up.append(layer) or original_weights(layer))
    q = stack.layers[1].self_attn.q_proj.weight
    original = q.data
    try:
        run_token = object()
        with native.trusted_during(run_token):
            run(stack)
        assert len(looked_up) == 2  # both layers checked once
        with native.trusted_during(run_token):
            assert torch.allclose(run(stack), reference, atol=1e-5)
            q.data = original.t()  # swapped mid-run: not looked at, the run goes on with what it checked
            assert torch.allclose(run(stack), reference, atol=1e-5)
            assert torch.equal(run(stack, n=3, layers=list(stack.layers)),
                               run(stack, n=3))  # and the trust is the same with layers named again
        assert len(looked_up) == 2
        with pytest.raises(ValueError, match=r"self_attn.q_proj.weight of layer 1 must be float32 .*non-contiguous"):
            run(stack)  # outside the run: checked
        with pytest.raises(ValueError, match=r"self_attn.q_proj.weight of layer 1"), native.trusted_during(object()):
            run(stack)  # the next run: checked
        q.data = original
        with native.trusted_during(run_token):
            hidden = stack.embed([3, 4, 5])
            with torch.inference_mode():
                native.layers(list(stack.layers), hidden, torch.arange(3)[None], None, stack.new_cache(16),
                              trusted=False)
        assert len(looked_up) > 2 + 2  # untrusted (a streamed layer's call): looked up every time
    finally:
        q.data = original
    assert_still_works(stack, reference)


def test_inside_a_run_a_cache_checked_once_is_reused_until_a_tensor_of_it_is_replaced(stack, monkeypatch):
    """The run's prepared call (``NativeStep._prepared_call``): a run's next step on the same cache checks it
    no more and computes the same bits; a keys tensor replaced mid-run is checked and refused; a tensor's
    ``.data`` swapped mid-run is never read (the memo holds the storage checked), and is refused after the run."""
    native = stack.native
    checks = []
    original_check = native_step.NativeStep._check_cache
    monkeypatch.setattr(native_step.NativeStep, "_check_cache",
                        lambda self, cache, indices: checks.append(cache) or original_check(self, cache, indices))
    untrusted_cache = stack.new_cache(16)
    untrusted = [run(stack, n=n, cache=untrusted_cache) for n in (3, 1, 2)]
    assert len(checks) == 3  # outside a run: checked every call
    run_token, cache = object(), stack.new_cache(16)
    with native.trusted_during(run_token):
        trusted = [run(stack, n=n, cache=cache) for n in (3, 1)]
        assert len(checks) == 4  # checked once in the run
        keys = cache.keys[0]
        keys.data = torch.zeros(1)  # swapped mid-run: the call goes on with the storage it checked
        trusted.append(run(stack, n=2, cache=cache))
        assert len(checks) == 4
    assert all(torch.equal(a, b) for a, b in zip(trusted, untrusted))
    with pytest.raises(ValueError, match="keys of layer 0 must be float32"):
        run(stack, n=1, cache=cache)  # outside the run: checked, refused
    keys.data = untrusted_cache.keys[0].clone()
    with native.trusted_during(run_token):
        cache.keys[1] = cache.keys[1].to(torch.bfloat16)  # replaced mid-run: a new tensor is checked
        with pytest.raises(ValueError, match="keys of layer 1 must be float32"):
            run(stack, n=1, cache=cache)


def test_inside_a_run_the_head_is_checked_once_and_a_new_head_is_checked(stack, monkeypatch):
    native = stack.native
    required = []
    original_require = native_step.require
    monkeypatch.setattr(native_step, "require", lambda name, *a: required.append(name) or original_require(name, *a))
    norm, head = stack.backbone.norm, stack.model.lm_head.weight
    with torch.inference_mode():
        hidden = stack.embed([3, 4])
        reference = native.head(hidden, norm, head)
        native._checked_heads.clear()
        with native.trusted_during(object()):
            for _ in range(3):
                assert torch.equal(native.head(hidden, norm, head), reference)
            assert required == ["the final norm's weight", "the LM head"] * 2  # once outside, once in the run
            with pytest.raises(ValueError, match="the LM head must be float32"):
                native.head(hidden, norm, head.t())  # another tensor: checked


def test_an_engine_run_trusts_its_own_steps_only(monkeypatch):
    """Engine runs wrap each step in the trust of that run, and not the consumer's code between events."""
    engine = Engine(tiny_llama(vocab=64, layers=2, seed=3))
    native = engine.target.native
    seen = []
    original = native_step.NativeStep._weight_pointers

    def spy(self, layer, index, trusted=False):
        seen.append((trusted, self._run))
        return original(self, layer, index, trusted)

    monkeypatch.setattr(native_step.NativeStep, "_weight_pointers", spy)
    for _ in engine.generate([5, 6, 7], "ar", max_new_tokens=4):
        assert native._run is None  # the consumer's code runs untrusted
    runs = {id(run) for _, run in seen}
    assert seen and all(trusted for trusted, _ in seen) and len(runs) == 1 and all(run is not None for _, run in seen)


# --- head() and linear() ----------------------------------------------------------------------------------------
def test_wrong_head_shapes_are_refused(stack):
    native, norm, head = stack.native, stack.backbone.norm, stack.model.lm_head.weight
    hidden = torch.zeros(1, 2, D)
    with torch.inference_mode():
        reference = native.head(hidden, norm, head)
        with pytest.raises(ValueError, match=r"the LM head must be float32 \[64, 32\] contiguous on cpu, "
                                             r"got float32 \[64, 16\]"):
            native.head(hidden, norm, head[:, :16].contiguous())
        with pytest.raises(ValueError, match=r"the LM head must be float32 \[vocab, 32\].*got float32 \[64\]"):
            native.head(hidden, norm, head[:, 0].contiguous())
        with pytest.raises(ValueError, match=r"the LM head must be float32 .*got bfloat16"):
            native.head(hidden, norm, head.to(torch.bfloat16))
        with pytest.raises(ValueError, match=r"the LM head must be .*non-contiguous"):
            native.head(hidden, norm, torch.zeros(D, 64).t())
        with pytest.raises(ValueError, match=r"the final norm's weight must be float32 \[32\].*got float32 \[16\]"):
            native.head(hidden, SimpleNamespace(weight=torch.ones(16)), head)
        with pytest.raises(ValueError, match=r"hidden must be float32 \[1, n, 32\]"):
            native.head(torch.zeros(2, 32), norm, head)
        assert torch.equal(native.head(hidden, norm, head), reference)


def test_a_bad_linear_is_refused_and_a_good_one_computes(stack):
    native = stack.native
    x, weight, bias = torch.randn(2, 3, D), torch.randn(10, D), torch.randn(10)
    with torch.inference_mode():
        with pytest.raises(ValueError, match=r"linear's x must be float32 \[..., 32\] on cpu \(the weight's in-dim\), "
                                             r"got float32 \[2, 3, 16\]"):
            native.linear(torch.randn(2, 3, 16), weight)
        with pytest.raises(ValueError, match=r"linear's weight must be float32 \[N, K\] .*got float32 \[32\]"):
            native.linear(x, torch.randn(D))
        with pytest.raises(ValueError, match=r"linear's weight must be float32 .*got bfloat16 \[10, 32\]"):
            native.linear(x, weight.to(torch.bfloat16))
        with pytest.raises(ValueError, match=r"linear's x must be float32 .*got bfloat16"):
            native.linear(x.to(torch.bfloat16), weight)
        with pytest.raises(ValueError, match=r"linear's bias must be float32 \[10\] on cpu or None, got float32 \[9\]"):
            native.linear(x, weight, torch.randn(9))
        assert native.linear(torch.zeros(0, D), weight).shape == (0, 10)  # no rows: nothing for C to refuse
        out = native.linear(x, weight.t().contiguous().t(), bias)  # any layout of a valid weight: copied
    assert out.shape == (2, 3, 10) and torch.allclose(out, F.linear(x, weight, bias), atol=1e-5)


def test_step_c_still_refuses_what_slips_past_with_its_error_codes(stack):
    """The C entry points' own refusals stay: a NULL tensor straight to the library is refused, not read."""
    lib = stack.native.lib
    code = lib.specviz_linear(None, 1, 4, None, 0, 4, None, 0, None, 1)
    with pytest.raises(ValueError, match=r"native step \(linear\) refused its arguments: a missing \(NULL\) tensor"):
        native_step._checked(code, "linear")


def test_bfloat16_steps_are_checked_against_bfloat16():
    from tests.test_exact_numerics import bf16_llama

    stack = Engine(bf16_llama()).target
    with torch.inference_mode():
        hidden = stack.embed([5, 6])
        with pytest.raises(ValueError, match=r"keys of layer 0 must be bfloat16 \[1, 2, 8, 64\] contiguous on cpu, "
                                             r"got float32 \[1, 2, 8, 64\]"):
            stack.native.layers(list(stack.layers), hidden, torch.arange(2)[None], None,
                                KVCache(3, 2, 64, 8, torch.float32))
        out = stack.native.layers(list(stack.layers), hidden, torch.arange(2)[None], None, stack.new_cache(8))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


def test_a_cache_whose_storage_was_shrunk_under_it_is_refused(stack):
    """The right shape, dtype and layout over a storage resized to nothing (as FSDP frees parameters): C would
    write the new keys into freed memory."""
    cache = stack.new_cache(16)
    run(stack, cache=cache)  # checked and remembered first: the shrinking must still be seen
    cache.crop(0)
    cache.values[0].untyped_storage().resize_(0)
    with pytest.raises(ValueError, match=r"values of layer 0 must be .*contiguous on cpu whose storage does not hold it"):
        run(stack, cache=cache)


def test_a_layer_with_part_of_an_mlp_is_refused(stack):
    """An attention-only block hands C no MLP at all (gate_up, down and norm2 NULL). A layer missing one module
    of an MLP is refused in Python, naming the layer; pointers for part of one are refused by C itself."""
    import ctypes

    reference = expected(stack)
    layer = stack.layers[0]
    gate = layer.mlp._modules.pop("gate_proj")
    try:
        with pytest.raises(ValueError, match=r"layer 0 is no Llama layer.*gate_proj"):
            run(stack)
    finally:
        layer.mlp._modules["gate_proj"] = gate
    native, cache = stack.native, stack.new_cache(16)
    call = native._prepare(list(stack.layers), cache, trusted=False, keep=False)
    call.pointers[0].down = None  # gate_up and norm2 still given
    with torch.inference_mode():
        hidden = stack.embed([3, 4, 5]).reshape(3, D).clone()
    positions = torch.arange(3)
    work = native._work_for(call.shape, 3, 1)
    code = native.lib.specviz_layers(ctypes.byref(call.shape), call.pointers, 2, hidden.data_ptr(), 3,
                                     positions.data_ptr(), 0, None, native.inv_freq.data_ptr(), work.data_ptr(), 1)
    with pytest.raises(ValueError, match=r"a missing \(NULL\) tensor"):
        native_step._checked(code, "layers")
    assert_still_works(stack, reference)


def test_a_cross_layer_needs_both_maps_gone_and_a_memory(stack):
    """A cross-attention layer (MoA's CA) hands C neither a key nor a value map: one of the two alone is refused,
    and so is a cross layer given no memory to read (prefix 0); C refuses both itself, with its codes."""
    import ctypes

    reference = expected(stack)
    native, cache = stack.native, stack.new_cache(16)
    with torch.inference_mode():
        hidden = stack.embed([3, 4, 5]).reshape(3, D).clone()
    positions = torch.arange(3)

    def code_with(prefix: int, **pointers) -> int:
        call = native._prepare(list(stack.layers)[:1], cache, trusted=False, keep=False)
        for name, value in pointers.items():
            setattr(call.pointers[0], name, value)
        work = native._work_for(call.shape, 3, 1)
        return native.lib.specviz_layers(ctypes.byref(call.shape), call.pointers, 1, hidden.data_ptr(), 3,
                                         positions.data_ptr(), prefix, None, native.inv_freq.data_ptr(),
                                         work.data_ptr(), 1)

    with pytest.raises(ValueError, match=r"a missing \(NULL\) tensor"):
        native_step._checked(code_with(0, k=None), "layers")
    with pytest.raises(ValueError, match=r"native step \(layers\) refused its arguments: .*cache"):
        native_step._checked(code_with(0, k=None, v=None), "layers")
    assert code_with(4, k=None, v=None) == 0  # a memory of 4 entries: read, nothing written
    assert_still_works(stack, reference)
