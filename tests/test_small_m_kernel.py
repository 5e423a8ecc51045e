"""The compiled small-M fp32 product: the right numbers, the same bits for a row whatever shares the call,
and a clean step aside where it cannot run."""

from __future__ import annotations

import pytest
import torch

from engines import Engine
from engines.model import small_m_kernel
from engines.model.fused_layer import Projection
from tests.conftest import tiny_llama

needs_kernel = pytest.mark.skipif(small_m_kernel.kernel() is None, reason="no AVX2/FMA or no C compiler here")


@needs_kernel
@pytest.mark.parametrize("shape", [(96, 64), (576, 576), (37, 1536)])
def test_the_product_matches_f_linear(shape):
    torch.manual_seed(0)
    weight = torch.randn(*shape)
    for rows in (1, 2, 3, 5, 16):
        x = torch.randn(rows, shape[1])
        assert torch.allclose(small_m_kernel.product(x, weight), torch.nn.functional.linear(x, weight),
                              atol=1e-4, rtol=1e-5)


@needs_kernel
def test_a_rows_bits_do_not_depend_on_the_rows_beside_it():
    torch.manual_seed(1)
    weight, x = torch.randn(300, 576), torch.randn(16, 576)
    together = small_m_kernel.product(x, weight)
    for row in range(16):
        assert torch.equal(small_m_kernel.product(x[row:row + 1], weight)[0], together[row])
    for rows in range(1, 16):
        assert torch.equal(small_m_kernel.product(x[:rows], weight), together[:rows])


@needs_kernel
def test_one_thread_gives_the_same_bits():
    torch.manual_seed(2)
    weight, x = torch.randn(2 * small_m_kernel.PARALLEL_MIN_WEIGHTS // 64, 64), torch.randn(4, 64)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # large enough a weight to split between threads
    both = small_m_kernel.product(x, weight)
    torch.set_num_threads(1)
    try:
        assert torch.equal(small_m_kernel.product(x, weight), both)
    finally:
        torch.set_num_threads(threads)


@needs_kernel
def test_fp32_engine_verifies_a_chunk_with_the_bits_of_one_token_steps():
    """With the kernel, a chunk's linear layers give each row the bits of one-token steps; what differs is
    only attention (sdpa), so logits agree to fp32 rounding and the chunk's own rows are row-invariant."""
    engine = Engine(tiny_llama(vocab=64, layers=2, seed=3))
    assert all(layer.specviz_fused.qkv.small_m for layer in engine.target.layers)
    ids = list(range(3, 30))
    with torch.inference_mode():
        cache = engine.target.new_cache(64)
        engine.target.forward(ids[:-4], cache)
        chunk = engine.target.forward(ids[-4:], cache)
        cache.crop(len(ids) - 4)
        steps = torch.cat([engine.target.forward([token], cache) for token in ids[-4:]])
    assert torch.allclose(chunk, steps, atol=1e-5, rtol=1e-5)


def test_switched_off_or_unfit_weights_keep_onednn(monkeypatch):
    assert not small_m_kernel.applies(torch.randn(8, 33))  # K not a multiple of 32
    assert not small_m_kernel.applies(torch.randn(8, 64, dtype=torch.bfloat16))
    monkeypatch.setenv("SPECVIZ_SMALL_M_KERNEL", "0")
    assert not small_m_kernel.supported_here()
    monkeypatch.setattr(small_m_kernel, "_loaded", {})
    projection = Projection(torch.randn(16, 64), row_invariant=False)
    assert not projection.small_m
    x = torch.randn(1, 64)
    assert torch.allclose(projection(x), torch.nn.functional.linear(x, projection.weight), atol=1e-5)


@pytest.fixture
def fresh_kernel(monkeypatch, tmp_path):
    """A process that has not loaded the kernel yet, on a CPU it fits, with nothing built in its cache."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECVIZ_SMALL_M_KERNEL", raising=False)
    monkeypatch.setattr(small_m_kernel, "_loaded", {})
    monkeypatch.setattr(small_m_kernel, "_warned", False)
    monkeypatch.setattr(small_m_kernel, "_platform_fits", lambda: True)
    monkeypatch.setattr(small_m_kernel, "cpu_flags", lambda: frozenset({"avx2", "fma"}))


def kernel_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == small_m_kernel.__name__]


def test_a_missing_compiler_is_said_once_naming_the_path_that_runs_instead(fresh_kernel, monkeypatch, caplog):
    monkeypatch.setattr(small_m_kernel, "_compiler", lambda: None)
    caplog.set_level("WARNING", logger=small_m_kernel.__name__)
    assert small_m_kernel.kernel() is None
    monkeypatch.setattr(small_m_kernel, "_loaded", {})  # asked again (another engine, another model): still one line
    assert small_m_kernel.kernel() is None
    assert not small_m_kernel.applies(torch.randn(8, 64))
    (line,) = kernel_lines(caplog)
    assert line.startswith("specviz: no C compiler found") and "oneDNN/BLAS path (F.linear) instead" in line
    assert "\n" not in line


def test_a_failed_build_is_said_once(fresh_kernel, monkeypatch, caplog, tmp_path):
    monkeypatch.setattr(small_m_kernel, "_compiler", lambda: str(tmp_path / "no-such-cc"))
    caplog.set_level("WARNING", logger=small_m_kernel.__name__)
    assert small_m_kernel.kernel() is None
    monkeypatch.setattr(small_m_kernel, "_loaded", {})
    assert small_m_kernel.kernel() is None
    (line,) = kernel_lines(caplog)
    assert line.startswith("specviz: the small-M kernel failed to build or load (") and "instead" in line


@pytest.mark.skipif(not small_m_kernel.supported_here() or small_m_kernel.find_compiler() is None,
                    reason="an x86-64 Linux CPU with AVX2 and a C compiler")
def test_a_library_that_no_longer_loads_is_built_again(fresh_kernel, caplog):
    from engines import storage

    caplog.set_level("WARNING", logger=storage.__name__)
    small_m_kernel.library_path().parent.mkdir(parents=True)
    small_m_kernel.library_path().write_bytes(b"not a library")
    assert small_m_kernel.kernel() is not None
    assert any(str(small_m_kernel.library_path()) in r.getMessage() and "does not load" in r.getMessage()
               for r in caplog.records if r.name == storage.__name__)


def test_a_platform_the_kernel_was_not_written_for_stays_silent(fresh_kernel, monkeypatch, caplog):
    monkeypatch.setattr(small_m_kernel, "_platform_fits", lambda: False)  # macOS, Windows, ARM
    monkeypatch.setattr(small_m_kernel, "_compiler", lambda: None)
    caplog.set_level("WARNING", logger=small_m_kernel.__name__)
    assert small_m_kernel.kernel() is None
    assert kernel_lines(caplog) == []
