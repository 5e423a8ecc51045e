"""On CUDA the engine turns PyTorch's cuDNN attention off unless ``SPECVIZ_CUDNN_SDPA=1``
(:mod:`engines.model.cuda_attention`). The switch is PyTorch's process-wide flag, which the CPU build holds too, so
these run without a GPU; ``tests/test_cuda.py`` builds engines on a real one."""

import pytest
import torch

from engines import Engine
from engines.model.cuda_attention import KEEP_CUDNN, choose_cuda_attention
from specviz.bench.report import to_markdown
from tests.conftest import tiny_llama


@pytest.fixture
def cudnn_allowed(monkeypatch):
    """PyTorch's default (allowed) for the test, and whatever it was afterwards."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    monkeypatch.delenv(KEEP_CUDNN, raising=False)
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


def test_cudnn_attention_is_turned_off_unless_the_environment_keeps_it(cudnn_allowed, monkeypatch):
    assert choose_cuda_attention() is False and not torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    monkeypatch.setenv(KEEP_CUDNN, "1")
    assert choose_cuda_attention() is True and torch.backends.cuda.cudnn_sdp_enabled()


def test_an_engine_on_the_cpu_leaves_the_switch_alone(cudnn_allowed):
    Engine(tiny_llama(vocab=16, layers=2))
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_a_cuda_bench_report_says_whether_cudnn_attention_was_allowed():
    summary = {"tokens_per_s": 10.0, "speedup": 1.0, "tau": 1.0, "alpha": None, "equals_ar": 1.0}
    setup = {"model": "m", "dtype": "bfloat16", "device": "cuda:0", "threads": 16, "n_prompts": 1, "prompts": "p",
             "max_new_tokens": 8, "temperature": 0.0, "row_invariant": False}
    for allowed, words in ((False, "cuDNN attention off"), (True, "cuDNN attention on")):
        text = to_markdown({"setup": {**setup, "cudnn_attention": allowed}, "methods": {"ar": {"overall": summary}}})
        assert words in text.splitlines()[0]
    cpu = to_markdown({"setup": {**setup, "device": "cpu"}, "methods": {"ar": {"overall": summary}}})
    assert "cuDNN" not in cpu
