"""Shared fixtures: tiny random models for unit tests, the real default model for integration tests."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Parallel test workers (pytest-xdist, as `make test` runs them) share the machine's cores: each computes on
# one thread, and so does every process it starts (a CLI run, the dashboard's server), since OpenMP threads
# that outnumber the cores spin-wait on each other and crawl.
PARALLEL_WORKER = "PYTEST_XDIST_WORKER" in os.environ
if PARALLEL_WORKER:
    os.environ["OMP_NUM_THREADS"] = "1"

import pytest
import torch

if PARALLEL_WORKER:
    torch.set_num_threads(1)
from transformers import LlamaConfig, LlamaForCausalLM

from engines import Engine


def tiny_llama(vocab: int = 8, layers: int = 2, seed: int = 0, logit_scale: float = 1.0) -> LlamaForCausalLM:
    """A random Llama small enough to enumerate its output distribution exactly."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=False, eos_token_id=None, bos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)  # peakier distributions make a wrong rule easier to see
    model.config._attn_implementation = "sdpa"
    return model


def write_answer_corpus(engine: Engine, path, prompts: int, answer_tokens: int, vocab: int = 64) -> None:
    """A miniature distillation corpus: ``engine`` answers random prompts greedily (trainer tests)."""
    generator = torch.Generator().manual_seed(0)
    with open(path, "w") as out:
        for i in range(prompts):
            prompt = torch.randint(0, vocab, (6,), generator=generator).tolist()
            answer = engine.run(prompt, "ar", max_new_tokens=answer_tokens).token_ids
            out.write(json.dumps({"id": f"q{i}", "category": "qa", "mode": "greedy", "turn": 0, "temperature": 0.0,
                                  "seed": 0, "prompt_ids": prompt, "answer_ids": answer}) + "\n")


def trainer_setup(tmp_path_factory, name: str, prompts: int, answer_tokens: int) -> tuple[Engine, Path, Path]:
    """A tiny target (4 layers, vocabulary 64) and its miniature distillation corpus in a fresh folder: what every
    trainer test starts from, sized by the test."""
    root = tmp_path_factory.mktemp(name)
    engine = Engine(tiny_llama(vocab=64, layers=4, seed=3, logit_scale=3.0))
    corpus = root / "corpus.jsonl"
    write_answer_corpus(engine, corpus, prompts=prompts, answer_tokens=answer_tokens)
    return engine, corpus, root


@pytest.fixture(scope="session")
def real_engine() -> Engine:
    """The default model in fp32: the ground truth for losslessness tests."""
    return Engine.load(dtype="float32")


@pytest.fixture
def tiny_engine() -> Engine:
    return Engine(tiny_llama(vocab=16, layers=3))


@pytest.fixture(scope="session", autouse=True)
def no_lane_worker_outlives_the_suite():
    """After every test has run, no lane worker process may be left (make test checks it, not just a test)."""
    import psutil

    from tests.lane_processes import lane_workers

    yield
    left = lane_workers()
    for pid in left:  # psutil's kill: SIGKILL on POSIX, TerminateProcess on Windows
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    assert not left, f"lane worker processes left behind: {left}"
