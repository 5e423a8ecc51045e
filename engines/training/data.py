"""Training batches from the distillation corpus, and the teacher signals computed on the fly.

Teacher hidden states and logits are recomputed per batch rather than stored: one batched forward
of the 135M target runs at thousands of tokens/s on two cores, far cheaper than storing hundreds of
megabytes of hidden states per layer.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from engines.model.layers import LayerStack, decoder_pass
from engines.training.corpus import read_corpus


@dataclass
class Batch:
    ids: torch.Tensor  # [B, T], right-padded
    loss_mask: torch.Tensor  # [B, T] True where position t predicts an answer token t+1

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(self.ids.to(device), self.loss_mask.to(device))


def held_out(record: dict, fraction: float = 0.05) -> bool:
    """A stable split by prompt id, so every turn and mode of a prompt lands on the same side."""
    digest = hashlib.sha256(str(record["id"]).encode()).digest()
    return digest[0] < 256 * fraction


def split_corpus(path: str | Path | list) -> tuple[list[dict], list[dict]]:
    """(train, held-out) of one corpus or several read as one (a list of files and chunk folders)."""
    paths = path if isinstance(path, (list, tuple)) else [path]
    records = [record for p in paths for record in read_corpus(p)]
    if not records:
        raise ValueError(f"distillation corpus {path} is empty or missing: run `specviz distill` first")
    return [r for r in records if not held_out(r)], [r for r in records if held_out(r)]


def draft_vocabulary(records: list[dict], size: int, always: tuple[int, ...] = ()) -> torch.Tensor:
    """The ``size`` tokens the target produces most often in its answers (plus ``always``, e.g. EOS)."""
    counts = Counter(t for r in records for t in r["answer_ids"])
    chosen = list(dict.fromkeys(list(always) + [t for t, _ in counts.most_common(size)]))[:size]
    return torch.tensor(sorted(chosen))


def vocabulary_coverage(records: list[dict], vocab_ids: torch.Tensor) -> float:
    allowed = set(vocab_ids.tolist())
    tokens = [t for r in records for t in r["answer_ids"]]
    return sum(t in allowed for t in tokens) / max(len(tokens), 1)


def batches(records: list[dict], max_tokens: int, seed: int, max_len: int = 512) -> list[Batch]:
    """Length-sorted batches of about ``max_tokens`` padded tokens, in a seeded random order."""
    sequences = sorted(((r["prompt_ids"] + r["answer_ids"])[:max_len], len(r["prompt_ids"])) for r in records
                       if r["answer_ids"])
    groups, current = [], []
    for seq in sequences:
        if current and (len(current) + 1) * len(seq[0]) > max_tokens:
            groups.append(current)
            current = []
        current.append(seq)
    if current:
        groups.append(current)
    random.Random(seed).shuffle(groups)
    out = []
    for group in groups:
        width = max(len(s) for s, _ in group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        mask = torch.zeros(len(group), width, dtype=torch.bool)
        for row, (seq, prompt_len) in enumerate(group):
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, prompt_len - 1: len(seq) - 1] = True
        out.append(Batch(ids, mask))
    return out


class KeyValueCapture:
    """Stands in for a KV cache in a whole-sequence pass and keeps every layer's keys and values (after
    the rotary embedding, as a real cache holds them): MoA's drafter learns from all of them."""

    def __init__(self):
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *_args, **_kwargs):
        self.keys[layer_idx], self.values[layer_idx] = key, value
        return key, value


@torch.no_grad()
def teacher(stack: LayerStack, batch: Batch, layers: tuple[int, ...], vocab_ids: torch.Tensor,
            keys_values: bool = False) -> dict:
    """Hidden states after each layer in ``layers`` ``[B, T, d]`` (fp32), the normed final feature,
    and the target's log-probabilities on the draft vocabulary at the loss positions ``[M, V']``.
    ``keys_values`` adds every layer's keys and values (``{layer: [B, H_kv, T, D]}``, fp32)."""
    capture = KeyValueCapture() if keys_values else None
    if capture is None:
        states = stack.causal_states(batch.ids, layers)
    else:
        hidden, states = stack.embed(batch.ids), {}
        positions = torch.arange(hidden.shape[1], device=hidden.device)[None]
        rotary = stack.backbone.rotary_emb(hidden, positions)
        for i, layer in enumerate(stack.layers):
            hidden = decoder_pass([layer], hidden, positions, rotary, None, capture)
            if i + 1 in layers or i + 1 == stack.n_layers:
                states[i + 1] = hidden
    final = stack.backbone.norm(states[stack.n_layers])
    logits = final[batch.loss_mask].float() @ stack.model.lm_head.weight[vocab_ids].float().T
    signals = {"hidden": {layer: hidden.float() for layer, hidden in states.items()}, "feature": final.float(),
               "logprobs": torch.log_softmax(logits, -1)}
    if capture is not None:
        signals["keys"] = {l: k.float() for l, k in capture.keys.items()}
        signals["values"] = {l: v.float() for l, v in capture.values.items()}
    return signals


def distill_loss(student_logits: torch.Tensor, teacher_logprobs: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) on the draft vocabulary: the reduced-vocabulary form of the papers' distillation loss."""
    student = torch.log_softmax(student_logits.float(), -1)
    return torch.sum(teacher_logprobs.exp() * (teacher_logprobs - student), -1).mean()


def topk_distill_loss(student_logits: torch.Tensor, teacher_logprobs: torch.Tensor, k: int) -> torch.Tensor:
    """CATS's reduced KL: KL(p̃ ‖ q) = Σ_{v ∈ top-K(p)} p̃(v)·(log p̃(v) − log q(v)), p̃ the target
    renormalised on its top K. The paper writes the cross-entropy −Σ p̃·log q, which differs by the
    constant H(p̃); the KL form reaches 0 at the optimum, so its curve shows how much is left to learn."""
    top, index = teacher_logprobs.topk(min(k, teacher_logprobs.shape[-1]), dim=-1)
    target = torch.log_softmax(top, -1)
    student = torch.log_softmax(student_logits.float(), -1).gather(-1, index)
    return (target.exp() * (target - student)).sum(-1).mean()


def vocab_index(vocab_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Full-vocabulary id → position in the draft vocabulary, −1 for tokens outside it."""
    index = torch.full((vocab_size,), -1, dtype=torch.long, device=vocab_ids.device)
    index[vocab_ids] = torch.arange(len(vocab_ids), device=vocab_ids.device)
    return index
