"""The CUDA paths: every method and every trainer on a GPU. Skipped where no GPU is present (CI has none);
run on a GPU machine with ``pytest tests/test_cuda.py``.

On the GPU the engine must stay lossless (greedy fp32 output = ``ar``'s on the same device), sample with
the same seeded random stream as on the CPU, and the trainers must move every batch and buffer to the
target's device."""

import pytest
import torch

from engines import Engine
from engines.drafters.trained import available, load_trained
from engines.training.recipes import train_drafters
from engines.training.train import TrainConfig
from specviz.experiments.drafter_cards import drafter_run_options
from tests.conftest import tiny_llama, write_answer_corpus

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

PROMPT = "Explain in a few sentences why the sky looks blue during the day."
NEW_TOKENS = 40
UNTRAINED = [("ar", {}), ("sps", {"draft_layers": 4, "gamma": 4}), ("pld", {}), ("eesd", {"exit_layer": 20, "gamma": 3})]
# both lanes on the one GPU, in turn (mode=lanes needs a second device)
VERDICT = [("mirror", {"mode": "serial"}), ("mirror", {"mode": "serial", "exit_head": "norm", "draft": "tiny"}),
           ("ssd", {"mode": "serial", "fanout": "geometric", "c": 0.5})]


@pytest.fixture(scope="module")
def cuda_engine() -> Engine:
    return Engine.load(dtype="float32", device="cuda")


def _runs():
    return UNTRAINED + VERDICT + [drafter_run_options(name) for name in available()]


@pytest.mark.parametrize("method,options", _runs(), ids=lambda v: v if isinstance(v, str) else "")
def test_greedy_on_cuda_equals_ar(cuda_engine, method, options):
    reference = cuda_engine.run(PROMPT, "ar", max_new_tokens=NEW_TOKENS)
    run = cuda_engine.run(PROMPT, method, max_new_tokens=NEW_TOKENS, **options)
    assert run.token_ids == reference.token_ids
    assert run.events[0].lanes["target"].startswith("cuda")


@pytest.mark.parametrize("method,options", _runs(), ids=lambda v: v if isinstance(v, str) else "")
def test_sampling_on_cuda_runs(cuda_engine, method, options):
    run = cuda_engine.run(PROMPT, method, max_new_tokens=NEW_TOKENS, temperature=1.0, top_p=0.9, seed=1, **options)
    assert 0 < run.stats.new_tokens <= NEW_TOKENS
    assert 0.0 <= run.stats.acceptance_rate <= 1.0


def test_bf16_on_cuda_decodes():
    engine = Engine.load(dtype="bfloat16", device="cuda")
    run = engine.run(PROMPT, "sps", max_new_tokens=NEW_TOKENS, draft_layers=4, gamma=4)
    assert run.stats.new_tokens == NEW_TOKENS or run.token_ids[-1] in engine.eos_ids


def test_seeded_sampling_draws_the_same_stream_on_cpu_and_cuda():
    """The sampler's generator stays on the CPU, so a seed means the same draws on both devices."""
    model = tiny_llama(vocab=16, layers=2)
    cpu = Engine(model).run([1, 2, 3], "ar", max_new_tokens=12, temperature=1.0, seed=5)
    gpu = Engine(model.to("cuda")).run([1, 2, 3], "ar", max_new_tokens=12, temperature=1.0, seed=5)
    assert cpu.token_ids == gpu.token_ids


@pytest.mark.parametrize("kind,options", [("exit", {"exit_layers": (1,), "head_kinds": ("norm", "layer")}),
                                          ("eagle", {}), ("tiny", {"tiny_layers": 2, "tiny_trained": 1}),
                                          ("ss", {"tiny_layers": 2, "tiny_trained": 1}),
                                          ("cats", {"dm_layer": 1, "sv_layer": 2})])
def test_trainers_run_on_cuda(tmp_path, monkeypatch, kind, options):
    engine = Engine(tiny_llama(vocab=64, layers=4, seed=3, logit_scale=3.0).to("cuda"))
    corpus = tmp_path / "corpus.jsonl"
    write_answer_corpus(engine, corpus, prompts=20, answer_tokens=16)
    monkeypatch.setenv("SPECVIZ_DRAFTS", str(tmp_path))
    saved = train_drafters(kind, engine.target, "tiny-test", corpus, TrainConfig(epochs=3, batch_tokens=128),
                           draft_vocab_size=48, **options)
    for name, card in saved:
        module, _ = load_trained(name, engine.target)
        assert all(p.is_cuda for p in module.parameters())
        method, run_options = drafter_run_options(name)
        reference = engine.run([4, 5, 6], "ar", max_new_tokens=12)
        assert engine.run([4, 5, 6], method, max_new_tokens=12, **run_options).token_ids == reference.token_ids


def test_a_cuda_run_waits_for_its_kernels_at_span_boundaries(cuda_engine):
    from engines import Trace

    trace = Trace()
    cuda_engine.run("Hi", "pld", max_new_tokens=8, trace=trace)
    assert trace.device_sync is not None
