"""The native decode step (engines/model/native/step.c): the Hugging Face layer's math, row-invariant in every dtype,
and out of the way where it cannot run. Tiny random Llamas; each test well under a second."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch

from engines import Engine
from engines.model.layers import chain_parents, tree_mask
from engines.model.native import step as native_step
from tests.conftest import tiny_llama
from tests.test_exact_numerics import bf16_llama

pytestmark = pytest.mark.skipif(not native_step.available(), reason="the native step does not build here")


def logits_of(engine: Engine, ids: list[int], native: bool) -> torch.Tensor:
    engine.target.use_native(native)
    with torch.inference_mode():
        cache = engine.target.new_cache(128)
        engine.target.forward(ids[:-4], cache)
        return engine.target.forward(ids[-4:], cache)


def prefilled(stack, prefix: list[int], capacity: int):
    """A fresh cache holding the prefix."""
    cache = stack.new_cache(capacity)
    stack.forward(prefix, cache)
    return cache


def one_token_steps(stack, prefix: list[int], tokens: list[int], capacity: int) -> torch.Tensor:
    """Each token's logits from one-token steps after the prefix: what a chunk or a tree verified in one forward
    must reproduce bit for bit."""
    cache = prefilled(stack, prefix, capacity)
    return torch.cat([stack.forward([token], cache) for token in tokens])


def test_fp32_native_layers_compute_what_the_hugging_face_layers_compute():
    engine = Engine(tiny_llama(vocab=64, layers=2, seed=3))
    assert engine.target.native is not None
    ids = list(range(3, 40))
    assert torch.allclose(logits_of(engine, ids, True), logits_of(engine, ids, False), atol=1e-5, rtol=1e-5)


def test_bf16_native_layers_stay_within_bf16_rounding_of_the_hugging_face_layers():
    engine = Engine(bf16_llama())
    ids = list(range(5, 60))
    native, torch_path = logits_of(engine, ids, True), logits_of(engine, ids, False)
    assert (native - torch_path).abs().max() < 0.05 * torch_path.abs().max()
    assert torch.equal(native.argmax(-1), torch_path.argmax(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_chunk_and_a_tree_give_each_row_the_bits_of_one_token_steps(dtype):
    """Row invariance by construction, in fp32 as in bf16: what lets every lossless method's greedy output
    equal `ar`'s bit for bit."""
    stack = Engine(bf16_llama(seed=1).to(dtype)).target
    prefix, chain = list(range(7, 47)), [11, 12, 13, 14, 15]
    with torch.inference_mode():
        stepped = one_token_steps(stack, prefix, chain, 128)
        assert torch.equal(stack.forward(chain, prefilled(stack, prefix, 128)), stepped)
        # the chain as one branch of a tree whose other branch (99, 98) comes first in node order
        nodes = [11, 99, 98, 12, 13, 14, 15]
        parents = [-1, 0, 1, 0, 3, 4, 5]
        tree_logits = stack.forward(nodes, prefilled(stack, prefix, 128), parents)
        assert torch.equal(tree_logits[[0, 3, 4, 5, 6]], stepped)


