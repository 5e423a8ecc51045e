"""``specviz`` command line: ``generate`` one prompt with any method, ``bench`` methods side by side."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from engines import Engine, get_method, write_jsonl
from engines.core.stats import compute_stats
from engines.core.trace import Commit, RunEnd
from engines.lanes import LaneError, LaneSpec
from engines.model.native.step import build_description as native_build_description
from engines.storage import write_json_atomic

from .cli_parser import MEMORY_STATS, build_parser, memory_arguments, method_option_fields
from .views.tokens import ansi


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
    interrupted = False
    try:
        stream = engine.generate(args.prompt, args.method, max_new_tokens=args.max_new_tokens,
                                 temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                                 **memory_arguments(args), **options)
        try:
            for event in stream:
                events.append(event)
                if isinstance(event, Commit) and not args.json:
                    sys.stdout.write("".join(ansi(p, f) for p, f in zip(event.pieces, event.fates)))
                    sys.stdout.flush()
        except KeyboardInterrupt:  # Ctrl-C: what was produced and its stats, never a traceback
            interrupted = True
            stream.close()  # ends the run's lanes before the engine closes
    finally:
        engine.close()
    if interrupted:
        return report_interrupted(args, engine, events)
    end: RunEnd = events[-1]
    if args.trace:
        write_jsonl(events, args.trace)
    print_run(args, events[0], end.stats, end.token_ids, end.text)
    return 0


def print_run(args, start, s: dict, token_ids: list[int], text: str, note: str = "") -> None:
    """The run's stats after its text (or one JSON line with ``--json``); ``note`` says why it ended early."""
    budgeted = start.memory is not None
    if args.json:
        keys = ("tokens_per_s", "mean_accepted_length", "acceptance_rate", "target_calls", "new_tokens", "clock")
        keys += MEMORY_STATS if budgeted else ()
        record = {"method": args.method, "config": start.config, "token_ids": token_ids, "text": text,
                  "stats": {k: s[k] for k in keys}}
        if note:
            record["interrupted"] = note
        print(json.dumps(record))
        return
    print(f"\n\n{note + ': ' if note else ''}{s['new_tokens']} tokens, {s['tokens_per_s']:.1f} tok/s, "
          f"τ = {s['mean_accepted_length']:.2f}, α = {s['acceptance_rate']:.2f}, {s['target_calls']} target calls"
          + ("  (clock=virtual: replayed from measured per-operation costs, not wall time)"
             if s.get("clock") == "virtual" else "") + "  "
          f"[{ansi('accepted', 'accepted')} {ansi('correction', 'correction')} {ansi('bonus', 'bonus')}]")
    if budgeted:
        print(f"memory budget: {s['bytes_streamed'] / 1e6:.1f} MB streamed, {s['bytes_per_token'] / 1e6:.2f} MB "
              f"per token, peak {s['peak_resident_bytes'] / 1e6:.1f} MB of weights resident")


def report_interrupted(args, engine: Engine, events: list) -> int:
    """After Ctrl-C: the tokens committed so far and their stats up to the last event, exit status 130
    (the shell's code for an interrupt). The trace, if asked for, holds the events up to the interrupt."""
    if not events:
        print("\nspecviz: interrupted before the first token", file=sys.stderr)
        return 130
    if args.trace:
        write_jsonl(events, args.trace)
    token_ids = [t for e in events if isinstance(e, Commit) for t in e.tokens]
    stats = compute_stats(events, end_time=events[-1].t).to_dict()
    print_run(args, events[0], stats, token_ids, engine.detokenize(token_ids), note="interrupted")
    return 130


def bench_command(args) -> int:
    from .bench.hf_baselines import HF_METHODS
    from .bench.llamacpp_peer import PEER_METHODS
    from .bench.method_specs import split_methods
    from .bench.report import write_results
    from .bench.runner import default_methods, run_bench
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
    from .bench.method_specs import split_methods
    from .experiments.disconnection import measure_disconnection, write_disconnection

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


def parse_chunks(text: str) -> list[int]:
    """'3' → [3]; '0-9' → 0…9; '0,2,5' → [0, 2, 5]."""
    chunks: list[int] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            first, _, last = part.partition("-")
            chunks += list(range(int(first), int(last or first) + 1))
    except ValueError:
        raise ValueError(f"chunks must look like '3', '0-9' or '0,2,5', got {text!r}") from None
    if not chunks or min(chunks) < 0:
        raise ValueError(f"chunks must name chunk numbers >= 0, got {text!r}")
    return sorted(set(chunks))


