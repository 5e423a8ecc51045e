"""Small measurements behind the introduction's claim that decoding is memory-bound.

One forward of the target reads every weight once, whether it processes 1 token or 32, while the
arithmetic grows with the number of tokens. If a step costs about "bytes of weights ÷ memory
bandwidth" and barely more for a chunk of tokens, the machine is memory-bound at one token, and
verifying several guessed tokens in one forward is almost free: the premise of speculative decoding.
"""

from __future__ import annotations

import statistics
import time
from typing import Sequence

import torch

from engines.model import verify_cost
from engines.model.layers import LayerStack


def weight_bytes(stack: LayerStack) -> int:
    """Bytes of parameters one full forward reads (tied embeddings counted once, as stored; a weight the native
    step reads as GGUF blocks at the blocks' size)."""
    return _bytes(stack.model, stack)


def _bytes(module: torch.nn.Module, stack: LayerStack) -> int:
    return verify_cost.weight_bytes(module, stack.native)


def self_draft_cost_ratio(stack: LayerStack, draft_layers: int) -> float:
    """Memory-bound estimate of c for a self-draft of the first ``draft_layers`` layers.

    Such a draft reads its layers plus the final norm and the LM head every step, the target reads
    all layers plus the same head; if a step costs its bytes, c is the ratio. The LM head of a small
    model with a large vocabulary is a big share of its weights, so c is well above k / N.
    """
    layers = [_bytes(layer, stack) for layer in stack.layers]
    head = _bytes(stack.backbone.norm, stack) + _bytes(stack.model.lm_head, stack)
    return (sum(layers[:draft_layers]) + head) / (sum(layers) + head)


def forward_costs(stack: LayerStack, chunk_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32), context: int = 200,
                  repeats: int = 5, seed: int = 0) -> list[dict]:
    """Median seconds of one forward of ``n`` new tokens on top of a KV cache of ``context`` tokens.

    This is exactly what decoding does: one token per step for autoregressive decoding, γ+1 tokens
    per verification round for speculative decoding. Chunk sizes are interleaved within each repeat
    so slow drift of a shared machine spreads over all of them alike; a first pass warms up.
    """
    generator = torch.Generator().manual_seed(seed)
    vocab = stack.config.vocab_size
    prompt = torch.randint(vocab, (context,), generator=generator).tolist()
    times: dict[int, list[float]] = {n: [] for n in chunk_sizes}
    with torch.inference_mode():
        cache = stack.new_cache(context + max(chunk_sizes))
        stack.forward(prompt, cache)
        for repeat in range(repeats + 1):
            for n in chunk_sizes:
                chunk = torch.randint(vocab, (n,), generator=generator).tolist()
                start = time.perf_counter()
                stack.forward(chunk, cache)
                if repeat:  # pass 0 is the warm-up
                    times[n].append(time.perf_counter() - start)
                cache.crop(context)
    return [{"tokens": n, "seconds": statistics.median(times[n])} for n in chunk_sizes]


def exit_agreement(stack: LayerStack, sequences: Sequence[Sequence[int]], layers: Sequence[int]) -> dict[int, float]:
    """How often the model's own final norm + head, applied after layer ℓ, already picks the token the
    full model picks (the "logit lens"), over every position of ``sequences``.

    This is the acceptance ceiling of an untrained early exit at ℓ, and it shows how much work the
    last layers do: where it is low even near the top, no shallow draft can agree often.
    """
    hits = {layer: 0 for layer in layers}
    positions = 0
    with torch.inference_mode():
        for ids in sequences:
            states = stack.causal_states(list(ids), layers)
            final = stack.logits(states[stack.n_layers]).argmax(-1)
            positions += len(final)
            for layer in layers:
                hits[layer] += int((stack.logits(states[layer]).argmax(-1) == final).sum())
    return {layer: hits[layer] / positions for layer in layers}
