"""The engine's host cost per token on PyTorch's path, with the arithmetic taken away.

A random Llama with the default model's depth (30 layers) but widths of 64 runs each method for 128 tokens on
one thread with the native step off: what is left is Python, the layers' bookkeeping and the round's tail. On a
GPU the same work is paid on the host per step, so it bounds what PyTorch's path can reach there (docs/gpu.md).

    .venv/bin/python scripts/host_overhead.py ar pld
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ["SPECVIZ_NATIVE_STEP"] = "0"  # before the engine loads: PyTorch's path, as on a GPU
sys.path.append(str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from engines import Engine  # noqa: E402


def host_ms_per_token(method: str, tokens: int, layers: int) -> float:
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=False, eos_token_id=None, bos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.config._attn_implementation = "sdpa"
    engine = Engine(model)
    prompt = [1, 2, 3, 4]
    engine.run(prompt, method, max_new_tokens=16)  # warm-up
    start = time.perf_counter()
    run = engine.run(prompt, method, max_new_tokens=tokens)
    return (time.perf_counter() - start) / run.stats.new_tokens * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("methods", nargs="*", default=["ar"])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--layers", type=int, default=30, help="the default model has 30")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for method in args.methods:
        print(f"{method}: {host_ms_per_token(method, args.tokens, args.layers):.2f} ms a token "
              f"({args.layers} layers of width 64, one thread)")


if __name__ == "__main__":
    main()