def corpus_command(args) -> int:
    import time

    from engines.training.corpus import parse_modes
    from engines.training.corpus_chunks import build_chunks, summary
    from engines.training.prompt_synthesis import seed_topics
    from engines.training.recipes import DEFAULT_CORPUS

    from .distill_prompts import check_no_overlap, load_seeds

    chunks, modes = parse_chunks(args.chunks), parse_modes(args.modes)
    if args.together < 1:
        raise ValueError(f"together must be >= 1, got {args.together}")
    if args.human:
        return human_corpus(args, chunks, modes)
    out = Path(args.out) if args.out else DEFAULT_CORPUS.parent / "v2"
    seeds = load_seeds()
    topics, translations = seed_topics(seeds), seeds["translation"]["sources"]
    engine = Engine.load(dtype=args.dtype, device=args.device)
    for first in range(0, len(chunks), args.together):
        group = chunks[first:first + args.together]
        began = time.perf_counter()
        paths = build_chunks(engine, out, group, args.prompts_per_chunk, modes, topics, args.seed, args.batch_size,
                             args.max_new_tokens, check=check_no_overlap, translations=translations,
                             max_batch_tokens=args.max_batch_tokens)
        print(f"chunks {group}: {[p.name for p in paths]} ({time.perf_counter() - began:.0f} s)", flush=True)
    print(json.dumps(summary(out), indent=1))
    return 0


def human_corpus(args, chunks: list[int], modes) -> int:
    """``specviz corpus --human``: the packages' prompts, answered by the target in resumable chunks."""
    import subprocess
    import time

    from engines.training.corpus_chunks import build_prompt_chunks, summary
    from engines.training.human_prompts import INSTALL, check_apart, human_prompts
    from engines.training.recipes import DEFAULT_CORPUS

    from .distill_prompts import DEFAULT_EVAL
    from .prompts import load_prompts

    if args.install:
        subprocess.run([sys.executable, "-m", *INSTALL.split()], check=True)
    prompts = human_prompts([s.strip() for s in args.human_sources.split(",") if s.strip()], args.seed)
    evaluation = [vars(prompt) for prompt in load_prompts(DEFAULT_EVAL)]  # question_id, category, turns
    out = Path(args.out) if args.out else DEFAULT_CORPUS.parent / "human"
    engine = Engine.load(dtype=args.dtype, device=args.device)
    for first in range(0, len(chunks), args.together):
        group = chunks[first:first + args.together]
        began = time.perf_counter()
        paths = build_prompt_chunks(engine, out, group, prompts, args.prompts_per_chunk, modes, args.seed,
                                    args.batch_size, args.max_new_tokens, check=lambda p: check_apart(p, evaluation),
                                    max_batch_tokens=args.max_batch_tokens)
        print(f"chunks {group}: {[p.name for p in paths]} ({time.perf_counter() - began:.0f} s)", flush=True)
    print(json.dumps(summary(out), indent=1))
    return 0


