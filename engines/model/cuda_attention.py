"""Which of PyTorch's attention kernels decoding uses on a GPU.

From torch 2.11 (whose bundled cuDNN passes 9.15) ``scaled_dot_product_attention`` prefers cuDNN's fused attention
on Hopper and Blackwell GPUs. cuDNN builds an execution graph for each new shape of queries and keys; other
projects' cuDNN backends report builds of up to hundreds of milliseconds and pad lengths to fixed buckets to reuse
graphs (SGLang, FlashInfer, MLX). Decoding makes a new key length at every step, every verify round and every
drafting level, so each would pay a build. The engine's one GPU bench (one H200, torch 2.11, ``docs/gpu.md``) ran
`ar` at 61 ms a token where the host's own work is about 8: a build of about 50 ms per forward would explain the
gap. That was not measured there. So on CUDA the engine turns cuDNN's attention off for the process, as vLLM
does; Flash and memory-efficient attention build nothing per shape. ``SPECVIZ_CUDNN_SDPA=1`` keeps PyTorch's
choice, so a GPU round can time the two against each other.
"""

from __future__ import annotations

import os

import torch

KEEP_CUDNN = "SPECVIZ_CUDNN_SDPA"


def choose_cuda_attention() -> bool:
    """Called when an engine is built on a CUDA model; says whether cuDNN's attention stays on (the caller's
    environment asked for it) or was turned off."""
    if os.environ.get(KEEP_CUDNN, "0") == "1":
        return True
    torch.backends.cuda.enable_cudnn_sdp(False)
    return False
