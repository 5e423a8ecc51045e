"""Hugging Face ``generate`` on the same model, timed like the engine's runs, for honest comparison.

``hf_ar`` is plain greedy/sampled ``generate``; ``hf_pld`` is ``generate(prompt_lookup_num_tokens=10)``;
``hf_assisted`` is ``generate(assistant_model=tiny)`` with the project's trained ``tiny`` draft and a
constant 5 draft tokens per round — the same target, draft and γ as ``sps(draft=tiny,full_vocab=true)``.
Prefill is excluded from tokens/s as for the engine: a ``max_new_tokens=1`` call on the same input
measures it, and its time is subtracted. A forward hook counts the target's calls, so the benchmark can
give Hugging Face's runs a τ (tokens after the first ÷ calls after the prefill) like the engine's.
``generate`` runs with PyTorch's stock kernels, as its users get it, not with the matmul kernels the
engine tuned for this machine (:mod:`engines.model.kernels`).
"""

from __future__ import annotations

import time

import torch

from engines import Engine
from engines.model.kernels import stock_kernels

HF_METHODS = {"hf_ar": {}, "hf_pld": {"prompt_lookup_num_tokens": 10}, "hf_assisted": {}}
ASSISTED_TOKENS = 5


def _assistant(engine: Engine):
    assistant = engine.trained_drafter("tiny")
    config = assistant.generation_config
    config.num_assistant_tokens = ASSISTED_TOKENS
    config.num_assistant_tokens_schedule = "constant"  # no adaptive γ: compare like with like
    config.assistant_confidence_threshold = 0.0
    return assistant


def hf_generate(engine: Engine, prompt_ids: list[int], method: str, max_new_tokens: int,
                temperature: float = 0.0, seed: int = 0) -> dict:
    if method not in HF_METHODS:
        raise ValueError(f"unknown Hugging Face baseline {method!r}; known: {', '.join(HF_METHODS)}")
    eos = sorted(engine.eos_ids)
    kwargs = dict(HF_METHODS[method], do_sample=temperature > 0, eos_token_id=eos or None,
                  pad_token_id=eos[0] if eos else None)
    if method == "hf_assisted":
        kwargs["assistant_model"] = _assistant(engine)
    if temperature > 0:
        kwargs["temperature"] = temperature
        kwargs["top_p"] = 1.0
        kwargs["top_k"] = 0
    inputs = torch.tensor([prompt_ids], device=engine.target.device)
    attention = torch.ones_like(inputs)

    def timed(n: int) -> tuple[float, torch.Tensor]:
        torch.manual_seed(seed)
        start = time.perf_counter()
        with torch.inference_mode(), stock_kernels(engine.model):  # as Hugging Face's users run it
            out = engine.model.generate(inputs, attention_mask=attention, max_new_tokens=n, min_new_tokens=0, **kwargs)
        if out.is_cuda:  # kernels may still be queued; the engine's loop syncs every step by reading tokens
            torch.cuda.synchronize(out.device)
        return time.perf_counter() - start, out

    prefill_seconds, _ = timed(1)
    calls: list[int] = []  # the target's forward calls: prefill, then one per round (per token for hf_ar)
    hook = engine.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        seconds, out = timed(max_new_tokens)
    finally:
        hook.remove()
    new_ids = out[0, len(prompt_ids):].tolist()
    if eos and eos[0] in new_ids and eos[0] not in engine.eos_ids:
        new_ids = new_ids[: new_ids.index(eos[0]) + 1]
    decode = max(seconds - prefill_seconds, 1e-9)
    return {"token_ids": new_ids, "text": engine.detokenize(new_ids), "new_tokens": len(new_ids),
            "decode_seconds": decode, "prefill_seconds": prefill_seconds, "target_calls": len(calls)}
