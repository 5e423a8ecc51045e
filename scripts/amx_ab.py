"""The target's forward on AMX tiles against the vector dot products, in one process.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/amx_ab.py [--rows 1,2,4,8,16,32] [--blocks 20]

Where the native step was built for a CPU with AMX tiles (a Xeon since Sapphire Rapids) and the OS allows them,
loads the default model once in bf16, prefills 300 tokens, then times forwards of n rows after them, switching
the products between the tiles and the vector dot products (``specviz_use_amx``: the same packed weights) in
runs of 8 forwards, every row count and both variants in each block (the order flipping every block), so that a
VM's drifting speed falls on all alike. Prints the median ms a forward for each, their ratio, and each one's
t(n) ÷ t(first row count). ``SPECVIZ_QUANTIZED_PANELS=0`` times
the plain panels instead of the GGUF blocks.

``--ar N`` times whole ``ar`` runs instead: N rounds over the first six prompts of ``data/prompts.jsonl``, 128
tokens each through end-of-text, the two variants alternating; median tokens/s of the decode (as the bench
counts them) and of the whole run, prefill included.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from engines import Engine
from engines.model.step_choice import machine_name
from engines.model.native import step as native_step


def time_ar_runs(engine: Engine, lib, rounds: int) -> None:
    from specviz.prompts import load_prompts

    prompts = [prompt.turns[0] for prompt in load_prompts()[:6]]
    whole: dict[int, list[float]] = {0: [], 1: []}
    decode: dict[int, list[float]] = {0: [], 1: []}
    for round_ in range(rounds):
        for tiles in ((0, 1) if round_ % 2 else (1, 0)):
            lib.specviz_use_amx(tiles)
            for prompt in prompts:
                engine.run(prompt, "ar", max_new_tokens=8)  # this prompt's packing and caches, untimed
                started = time.perf_counter()
                run = engine.run(prompt, "ar", max_new_tokens=128, stop_at_eos=False)
                whole[tiles].append(128 / (time.perf_counter() - started))
                decode[tiles].append(run.stats.tokens_per_s)
    print(f"{machine_name()}, bf16, ar, {rounds} rounds × {len(prompts)} prompts × 128 tokens, median tokens/s: "
          f"decode (as the bench counts) vector {statistics.median(decode[0]):.1f}, AMX "
          f"{statistics.median(decode[1]):.1f}; prefill included vector {statistics.median(whole[0]):.1f}, AMX "
          f"{statistics.median(whole[1]):.1f}")
    lib.specviz_use_amx(int(native_step.amx_wanted()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1,2,4,8,16,32")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--ar", type=int, default=0, help="rounds of whole ar runs instead of forwards")
    args = parser.parse_args()
    rows = [int(n) for n in args.rows.split(",")]
    if not native_step.amx():
        raise SystemExit("no AMX here: the native step's build or this CPU/OS has none (or SPECVIZ_AMX=0)")
    lib = native_step._library()
    engine = Engine.load(dtype="bfloat16")
    if args.ar:
        time_ar_runs(engine, lib, args.ar)
        return
    cache = engine.target.new_cache(512)
    variants = {"vector": 0, "AMX": 1}
    with torch.inference_mode():
        engine.target.forward(list(range(100, 400)), cache)
        for n in rows:  # every panel kind packed before timing
            engine.target.forward([5] * n, cache)
            cache.crop(300)
        print(f"{machine_name()}, bf16, {torch.get_num_threads()} threads, 300 tokens cached; median ms a forward")
        print("| rows | vector, ms | AMX, ms | AMX ÷ vector | vector t(n)/t(1) | AMX t(n)/t(1) |")
        print("|--:|--:|--:|--:|--:|--:|")
        times = {(name, n): [] for name in variants for n in rows}
        for block in range(args.blocks):  # every row count and both variants in each block: drift falls on all
            for n in rows:
                for name in (list(variants) if block % 2 else list(variants)[::-1]):
                    lib.specviz_use_amx(variants[name])
                    for _ in range(8):
                        started = time.perf_counter()
                        engine.target.forward([5] * n, cache)
                        times[name, n].append(time.perf_counter() - started)
                        cache.crop(300)
        ms = {key: statistics.median(values) * 1e3 for key, values in times.items()}
        for n in rows:
            vector, tiles = ms["vector", n], ms["AMX", n]
            print(f"| {n} | {vector:.2f} | {tiles:.2f} | {tiles / vector:.3f} | {vector / ms['vector', rows[0]]:.2f} | "
                  f"{tiles / ms['AMX', rows[0]]:.2f} |", flush=True)
    lib.specviz_use_amx(int(native_step.amx_wanted()))


if __name__ == "__main__":
    main()
