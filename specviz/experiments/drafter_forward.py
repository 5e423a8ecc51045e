"""One EAGLE draft, step by step on a real context: what the head reads from the target, the layers it runs, and
its top-k over the draft vocabulary (notebook 02 draws it with :func:`specviz.views.drafter_forward.drafter_forward_figure`).

The head (``engines.drafters.heads.EagleHead``) pairs the embedding of token t+1 with the target's feature f_t (its
last hidden state after the final norm) and predicts f_{t+1}; the target's own LM head, restricted to the draft
vocabulary, turns a feature into a token. Within a round it feeds on its own predicted features. This module runs
exactly those calls, as :class:`engines.drafters.eagle.EagleDrafter` makes them, and keeps every intermediate vector,
so the figure shows the numbers of one real forward rather than a diagram.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engines import Engine


@dataclass(frozen=True)
class DraftStepView:
    """One drafted position: the head's best guesses and what the target chose there."""

    candidates: list[tuple[int, str, float]]  # (token id, text, probability over the draft vocabulary), best first
    target_token: int
    target_text: str
    target_rank: int | None  # 1 = the head's favourite; None: outside the draft vocabulary
    feature_cosine: float  # cos(predicted feature, the target's feature at the same position)
    on_target_path: bool  # every earlier guess of the round was the target's token (the feature compared is the one
    # the target computes on the committed text; off that path the head is guessing on its own guesses)


@dataclass(frozen=True)
class DrafterForward:
    context_tail: str  # the last words of the context the round drafts after
    read_feature: list[float]  # f_{t-1}: the target's normed last hidden state, paired with the newest token
    read_embedding: list[float]  # the newest committed token's embedding (the target's own table)
    layer_input: list[float]  # fc over (embedding, feature): the decoder layer's input
    predicted: list[float]  # the decoder layer's output: the predicted feature f̂_t
    target_feature: list[float]  # the target's real f_t
    modules: list[tuple[str, str, str]]  # (what, shape, whose) in the order the forward runs them
    steps: list[DraftStepView]
    draft_vocab: int
    vocab: int


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.float().flatten(), b.float().flatten(), dim=0))


@torch.no_grad()
def eagle_forward(engine: Engine, context_ids: list[int], following: list[int], *, steps: int = 3, k: int = 5,
                  drafter: str = "eagle") -> DrafterForward:
    """The first ``steps`` drafts of an EAGLE round after ``context_ids`` (its last token the newest committed one),
    beside ``following``: the target's own next tokens there (a greedy ``ar`` run's), at least ``steps`` of them."""
    if len(context_ids) < 2:
        raise ValueError(f"context_ids must hold at least 2 tokens (a feature and a token to pair), got {len(context_ids)}")
    if len(following) < steps or steps < 1 or k < 1:
        raise ValueError(f"need steps ≥ 1, k ≥ 1 and at least steps target tokens; got steps={steps}, k={k}, "
                         f"{len(following)} following tokens")
    stack = engine.target
    head = engine.trained_drafter(drafter)
    if getattr(head, "kind", "") != "eagle":
        raise ValueError(f"drafter must be an EAGLE head; {drafter!r} is {getattr(head, 'kind', '?')!r}")
    shared = head.head
    vocab_ids = shared.vocab_ids
    text = lambda token: engine.detokenize([int(token)])

    # the target's features on the committed text and on its own next tokens (what verification would give)
    ids = list(context_ids) + list(following[:steps])
    cache = stack.new_cache(len(ids) + 1)
    hidden = stack.run(stack.embed(ids), 0, stack.n_layers, cache)
    target_features = head.target_feature(stack.backbone.norm(hidden))  # [1, n, d]

    t = len(context_ids) - 1  # the newest committed token; features exist for the positions before it
    head_cache = head.new_cache(len(ids) + steps + 1)
    embeddings = stack.embed(context_ids[1:]).to(target_features.dtype)
    read = target_features[:, :t]
    layer_input = head.fuse(embeddings, read)[:, -1]
    predicted = head.features(embeddings, read, head_cache)[:, -1:]
    first = predicted
    views, on_path = [], True
    for step in range(steps):
        logits = head(predicted)[0, -1].float()  # the draft vocabulary's logits
        probs = torch.softmax(logits, dim=-1)
        order = torch.argsort(probs, descending=True)
        candidates = [(int(vocab_ids[i]), text(vocab_ids[i]), float(probs[i])) for i in order[:k]]
        target_token = int(following[step])
        where = (vocab_ids == target_token).nonzero()
        rank = int((order == where[0, 0]).nonzero()[0, 0]) + 1 if len(where) else None
        views.append(DraftStepView(candidates, target_token, text(target_token), rank,
                                   _cosine(predicted[0, -1], target_features[0, t + step]), on_path))
        guess = candidates[0][0]
        on_path = on_path and guess == target_token
        if step + 1 < steps:
            predicted = head.features(stack.embed([guess]).to(predicted.dtype), predicted, head_cache)[:, -1:]

    d = stack.config.hidden_size
    layers = [m for m in head.modules() if type(m).__name__.endswith("DecoderLayer")]
    modules = [("embedding of the newest token", f"{stack.config.vocab_size:,} × {d}", "the target's, shared"),
               ("the target's feature f (last layer, normed)", f"{d} values", "read from the target"),
               ("fc over (embedding, feature)", f"{head.fc.in_features:,} → {head.fc.out_features}", "trained"),
               (f"{len(layers)} decoder layer", f"{d} → {d}", "trained, initialised from the target's last layer"),
               ("LM head rows of the draft vocabulary", f"{d} → {len(vocab_ids):,}", "the target's, frozen")]
    as_list = lambda v: [float(x) for x in v.float().flatten()]
    return DrafterForward(
        context_tail=engine.detokenize(list(context_ids[-12:])), read_feature=as_list(read[0, -1]),
        read_embedding=as_list(embeddings[0, -1]), layer_input=as_list(layer_input[0]), predicted=as_list(first[0, -1]),
        target_feature=as_list(target_features[0, t]), modules=modules, steps=views, draft_vocab=len(vocab_ids),
        vocab=stack.config.vocab_size)