def train_command(args) -> int:
    import torch
    from tqdm.auto import tqdm

    from engines.training.recipes import DEFAULT_CORPUS, SHIPPED, drafter_families, init_card, train_drafters
    from engines.training.train import TrainConfig

    if args.acceptance_tokens < 1:
        raise ValueError(f"acceptance_tokens must be >= 1, got {args.acceptance_tokens}")
    if args.max_minutes is not None and not args.max_minutes > 0:
        raise ValueError(f"max-minutes must be > 0, got {args.max_minutes}")
    drafter_families(args.drafter)  # a ValueError naming the families before the model loads
    if args.init_from not in (None, SHIPPED):
        init_card(args.init_from)  # and one naming --init-from's drafter
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
    elif args.drafter == "eagle3":
        try:
            layers = tuple(int(x) for x in args.feature_layers.split(",")) if args.feature_layers else None
        except ValueError:
            raise ValueError(f"feature-layers must be three comma-separated layers, got {args.feature_layers!r}") \
                from None
        options = {"feature_layers": layers, "ttt_depth": args.ttt_depth, "hass_top_k": args.hass_top_k}
    if args.checkpoint_minutes < 0:
        raise ValueError(f"checkpoint-minutes must be >= 0, got {args.checkpoint_minutes}")
    engine = Engine.load(dtype=args.dtype, device=args.device)
    previous_precision = torch.get_float32_matmul_precision()
    if args.device == "cuda":  # TF32 matmuls: distillation targets do not need fp32's last bits, and it is ~4× faster
        torch.set_float32_matmul_precision("high")
    config = TrainConfig(args.epochs, args.batch_tokens, args.lr, args.seed, args.max_steps,
                         args.max_minutes * 60 if args.max_minutes else None, args.checkpoint,
                         args.checkpoint_minutes * 60, args.warmup_steps)
    bar = tqdm(desc=f"train {args.drafter}", unit="step")

    def progress(step, total, losses):
        bar.total = total
        bar.update(1)
        bar.set_postfix({k: f"{v:.3f}" for k, v in losses.items()})

    command = "specviz train " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["train"] else f"specviz train {args.drafter}"
    saved = train_drafters(args.drafter, engine.target, engine.name, args.corpus or DEFAULT_CORPUS, config,
                           command, progress, init_from=args.init_from, **options)
    bar.close()
    torch.set_float32_matmul_precision(previous_precision)  # acceptance is measured on the exact target
    from .experiments.drafter_cards import record_acceptance

    for name, card in saved:
        acceptance = record_acceptance(engine, name, max_new_tokens=args.acceptance_tokens)
        print(f"{name}: held-out agreement top-1 {card['heldout_top1_agreement']}, top-4 "
              f"{card['heldout_top4_agreement']}, final loss "
              f"{card['training']['loss_curve'][-1][1]:.3f}; γ=5 greedy α {acceptance['greedy']['alpha']}, "
              f"τ {acceptance['greedy']['tau']}")
    return 0


