"""A training run resumes from its checkpoint (engines/training/checkpoint.py): killed after a checkpoint, the
resumed run ends where an unbroken one ends, with the same loss curve and weights; a checkpoint of another
run is refused, a damaged one set aside."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from engines.training import checkpoint
from engines.training.data import draft_vocabulary, split_corpus
from engines.training.recipes import build_students
from engines.training.train import TrainConfig, fit
from tests.conftest import trainer_setup

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return trainer_setup(tmp_path_factory, "resume", prompts=30, answer_tokens=16)


class Killed(Exception):
    pass


def _run(engine, corpus, config, stop_after=None):
    """Fit an EAGLE-3 head and an exit head together; ``stop_after``: raise after that step (a kill)."""
    train, heldout = split_corpus(corpus)
    vocab = draft_vocabulary(train, 48)
    students = []
    for kind, options in (("eagle3", {"feature_layers": (1, 2, 3), "ttt_depth": 2}),
                          ("exit", {"exit_layers": (2,), "head_kinds": ("norm",)})):
        students += build_students(kind, engine.target, vocab, **options)[0]

    steps = []

    def progress(step, total, losses):
        steps.append(step)
        if stop_after is not None and step == stop_after:
            raise Killed

    result = fit(engine.target, students, train, heldout[:2], vocab, config, progress)
    result.steps_run = steps
    return result, {s.name: checkpoint.trained_tensors(s.module) for s in students}


def test_a_resumed_run_ends_where_an_unbroken_one_ends(setup, tmp_path):
    engine, corpus, _ = setup
    unbroken, weights = _run(engine, corpus, TrainConfig(epochs=20, max_steps=8, batch_tokens=256, lr=3e-3))
    path = tmp_path / "run.ckpt"
    config = TrainConfig(epochs=20, max_steps=8, batch_tokens=256, lr=3e-3, checkpoint=path, checkpoint_every=0)
    with pytest.raises(Killed):
        _run(engine, corpus, config, stop_after=5)
    assert torch.load(path, weights_only=True)["step"] == 5
    resumed, resumed_weights = _run(engine, corpus, config)
    assert resumed.steps_run == [6, 7, 8]  # it went on from the checkpoint, not from step 1
    assert resumed.steps == 8 and resumed.curves == unbroken.curves
    for name, tensors in weights.items():
        for key, tensor in tensors.items():
            assert torch.allclose(resumed_weights[name][key], tensor, atol=1e-6), (name, key)

    other = TrainConfig(epochs=20, max_steps=8, batch_tokens=256, lr=1e-3, checkpoint=path)  # another recipe
    with pytest.raises(ValueError, match="another run"):
        _run(engine, corpus, other)
    path.write_bytes(b"not a checkpoint")  # damaged: set aside, the run starts over
    again, _ = _run(engine, corpus, config)
    assert again.steps_run[0] == 1 and again.curves == unbroken.curves
    assert path.with_name(path.name + ".corrupt").exists()
    with pytest.raises(ValueError, match="checkpoint_every"):
        TrainConfig(checkpoint_every=-1).validate()


KILLED_RUN = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from engines import Engine
from engines.training.recipes import train_drafters
from engines.training.train import TrainConfig
from tests.conftest import tiny_llama
engine = Engine(tiny_llama(vocab=64, layers=4, seed=3, logit_scale=3.0))
config = TrainConfig(epochs=1000, max_steps=100, batch_tokens=256, lr=3e-3, checkpoint={checkpoint!r},
                     checkpoint_every=0)
train_drafters("exit", engine.target, "tiny-test", {corpus!r}, config, draft_vocab_size=48, exit_layers=(2,),
               head_kinds=("norm",), progress=lambda step, total, losses: time.sleep(0.05))
"""


def test_a_run_killed_by_sigkill_resumes_from_its_last_checkpoint(setup, tmp_path, monkeypatch):
    """A real kill (SIGKILL, mid-run) leaves a whole checkpoint; the next run resumes there and, once every
    drafter is saved, removes it."""
    from engines.training.recipes import train_drafters

    engine, corpus, _ = setup
    path = tmp_path / "killed.ckpt"
    env = {**os.environ, "SPECVIZ_DRAFTS": str(tmp_path / "drafts"), "OMP_NUM_THREADS": "1"}
    code = KILLED_RUN.format(root=str(ROOT), checkpoint=str(path), corpus=str(corpus))
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            if path.exists() and torch.load(path, weights_only=True)["step"] >= 3:
                break
            time.sleep(0.2)
        assert child.poll() is None, "the run ended before it could be killed"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    at_kill = torch.load(path, weights_only=True)["step"]
    assert 3 <= at_kill < 100
    monkeypatch.setenv("SPECVIZ_DRAFTS", str(tmp_path / "drafts"))
    steps = []
    config = TrainConfig(epochs=1000, max_steps=100, batch_tokens=256, lr=3e-3, checkpoint=path, checkpoint_every=60)
    (name, card), = train_drafters("exit", engine.target, "tiny-test", corpus, config, draft_vocab_size=48,
                                   exit_layers=(2,), head_kinds=("norm",),
                                   progress=lambda step, total, losses: steps.append(step))
    assert steps[0] == at_kill + 1 and steps[-1] == 100 == card["training"]["steps"]
    assert [point[0] for point in card["training"]["loss_curve"]] == list(range(1, 101))  # from the first run on
    assert not path.exists()
