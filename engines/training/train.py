"""Training loops for the drafters: each learns to imitate the target on the target's own answers.

Every student reads the same teacher pass (hidden states at the layers it needs, the normed last
feature, the target's log-probabilities on the draft vocabulary), so several exit heads train in one
loop for the price of one teacher forward. Loss: KL(target ‖ draft) on the draft vocabulary; EAGLE
adds SmoothL1 between predicted and true features (the EAGLE recipe).
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..drafters.heads import EagleHead, ExitLayerHead, ExitNormHead
from ..drafters.streaming import StreamingDraft
from ..layers import LayerStack
from .data import Batch, batches, distill_loss, teacher, topk_distill_loss, vocab_index


@dataclass
class TrainConfig:
    epochs: float = 1.0
    batch_tokens: int = 2048
    lr: float = 1e-3
    seed: int = 0
    max_steps: int | None = None

    def validate(self) -> None:
        if not self.epochs > 0:
            raise ValueError(f"epochs must be > 0, got {self.epochs}")
        if self.batch_tokens < 64:
            raise ValueError(f"batch_tokens must be >= 64, got {self.batch_tokens}")
        if not 0 < self.lr < 1:
            raise ValueError(f"lr must be in (0, 1), got {self.lr}")


class Student:
    """A module being trained plus how it turns a teacher pass into (loss, draft logits at loss positions)."""

    layers: tuple[int, ...] = ()

    def __init__(self, name: str, module: torch.nn.Module):
        self.name = name
        self.module = module
        self.curve: list[list[float]] = []

    def parameters(self):
        return [p for p in self.module.parameters() if p.requires_grad]

    def loss(self, batch: Batch, signals: dict) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class ExitStudent(Student):
    def __init__(self, name: str, head: ExitNormHead | ExitLayerHead, exit_layer: int):
        super().__init__(name, head)
        self.layers = (exit_layer,)
        self.exit_layer = exit_layer

    def loss(self, batch, signals):
        hidden = signals["hidden"][self.exit_layer]
        if isinstance(self.module, ExitLayerHead):
            logits = self.module(hidden)[batch.loss_mask]  # the layer sees the whole causal sequence
        else:
            logits = self.module(hidden[batch.loss_mask])
        return distill_loss(logits, signals["logprobs"]), logits


class AdapterStudent(ExitStudent):
    """A CATS adapter, trained with the reduced top-K KL instead of the full one."""

    def __init__(self, name: str, head: ExitLayerHead, exit_layer: int, top_k: int = 20):
        super().__init__(name, head, exit_layer)
        self.top_k = top_k

    def loss(self, batch, signals):
        logits = self.module(signals["hidden"][self.exit_layer])[batch.loss_mask]
        return topk_distill_loss(logits, signals["logprobs"], self.top_k), logits


class EagleStudent(Student):
    feature_weight = 1.0
    kl_weight = 0.1

    def __init__(self, name: str, head: EagleHead, stack: LayerStack, noise: float = 0.05):
        super().__init__(name, head)
        self.stack = stack
        self.noise = noise

    def loss(self, batch, signals):
        feature = signals["feature"]
        inputs = feature[:, :-1]
        if self.noise:  # EAGLE's trick: at drafting time the head reads its own, imperfect features
            inputs = inputs + self.noise * torch.randn_like(inputs) * inputs.std()
        with torch.no_grad():
            embeddings = self.stack.embed(batch.ids[:, 1:]).float()
        predicted = self.module.features(embeddings, inputs)
        mask = batch.loss_mask[:, 1:]  # position t+1 predicts token t+2; position 0 is never a loss position
        logits = self.module(predicted[mask])
        feature_loss = torch.nn.functional.smooth_l1_loss(predicted[mask], feature[:, 1:][mask])
        return self.feature_weight * feature_loss + self.kl_weight * distill_loss(logits, signals["logprobs"]), logits


class TinyStudent(Student):
    def __init__(self, name: str, model: torch.nn.Module, trained_layers: list[int], vocab_ids: torch.Tensor):
        super().__init__(name, model)
        model.requires_grad_(False)
        for i in trained_layers:
            model.model.layers[i].requires_grad_(True)
        model.model.norm.requires_grad_(True)
        self.vocab_ids = vocab_ids

    def loss(self, batch, signals):
        hidden = self.module.model(input_ids=batch.ids).last_hidden_state[batch.loss_mask]
        logits = hidden @ self.module.lm_head.weight[self.vocab_ids].T
        return distill_loss(logits, signals["logprobs"]), logits


class StreamingStudent(Student):
    """Speculative streaming: the main stream imitates the target, stream j learns the token j further on.

    The layers below the streams are the target's own (frozen), so the teacher pass already holds their
    output and only the stream layers run here."""

    def __init__(self, name: str, draft: StreamingDraft, trained_layers: list[int], vocab_ids: torch.Tensor,
                 stream_weight: float = 0.5):
        super().__init__(name, draft)
        if not 0 < stream_weight <= 1:
            raise ValueError(f"stream_weight must be in (0, 1], got {stream_weight}")
        self.stream_weight = stream_weight  # stream j's loss weight is stream_weight ** j
        draft.requires_grad_(False)
        for i in trained_layers:
            draft.model.model.layers[i].requires_grad_(True)
        draft.model.model.norm.requires_grad_(True)
        draft.streams.requires_grad_(True)
        self.layers = (draft.stream_start,)
        self.index = vocab_index(vocab_ids, draft.model.config.vocab_size)

    def loss(self, batch, signals):
        hidden = signals["hidden"][self.module.stream_start]
        width = hidden.shape[1]
        main, streams = self.module.run_streams(hidden, torch.arange(width))
        main_logits = self.module.logits(main[batch.loss_mask])
        loss = distill_loss(main_logits, signals["logprobs"])
        for j in range(1, self.module.n_streams + 1):
            # stream j at position t predicts token t+1+j, an answer token iff position t+j is a loss position
            future = torch.full_like(batch.ids, -1)
            future[:, : width - 1 - j] = self.index[batch.ids[:, 1 + j:]]
            valid = torch.zeros_like(batch.loss_mask)
            valid[:, : width - j] = batch.loss_mask[:, j:]
            valid &= future >= 0
            if valid.any():
                stream_logits = self.module.logits(streams[:, :, j - 1][valid])
                loss = loss + self.stream_weight ** j * torch.nn.functional.cross_entropy(
                    stream_logits.float(), future[valid])
        return loss, main_logits


@dataclass
class FitResult:
    steps: int
    seconds: float
    train_tokens: int
    curves: dict = field(default_factory=dict)
    heldout_agreement: dict = field(default_factory=dict)


def fit(stack: LayerStack, students: list[Student], train: list[dict], heldout: list[dict],
        vocab_ids: torch.Tensor, config: TrainConfig,
        progress: Callable[[int, int, dict], None] | None = None) -> FitResult:
    """Train every student on the same teacher passes; cosine learning rate; held-out top-1 agreement at the end."""
    config.validate()
    torch.manual_seed(config.seed)
    layers = tuple(sorted({l for s in students for l in s.layers}))
    epoch_batches = batches(train, config.batch_tokens, config.seed)
    total = max(1, math.ceil(len(epoch_batches) * config.epochs))
    if config.max_steps:
        total = min(total, config.max_steps)
    optimizers = [torch.optim.AdamW(s.parameters(), lr=config.lr, weight_decay=0.0) for s in students]
    schedules = [torch.optim.lr_scheduler.LambdaLR(o, lambda step: 0.5 * (1 + math.cos(math.pi * step / total)))
                 for o in optimizers]
    start, tokens = time.perf_counter(), 0
    for s in students:
        s.module.train()
    for step in range(total):
        batch = epoch_batches[step % len(epoch_batches)].to(stack.device)
        signals = teacher(stack, batch, layers, vocab_ids)
        tokens += int(batch.loss_mask.sum())
        losses = {}
        for student, optimizer, schedule in zip(students, optimizers, schedules):
            loss, _ = student.loss(batch, signals)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            losses[student.name] = float(loss.detach())
            student.curve.append([step + 1, round(losses[student.name], 5)])
        if progress:
            progress(step + 1, total, losses)
    seconds = time.perf_counter() - start
    agreement = heldout_agreement(stack, students, heldout, vocab_ids, config.batch_tokens, layers)
    return FitResult(total, seconds, tokens, {s.name: thin(s.curve) for s in students}, agreement)


@torch.no_grad()
def heldout_agreement(stack, students, heldout, vocab_ids, batch_tokens, layers) -> dict:
    """How often the draft's argmax equals the target's on held-out answers (teacher-forced α proxy)."""
    hits = {s.name: 0 for s in students}
    count = 0
    for s in students:
        s.module.eval()
    for batch in batches(heldout, batch_tokens, seed=0):
        batch = batch.to(stack.device)
        signals = teacher(stack, batch, layers, vocab_ids)
        target_top = signals["logprobs"].argmax(-1)
        count += len(target_top)
        for s in students:
            _, logits = s.loss(batch, signals) if not isinstance(s, EagleStudent) else _eagle_eval(s, batch, signals)
            hits[s.name] += int((logits.argmax(-1) == target_top).sum())
    return {name: hit / count if count else None for name, hit in hits.items()}


def _eagle_eval(student: EagleStudent, batch, signals):
    noise, student.noise = student.noise, 0.0
    try:
        return student.loss(batch, signals)
    finally:
        student.noise = noise


def thin(curve: list[list[float]], points: int = 100) -> list[list[float]]:
    """At most ``points`` (step, loss) pairs, each the mean of its stretch, for the model card."""
    if len(curve) <= points:
        return curve
    size = len(curve) / points
    out = []
    for i in range(points):
        part = curve[int(i * size): int((i + 1) * size)]
        out.append([part[-1][0], round(sum(p[1] for p in part) / len(part), 5)])
    return out


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