def agreement_command(args) -> int:
    from tqdm.auto import tqdm

    from engines.training.agreement import by_category, by_provenance, depth_agreement, topk_agreement
    from engines.training.data import split_corpus
    from engines.training.recipes import DEFAULT_CORPUS, corpus_paths

    from .experiments.drafter_compare import answer_records

    names = [n.strip() for n in args.drafters.split(",") if n.strip()]
    try:
        ks = sorted({int(k) for k in args.ks.split(",")})
    except ValueError:
        raise ValueError(f"ks must be comma-separated integers, got {args.ks!r}") from None
    if not names:
        raise ValueError("drafters must name at least one drafter from data/drafts")
    if args.by_provenance and args.on != "heldout":
        raise ValueError("--by-provenance needs --on heldout (the evaluation prompts are all human-written)")
    if args.by_category and args.on != "eval":
        raise ValueError("--by-category needs --on eval (held-out records are grouped by --by-provenance)")
    if args.depth is not None and args.depth < 1:
        raise ValueError(f"depth must be >= 1, got {args.depth}")
    engine = Engine.load(dtype=args.dtype, device=args.device)
    if args.on == "heldout":
        records = split_corpus(corpus_paths(args.corpus or DEFAULT_CORPUS))[1]
    else:
        with tqdm(desc="answers", unit="prompt") as answers:
            records = answer_records(engine, args.max_new_tokens, progress=answers.update)
    bar = tqdm(desc="agreement", unit="batch")

    def progress(done, total):
        bar.total = total
        bar.update(1)

    groups = by_provenance(records) if args.by_provenance else by_category(records) if args.by_category \
        else {"all": records}
    report = {"on": args.on, "dtype": engine.dtype, "records": len(records), "groups": {}}
    for group, members in groups.items():
        result = topk_agreement(engine.target, names, members, ks, progress=progress)
        which = f"category {group}" if args.by_category else f"prompts written by {group}"
        print(f"target's next token among the drafter's top k ({args.on}, {which}, "
              f"{sum(len(r['answer_ids']) for r in members)} answer tokens, {engine.dtype})")
        print("| drafter | " + " | ".join(f"top-{k}" for k in ks) + " |\n|---|" + "---|" * len(ks))
        for name, row in result.items():
            print(f"| {name} | " + " | ".join(f"{row[k]:.3f}" for k in ks) + " |")
        entry = {"records": len(members), "agreement": result}
        if args.depth:
            by_depth = depth_agreement(engine.target, names, members, args.depth, ks, progress=progress)
            print(f"\nper draft position ({group}): top-k of the i-th draft and αᵢ (right where drafts 1..i-1 were)")
            print("| drafter | i | " + " | ".join(f"top-{k}" for k in ks) + " | αᵢ | chains |\n|---|---|"
                  + "---|" * (len(ks) + 2))
            for name, rows in by_depth.items():
                for i, row in rows.items():
                    cells = [_fmt(row[f"top{k}"]) for k in ks] + [_fmt(row["alpha"]), str(row["chains"])]
                    print(f"| {name} | {i} | " + " | ".join(cells) + " |")
            entry["by_depth"] = by_depth
        report["groups"][group] = entry
        print()
    bar.close()
    if args.out:
        if not args.by_provenance and not args.by_category and not args.depth:  # the earlier shape, as recorded
            report = {"on": args.on, "dtype": engine.dtype, "records": len(records),
                      "agreement": report["groups"]["all"]["agreement"]}
        write_json_atomic(args.out, report, indent=2)
    return 0


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def verify_cost_command(args) -> int:
    engine = Engine.load(args.model, args.dtype, args.device)
    curve = engine.verify_cost(remeasure=args.remeasure, progress=lambda text: print(text, file=sys.stderr))
    if args.json:
        print(json.dumps(curve.to_dict()))
        return 0
    kernels = list(curve.by_kernel)
    print(f"{engine.name}, {engine.dtype} on {engine.device}, {curve.threads} threads, {curve.prefix} tokens cached "
          f"(curve cached as {curve.key})\nstep: {engine.step_description}\nnative build: {native_build_description()}")
    print("| n | ms | × n=1 | kernel | " + " | ".join(f"{k} ms" for k in kernels) + " |")
    print("|---|---|---|---|" + "---|" * len(kernels))
    for n, seconds in curve.seconds.items():
        print(f"| {n} | {seconds * 1e3:.1f} | {curve.relative(n):.2f} | {curve.kernels[n]} | "
              + " | ".join(f"{curve.by_kernel[k][n] * 1e3:.1f}" for k in kernels) + " |")
    print(f"bandwidth {curve.bandwidth_gb_s:.1f} GB/s, weights {curve.weight_bytes / 1e6:.0f} MB per token: ceiling "
          f"{curve.ceiling_tokens_per_s:.0f} tok/s; one-token forward here {1 / curve.cost(1):.0f} per second")
    return 0


def lanes_physics_command(args) -> int:
    from .experiments.lane_physics import measure, to_markdown

    engine = Engine.load(args.model, args.dtype, args.device)
    try:
        result = measure(engine, args.max_new_tokens)
    finally:
        engine.close()
    print(to_markdown(result))
    if args.out:
        write_json_atomic(args.out, result, indent=2)
    return 0


def lane_worker_command(args) -> int:
    from engines.lanes.worker import serve

    serve(args.address, args.port, args.rank, args.world_size, args.lane)
    os._exit(0)  # as `python -m engines.lanes.worker` does: gloo's receives are still posted


COMMANDS = {"lane-worker": lane_worker_command, "lanes-physics": lanes_physics_command, "verify-cost": verify_cost_command, "generate": generate_command, "bench": bench_command, "distill": distill_command, "corpus": corpus_command, "disconnection": disconnection_command, "train": train_command,
            "agreement": agreement_command}


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    args = build_parser().parse_args(argv)
    if getattr(args, "isa", None):  # before any engine loads; lane workers inherit the environment
        os.environ["SPECVIZ_NATIVE_ISA"] = args.isa
    if getattr(args, "products", None):  # the same: the products' numerics, for this process and its lane workers
        os.environ["SPECVIZ_PRODUCTS"] = args.products
    if getattr(args, "amx", None):  # the same: AMX tiles or the vector products
        os.environ["SPECVIZ_AMX"] = "1" if args.amx == "on" else "0"
    try:
        return COMMANDS[args.command](args)
    except (ValueError, OSError, LaneError) as error:  # OSError: a file that cannot be read or written
        print(f"specviz: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C outside a run's stream (loading, measuring): one line, no traceback
        print("\nspecviz: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
