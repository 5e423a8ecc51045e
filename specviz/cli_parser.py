"""``specviz``'s argument parser: every subcommand and its options (the commands are :mod:`specviz.cli`).
"""

from __future__ import annotations

import argparse
import dataclasses
import typing

from engines import METHODS
from engines.methods.base import int_or_auto
from engines.model.loading import DEFAULT_MODEL


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


def add_native_step_arguments(parser: argparse.ArgumentParser) -> None:
    """Which build of the native step runs and with which products (``SPECVIZ_NATIVE_ISA``, ``SPECVIZ_PRODUCTS``,
    ``SPECVIZ_AMX`` for this process and the lane workers it starts): each build's curves and dtype choice are
    cached apart, so the AVX2 build can be measured on an AVX-512 machine without mixing the two."""
    parser.add_argument("--isa", choices=["native", "avx2"], default=None,
                        help="native step build: native (-march=native, the default) or avx2 (x86-64-v3: AVX2, FMA, "
                             "F16C, no AVX-512; x86 only); sets SPECVIZ_NATIVE_ISA")
    parser.add_argument("--products", choices=["exact", "int8"], default=None,
                        help="the native step's products: exact (the model's own numbers, the default) or int8 (the "
                             "GGUF's blocks against inputs quantized to int8, llama.cpp's numerics: other logits, the "
                             "same for every method); sets SPECVIZ_PRODUCTS")
    parser.add_argument("--amx", choices=["on", "off"], default=None,
                        help="a bf16 model's products and attention scores on AMX tiles where the CPU has them (on, "
                             "the default: Xeons since Sapphire Rapids) or on the vector dot products (off: other "
                             "bits, the same for every method); sets SPECVIZ_AMX")


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
    add_native_step_arguments(gen)
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
    add_native_step_arguments(bench)

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

    corpus = commands.add_parser("corpus", help="build the chunked distillation corpus: prompts and answers by the "
                                                "target, one resumable chunk at a time (data/distill/v2)")
    corpus.add_argument("--out", default=None, help="default data/distill/v2 (finished chunks are kept)")
    corpus.add_argument("--chunks", default="0-12", help="chunk numbers to make: '3', '0-9' or '0,2,5'")
    corpus.add_argument("--prompts-per-chunk", type=int, default=1200)
    corpus.add_argument("--modes", default="greedy,sample@0.7,sample@0.8,sample@0.9,sample@1.0",
                        help="greedy and/or sample@T with T in [0.7, 1.0]")
    corpus.add_argument("--max-new-tokens", type=int, default=160)
    corpus.add_argument("--batch-size", type=int, default=64, help="sequences generated together (CPU 32–64, GPU 512+)")
    corpus.add_argument("--together", type=int, default=1,
                        help="chunks made in shared batches (a GPU fills its batches with several chunks' prompts)")
    corpus.add_argument("--max-batch-tokens", type=int, default=None,
                        help="cap on rows × (prompt + answer) tokens per batch: bounds the KV cache's memory")
    corpus.add_argument("--seed", type=int, default=0)
    corpus.add_argument("--dtype", choices=["float32", "bfloat16"], default=None)
    corpus.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    corpus.add_argument("--human", action="store_true",
                        help="prompts people wrote, from packages (engines/training/human_prompts.py), answered by "
                             "the target in the same chunks (default out data/distill/human)")
    corpus.add_argument("--human-sources", default="mt_bench,chitchat", help="with --human: which packages' prompts")
    corpus.add_argument("--install", action="store_true",
                        help="with --human: pip-install the packages that ship them first (as make human-prompts)")

    train = commands.add_parser("train", help="train a drafter on the distillation corpus (writes data/drafts/…)")
    train.add_argument("drafter", help="one family (exit, eagle, eagle3, tiny, ss, cats, moa; its options below), or "
                                        "all, "
                                        "or a comma-separated list (eagle,tiny,ss): those families with their shipped "
                                        "options, on one teacher pass per batch")
    train.add_argument("--corpus", default=None,
                       help="corpus files and chunk folders, comma-separated (default data/distill/corpus.jsonl)")
    train.add_argument("--exit-layers", default="4,8,15", help="exit: comma-separated layers")
    train.add_argument("--heads", default="norm,layer", help="exit: norm and/or layer")
    train.add_argument("--tiny-layers", type=int, default=4, help="tiny, ss: layers taken from the target")
    train.add_argument("--tiny-trained", type=int, default=2,
                       help="tiny: how many of the top layers are trained; ss: the layers that carry the streams")
    train.add_argument("--streams", type=int, default=2, help="ss: lookahead streams")
    train.add_argument("--stream-weight", type=float, default=0.5, help="ss: stream j's loss weight is w^j")
    train.add_argument("--dm-layer", type=int, default=3, help="cats: the draft adapter's layer ℓ_DM")
    train.add_argument("--sv-layer", default="15", help="cats: the shallow verifier's layer ℓ_SV (comma-separated: "
                       "several verifiers from one teacher pass)")
    train.add_argument("--no-dm-adapter", action="store_true", help="cats: train shallow verifiers only, keep cats@ℓ_DM")
    train.add_argument("--top-k", type=int, default=20, help="cats: support of the reduced top-K KL loss")
    train.add_argument("--tli", default="0", help="moa: comma-separated Target Layer Inference depths (e.g. 0,1,3)")
    train.add_argument("--no-lsa", action="store_true", help="moa: the −LSA ablation (CA memory = last hidden states)")
    train.add_argument("--ablation", action="store_true", help="moa: also train the −LSA ablation at TLI 0")
    train.add_argument("--separate-lsa", action="store_true",
                       help="moa: train one LSA per TLI instead of sharing the first one's")
    train.add_argument("--control", default=None,
                       help="moa: also train an EAGLE head of this name on the same batches (an equal-budget control)")
    train.add_argument("--feature-layers", default=None,
                       help="eagle3: the three target layers whose features it fuses (default 2, L/2, L-3)")
    train.add_argument("--ttt-depth", type=int, default=None,
                       help="eagle3: draft steps unrolled in training (default: the eagle method's depth)")
    train.add_argument("--hass-top-k", type=int, default=0,
                       help="eagle3: add HASS's objective on the target's top K tokens at every step (0: off)")
    train.add_argument("--init-from", default=None,
                       help="warm start: 'shipped' starts each drafter from the shipped one of its name (a "
                            "CPU hour refines what a longer run learned); a drafter's name starts a one-drafter run "
                            "from it. eagle3: from an EAGLE head's fc and layer (e.g. eagle; the high feature "
                            "layer is then the last), or on from a shipped EAGLE-3 head (its feature layers)")
    train.add_argument("--checkpoint", default=None,
                       help="resume from this file when it exists; written as training goes and removed once every "
                            "drafter is saved")
    train.add_argument("--checkpoint-minutes", type=float, default=5.0, help="minutes between checkpoints")
    train.add_argument("--epochs", type=float, default=1.0)
    train.add_argument("--batch-tokens", type=int, default=2048)
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--warmup-steps", type=int, default=0,
                       help="the learning rate rises linearly over these first steps (for a warm start: --init-from)")
    train.add_argument("--max-steps", type=int, default=None)
    train.add_argument("--max-minutes", type=float, default=None,
                       help="time budget: the step count is cut to what fits, measured on the first steps")
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
    agree.add_argument("--depth", type=int, default=None,
                       help="also report top-k and αᵢ at each draft position 1..DEPTH (EAGLE heads unrolled)")
    agree.add_argument("--by-provenance", action="store_true",
                       help="with --on heldout: report human-, seed- and target-written prompts' answers apart")
    agree.add_argument("--by-category", action="store_true",
                       help="with --on eval: report each category's answers apart (translation, qa, …)")
    agree.add_argument("--out", default=None, help="also write the result as JSON to this file")

    cost = commands.add_parser("verify-cost", help="measure what a target forward of n tokens costs here "
                               "(tunes the matmul kernels; cached per machine)")
    cost.add_argument("--model", default=DEFAULT_MODEL, help="default: the embedded SmolLM2-135M-Instruct")
    cost.add_argument("--dtype", choices=["float32", "bfloat16"], default=None)
    cost.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    cost.add_argument("--remeasure", action="store_true", help="measure again even if this machine's curve is cached")
    cost.add_argument("--json", action="store_true", help="print the curve as one JSON object")
    add_native_step_arguments(cost)
    return parser
