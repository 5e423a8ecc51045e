"""What a target forward and each shipped drafter's step cost here, on the native step and on PyTorch's path.

    .venv/bin/python scripts/step_costs.py [--dtype bfloat16] [--tokens 64]

Prints one markdown table per path: the target's t(1), t(8), t(16) (median ms of a forward of n tokens after
256 cached, :func:`engines.model.verify_cost.time_forwards`), and for each drafter its ms per drafted token inside a
real `sps`/`eesd` run (γ = 4, greedy, one prompt) and c = that ÷ t(1), the cost ratio speculative sampling's
speedup law takes. Both paths run in one process, interleaved path by path, on the same weights.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after PYTHONPATH: another checkout can be timed

from engines import Engine  # noqa: E402
from engines.model.step_choice import machine_name  # noqa: E402
from engines.model.verify_cost import time_forwards  # noqa: E402
from specviz.views.chain import draft_seconds  # noqa: E402

DRAFTERS = {"tiny": "sps(draft=tiny)", "eagle": "sps(draft=eagle)", "ss": "sps(draft=ss)",
            "exit@8-norm": "eesd(exit_layer=8,head=norm)", "exit@8-layer": "eesd(exit_layer=8,head=layer)",
            "exit@15-norm": "eesd(exit_layer=15,head=norm)"}
PROMPT = "Explain how a bicycle stays upright when it moves, in a short paragraph."


def drafter_ms(engine: Engine, method: str, options: dict, tokens: int) -> float:
    engine.run(PROMPT, method, max_new_tokens=8, gamma=4, **options)  # warm-up
    result = engine.run(PROMPT, method, max_new_tokens=tokens, gamma=4, **options)
    drafted = result.stats.drafted
    return 1e3 * draft_seconds(result.events) / max(drafted, 1)


def main() -> int:
    from specviz.bench.method_specs import parse_method

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    engine = Engine.load(dtype=args.dtype)
    print(f"{machine_name()}, {engine.dtype}, {engine.step_description}\n")
    paths = [("native", True), ("pytorch", False)] if engine.target.native is not None else [("pytorch", False)]
    for label, native in paths:
        engine.target.use_native(native)
        t = time_forwards(engine.target, 256, [1, 8, 16], 7)
        print(f"### {label} step: target t(1) {t[1] * 1e3:.2f} ms, t(8) {t[8] * 1e3:.2f} ms, t(16) {t[16] * 1e3:.2f} ms\n")
        print("| drafter | ms per drafted token | c |\n|---|---|---|")
        for name, spec in DRAFTERS.items():
            parsed = parse_method(spec)
            ms = drafter_ms(engine, parsed.name, parsed.options, args.tokens)
            print(f"| {name} | {ms:.2f} | {ms / (t[1] * 1e3):.3f} |")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
