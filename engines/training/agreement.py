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
    if kind == "eagle" and card.get("architecture") == "eagle3":
        from engines.training.ttt import Eagle3Student

        return Eagle3Student(name, module, stack, card.get("ttt_depth", 1), card.get("hass_top_k", 0)), vocab
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
            for student in members:  # an unrolled head's first draft step is what is measured here
                logits = student.depth_logits(batch, signals, 1)[0] if hasattr(student, "depth_logits") \
                    else student.loss(batch, signals)[1]
                ranked = vocab[logits.topk(max(ks), dim=-1).indices]  # draft-vocabulary index → token id
                found = (ranked == target[:, None]).cumsum(-1)
                for k in ks:
                    hits[student.name][k] += int(found[:, k - 1].sum())
            if progress:
                progress(g * len(work) + i + 1, len(groups) * len(work))
    return {name: {k: count / positions if positions else None for k, count in row.items()} for name, row in hits.items()}


@torch.no_grad()
def depth_agreement(stack: LayerStack, names: Sequence[str], records: list[dict], depth: int = 6,
                    ks: Sequence[int] = (1, 4), batch_tokens: int = 4096,
                    progress: Callable[[int, int], None] | None = None) -> dict:
    """Per draft position i = 1..``depth``: ``{name: {i: {"top1": …, "top4": …, "alpha": …, "chains": n}}}``.

    A chain starts at every answer position u and drafts positions u, u+1, …; its i-th draft is scored against
    the target's argmax at u+i−1, given the true tokens before it. ``top-k`` at i: how often the target's token is
    among the i-th draft's k best. ``alpha`` at i (αᵢ): how often the i-th draft is right where drafts 1..i−1 were
    (on greedy answers, the acceptance of position i in a greedy chain). An EAGLE head drafts position i from its
    own features of positions 1..i−1 (unrolled as it drafts, engines/training/ttt.py), so its agreement falls with
    i; the other drafters read only tokens or the target's states of true tokens, so teacher-forced their i-th
    draft is their first one at u+i−1, and what changes with i is only the conditioning of αᵢ."""
    from engines.drafters.heads import EagleHead
    from engines.training.ttt import depth_rows, eagle_depth_logits

    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive integers, got {list(ks)}")
    students = [shipped_student(name, stack) for name in names]
    head = stack.model.lm_head.weight.float()
    kmax = max(ks)
    counts = {name: {i: {"chains": 0, "alpha_seen": 0, "alpha_hit": 0, **{k: 0 for k in ks}}
                     for i in range(1, depth + 1)} for name in names}
    work = batches(records, batch_tokens, seed=0)
    for n, batch in enumerate(work):
        batch = batch.to(stack.device)
        for student, vocab in students:
            layers = tuple(student.layers)
            signals = teacher(stack, batch, layers, vocab, student.needs_keys_values)
            mask = batch.loss_mask
            target = torch.full(mask.shape, -1, dtype=torch.long, device=mask.device)
            features = signals["feature"][mask]
            target[mask] = torch.cat([(chunk @ head.T).argmax(-1) for chunk in features.split(1024)])
            predicted = []  # [B, T, kmax] token ids of each depth's best drafts at the position it drafts
            if isinstance(student.module, EagleHead):
                for i, logits in enumerate(eagle_depth_logits(student.module, stack, batch, signals, depth), 1):
                    dense = torch.full((*mask.shape, kmax), -2, dtype=torch.long, device=mask.device)
                    dense[:, 1:][depth_rows(batch, i)[0]] = vocab[logits.topk(kmax, dim=-1).indices]
                    predicted.append(dense)
            else:
                _, logits = student.loss(batch, signals)
                dense = torch.full((*mask.shape, kmax), -2, dtype=torch.long, device=mask.device)
                dense[mask] = vocab[logits.topk(kmax, dim=-1).indices]
                predicted = [dense] * depth
            _count(counts[student.name], predicted, target, mask, ks)
        if progress:
            progress(n + 1, len(work))
    return {name: {i: {**{f"top{k}": _share(c[k], c["chains"]) for k in ks},
                       "alpha": _share(c["alpha_hit"], c["alpha_seen"]), "chains": c["chains"]}
                   for i, c in by_depth.items()} for name, by_depth in counts.items()}


def _count(counts: dict, predicted: list[torch.Tensor], target: torch.Tensor, mask: torch.Tensor, ks) -> None:
    """Add one batch's chains to ``counts`` (chain u's i-th draft sits at position u+i−1)."""
    width = mask.shape[1]
    valid_so_far = torch.ones_like(mask)
    hits_so_far = torch.ones_like(mask)
    for i, dense in enumerate(predicted, 1):
        shift = i - 1
        at = torch.zeros_like(mask)
        ranked = torch.full((*mask.shape, dense.shape[-1]), -2, dtype=torch.long, device=mask.device)
        wanted = torch.full(mask.shape, -1, dtype=torch.long, device=mask.device)
        if shift < width:
            at[:, :width - shift] = mask[:, shift:] & (dense[:, shift:, 0] >= 0)
            ranked[:, :width - shift] = dense[:, shift:]
            wanted[:, :width - shift] = target[:, shift:]
        found = (ranked == wanted[..., None]).cumsum(-1) > 0
        valid_so_far = valid_so_far & at
        counts[i]["chains"] += int(valid_so_far.sum())
        for k in ks:
            counts[i][k] += int((valid_so_far & found[..., k - 1]).sum())
        seen = valid_so_far & hits_so_far
        counts[i]["alpha_seen"] += int(seen.sum())
        counts[i]["alpha_hit"] += int((seen & found[..., 0]).sum())
        hits_so_far = hits_so_far & found[..., 0]


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _grouped(records: list[dict], key) -> dict[str, list[dict]]:
    """Records by ``key(record)``, the groups in the order their first records come."""
    groups: dict[str, list[dict]] = {}
    for record in records:
        groups.setdefault(key(record), []).append(record)
    return groups


def by_provenance(records: list[dict]) -> dict[str, list[dict]]:
    """Held-out records grouped by who wrote their prompts (human, seed, target), for reports kept apart."""
    from engines.training.human_prompts import PROVENANCES, provenance

    groups = _grouped(records, provenance)
    return {name: groups[name] for name in PROVENANCES if name in groups}


def by_category(records: list[dict]) -> dict[str, list[dict]]:
    """Evaluation records grouped by their prompt's category (translation, qa, …), in the order they first come:
    where a drafter's agreement on the evaluation prompts is lost, which the held-out groups cannot show."""
    return _grouped(records, lambda record: record["category"])
