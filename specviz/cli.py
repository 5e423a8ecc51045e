"""``specviz`` command line: ``generate`` one prompt with any method, ``bench`` methods side by side."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import typing
from pathlib import Path

from engines import METHODS, Engine, get_method, write_jsonl
from engines.core.trace import Commit, RunEnd
from engines.lanes import LaneError, LaneSpec
from engines.methods.base import int_or_auto
from engines.model.loading import DEFAULT_MODEL

from .tokens import ansi


def method_option_fields() -> dict[str, type]:
    """Every method config field, once: they become ``--flag`` options (``exit_layer`` → ``--exit-layer``)."""
    found: dict[str, type] = {}
    for method in METHODS.values():
        hints = typing.get_type_hints(method.Config)
        for f in dataclasses.fields(method.Config):
            kind = hints[f.name]
            found.setdefault(f.name, int_or_auto if typing.get_args(kind) else kind)  # int | str: a number or "auto"
    return found


def parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false", "1", "0", "yes", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return lowered in ("true", "1", "yes")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=DEFAULT_MODEL, help="default: the embedded SmolLM2-135M-Instruct")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                        help="default: the faster of the two on this machine, measured once and cached")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)


def add_memory_arguments(parser: argparse.ArgumentParser) -> None:
    """The memory-budget run setting (edge devices whose DRAM does not hold the model; engines.memory_budget.weight_stream)."""
    group = parser.add_argument_group("memory budget (emulated edge device; the target's layers only)")
    group.add_argument("--memory-budget-mb", type=float, default=None,
                       help="keep the target's first layers that fit in this many MB resident (embeddings, norm and "
                            "head always are); stream the rest from per-layer files")
    group.add_argument("--flash-mb-s", type=float, default=None,
                       help="with --memory-budget-mb: read streamed layers at most this fast (default: unthrottled)")
    group.add_argument("--stream", choices=["deep", "all"], default="deep",
                       help="deep: layers beyond the budget stream on every forward; all: every layer streams, "
                            "the ones that fit are held until the round ends (the CATS paper's two modes)")


def memory_arguments(args) -> dict:
    return {"memory_budget_mb": args.memory_budget_mb, "flash_mb_s": args.flash_mb_s, "stream": args.stream}


MEMORY_STATS = ("bytes_streamed", "bytes_per_token", "peak_resident_bytes")


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
    add_memory_arguments(gen)
    options = gen.add_argument_group("method options (only those of the chosen method apply)")
    for name, kind in method_option_fields().items():
        options.add_argument("--" + name.replace("_", "-"), dest=name, type=parse_bool if kind is bool else kind,
                             default=None)

    gen.add_argument("--lane-address", default=None, metavar="HOST:PORT",
                     help="ppsd mode=lanes: host the lanes' store at HOST:PORT and wait for workers started by hand "
                          "(`specviz lane-worker`, on this or other machines) instead of spawning them here")

    worker = commands.add_parser("lane-worker", help="serve as one lane of a driver's run (two-host runs; see docs/lanes.md)")
    worker.add_argument("--address", required=True, help="the driver's host (its --lane-address)")
    worker.add_argument("--port", type=int, required=True, help="the driver's port")
    worker.add_argument("--rank", type=int, default=1, help="this lane's rank: 1 .. world-size − 1 (stage rank + 1)")
    worker.add_argument("--world-size", type=int, default=2, help="lanes in all, the driver's included")
    worker.add_argument("--lane", default="cpu0", help="cpuK (this host's K-th usable core) or cuda:K")

    physics = commands.add_parser("lanes-physics", help="decode speed with 1 and all threads, and two 1-thread lanes "
                                                         "side by side (what the parallel methods stand on)")
    add_model_arguments(physics)
    physics.add_argument("--out", default=None, help="also write the result as JSON to this file")

    bench = commands.add_parser("bench", help="benchmark methods on a Spec-Bench style prompt file")
    bench.add_argument("--prompts", default=None, help="JSON lines (question_id, category, turns); "
                                                       "default data/prompts.jsonl")
    bench.add_argument("--methods", default=None,
                       help="comma-separated, e.g. 'ar,hf_ar,sps(draft_layers=4,gamma=5),pld,hf_pld'; llamacpp_ar and "
                            "llamacpp_lookup are llama.cpp on the same weights (after `make peers`; skipped with a "
                            "note without it)")
    add_model_arguments(bench)
    bench.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    bench.add_argument("--per-category", type=int, default=None, help="only the first N prompts of each category")
    bench.add_argument("--out", default="bench-out", help="directory for results.json and results.md")
    bench.add_argument("--row-invariant", choices=["auto", "on", "off"], default="auto",
                       help="verify n tokens with the bits of n one-token steps (auto: in bf16 on a CPU, where greedy "
                            "output then equals ar's; off: PyTorch's own attention, faster for many-token verifies)")
    add_memory_arguments(bench)

    disconnect = commands.add_parser("disconnection", help="MoA's disconnection experiment: the client continues "
                                                           "alone after B tokens (lossy); agreement with the connected run")
    disconnect.add_argument("--methods", default="moa(network=local),eagle(network=local),eagle(network=local,draft=tiny)",
                            help="comma-separated method specs, each with a network option")
    disconnect.add_argument("--budgets", default="1,10,25,50", help="comma-separated B values")
    disconnect.add_argument("--per-category", type=int, default=1)
    disconnect.add_argument("--max-new-tokens", type=int, default=128)
    disconnect.add_argument("--prompts", default=None)
    disconnect.add_argument("--dtype", choices=["float32", "bfloat16"], default=None)
    disconnect.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    disconnect.add_argument("--out", default="bench-out")
    distill = commands.add_parser("distill", help="have the target answer the training prompts (self-distillation corpus)")
    distill.add_argument("--out", default=None, help="default data/distill/corpus.jsonl (appends; resumable)")
    distill.add_argument("--per-category", type=int, default=100, help="training prompts per Spec-Bench group")
    distill.add_argument("--modes", default="greedy,sample@0.8", help="greedy and/or sample@T with T in [0.7, 1.0]")
    distill.add_argument("--max-new-tokens", type=int, default=160)
    distill.add_argument("--batch-size", type=int, default=16)
    distill.add_argument("--seed", type=int, default=0)
    distill.add_argument("--dtype", choices=["float32", "bfloat16"], default=None)
    distill.add_argument("--device", choices=["cpu", "cuda"], default="cpu")

    train = commands.add_parser("train", help="train a drafter on the distillation corpus (writes data/drafts/…)")
    train.add_argument("drafter", choices=["exit", "eagle", "tiny", "ss", "cats", "moa"])
    train.add_argument("--corpus", default=None, help="default data/distill/corpus.jsonl")
    train.add_argument("--exit-layers", default="4,8,15", help="exit: comma-separated layers")
    train.add_argument("--heads", default="norm,layer", help="exit: norm and/or layer")
    train.add_argument("--tiny-layers", type=int, default=4, help="tiny, ss: layers taken from the target")
    train.add_argument("--tiny-trained", type=int, default=2,
                       help="tiny: how many of the top layers are trained; ss: the layers that carry the streams")
    train.add_argument("--streams", type=int, default=2, help="ss: lookahead streams")
    train.add_argument("--stream-weight", type=float, default=0.5, help="ss: stream j's loss weight is w^j")
    train.add_argument("--dm-layer", type=int, default=3, help="cats: the draft adapter's layer L_DM")
    train.add_argument("--sv-layer", default="15", help="cats: the shallow verifier's layer L_SV (comma-separated: "
                       "several verifiers from one teacher pass)")
    train.add_argument("--no-dm-adapter", action="store_true", help="cats: train shallow verifiers only, keep cats@L_DM")
    train.add_argument("--top-k", type=int, default=20, help="cats: support of the reduced top-K KL loss")
    train.add_argument("--tli", default="0", help="moa: comma-separated Target Layer Inference depths (e.g. 0,1,3)")
    train.add_argument("--no-lsa", action="store_true", help="moa: the −LSA ablation (CA memory = last hidden states)")
    train.add_argument("--ablation", action="store_true", help="moa: also train the −LSA ablation at TLI 0")
    train.add_argument("--separate-lsa", action="store_true",
                       help="moa: train one LSA per TLI instead of sharing the first one's")
    train.add_argument("--control", default=None,
                       help="moa: also train an EAGLE head of this name on the same batches (an equal-budget control)")
    train.add_argument("--epochs", type=float, default=1.0)
    train.add_argument("--batch-tokens", type=int, default=2048)
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--max-steps", type=int, default=None)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--acceptance-tokens", type=int, default=48,
                       help="new tokens per prompt when measuring the card's α and τ after training")
    train.add_argument("--dtype", choices=["float32", "bfloat16"], default=None, help="the teacher's dtype")
    train.add_argument("--device", choices=["cpu", "cuda"], default="cpu")

    agree = commands.add_parser("agreement", help="teacher-forced top-k agreement of shipped drafters with the target")
    agree.add_argument("--drafters", default="tiny,eagle,ss,exit@8-norm,exit@8-layer,exit@15-norm,cats@3",
                       help="comma-separated names from data/drafts")
    agree.add_argument("--ks", default="1,2,4,8", help="comma-separated k: is the target's token in the draft's top k?")
    agree.add_argument("--on", choices=["heldout", "eval"], default="heldout",
                       help="heldout: the corpus's held-out answers; eval: the target's greedy answers to the "
                            "first turn of each prompt in data/prompts.jsonl")
    agree.add_argument("--corpus", default=None, help="with --on heldout; default data/distill/corpus.jsonl")
    agree.add_argument("--max-new-tokens", type=int, default=128, help="with --on eval: answer length")
    agree.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="the target's dtype")
    agree.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    agree.add_argument("--out", default=None, help="also write the result as JSON to this file")

    cost = commands.add_parser("verify-cost", help="measure what a target forward of n tokens costs here "
                               "(tunes the matmul kernels; cached per machine)")
    cost.add_argument("--model", default=DEFAULT_MODEL, help="default: the embedded SmolLM2-135M-Instruct")
    cost.add_argument("--dtype", choices=["float32", "bfloat16"], default=None)
    cost.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    cost.add_argument("--remeasure", action="store_true", help="measure again even if this machine's curve is cached")
    cost.add_argument("--json", action="store_true", help="print the curve as one JSON object")
    return parser


def generate_command(args) -> int:
    options = {name: getattr(args, name) for name in method_option_fields() if getattr(args, name) is not None}
    get_method(args.method)  # fail on a typo before spending seconds on loading the model
    engine = Engine.load(args.model, args.dtype, args.device)
    if not args.json:
        print(f"[{engine.step_description}]", file=sys.stderr)
    if args.lane_address:
        host, _, port = args.lane_address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--lane-address must be HOST:PORT, got {args.lane_address!r}")
        engine.lane_spec = LaneSpec(address=host, port=int(port), spawn=False)
    events = []
    try:
        stream = engine.generate(args.prompt, args.method, max_new_tokens=args.max_new_tokens,
                                 temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                                 **memory_arguments(args), **options)
        for event in stream:
            events.append(event)
            if isinstance(event, Commit) and not args.json:
                sys.stdout.write("".join(ansi(p, f) for p, f in zip(event.pieces, event.fates)))
                sys.stdout.flush()
    finally:
        engine.close()
    end: RunEnd = events[-1]
    if args.trace:
        write_jsonl(events, args.trace)
    s = end.stats
    budgeted = events[0].memory is not None
    if args.json:
        keys = ("tokens_per_s", "mean_accepted_length", "acceptance_rate", "target_calls", "new_tokens", "clock")
        keys += MEMORY_STATS if budgeted else ()
        print(json.dumps({"method": args.method, "config": events[0].config, "token_ids": end.token_ids,
                          "text": end.text, "stats": {k: s[k] for k in keys}}))
    else:
        print(f"\n\n{s['new_tokens']} tokens, {s['tokens_per_s']:.1f} tok/s, τ = {s['mean_accepted_length']:.2f}, "
              f"α = {s['acceptance_rate']:.2f}, {s['target_calls']} target calls"
              + ("  (clock=virtual: replayed from measured per-operation costs, not wall time)"
                 if s.get("clock") == "virtual" else "") + "  "
              f"[{ansi('accepted', 'accepted')} {ansi('correction', 'correction')} {ansi('bonus', 'bonus')}]")
        if budgeted:
            print(f"memory budget: {s['bytes_streamed'] / 1e6:.1f} MB streamed, {s['bytes_per_token'] / 1e6:.2f} MB "
                  f"per token, peak {s['peak_resident_bytes'] / 1e6:.1f} MB of weights resident")
    return 0


def bench_command(args) -> int:
    from .bench import default_methods, run_bench, split_methods, write_results
    from .hf_baselines import HF_METHODS
    from .llamacpp_peer import PEER_METHODS
    from .prompts import DEFAULT_PROMPTS

    memory = memory_arguments(args)
    methods = split_methods(args.methods) if args.methods else default_methods()
    if not args.methods and memory["memory_budget_mb"] is not None:  # HF's generate and llama.cpp keep all resident
        methods = [m for m in methods if m not in HF_METHODS and m not in PEER_METHODS]
    if not args.methods and args.temperature > 0:  # llama.cpp's rows run greedy only
        methods = [m for m in methods if m not in PEER_METHODS]
    row_invariant = {"auto": None, "on": True, "off": False}[args.row_invariant]
    engine = Engine.load(args.model, args.dtype, args.device, row_invariant=row_invariant)
    results = run_bench(engine, args.prompts or DEFAULT_PROMPTS, methods, args.max_new_tokens, args.temperature,
                        args.seed, args.limit, per_category=args.per_category,
                        checkpoint=lambda partial: write_results(partial, args.out), memory=memory)
    engine.close()
    json_path, md_path = write_results(results, args.out)
    print(md_path.read_text())
    print(f"wrote {json_path} and {md_path}")
    return 0


def disconnection_command(args) -> int:
    from .bench import split_methods
    from .disconnection import measure_disconnection, write_disconnection

    try:
        budgets = tuple(int(b) for b in args.budgets.split(","))
    except ValueError:
        raise ValueError(f"budgets must be comma-separated integers, got {args.budgets!r}") from None
    engine = Engine.load(dtype=args.dtype, device=args.device)
    results = measure_disconnection(engine, split_methods(args.methods), budgets, args.prompts, args.per_category,
                                    args.max_new_tokens)
    path = write_disconnection(results, args.out)
    print(path.with_suffix(".md").read_text())
    print(f"wrote {path}")
    return 0


def distill_command(args) -> int:
    from engines.training.corpus import build_corpus, parse_modes
    from engines.training.recipes import DEFAULT_CORPUS

    from .distill_prompts import build_prompts, check_no_overlap, write_prompts

    modes = parse_modes(args.modes)
    prompts = build_prompts(args.per_category, args.seed)
    check_no_overlap(prompts)
    out = Path(args.out) if args.out else DEFAULT_CORPUS
    write_prompts(out.with_name("prompts.jsonl"), prompts)
    engine = Engine.load(dtype=args.dtype, device=args.device)
    build_corpus(engine, prompts, out, modes, args.max_new_tokens, args.batch_size, args.seed)
    print(f"corpus: {out}")
    return 0


def train_command(args) -> int:
    import torch
    from tqdm.auto import tqdm

    from engines.training.recipes import DEFAULT_CORPUS, train_drafters
    from engines.training.train import TrainConfig

    if args.acceptance_tokens < 1:
        raise ValueError(f"acceptance_tokens must be >= 1, got {args.acceptance_tokens}")
    options = {}
    if args.drafter == "exit":
        options = {"exit_layers": tuple(int(x) for x in args.exit_layers.split(",")),
                   "head_kinds": tuple(args.heads.split(","))}
    elif args.drafter in ("tiny", "ss"):
        options = {"tiny_layers": args.tiny_layers, "tiny_trained": args.tiny_trained}
        if args.drafter == "ss":
            options.update(streams=args.streams, stream_weight=args.stream_weight)
    elif args.drafter == "cats":
        try:
            sv_layers = tuple(int(x) for x in args.sv_layer.split(","))
        except ValueError:
            raise ValueError(f"sv-layer must be comma-separated layer numbers, got {args.sv_layer!r}") from None
        options = {"dm_layer": None if args.no_dm_adapter else args.dm_layer, "sv_layer": sv_layers, "top_k": args.top_k}
    elif args.drafter == "moa":
        try:
            tli = tuple(int(x) for x in args.tli.split(","))
        except ValueError:
            raise ValueError(f"tli must be comma-separated integers, got {args.tli!r}") from None
        options = {"tli": tli, "lsa": not args.no_lsa, "share_lsa": not args.separate_lsa, "ablation": args.ablation,
                   "control": args.control, "seed": args.seed}
    engine = Engine.load(dtype=args.dtype, device=args.device)
    previous_precision = torch.get_float32_matmul_precision()
    if args.device == "cuda":  # TF32 matmuls: distillation targets do not need fp32's last bits, and it is ~4× faster
        torch.set_float32_matmul_precision("high")
    config = TrainConfig(args.epochs, args.batch_tokens, args.lr, args.seed, args.max_steps)
    bar = tqdm(desc=f"train {args.drafter}", unit="step")

    def progress(step, total, losses):
        bar.total = total
        bar.update(1)
        bar.set_postfix({k: f"{v:.3f}" for k, v in losses.items()})

    command = "specviz train " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["train"] else f"specviz train {args.drafter}"
    saved = train_drafters(args.drafter, engine.target, engine.name, args.corpus or DEFAULT_CORPUS, config,
                           command, progress, **options)
    bar.close()
    torch.set_float32_matmul_precision(previous_precision)  # acceptance is measured on the exact target
    from .drafter_cards import record_acceptance

    for name, card in saved:
        acceptance = record_acceptance(engine, name, max_new_tokens=args.acceptance_tokens)
        print(f"{name}: held-out top-1 agreement {card['heldout_top1_agreement']}, final loss "
              f"{card['training']['loss_curve'][-1][1]:.3f}; γ=5 greedy α {acceptance['greedy']['alpha']}, "
              f"τ {acceptance['greedy']['tau']}")
    return 0


def agreement_command(args) -> int:
    from tqdm.auto import tqdm

    from engines.training.agreement import topk_agreement
    from engines.training.data import split_corpus
    from engines.training.recipes import DEFAULT_CORPUS

    from .drafter_compare import answer_records

    names = [n.strip() for n in args.drafters.split(",") if n.strip()]
    try:
        ks = sorted({int(k) for k in args.ks.split(",")})
    except ValueError:
        raise ValueError(f"ks must be comma-separated integers, got {args.ks!r}") from None
    if not names:
        raise ValueError("drafters must name at least one drafter from data/drafts")
    engine = Engine.load(dtype=args.dtype, device=args.device)
    if args.on == "heldout":
        records = split_corpus(args.corpus or DEFAULT_CORPUS)[1]
    else:
        with tqdm(desc="answers", unit="prompt") as answers:
            records = answer_records(engine, args.max_new_tokens, progress=answers.update)
    bar = tqdm(desc="agreement", unit="batch")

    def progress(done, total):
        bar.total = total
        bar.update(1)

    result = topk_agreement(engine.target, names, records, ks, progress=progress)
    bar.close()
    print(f"target's next token among the drafter's top k ({args.on}, {sum(len(r['answer_ids']) for r in records)} "
          f"answer tokens, {engine.dtype})")
    print("| drafter | " + " | ".join(f"top-{k}" for k in ks) + " |\n|---|" + "---|" * len(ks))
    for name, row in result.items():
        print(f"| {name} | " + " | ".join(f"{row[k]:.3f}" for k in ks) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps({"on": args.on, "dtype": engine.dtype, "records": len(records),
                                              "agreement": result}, indent=2) + "\n")
    return 0


def verify_cost_command(args) -> int:
    engine = Engine.load(args.model, args.dtype, args.device)
    curve = engine.verify_cost(remeasure=args.remeasure, progress=lambda text: print(text, file=sys.stderr))
    if args.json:
        print(json.dumps(curve.to_dict()))
        return 0
    kernels = list(curve.by_kernel)
    print(f"{engine.name}, {engine.dtype} on {engine.device}, {curve.threads} threads, {curve.prefix} tokens cached "
          f"(curve cached as {curve.key})\nstep: {engine.step_description}")
    print("| n | ms | × n=1 | kernel | " + " | ".join(f"{k} ms" for k in kernels) + " |")
    print("|---|---|---|---|" + "---|" * len(kernels))
    for n, seconds in curve.seconds.items():
        print(f"| {n} | {seconds * 1e3:.1f} | {curve.relative(n):.2f} | {curve.kernels[n]} | "
              + " | ".join(f"{curve.by_kernel[k][n] * 1e3:.1f}" for k in kernels) + " |")
    print(f"bandwidth {curve.bandwidth_gb_s:.1f} GB/s, weights {curve.weight_bytes / 1e6:.0f} MB per token: ceiling "
          f"{curve.ceiling_tokens_per_s:.0f} tok/s; one-token forward here {1 / curve.cost(1):.0f} per second")
    return 0


def lanes_physics_command(args) -> int:
    from .lane_physics import measure, to_markdown

    engine = Engine.load(args.model, args.dtype, args.device)
    try:
        result = measure(engine, args.max_new_tokens)
    finally:
        engine.close()
    print(to_markdown(result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


def lane_worker_command(args) -> int:
    from engines.lanes.worker import serve

    serve(args.address, args.port, args.rank, args.world_size, args.lane)
    os._exit(0)  # as `python -m engines.lanes.worker` does: gloo's receives are still posted


COMMANDS = {"lane-worker": lane_worker_command, "lanes-physics": lanes_physics_command, "verify-cost": verify_cost_command, "generate": generate_command, "bench": bench_command, "distill": distill_command, "disconnection": disconnection_command, "train": train_command,
            "agreement": agreement_command}


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ValueError, FileNotFoundError, LaneError) as error:
        print(f"specviz: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
