"""``specviz`` command line: ``generate`` one prompt with any method, ``bench`` methods side by side."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import typing

from engines import METHODS, Engine, get_method, write_jsonl
from engines.model import DEFAULT_MODEL
from engines.trace import Commit, RunEnd

from .tokens import ansi


def method_option_fields() -> dict[str, type]:
    """Every method config field, once: they become ``--flag`` options (``exit_layer`` → ``--exit-layer``)."""
    found: dict[str, type] = {}
    for method in METHODS.values():
        hints = typing.get_type_hints(method.Config)
        for f in dataclasses.fields(method.Config):
            found.setdefault(f.name, hints[f.name])
    return found


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=DEFAULT_MODEL, help="default: the embedded SmolLM2-135M-Instruct")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                        help="default: bfloat16 where the CPU supports it, else float32")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specviz", description="See, learn and compare speculative decoding.")
    commands = parser.add_subparsers(dest="command", required=True)

    gen = commands.add_parser("generate", help="decode one prompt and show each token's fate")
    gen.add_argument("--method", default="ar", help=f"one of: {', '.join(METHODS)}")
    gen.add_argument("--prompt", required=True)
    add_model_arguments(gen)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--trace", help="write the run's events to this JSON-lines file")
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    options = gen.add_argument_group("method options (only those of the chosen method apply)")
    for name, kind in method_option_fields().items():
        options.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, default=None)

    bench = commands.add_parser("bench", help="benchmark methods on a Spec-Bench style prompt file")
    bench.add_argument("--prompts", default=None, help="JSON lines (question_id, category, turns); "
                                                       "default data/prompts.jsonl")
    bench.add_argument("--methods", default=None,
                       help="comma-separated, e.g. 'ar,hf_ar,sps(draft_layers=4,gamma=5),pld,hf_pld'")
    add_model_arguments(bench)
    bench.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    bench.add_argument("--out", default="bench-out", help="directory for results.json and results.md")
    return parser


def generate_command(args) -> int:
    options = {name: getattr(args, name) for name in method_option_fields() if getattr(args, name) is not None}
    get_method(args.method)  # fail on a typo before spending seconds on loading the model
    engine = Engine.load(args.model, args.dtype, args.device)
    stream = engine.generate(args.prompt, args.method, max_new_tokens=args.max_new_tokens,
                             temperature=args.temperature, top_p=args.top_p, seed=args.seed, **options)
    events = []
    for event in stream:
        events.append(event)
        if isinstance(event, Commit) and not args.json:
            sys.stdout.write("".join(ansi(p, f) for p, f in zip(event.pieces, event.fates)))
            sys.stdout.flush()
    end: RunEnd = events[-1]
    if args.trace:
        write_jsonl(events, args.trace)
    s = end.stats
    if args.json:
        print(json.dumps({"method": args.method, "config": events[0].config, "token_ids": end.token_ids,
                          "text": end.text, "stats": {k: s[k] for k in ("tokens_per_s", "mean_accepted_length",
                                                                        "acceptance_rate", "target_calls", "new_tokens")}}))
    else:
        print(f"\n\n{s['new_tokens']} tokens, {s['tokens_per_s']:.1f} tok/s, τ = {s['mean_accepted_length']:.2f}, "
              f"α = {s['acceptance_rate']:.2f}, {s['target_calls']} target calls  "
              f"[{ansi('accepted', 'accepted')} {ansi('correction', 'correction')} {ansi('bonus', 'bonus')}]")
    return 0


def bench_command(args) -> int:
    from .bench import DEFAULT_METHODS, run_bench, split_methods, write_results
    from .prompts import DEFAULT_PROMPTS

    methods = split_methods(args.methods) if args.methods else DEFAULT_METHODS
    engine = Engine.load(args.model, args.dtype, args.device)
    results = run_bench(engine, args.prompts or DEFAULT_PROMPTS, methods, args.max_new_tokens, args.temperature,
                        args.seed, args.limit)
    json_path, md_path = write_results(results, args.out)
    print(md_path.read_text())
    print(f"wrote {json_path} and {md_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    args = build_parser().parse_args(argv)
    try:
        return generate_command(args) if args.command == "generate" else bench_command(args)
    except (ValueError, FileNotFoundError) as error:
        print(f"specviz: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
