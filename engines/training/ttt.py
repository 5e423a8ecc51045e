"""Training-time test (EAGLE-3): an EAGLE head trained on its own unrolled drafts, to the draft depth.

Why: at drafting time the head's input at step j+1 is its *own* step-j output, never a target feature, and its
attention reads the target-fed entries of its cache up to where the draft began plus its own earlier draft
steps. Trained on target features alone (EAGLE's recipe) it meets those inputs first at inference, and its
acceptance decays with depth. Here every position of a batch starts a chain at once: step 1 reads the target's
features, step j reads step j−1's outputs shifted by one position, and the loss is summed over depths 1..D.

Step j's query at position p belongs to the chain that began at s = p − (j − 1). It may see the step-1 (target
fed) keys at positions ≤ s and, for each earlier step b of its own chain, the one key at p − (j − b): exactly
what the head's cache holds when it drafts its j-th token at inference (:func:`ttt_mask`). Keys of all steps are
kept in a cache that concatenates (autograd flows through every one of them), so depth D costs D layer passes
over the batch plus attention over D times the keys, not the D(D+1)/2 passes recomputing earlier steps would.
"""

from __future__ import annotations

import torch

from engines.drafters.heads import EagleHead
from engines.model.layers import LayerStack, decoder_pass
from engines.training.data import Batch, distill_loss
from engines.training.train import Student


class ConcatCache:
    """Stands in for a KV cache in training: each step's keys and values are appended (by concatenation, so
    autograd reaches every step) and the attention reads all of them under :func:`ttt_mask`."""

    def __init__(self):
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *_args, **_kwargs):
        self.keys = key if self.keys is None else torch.cat([self.keys, key], dim=2)
        self.values = value if self.values is None else torch.cat([self.values, value], dim=2)
        return self.keys, self.values


