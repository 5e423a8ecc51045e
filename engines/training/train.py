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

from engines.drafters.heads import EagleHead, ExitLayerHead, ExitNormHead, _layer_like
from engines.drafters.moa_head import MoAHead, block_memory_mask, block_starts, layer_kv_rows, mixed_attention_layer
from engines.drafters.streaming import StreamingDraft
from engines.model.layers import LayerStack
from engines.training import checkpoint
from engines.training.data import Batch, batches, distill_loss, teacher, topk_distill_loss, vocab_index
from engines.training.human_prompts import provenance


@dataclass
class TrainConfig:
    epochs: float = 1.0
    batch_tokens: int = 2048
    lr: float = 1e-3
    seed: int = 0
    max_steps: int | None = None
    max_seconds: float | None = None  # a time budget: the step count is cut to what fits, measured as it trains
    checkpoint: str | Path | None = None  # resume from here when it exists; written every checkpoint_every seconds
    checkpoint_every: float = 300.0
    warmup_steps: int = 0  # the learning rate rises linearly over these first steps (lr_factor)

    def validate(self) -> None:
        if not self.epochs > 0:
            raise ValueError(f"epochs must be > 0, got {self.epochs}")
        if self.batch_tokens < 64:
            raise ValueError(f"batch_tokens must be >= 64, got {self.batch_tokens}")
        if not 0 < self.lr < 1:
            raise ValueError(f"lr must be in (0, 1), got {self.lr}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0, got {self.max_seconds}")
        if not (isinstance(self.warmup_steps, int) and self.warmup_steps >= 0):
            raise ValueError(f"warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if not self.checkpoint_every >= 0:
            raise ValueError(f"checkpoint_every must be >= 0 seconds, got {self.checkpoint_every}")

    def recipe(self) -> dict:
        """The fields a resumed run must share with the one that wrote the checkpoint (not the time budget:
        a resumed run may be given the time it has left)."""
        return {"epochs": self.epochs, "batch_tokens": self.batch_tokens, "lr": self.lr, "seed": self.seed,
                "max_steps": self.max_steps, "warmup_steps": self.warmup_steps}


def lr_factor(step: int, total: int, warmup: int = 0) -> float:
    """The learning rate's share at ``step`` of ``total``: a linear rise over the first ``warmup`` steps, times a
    cosine decay to 0 at ``total``. Why the rise: AdamW's first updates are full-size whatever the gradients'
    scale, and a head started from trained weights (``--init-from``) lost what it knew in them: the first real
    `eagle3` run's loss jumped from 11.3 to 24 on its first step (docs/training.md)."""
    rise = min(1.0, (step + 1) / warmup) if warmup else 1.0
    return rise * 0.5 * (1 + math.cos(math.pi * min(step, total) / total))


class Student:
    """A module being trained plus how it turns a teacher pass into (loss, draft logits at loss positions)."""

    layers: tuple[int, ...] = ()
    needs_keys_values = False  # every layer's keys and values from the teacher pass (MoA's LSA)

    def __init__(self, name: str, module: torch.nn.Module):
        self.name = name
        self.module = module
        self.curve: list[list[float]] = []
        self.lr: float | None = None  # None: the run's learning rate (several families train in one run)

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


class MoAStudent(Student):
    """MoA's Eq. 2: 0.1·KL(target ‖ draft) + 1.0·SmoothL1(ô, o) on answer positions, CA under the block mask.

    ``ô`` targets the residual stream before the last TLI layers; SmoothL1 reads it divided by the
    teacher's RMS over the batch, because SmolLM2's residual stream has a few very large dimensions that
    would otherwise own the loss. For TLI > 0 the frozen target layers run in fp32 copies, each position
    reading the teacher's keys/values before it and its own at itself (the documented deviation).

    ``lsa_from``: another MoA student whose LSA this one reads (detached) instead of training its own,
    and whose final LSA weights it ships. LSA runs over 30 layers per token and costs more than the
    rest of the drafter together, so on two CPU cores one LSA is trained (by TLI 0) and the TLI 1 and 3
    drafters share it. Runs in bf16 autocast where the device supports it (the card says so)."""

    feature_weight = 1.0
    kl_weight = 0.1
    needs_keys_values = True

    def __init__(self, name: str, head: MoAHead, stack: LayerStack, seed: int = 0,
                 lsa_from: "MoAStudent | None" = None, mixed_precision: bool = False):
        super().__init__(name, head)
        self.stack = stack
        self.lsa_from = lsa_from
        self.mixed_precision = mixed_precision
        self.memory: torch.Tensor | None = None  # this step's LSA rows, for students that share them
        if lsa_from is not None:
            head.lsa.requires_grad_(False)
        self.layers = (stack.n_layers - head.tli,)
        self.needs_keys_values = head.uses_lsa or head.tli > 0
        self.frozen = [_layer_like(stack, l).float().requires_grad_(False).to(stack.device) for l in head.tli_layers]
        self.generator = torch.Generator().manual_seed(seed)

    def loss(self, batch, signals):
        with torch.autocast(batch.ids.device.type, dtype=torch.bfloat16, enabled=self.mixed_precision):
            loss, logits = self._loss(batch, signals)
        return loss.float(), logits.float()

    def adopt_shared_lsa(self) -> None:
        if self.lsa_from is not None:
            self.module.lsa.load_state_dict(self.lsa_from.module.lsa.state_dict())

    def _loss(self, batch, signals):
        head, stack = self.module, self.stack
        ids = batch.ids
        width = ids.shape[1]
        positions = torch.arange(width, device=ids.device)[None]
        with torch.no_grad():
            embeddings = stack.embed(ids).float()
        queries = head.self_attend(embeddings, positions)
        if self.lsa_from is not None:
            memory = self.lsa_from.memory
        elif head.uses_lsa:
            layer_kv = torch.stack([layer_kv_rows(signals["keys"][l], signals["values"][l])
                                    for l in range(stack.n_layers)], dim=2)
            memory = head.memory_rows(layer_kv=layer_kv)
            self.memory = memory.detach()
        else:
            memory = head.memory_rows(feature=signals["feature"])
        null_k, null_v = head.null_keys_values(len(ids))
        keys, values = head.memory_keys_values(memory)
        starts = torch.stack([block_starts(width, self.generator) for _ in range(len(ids))])
        mask = block_memory_mask(starts, ids.device)
        predicted = head.cross_attend(queries, torch.cat([null_k, keys], 2), torch.cat([null_v, values], 2), mask)
        target = signals["hidden"][stack.n_layers - head.tli]
        hidden = predicted
        if self.frozen:
            rotary = stack.backbone.rotary_emb(hidden, positions)
            for index, layer in zip(head.tli_layers, self.frozen):
                hidden = mixed_attention_layer(layer, hidden, signals["keys"][index], signals["values"][index], rotary)
        logits = head(hidden[batch.loss_mask])
        scale = target[batch.loss_mask].pow(2).mean().sqrt()
        feature_loss = torch.nn.functional.smooth_l1_loss(predicted[batch.loss_mask] / scale,
                                                          target[batch.loss_mask] / scale)
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
    """Train every student on the same teacher passes; learning rate by :func:`lr_factor`; held-out agreement at
    the end.

    With ``config.max_seconds`` the step count is cut, after ``BUDGET_PROBE`` measured steps, to what their
    mean step time fits in the budget, and the cosine schedule is stretched over that count, so a run on a
    slow machine still ends in time with a fully decayed learning rate (the budget counts the seconds of the
    runs a resumed run continues).

    With ``config.checkpoint`` the run resumes from that file when it exists and writes it every
    ``config.checkpoint_every`` seconds and once training ends (:mod:`engines.training.checkpoint`)."""
    config.validate()
    torch.manual_seed(config.seed)
    layers = tuple(sorted({l for s in students for l in s.layers}))
    keys_values = any(s.needs_keys_values for s in students)
    epoch_batches = batches(train, config.batch_tokens, config.seed)
    total = max(1, math.ceil(len(epoch_batches) * config.epochs))
    if config.max_steps:
        total = min(total, config.max_steps)
    plan = {"total": total, "probed": False}
    optimizers = [torch.optim.AdamW(s.parameters(), lr=s.lr or config.lr, weight_decay=0.0) for s in students]
    schedules = [torch.optim.lr_scheduler.LambdaLR(
        o, lambda step: lr_factor(step, plan["total"], config.warmup_steps)) for o in optimizers]
    run_id = checkpoint.fingerprint([s.name for s in students], config.recipe(), len(epoch_batches),
                                    sum(p.numel() for s in students for p in s.parameters()))
    step, tokens, spent = 0, 0, 0.0
    resumed = checkpoint.load(config.checkpoint, run_id) if config.checkpoint else None
    if resumed is not None:
        step, tokens, spent = resumed["step"], resumed["tokens"], resumed["seconds"]
        plan.update(resumed["plan"])
        for s, optimizer, schedule in zip(students, optimizers, schedules):
            s.module.load_state_dict(resumed["tensors"][s.name], strict=False)
            optimizer.load_state_dict(resumed["optimizers"][s.name])
            schedule.load_state_dict(resumed["schedules"][s.name])
            s.curve = [list(point) for point in resumed["curves"][s.name]]
        checkpoint.restore_rng(resumed["rng"], students)

    def save_checkpoint() -> None:
        checkpoint.save(config.checkpoint, {
            "fingerprint": run_id, "step": step, "tokens": tokens, "plan": dict(plan),
            "seconds": spent + time.perf_counter() - start,
            "tensors": {s.name: checkpoint.trained_tensors(s.module) for s in students},
            "optimizers": {s.name: o.state_dict() for s, o in zip(students, optimizers)},
            "schedules": {s.name: sch.state_dict() for s, sch in zip(students, schedules)},
            "curves": {s.name: s.curve for s in students}, "rng": checkpoint.rng_state(students)})

    start = time.perf_counter()
    saved_at = start
    first_step = step
    for s in students:
        s.module.train()
    while step < plan["total"]:
        batch = epoch_batches[step % len(epoch_batches)].to(stack.device)
        signals = teacher(stack, batch, layers, vocab_ids, keys_values)
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
        step += 1
        if step == first_step + 1:
            warmed = time.perf_counter()  # the first step pays for allocation and kernel choice: not timed
        if config.max_seconds and not plan["probed"] and step >= first_step + BUDGET_PROBE:
            per_step = (time.perf_counter() - warmed) / (step - first_step - 1)
            left = config.max_seconds - spent - (time.perf_counter() - start)
            plan["total"] = max(step, min(plan["total"], step + int(left / per_step)))
            plan["probed"] = True
        if config.checkpoint and (step == plan["total"] or time.perf_counter() - saved_at >= config.checkpoint_every):
            save_checkpoint()
            saved_at = time.perf_counter()
        if progress:
            progress(step, plan["total"], losses)
    seconds = spent + time.perf_counter() - start
    for s in students:
        if isinstance(s, MoAStudent):
            s.adopt_shared_lsa()
    agreement = heldout_agreement(stack, students, heldout, vocab_ids, config.batch_tokens, layers, keys_values,
                                  group=provenance)
    return FitResult(plan["total"], seconds, tokens, {s.name: thin(s.curve) for s in students}, agreement)


BUDGET_PROBE = 10  # steps timed before a time budget fixes the step count


@torch.no_grad()
def heldout_agreement(stack, students, heldout, vocab_ids, batch_tokens, layers, keys_values: bool = False,
                      ks: tuple[int, ...] = (1, 4), group: Callable[[dict], str] | None = None) -> dict:
    """Held-out agreement: how often the target's argmax is among the draft's k best on held-out answers,
    teacher-forced (not α, the acceptance rate measured by decoding); ``{name: {k: share}}``. With ``group``
    (a record → its group, e.g. who wrote its prompt) each group is measured on its own too, under
    ``"groups": {group: {k: share, "positions": n}}``, from the same passes."""
    for s in students:
        s.module.eval()
    parts: dict[str, list[dict]] = {}
    for record in heldout:
        parts.setdefault(group(record) if group else "all", []).append(record)
    hits = {name: {k: 0 for k in ks} for name in [s.name for s in students]}
    by_group = {}
    for name, records in parts.items():
        part_hits, count = _agreement_hits(stack, students, records, vocab_ids, batch_tokens, layers, keys_values, ks)
        by_group[name] = (part_hits, count)
        for student, row in part_hits.items():
            for k in ks:
                hits[student][k] += row[k]
    total = sum(count for _, count in by_group.values())
    result = {name: {k: hit / total if total else None for k, hit in row.items()} for name, row in hits.items()}
    if group:
        for name in result:
            result[name]["groups"] = {g: {**{k: row[name][k] / count for k in ks}, "positions": count}
                                      for g, (row, count) in by_group.items() if count}
    return result


def _agreement_hits(stack, students, records, vocab_ids, batch_tokens, layers, keys_values, ks):
    """({name: {k: hits}}, positions) over ``records``."""
    hits = {s.name: {k: 0 for k in ks} for s in students}
    count = 0
    for batch in batches(records, batch_tokens, seed=0):
        batch = batch.to(stack.device)
        signals = teacher(stack, batch, layers, vocab_ids, keys_values)
        target_top = signals["logprobs"].argmax(-1)
        count += len(target_top)
        for s in students:
            if hasattr(s, "depth_logits"):  # an unrolled head: its first draft step is what is measured here
                logits = s.depth_logits(batch, signals, 1)[0]
            else:
                _, logits = s.loss(batch, signals) if not isinstance(s, EagleStudent) else _eagle_eval(s, batch, signals)
            ranked = logits.topk(max(ks), dim=-1).indices
            for k in ks:
                hits[s.name][k] += int((ranked[:, :k] == target_top[:, None]).any(-1).sum())
    return hits, count


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
