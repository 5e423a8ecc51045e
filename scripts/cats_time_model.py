"""Measured CATS and Kangaroo speedups under a memory budget beside the §7.6 time model at the same runs'
measured τ and stage costs (specviz.views.cats_costs.TimeModel), on the first turn of one prompt per category.

    .venv/bin/python scripts/cats_time_model.py --flash-mb-s 200 --max-new-tokens 48 --out data/bench/bf16/cats-model.json
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from engines import Engine  # noqa: E402
from engines.storage import write_json_atomic  # noqa: E402
from specviz.experiments.cats_sweeps import memory_settings  # noqa: E402
from specviz.prompts import load_prompts  # noqa: E402
from specviz.views.cats_costs import TimeModel, pool, run_costs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flash-mb-s", type=float, default=200.0)
    parser.add_argument("--resident-layers", type=int, default=15)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    engine = Engine.load()
    memory = memory_settings(engine, args.resident_layers, args.flash_mb_s)
    prompts = {}
    for prompt in load_prompts():
        prompts.setdefault(prompt.category, prompt.turns[0])
    methods = {"ar": ("ar", {}), "kangaroo": ("eesd", {"exit_layer": 3, "head": "cats"}), "cats": ("cats", {})}
    runs: dict[str, list] = {name: [] for name in methods}
    speed: dict[str, list[float]] = {name: [] for name in methods}
    for category, prompt in prompts.items():
        for name, (method, options) in methods.items():
            result = engine.run(prompt, method, max_new_tokens=args.max_new_tokens, **memory, **options)
            runs[name].append(result.events)
            speed[name].append(result.stats.decode_seconds / result.stats.new_tokens)
            print(f"{category} {name}: {result.stats.tokens_per_s:.2f} tok/s, τ {result.stats.mean_accepted_length:.2f}",
                  flush=True)
    ar_seconds = sum(speed["ar"])
    report = {"flash_mb_s": args.flash_mb_s, "resident_layers": args.resident_layers,
              "max_new_tokens": args.max_new_tokens, "prompts": len(prompts), "methods": {}}
    for name in ("kangaroo", "cats"):
        model = TimeModel.from_costs(pool(run_costs(r) for r in runs[name]), pool(run_costs(r) for r in runs["ar"]))
        measured = ar_seconds / sum(speed[name])
        predicted = model.speedup(args.flash_mb_s)
        report["methods"][name] = {"measured_speedup": round(measured, 3), "model_speedup": round(predicted, 3),
                                   "measured_over_model": round(measured / predicted, 3), "tau": round(model.tau, 3),
                                   "bytes_per_token_mb": round(model.bytes_per_token / 1e6, 2), "model": model.to_dict()}
        print(f"{name}: measured {measured:.2f}×, §7.6 model {predicted:.2f}× at τ {model.tau:.2f} "
              f"({measured / predicted:.0%} of the model), BPT {model.bytes_per_token / 1e6:.1f} MB")
    if args.out:
        write_json_atomic(args.out, report, indent=1)


if __name__ == "__main__":
    main()