def odd_llama(dtype: torch.dtype, eps: float = 1e-6) -> torch.nn.Module:
    """Shapes that cross every boundary the step cuts work at: a hidden size of 1.5 panels (64 outputs on AVX-512),
    heads of 24 (narrower than a panel, not a multiple of it), a vocabulary that ends mid-panel."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(5)
    config = LlamaConfig(vocab_size=200, hidden_size=96, intermediate_size=200, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False, rms_norm_eps=eps)
    model = LlamaForCausalLM(config).eval().to(dtype)
    model.config._attn_implementation = "sdpa"
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_row_count_1_to_65_gives_the_bits_of_one_row_steps_on_one_thread(dtype):
    """Row invariance by construction, tested where it could break: every row count 1–65 (tiles of several rows,
    the 64-row chunks of the MLP, attention blocks of whole vectors and their tails), two threads against one."""
    stack = Engine(odd_llama(dtype)).target
    prefix, tokens = list(range(3, 10)), [(11 * i + 5) % 200 for i in range(65)]
    threads = torch.get_num_threads()
    with torch.inference_mode():
        torch.set_num_threads(1)
        try:
            cache = stack.new_cache(128)
            stack.forward(prefix, cache)
            stepped = torch.cat([stack.forward([token], cache) for token in tokens])
        finally:
            torch.set_num_threads(max(threads, 2))
        try:
            cache = stack.new_cache(128)
            stack.forward(prefix, cache)
            for n in range(1, 66):
                together = stack.forward(tokens[:n], cache)
                cache.crop(len(prefix))
                assert torch.equal(together, stepped[:n]), f"{n} rows differ from one-row steps"
        finally:
            torch.set_num_threads(threads)


@pytest.mark.skipif(not native_step.amx(), reason="no AMX tiles here (Xeons since Sapphire Rapids have them)")
@pytest.mark.parametrize("make", [lambda: odd_llama(torch.bfloat16), lambda: bf16_llama(seed=13, heads=2)],
                         ids=["odd", "heads-128"])  # heads of 128: scores in four pieces of 32 (SmolLM2's 64: two)
def test_amx_tiles_take_the_bf16_products_and_differ_from_the_vector_ones_by_rounding_only(make):
    """Where the CPU has AMX, every bf16 product whose K is a multiple of 32 and attention's scores run on tiles, at
    every row count (the row-invariance tests above then run on them). Another order of the same sums: other bits
    than the vector dot products', within a sum's rounding of them. A process keeps one or the other throughout."""
    lib = native_step._library()
    stack = Engine(make()).target  # odd: K = 96 on tiles, the down projection's K = 200 not
    prefix, tokens = list(range(3, 90)), [(11 * i + 5) % 200 for i in range(20)]

    def logits(tiles: bool) -> torch.Tensor:
        lib.specviz_use_amx(int(tiles))
        with torch.inference_mode():
            cache = stack.new_cache(128)
            stack.forward(prefix, cache)
            return stack.forward(tokens, cache)

    try:
        on, off = logits(True), logits(False)
    finally:
        lib.specviz_use_amx(int(native_step.amx_wanted()))
    assert not torch.equal(on, off), "the tiles never ran"
    # rounding: 0.06% and 0.44% of the largest logit (measured); scores summed over half of each head: 4.0%
    assert (on - off).abs().max() < 0.01 * off.abs().max()


def test_amx_is_switched_by_its_variable(monkeypatch):
    monkeypatch.setenv(native_step.AMX_VARIABLE, "0")
    assert not native_step.amx() and native_step.panels_id().endswith("-no-amx")
    monkeypatch.setenv(native_step.AMX_VARIABLE, "yes")
    with pytest.raises(ValueError, match="SPECVIZ_AMX must be 0 or 1"):
        native_step.amx_wanted()
    monkeypatch.delenv(native_step.AMX_VARIABLE)
    assert native_step.amx_wanted() and not native_step.panels_id().endswith("-no-amx")
    native_step.amx()  # the switch back as the process had it


def test_a_mask_given_explicitly_is_the_causal_default():
    stack = Engine(tiny_llama(vocab=64, layers=2, seed=2)).target
    ids = list(range(3, 19))
    with torch.inference_mode():
        plain = stack.new_cache(64)
        stack.forward(ids[:10], plain)
        expected = stack.logits(stack.run(stack.embed(ids[10:]), 0, stack.n_layers, plain))
        masked = stack.new_cache(64)
        stack.forward(ids[:10], masked)
        n = len(ids) - 10
        hidden = stack.run_at(stack.embed(ids[10:]), 0, stack.n_layers, masked, torch.arange(10, 10 + n)[None],
                              tree_mask(10, chain_parents(n), torch.float32, "cpu"))
        assert torch.equal(stack.logits(hidden), expected)


def test_hooked_layers_run_native_with_their_hooks_fired_around_them():
    """The memory budget's weight streamer hooks layers: they stay on the native step (the same bits as
    without a budget), and their hooks see every forward."""
    engine = Engine(tiny_llama(vocab=64, layers=3, seed=4))
    ids = list(range(3, 30))
    unhooked = logits_of(engine, ids, True)
    seen = []
    layer = engine.target.layers[1]
    handles = [layer.register_forward_pre_hook(lambda *_: seen.append("before")),
               layer.register_forward_hook(lambda *_: seen.append("after"))]
    try:
        hooked = logits_of(engine, ids, True)
    finally:
        for handle in handles:
            handle.remove()
    assert torch.equal(hooked, unhooked)
    assert seen == ["before", "after"] * 2  # the prefill and the 4-token chunk


def test_what_the_native_step_cannot_take_runs_pytorchs_path():
    engine = Engine(tiny_llama(vocab=64, layers=2, seed=3))
    native = engine.target.native
    with torch.no_grad():
        assert native.runs(torch.zeros(1, 3, 32), None)
        assert native.runs(torch.zeros(1, 500, 32), None)  # a long prefill too: one numerics for every process
        assert not native.runs(torch.zeros(2, 3, 32), None)  # a batch
    assert not native.runs(torch.zeros(1, 3, 32), None)  # a training pass (gradients on)
    # a lane's partial model: layers it does not hold are never handed to the native step
    meta = tiny_llama(vocab=64, layers=2, seed=3)
    meta.model.layers[0].to("meta")
    stack = Engine(meta).target
    assert stack.layers[0].specviz_native is None and stack.layers[1].specviz_native is stack.native


def test_the_default_dtype_is_the_measured_choice_measured_once(tmp_path, monkeypatch):
    """No CPU flag decides: the cached measurement does (a missing one is measured; here a stand-in records the
    call) by the step that runs, and the engine says which step runs and why."""
    from engines.model import step_choice

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    measured = []
    timed = {"float32/native": 10.0, "float32/pytorch": 14.0, "bfloat16/native": 12.5, "bfloat16/pytorch": 9.0}

    def fake_measure(model, progress=None):
        measured.append(model)
        choice = step_choice.StepChoice("", timed, "a CPU", 2, "2026-11-26")
        choice.dtype = min(step_choice.DTYPES, key=choice.step_ms)
        step_choice.write_json_atomic(step_choice._path(model), asdict(choice))
        return choice

    monkeypatch.setattr(step_choice, "measure", fake_measure)
    assert step_choice.default_dtype("m") == "float32" and step_choice.default_dtype("m") == "float32"
    assert measured == ["m"]  # bf16's faster PyTorch time does not count: the native step runs
    assert "10.0 ms against 12.5 ms in bfloat16" in step_choice.describe("float32", "m")
    assert "chosen by the caller" in Engine(bf16_llama(), name="m").step_description


def test_the_native_step_can_be_switched_off_for_every_process(monkeypatch):
    monkeypatch.setenv("SPECVIZ_NATIVE_STEP", "0")  # lane workers inherit the environment
    engine = Engine(tiny_llama(vocab=64, layers=2, seed=3))
    assert engine.target.native is None and all(layer.specviz_native is None for layer in engine.target.layers)


def test_without_a_compiler_the_engine_runs_pytorchs_path_and_says_so_once(tmp_path, monkeypatch, caplog):
    from engines.model.native import library

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))  # nothing built here yet
    monkeypatch.setattr(library, "_loaded", {})
    monkeypatch.setattr(library, "compilers", lambda: [])
    monkeypatch.setattr(native_step, "_warned", set())
    caplog.set_level("WARNING", logger=native_step.__name__)
    engine = Engine(tiny_llama(vocab=64, layers=2, seed=3))
    Engine(tiny_llama(vocab=64, layers=2, seed=4))  # a second engine: no second line
    assert engine.target.native is None and "PyTorch's path" in engine.step_description
    assert len(engine.run([1, 2, 3], "ar", max_new_tokens=3).token_ids) == 3
    (line,) = [r.getMessage() for r in caplog.records if r.name == native_step.__name__]
    assert line.startswith("specviz: no C compiler found") and "PyTorch's path instead" in line


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_attention_over_many_key_blocks_computes_the_hugging_face_attention(dtype):
    """Attention's vector path (head_dim a multiple of the vector) groups the queries of one kv head and widens
    keys block by block (in bf16 on a CPU with AVX-512 BF16, scores by dot products straight from the cache): a
    chunk of 48 rows after 400 cached tokens crosses several key blocks and groups, on two threads, and must still
    be the Hugging Face layer's math (this caught a missing barrier after attention, which one-row steps computed
    with the same race could not), and each row the bits of one-row steps."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(7)
    config = LlamaConfig(vocab_size=96, hidden_size=512, intermediate_size=192, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval().to(dtype)
    model.config._attn_implementation = "sdpa"
    stack = Engine(model).target
    prefix, chunk = [(5 * i + 1) % 96 for i in range(400)], [(3 * i + 2) % 96 for i in range(48)]
    threads = torch.get_num_threads()
    torch.set_num_threads(max(threads, 2))
    try:
        with torch.inference_mode():
            results = {}
            for native in (True, False):
                stack.use_native(native)
                cache = stack.new_cache(512)
                stack.forward(prefix, cache)
                results[native] = stack.forward(chunk, cache)
            stack.use_native(True)
            cache = stack.new_cache(512)
            stack.forward(prefix, cache)
            stepped = torch.cat([stack.forward([token], cache) for token in chunk])
    finally:
        torch.set_num_threads(threads)
    if dtype == torch.float32:
        assert torch.allclose(results[True], results[False], atol=1e-4, rtol=1e-4)
    else:  # within bf16's rounding: the step rounds once per layer, PyTorch's path after every operation
        assert (results[True] - results[False]).abs().max() < 0.05 * results[False].abs().max()
    assert torch.equal(results[True], stepped)


@pytest.mark.parametrize("heads", [4, 2])
def test_a_wide_tree_over_many_key_blocks_gives_each_path_the_bits_of_one_token_steps(heads):
    """A verification's groups of queries take their scores by key lanes (4 rows or more in bf16 with AVX-512 BF16,
    two queries at a time), one-row steps the one-query path: a tree of 13 nodes (an odd group, and a decoy branch
    first so the accepted path's keys are scattered and some key lanes unseen) after 150 cached tokens (three key
    blocks, the last one partial) must give each node of the path what one-token steps give it. Heads of 64, as
    SmolLM2's, and of 128 (on AMX tiles, scores in four pieces of 32). A mask misread by the lanes' maximum fails this; a changed rounding in their sums is what the
    48-row test above catches (bf16 weights in the value sums absorb most of it here)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(11)
    config = LlamaConfig(vocab_size=96, hidden_size=256, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=heads, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval().to(torch.bfloat16)
    model.config._attn_implementation = "sdpa"
    stack = Engine(model).target
    prefix, path = [(5 * i + 1) % 96 for i in range(150)], [(3 * i + 2) % 96 for i in range(8)]
    decoy = [90, 91, 92, 93, 94]
    nodes = [path[0], *decoy, *path[1:]]  # node 0 the root; the decoy hangs below it, the path continues after
    parents = [-1, 0, 1, 2, 3, 4, 0, 6, 7, 8, 9, 10, 11]
    on_path = [0, 6, 7, 8, 9, 10, 11, 12]
    with torch.inference_mode():
        stepped = one_token_steps(stack, prefix, path, 256)
        tree = stack.forward(nodes, prefilled(stack, prefix, 256), parents)
    assert torch.equal(tree[on_path], stepped)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_attention_only_block_runs_native_row_invariant_and_near_pytorchs(dtype):
    """CATS's adapter, ``h + attention(norm(h))`` with no MLP: step.c skips the MLP stages of a layer that has
    none. Every row count gives each row the bits of one-row steps (one thread and two), and the result is
    PyTorch's block's within rounding (bf16: the step rounds once at the block's end, PyTorch twice)."""
    from engines.drafters.heads import AttentionBlock
    from engines.model.kv_cache import KVCache
    from engines.model.layers import LayerStack, decoder_pass

    stack = Engine(odd_llama(dtype)).target
    block = AttentionBlock(stack, 1).to(dtype).eval().requires_grad_(False)
    assert native_step.computes(block) and not native_step.computes(block.self_attn)
    n, config = 21, stack.config
    head_dim = config.hidden_size // config.num_attention_heads

    def cache() -> KVCache:
        return KVCache(1, config.num_key_value_heads, head_dim, 64, dtype)

    threads = torch.get_num_threads()
    with torch.inference_mode():
        hidden = stack.embed([(7 * i + 3) % 200 for i in range(n)])
        positions = torch.arange(n)[None]
        torch.set_num_threads(1)
        try:
            one = cache()
            stepped = torch.cat([stack.native.layers([block], hidden[:, i:i + 1], positions[:, i:i + 1], None, one)
                                 for i in range(n)], dim=1)
        finally:
            torch.set_num_threads(max(threads, 2))
        try:
            for rows in (1, 2, 7, n):
                together = stack.native.layers([block], hidden[:, :rows], positions[:, :rows], None, cache())
                assert torch.equal(together, stepped[:, :rows]), f"{rows} rows differ from one-row steps"
        finally:
            torch.set_num_threads(threads)
        mask = LayerStack.causal_mask(0, n, dtype, hidden.device)
        reference = decoder_pass([block], hidden, positions, stack.backbone.rotary_emb(hidden, positions), mask,
                                 cache())
    assert not torch.equal(stepped, hidden)  # the block did something
    tolerance = dict(atol=1e-6, rtol=0) if dtype == torch.float32 else dict(atol=1e-3, rtol=0)  # values ~0.1: 2 bf16 ulps
    torch.testing.assert_close(stepped.float(), reference.float(), **tolerance)


def wide_head_llama(dtype: torch.dtype) -> torch.nn.Module:
    """Heads of 64 (SmolLM2's): bf16 attention takes the dot-product path on CPUs with AVX-512 BF16."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(6)
    config = LlamaConfig(vocab_size=200, hidden_size=128, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         tie_word_embeddings=False, rms_norm_eps=1e-5)
    model = LlamaForCausalLM(config).eval().to(dtype)
    model.config._attn_implementation = "sdpa"
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads", ["odd", "wide"])
def test_moas_sa_and_ca_blocks_run_native_row_invariant_and_near_pytorchs(dtype, heads):
    """MoA's SA block (a Llama layer with a 256-wide MLP, its own cache) and CA block (queries against a memory of
    keys and values computed elsewhere: no k or v map, no RoPE, nothing written) on the step, widened to their
    MLPs (``NativeStep.with_inter``). CA's rows each get the bits of one-row calls (one thread and two); both
    blocks give PyTorch's result within rounding; a wrong memory or layer is refused with a ValueError."""
    from engines.drafters.moa_head import MoAHead
    from engines.model.kv_cache import KVCache

    # MoA's norms use 1e-5: the step takes them only where the model's is the same
    stack = Engine(odd_llama(dtype, eps=1e-5) if heads == "odd" else wide_head_llama(dtype)).target
    head = MoAHead(stack, torch.arange(50), tli=0).to(dtype).eval().requires_grad_(False)
    config, n = stack.config, 13
    head_dim = config.hidden_size // config.num_attention_heads
    threads = torch.get_num_threads()
    with torch.inference_mode():
        embeddings = stack.embed([(5 * i + 1) % 200 for i in range(n)])
        positions = torch.arange(n)[None]
        assert head._native_for(embeddings, head.sa, (head.sa_norm, head.sa_mlp_norm), head.sa_mlp) is not None
        cache = KVCache(1, config.num_key_value_heads, head_dim, 32, dtype)
        native_sa = head.self_attend(embeddings, positions, cache)
        assert cache.length() == n
        torch.testing.assert_close(native_sa.float(), head.self_attend(embeddings, positions).float(),  # PyTorch's
                                   **(dict(atol=2e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=0.1, rtol=0.05)))

        memory = torch.randn(1, 9, head.memory_width).to(dtype)
        keys, values = head.memory_keys_values(memory)
        keys, values = keys.contiguous(), values.contiguous()
        queries = native_sa
        torch.set_num_threads(1)
        try:
            stepped = torch.cat([head.cross_attend(queries[:, i:i + 1], keys, values) for i in range(n)], dim=1)
        finally:
            torch.set_num_threads(max(threads, 2))
        try:
            together = head.cross_attend(queries, keys, values)
        finally:
            torch.set_num_threads(threads)
        assert torch.equal(together, stepped), "CA's rows differ from one-row calls"
        everything = torch.ones(1, 1, n, keys.shape[2], dtype=torch.bool)  # a mask: PyTorch's path, same meaning
        reference = head.cross_attend(queries, keys, values, everything)
        torch.testing.assert_close(stepped.float(), reference.float(),
                                   **(dict(atol=2e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=0.1, rtol=0.05)))
        assert not torch.equal(stepped, queries)  # the block did something

        native = stack.native.with_inter(head.ca_mlp.gate.out_features)
        ca, sa = head.native_blocks()[1], head.native_blocks()[0]
        with pytest.raises(ValueError, match="the memory's keys"):
            native.attend_memory(ca, queries, keys.float() if dtype == torch.bfloat16 else keys.double(), values)
        with pytest.raises(ValueError, match="the memory's values"):
            native.attend_memory(ca, queries, keys, values[:, :, :-1])
        with pytest.raises(ValueError, match="the memory's keys"):
            native.attend_memory(ca, queries, keys[:, :, :0], values[:, :, :0])
        with pytest.raises(ValueError, match="cross-attention layer"):
            stack.native.with_inter(head.sa_mlp.gate.out_features).attend_memory(sa, queries, keys, values)
        with pytest.raises(ValueError, match="inter must be a positive int"):
            stack.native.with_inter(0)