def ttt_mask(width: int, step: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """The additive mask ``[1, 1, width, step·width]`` of draft step ``step`` (1-based) over the keys of steps
    1..step laid end to end: query p sees step-1 keys q ≤ p − (step − 1) and step-b keys (b ≥ 2) at
    q = p − (step − b) only. Every query sees at least its own key, so no row is empty."""
    if width < 1 or step < 1:
        raise ValueError(f"width and step must be >= 1, got {width} and {step}")
    p = torch.arange(width, device=device)[:, None]
    q = torch.arange(width, device=device)[None, :]
    blocks = [q <= p - (step - 1)] + [q == p - (step - b) for b in range(2, step + 1)]
    allowed = torch.cat(blocks, dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def unroll(head: EagleHead, stack: LayerStack, embeddings: torch.Tensor, features: torch.Tensor,
           depth: int) -> list[torch.Tensor]:
    """The head's output features at draft steps 1..``depth`` for every position ``[B, P, d]`` each.

    ``embeddings[:, p]`` is the embedding of token p+1 and ``features[:, p]`` the target's feature f_p (after
    :meth:`EagleHead.target_feature`); step j's output at p predicts token p+2 for the chain begun at p−j+1.
    Positions p < j−1 have no such chain: their step-j outputs are computed but mean nothing."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    width = embeddings.shape[1]
    positions = torch.arange(width, device=embeddings.device)[None]
    cache = ConcatCache()
    outputs, inputs = [], features
    for step in range(1, depth + 1):
        fused = head.fuse(embeddings, inputs)
        rotary = stack.backbone.rotary_emb(fused, positions)
        mask = ttt_mask(width, step, fused.dtype, fused.device)
        out = head.output_feature(decoder_pass([head.layer], fused, positions, rotary, mask, cache))
        outputs.append(out)
        inputs = torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1)  # step j+1 at p reads step j at p−1
    return outputs


def head_inputs(head: EagleHead, stack: LayerStack, batch: Batch, signals: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(embeddings of tokens 1.., target features f_0..f_{T−2}) for a teacher pass, in fp32."""
    if len(head.observe_layers) == 1:
        rows = signals["feature"]  # the normed last hidden state, which the teacher pass computed already
    else:
        rows = torch.cat([signals["hidden"][layer] for layer in head.observe_layers], dim=-1)
    features = head.target_feature(rows)[:, :-1]
    with torch.no_grad():
        embeddings = stack.embed(batch.ids[:, 1:]).to(features.dtype)
    return embeddings, features


def depth_rows(batch: Batch, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Where step ``depth``'s outputs are scored: ``valid`` ``[B, T−1]`` (an answer position with a chain start
    ≥ 0), and ``keep``, which of the teacher's loss rows (``loss_mask`` order) those are."""
    shifted = batch.loss_mask[:, 1:]  # output p predicts token p+2: the teacher's row at position p+1
    index = torch.arange(shifted.shape[1], device=shifted.device)[None]
    valid = shifted & (index >= depth - 1)
    return valid, valid[shifted]


def top_k_cross_entropy(student_logits: torch.Tensor, teacher_logprobs: torch.Tensor, k: int) -> torch.Tensor:
    """HASS's harmonised objective: −Σ_{v ∈ top-K(p)} p(v)·log q(v), the target's K likeliest tokens only (what
    a draft tree with K children can catch), p not renormalised."""
    top, index = teacher_logprobs.topk(min(k, teacher_logprobs.shape[-1]), dim=-1)
    student = torch.log_softmax(student_logits.float(), -1).gather(-1, index)
    return -(top.exp() * student).sum(-1).mean()


class Eagle3Student(Student):
    """EAGLE-3's loss: Σ_{j=1..D} KL(target ‖ head at step j) on the draft vocabulary, the head unrolled on its
    own outputs (:func:`unroll`); no feature regression (there is no target feature for a fused input), no noise
    (its own features are the noise the drafts meet). ``depth`` D defaults to the tree's draft depth.
    ``hass_top_k`` > 0 adds HASS's objective at every step (:func:`top_k_cross_entropy`, weight 1)."""

    def __init__(self, name: str, head: EagleHead, stack: LayerStack, depth: int, hass_top_k: int = 0):
        super().__init__(name, head)
        if depth < 1:
            raise ValueError(f"ttt depth must be >= 1, got {depth}")
        if hass_top_k < 0:
            raise ValueError(f"hass_top_k must be >= 0 (0: off), got {hass_top_k}")
        self.stack = stack
        self.depth = depth
        self.hass_top_k = hass_top_k
        self.layers = tuple(head.observe_layers)

    def loss(self, batch: Batch, signals: dict) -> tuple[torch.Tensor, torch.Tensor]:
        logits_by_depth = self.depth_logits(batch, signals, self.depth)
        total = 0.0
        for depth, logits in enumerate(logits_by_depth, 1):
            keep = depth_rows(batch, depth)[1]
            if keep.any():
                teacher_logprobs = signals["logprobs"][keep]
                total = total + distill_loss(logits, teacher_logprobs)
                if self.hass_top_k:
                    total = total + top_k_cross_entropy(logits, teacher_logprobs, self.hass_top_k)
        return total, logits_by_depth[0]

    def depth_logits(self, batch: Batch, signals: dict, depth: int) -> list[torch.Tensor]:
        """Draft-vocabulary logits of steps 1..``depth`` at their scored rows (:func:`depth_rows`)."""
        head = self.module
        embeddings, features = head_inputs(head, self.stack, batch, signals)
        outputs = unroll(head, self.stack, embeddings, features, depth)
        return [head(out[depth_rows(batch, j)[0]]) for j, out in enumerate(outputs, 1)]


def eagle_depth_logits(head: EagleHead, stack: LayerStack, batch: Batch, signals: dict,
                       depth: int) -> list[torch.Tensor]:
    """Any EAGLE head's logits at steps 1..``depth`` (the agreement measure's: an EAGLE-1 head unrolls the way
    it drafts too)."""
    return Eagle3Student("measure", head, stack, depth).depth_logits(batch, signals, depth)
