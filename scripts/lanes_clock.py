"""Does a consumer that lingers on each commit change the tokens/s a lanes run reports? Measured, not asserted.

A dashboard page draws while a run streams; before the lanes' driver ran in a thread of its own
(engines/lanes/background.py), its clock stopped while the page drew but its workers kept computing, so the
speed it showed depended on the page. This times `ppsd`, `mirror` and `ssd` in `mode=lanes` on the default
model, each run undisturbed and with a consumer sleeping ``--linger`` seconds on every commit, interleaved,
and prints the median tokens/s of each and their ratio. The control column times a second undisturbed run
in the lingering run's place: the ratio the machine itself gives two identical runs, so a lingering ratio is
read against it (on a 2-core machine with neighbours the noise alone moves a median by several percent).

    python scripts/lanes_clock.py [--repeats 3] [--max-new-tokens 64] [--linger 0.3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from engines import Engine, Trace

ROOT = Path(__file__).resolve().parents[1]
METHODS = {"ppsd": {"mode": "lanes"}, "mirror": {"mode": "lanes"}, "ssd": {"mode": "lanes"}}


def tokens_per_s(engine: Engine, prompt: str, method: str, options: dict, tokens: int, linger: float) -> float:
    for event in engine.generate(prompt, method, max_new_tokens=tokens, trace=Trace(detailed=True), **options):
        if event.kind == "commit" and linger:
            time.sleep(linger)
        if event.kind == "run_end":
            return event.stats["tokens_per_s"]
    raise RuntimeError("the run never ended")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--linger", type=float, default=0.3)
    args = parser.parse_args()
    prompt = json.loads((ROOT / "data" / "prompts.jsonl").read_text().splitlines()[0])["turns"][0]
    engine = Engine.load()
    print(f"{engine.step_description}\n")
    print("| method | undisturbed tok/s | lingering tok/s | ratio | control: undisturbed again | control ratio |\n"
          "|---|---|---|---|---|---|")
    try:
        for method, options in METHODS.items():
            tokens_per_s(engine, prompt, method, options, 16, 0.0)  # workers start and warm up untimed
            calm, lingering, control = [], [], []
            for _ in range(args.repeats):
                calm.append(tokens_per_s(engine, prompt, method, options, args.max_new_tokens, 0.0))
                lingering.append(tokens_per_s(engine, prompt, method, options, args.max_new_tokens, args.linger))
                control.append(tokens_per_s(engine, prompt, method, options, args.max_new_tokens, 0.0))
            a, b, c = statistics.median(calm), statistics.median(lingering), statistics.median(control)
            print(f"| {method} | {a:.1f} | {b:.1f} | {b / a:.2f}× | {c:.1f} | {c / a:.2f}× |", flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
