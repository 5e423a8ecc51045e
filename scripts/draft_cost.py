"""Each shipped drafter's cost c = (ms per drafted token) ÷ (ms per target decode step), robust to a shared machine.

The project's own measure (:func:`specviz.experiments.drafter_compare.compare_drafters`) divides a run's total
``draft`` time by its drafted tokens; on a CPU other processes share, one stalled round swings it 5×. Here each
round's ``draft`` span is divided by the tokens it drafted (the DraftTree's nodes), the first round (which also
feeds the prompt to the drafter's own cache) is left out, and c is the median over rounds and repeats divided
by the median ``ar`` step (its per-token ``verify`` spans), ``ar`` run beside the drafters in every repeat.

Usage: ``HF_HUB_OFFLINE=1 python scripts/draft_cost.py --dtype bfloat16 [--repeat 3] [names…]``; one JSON line
per drafter. Run it with ``PYTHONPATH`` at another checkout to measure that one in the same window.
"""

from __future__ import annotations

import argparse
import json
import statistics

DRAFTERS = ("eagle", "tiny", "ss", "exit@8-norm", "exit@8-layer", "cats@3", "moa-tli0")
PROMPT = "Explain in a few sentences why the sky looks blue during the day."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*", default=list(DRAFTERS))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()

    from engines import Engine
    from engines.core.trace import DraftTree, StageSpan
    from specviz.experiments.drafter_cards import drafter_run_options

    engine = Engine.load(dtype=args.dtype)

    def spans(run, stage: str) -> list[float]:
        return [e.end - e.start for e in run.events if isinstance(e, StageSpan) and e.stage == stage]

    steps: list[float] = []
    per_token: dict[str, list[float]] = {name: [] for name in args.names}
    for repeat in range(args.repeat + 1):  # the first pass warms up (loads, builds, first calls)
        ar = engine.run(PROMPT, "ar", max_new_tokens=args.tokens)
        for name in args.names:
            method, options = drafter_run_options(name)
            run = engine.run(PROMPT, method, max_new_tokens=args.tokens, **options)
            assert run.token_ids == ar.token_ids, name
            sizes = [len(e.nodes) for e in run.events if isinstance(e, DraftTree)]
            if repeat:
                per_token[name] += [s / n for s, n in list(zip(spans(run, "draft"), sizes))[1:] if n]
        if repeat:
            steps += spans(ar, "verify")
    step = statistics.median(steps)
    for name in args.names:
        ms = statistics.median(per_token[name])
        print(json.dumps({"drafter": name, "dtype": args.dtype, "c": round(ms / step, 3),
                          "ms_per_drafted_token": round(1000 * ms, 2), "ar_ms_per_step": round(1000 * step, 2),
                          "rounds": len(per_token[name])}), flush=True)


if __name__ == "__main__":
    main()
