"""How often int8 products pick the token the exact products pick: the default model's argmax, position by position.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/int8_agreement.py [--dtype bfloat16] [--max-new-tokens 128] [--limit N]

Why: ``SPECVIZ_PRODUCTS=int8`` changes the numbers every method computes with (docs/verify-cost.md, "Int8
products"); each method still equals `ar` under them, but `ar` itself answers a little differently. For each
evaluation prompt's first turn (``data/prompts.jsonl``) the exact model answers greedily; then both models read
that same prompt and answer in one forward each (row invariance makes a forward's rows what decoding would
give), and the script counts the answer positions where the int8 model's argmax is the exact model's token, the
answers whose every position agrees, and the first position where they part. The model is loaded twice, once
per setting (``SPECVIZ_PRODUCTS`` is read when a native step is made).
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

from engines import Engine
from engines.model.native import step as native_step
from specviz.prompts import load_prompts


def engine_with(products: str, dtype: str) -> Engine:
    previous = os.environ.get(native_step.PRODUCTS_VARIABLE)
    os.environ[native_step.PRODUCTS_VARIABLE] = products
    try:
        engine = Engine.load(dtype=dtype)
    finally:
        if previous is None:
            os.environ.pop(native_step.PRODUCTS_VARIABLE)
        else:
            os.environ[native_step.PRODUCTS_VARIABLE] = previous
    if engine.target.native is None or engine.target.native.int8_products != (products == "int8"):
        raise SystemExit(f"the native step does not run {products} products here")
    return engine


def argmaxes(engine: Engine, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return engine.target.forward(ids, engine.target.new_cache(len(ids) + 1)).argmax(-1).view(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    args = parser.parse_args()
    if args.max_new_tokens < 1 or (args.limit is not None and args.limit < 1):
        raise ValueError("--max-new-tokens and --limit must be >= 1")
    exact, int8 = engine_with("exact", args.dtype), engine_with("int8", args.dtype)
    records = load_prompts()[: args.limit]
    agreed = total = whole = 0
    first_parts = []
    for record in records:
        prompt = exact.encode([{"role": "user", "content": record.turns[0]}])
        answer = exact.run(prompt, "ar", max_new_tokens=args.max_new_tokens).token_ids
        ids = prompt + answer
        start = len(prompt) - 1  # the row whose argmax is the answer's first token
        reference, other = argmaxes(exact, ids)[start:-1], argmaxes(int8, ids)[start:-1]
        assert reference.tolist() == answer, "a forward's argmaxes are not what decoding committed"
        same = (reference == other).tolist()
        agreed, total, whole = agreed + sum(same), total + len(same), whole + all(same)
        first_parts.append(same.index(False) if not all(same) else len(same))
    print(f"{len(records)} prompts, {total} answer positions ({args.dtype}): int8's argmax is the exact one at "
          f"{agreed / total:.4f} of them; {whole} answers agree at every position; the first disagreement comes "
          f"after a median of {statistics.median(first_parts):.0f} tokens")


if __name__ == "__main__":
    main()
