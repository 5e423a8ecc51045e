"""Teacher-forced top-k agreement of shipped drafters with the target.

At every answer position, given the true context, is the target's own next token (its argmax over
the *full* vocabulary) among the drafter's k best? k = 1 is how often a chain draft's guess is right
where its context is right, the ceiling of its first-position acceptance; larger k is what a draft
tree that puts k candidates at a position could catch (EAGLE-2, SpecInfer), so the curve over k says
how much trees could add before any tree is built.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from engines.drafters.trained import load_trained
from engines.model.layers import LayerStack
from engines.training.data import batches, teacher
from engines.training.train import (
    AdapterStudent,
    EagleStudent,
    ExitStudent,
    MoAStudent,
    StreamingStudent,
    Student,
    TinyStudent,
)


def shipped_student(name: str, stack: LayerStack) -> tuple[Student, torch.Tensor]:
    """A shipped drafter wrapped as the trainer's student (fp32, eval mode), and its draft vocabulary."""
    module, card = load_trained(name, stack)
    module.float().eval()
    kind = card["kind"]
    if kind == "tiny":
        vocab = module.draft_vocab
        return TinyStudent(name, module, [], vocab), vocab
    vocab = module.head.vocab_ids
    if kind in ("exit_norm", "exit_layer"):
        return ExitStudent(name, module, card["exit_layer"]), vocab
    if kind == "cats_adapter":
        return AdapterStudent(name, module, card["exit_layer"], card.get("top_k", 20)), vocab
    if kind == "eagle":
        return EagleStudent(name, module, stack, noise=0.0), vocab
    if kind == "ss":
        return StreamingStudent(name, module, [], vocab), vocab
    if kind == "moa":  # its CA memory under the training block mask: lags of 1 to 15 tokens, as in a draft tree
        return MoAStudent(name, module, stack), vocab
    raise ValueError(f"no agreement measure for drafter kind {kind!r}")


@torch.no_grad()
def topk_agreement(stack: LayerStack, names: Sequence[str], records: list[dict], ks: Sequence[int] = (1, 2, 4, 8),
                   batch_tokens: int = 4096, progress: Callable[[int, int], None] | None = None) -> dict:
    """``{name: {k: fraction of answer positions whose target token is among the drafter's top k}}``.

    ``records`` are distillation-corpus records (``prompt_ids``, ``answer_ids``): the corpus's held-out
    answers, or the target's answers to the evaluation prompts. Drafters trained on different corpora read
    out through different draft vocabularies; each such group gets its own teacher pass over the same records.
    """
    if not names:
        raise ValueError("names must list at least one shipped drafter")
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive integers, got {list(ks)}")
    students = [shipped_student(name, stack) for name in names]
    groups: list[tuple[torch.Tensor, list[Student]]] = []  # the teacher's pass reads out through one vocabulary
    for student, vocab in students:
        if max(ks) > len(vocab):
            raise ValueError(f"ks must not exceed the draft vocabulary ({len(vocab)} tokens), got {max(ks)}")
        same = next((members for group_vocab, members in groups if torch.equal(group_vocab, vocab)), None)
        if same is None:
            groups.append((vocab, [student]))
        else:
            same.append(student)
    head = stack.model.lm_head.weight.float()
    hits = {name: dict.fromkeys(ks, 0) for name in names}
    work = batches(records, batch_tokens, seed=0)
    for g, (vocab, members) in enumerate(groups):
        layers = tuple(sorted({layer for student in members for layer in student.layers}))
        keys_values = any(student.needs_keys_values for student in members)
        positions = 0  # the same records for every group
        for i, batch in enumerate(work):
            batch = batch.to(stack.device)
            signals = teacher(stack, batch, layers, vocab, keys_values)
            features = signals["feature"][batch.loss_mask]
            target = torch.cat([(chunk @ head.T).argmax(-1) for chunk in features.split(1024)])
            positions += len(target)
            for student in members:
                _, logits = student.loss(batch, signals)
                ranked = vocab[logits.topk(max(ks), dim=-1).indices]  # draft-vocabulary index → token id
                found = (ranked == target[:, None]).cumsum(-1)
                for k in ks:
                    hits[student.name][k] += int(found[:, k - 1].sum())
            if progress:
                progress(g * len(work) + i + 1, len(groups) * len(work))
    return {name: {k: count / positions if positions else None for k, count in row.items()} for name, row in hits.items()}
