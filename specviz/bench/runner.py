"""``specviz bench``: every method on the same prompts, model, dtype and machine, in one run.

Methods are written ``name`` or ``name(option=value,...)``, e.g. ``sps(draft_layers=4,gamma=5)``;
``instrument=false`` turns detailed tracing off (to measure its overhead); ``threads=1`` runs the method
on one core with one thread (``ar(threads=1)`` is the one-lane baseline that virtual-clock rows are
compared with). ``hf_ar`` and ``hf_pld`` are Hugging Face ``generate`` on the same model; ``llamacpp_ar`` and
``llamacpp_lookup`` are llama.cpp on the same weights (:mod:`specviz.bench.llamacpp_peer`; skipped with a note where
``make peers`` has not brought it). Runs are interleaved prompt by prompt, so slow drift
of the machine's speed spreads over all methods alike; ``ar`` always runs, as the speedup denominator.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm

from engines import Engine
from engines.lanes import pinned
from engines.memory_budget import weight_stream
from engines.model.step_choice import machine_name
from engines.model.verify_cost import measure_bandwidth, weight_bytes

from ..prompts import DEFAULT_PROMPTS, load_prompts
from ..views.chain import draft_seconds
from . import llamacpp_peer
from .hf_baselines import HF_METHODS, hf_generate
from .llamacpp_peer import PEER_METHODS
from .method_specs import _SPEC, MethodSpec, parse_method
from .tallies import Tally

# the model-free drafts twice: at their papers' fixed γ, and at gamma=auto, the fastest on a CPU (each token
# verified only where its kind of match pays: docs/verify-cost.md)
DEFAULT_METHODS = ["ar", "hf_ar", "pld", "pld(gamma=auto)", "hf_pld", "sps(draft=suffix)", "sps(draft=suffix,gamma=auto)",
                   "sps(draft_layers=4)", "sps(draft_layers=26)", "eesd(exit_layer=8)", "eesd(exit_layer=26)"]
TRAINED_METHODS = {  # method → the shipped drafter it needs
    "sps(draft=tiny)": "tiny", "sps(draft=tiny,full_vocab=true)": "tiny", "hf_assisted": "tiny",
    "sps(draft=eagle)": "eagle", "sps(draft=ss)": "ss", "eesd(exit_layer=8,head=norm)": "exit@8-norm",
    "eesd(exit_layer=8,head=layer)": "exit@8-layer", "eesd(exit_layer=15,head=norm)": "exit@15-norm",
    "eesd(exit_layer=3,head=cats)": "cats@3", "eagle(merge_suffix=true)": "eagle"}
ONE_LANE_AR = "ar(threads=1)"  # the baseline of virtual-clock rows: one lane, measured for real


def default_methods() -> list[str]:
    """The baselines, plus the trained-drafter rows when ``data/drafts`` holds those drafters, plus llama.cpp's
    rows when ``make peers`` has brought it."""
    from engines.drafters.trained import available

    shipped = set(available())
    peers = list(PEER_METHODS) if llamacpp_peer.unavailable_reason() is None else []
    return DEFAULT_METHODS + [method for method, drafter in TRAINED_METHODS.items() if drafter in shipped] + peers


def skip_unavailable_peers(engine: Engine, specs: list[MethodSpec], temperature: float,
                           say: Callable[[str], None] = print) -> tuple[list[MethodSpec], dict[str, str]]:
    """The specs left to run, and a note per llama.cpp row that can not run here (said once, recorded in the
    results). A llama.cpp row asked for at temperature > 0 is refused, installed or not: it runs greedy only."""
    peers = [s for s in specs if s.name in PEER_METHODS]
    for spec in peers:
        llamacpp_peer.check_temperature(spec.label, temperature)
    reason = llamacpp_peer.unavailable_reason(engine.name, engine.dtype) if peers else None
    if reason is None:
        return specs, {}
    skipped = {spec.label: llamacpp_peer.skip_note(reason) for spec in peers}
    say("; ".join(f"{label}: {note}" for label, note in skipped.items()))
    return [s for s in specs if s.name not in PEER_METHODS], skipped


def select_prompts(prompts, limit: int | None = None, per_category: int | None = None):
    """The first ``per_category`` prompts of each category, then the first ``limit`` of those."""
    if per_category is not None:
        if per_category < 1:
            raise ValueError(f"per_category must be >= 1, got {per_category}")
        seen: dict[str, int] = defaultdict(int)
        kept = []
        for prompt in prompts:
            seen[prompt.category] += 1
            if seen[prompt.category] <= per_category:
                kept.append(prompt)
        prompts = kept
    return prompts[:limit]


def run_bench(engine: Engine, prompts_path, methods: list[str], max_new_tokens: int = 128,
              temperature: float = 0.0, seed: int = 0, limit: int | None = None, progress: bool = True,
              per_category: int | None = None, checkpoint: Callable[[dict], None] | None = None,
              memory: dict | None = None) -> dict:
    """Every method on every prompt, ``ar`` first. ``checkpoint`` receives the results so far after each
    prompt (``setup.complete`` false until the end), so a run cut short still leaves its measurements.
    ``memory``: ``memory_budget_mb``, ``flash_mb_s``, ``stream`` for every run (see ``Engine.generate``)."""
    specs = [parse_method(m) for m in methods]
    if not any(s.label == "ar" for s in specs):
        specs.insert(0, parse_method("ar"))
    memory = check_memory_budget(engine, specs, memory)
    specs, skipped = skip_unavailable_peers(engine, specs, temperature)
    notes = {"skipped": skipped, "peer": peer_setup(engine, specs)}
    specs.sort(key=lambda s: s.label != "ar")  # ar first: later turns of other methods compare with it
    prompts = select_prompts(load_prompts(prompts_path), limit, per_category)
    prepare_for_timing(engine, specs, temperature, seed, memory, progress)
    ceiling = machine_ceiling(engine)
    tallies: dict[str, dict[str, Tally]] = {s.label: defaultdict(Tally) for s in specs}
    bar = tqdm(total=len(prompts) * len(specs), desc="bench", disable=not progress)
    for done, prompt in enumerate(prompts, 1):
        ar_answers: list[list[int]] = []
        for spec in specs:
            messages: list[dict] = []
            for turn_index, turn in enumerate(prompt.turns):
                messages.append({"role": "user", "content": turn})
                ids, seconds, stats, drafting, calls, events = run_turn(engine, spec, list(messages), max_new_tokens,
                                                                        temperature, seed, memory)
                if spec.label == "ar":
                    ar_answers.append(ids)
                equal = ids == ar_answers[turn_index] if temperature == 0 else None
                counts = calls if isinstance(calls, dict) else {"target_calls": calls}
                for key in (prompt.category, "overall"):
                    tallies[spec.label][key].add(len(ids), seconds, equal, stats, drafting, events=events, **counts)
                messages.append({"role": "assistant", "content": engine.detokenize(ids)})
            bar.update(1)
        if checkpoint and done < len(prompts):
            checkpoint(summarise(tallies, setup_info(engine, prompts_path, max_new_tokens, temperature, done, False,
                                                     memory, ceiling, **notes)))
    bar.close()
    return summarise(tallies, setup_info(engine, prompts_path, max_new_tokens, temperature, len(prompts),
                                         memory=memory, ceiling=ceiling, **notes))


def is_peer(label: str) -> bool:
    """A row run by another program (llama.cpp), whose output may differ from ``ar``'s by its numerics."""
    match = _SPEC.match(label)
    return bool(match) and match.group(1) in PEER_METHODS


def peer_setup(engine: Engine, specs: list[MethodSpec]) -> dict | None:
    """What the results record about llama.cpp when its rows run: versions, weights, which API measured what."""
    if not any(s.name in PEER_METHODS for s in specs):
        return None
    return llamacpp_peer.peer_info(engine.name, engine.dtype)


def prepare_for_timing(engine: Engine, specs: list[MethodSpec], temperature: float, seed: int, memory: dict | None,
                       progress: bool = True) -> None:
    """Everything a first run on a fresh machine would otherwise do inside a timed turn, done before the first:
    the native step is built when the engine loads and the default dtype chosen there; here the verify-cost
    curve is measured (it installs the drafters' kernels and sizes ``auto`` drafts) and every method runs
    twice untimed (drafters loaded, lane workers started, allocator and caches warm). Without this, a fresh
    machine's first bench measured `ar` at 0.88x Hugging Face's `generate` and later ones at 1.28-1.47x."""
    say = (lambda text: print(f"bench: {text}", file=sys.stderr, flush=True)) if progress else (lambda text: None)
    say(engine.step_description)
    engine.verify_cost(progress=say)
    say(f"warming up {len(specs)} method(s) before any timed turn")
    for _ in range(2):
        for spec in specs:  # first-call costs (allocator, kernels, drafters, workers) must not land on one method
            run_turn(engine, spec, [1] if engine.tokenizer is None else "Hi", 4, temperature, seed, memory)


def machine_ceiling(engine: Engine) -> dict:
    """The memory-bandwidth bound on decoding here: every weight is read once per token, so tokens/s can
    not exceed bandwidth ÷ weight bytes (the bandwidth of a large read, measured now on this machine)."""
    bandwidth = measure_bandwidth(engine.target.device)
    weights = weight_bytes(engine.model)
    return {"bandwidth_gb_s": bandwidth, "weight_bytes": weights, "tokens_per_s": bandwidth * 1e9 / weights}


def check_memory_budget(engine: Engine, specs: list[MethodSpec], memory: dict | None) -> dict | None:
    """The validated budget arguments (``None`` when no budget is set); Hugging Face's ``generate`` runs the
    whole model resident, so its baselines are refused under a budget."""
    budget = weight_stream.memory_budget(**(memory or {}))
    if budget is None:
        return None
    weight_stream.plan_residency(engine.target, budget)
    refused = [s.label for s in specs if s.name in HF_METHODS or s.name in PEER_METHODS]
    if refused:
        raise ValueError(f"{', '.join(refused)} cannot run under memory_budget_mb: Hugging Face's generate and "
                         "llama.cpp keep the whole model resident; leave the hf_* and llamacpp_* methods out of a "
                         "memory-budget bench")
    return dict(memory)


def summarise(tallies: dict[str, dict[str, "Tally"]], setup: dict) -> dict:
    """Speedups against ``ar``; a virtual-clock row's against ``ar(threads=1)`` (one lane's real speed),
    never against wall-clock ``ar`` — or none if that row was not run."""
    rates = {label: {k: t.new_tokens / t.decode_seconds for k, t in by_key.items()}
             for label, by_key in tallies.items() if label in ("ar", ONE_LANE_AR)}
    methods = {}
    for label, by_key in tallies.items():
        virtual = any(t.clock == "virtual" for t in by_key.values())
        base = rates.get(ONE_LANE_AR, {}) if virtual else rates["ar"]
        methods[label] = {key: tally.summary(base.get(key)) for key, tally in by_key.items()}
        if is_peer(label):  # another program: "output = ar" is for information only
            for summary in methods[label].values():
                summary["peer"] = "llama.cpp"
    return {"setup": setup, "methods": methods}


def run_turn(engine: Engine, spec: MethodSpec, prompt, max_new_tokens, temperature, seed, memory: dict | None = None):
    """One turn; ``memory`` (the budget arguments of ``Engine.generate``) applies to the engine's methods only."""
    if spec.name in HF_METHODS:
        if memory and memory.get("memory_budget_mb") is not None:
            raise ValueError(f"{spec.name} cannot run under memory_budget_mb: Hugging Face's generate keeps the "
                             "whole model resident")
        ids = engine.encode(prompt)
        out = hf_generate(engine, ids, spec.name, max_new_tokens, temperature, seed)
        return out["token_ids"], out["decode_seconds"], None, 0.0, out["target_calls"], None
    if spec.name in PEER_METHODS:
        with pinned("cpu0") if spec.threads == 1 else nullcontext():
            out = llamacpp_peer.peer_generate(engine, engine.encode(prompt), spec.name, max_new_tokens, temperature,
                                              seed, threads=spec.threads)
        counts = {"target_calls": out["target_calls"], "drafted": out["drafted"], "accepted": out["accepted"]}
        return out["token_ids"], out["decode_seconds"], None, 0.0, counts, None
    with pinned("cpu0") if spec.threads == 1 else nullcontext():
        result = engine.run(prompt, spec.name, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                            instrument=spec.instrument, **(memory or {}), **spec.options)
    return (result.token_ids, result.stats.decode_seconds, result.stats, draft_seconds(result.events), None,
            result.events)


def setup_info(engine: Engine, prompts_path, max_new_tokens, temperature, n_prompts, complete: bool = True,
               memory: dict | None = None, ceiling: dict | None = None, skipped: dict | None = None,
               peer: dict | None = None) -> dict:
    """``skipped``: a note per row asked for that could not run here; ``peer``: llama.cpp's versions and APIs."""
    return {**({"memory_budget": memory} if memory else {}), **({"ceiling": ceiling} if ceiling else {}),
            **({"skipped": skipped} if skipped else {}), **({"peer": peer} if peer else {}),
            "model": engine.name, "dtype": engine.dtype, "step": engine.step_description,
            "row_invariant": engine.target.row_invariant, "device": engine.device, "threads": torch.get_num_threads(),
            **({"cudnn_attention": torch.backends.cuda.cudnn_sdp_enabled()}
               if engine.device.startswith("cuda") else {}),
            "machine": machine_name(), **native_build(engine), "torch": torch.__version__,
            "prompts": project_relative(prompts_path), "n_prompts": n_prompts, "max_new_tokens": max_new_tokens,
            "temperature": temperature, "complete": complete}


def native_build(engine: Engine) -> dict:
    """Which build of the native step ran (``{"native_isa": "native" | "avx2"}``) and, where its products took int8
    inputs, ``"products": "int8"``, and where a bf16 model's products ran on AMX tiles, ``"amx": True``, where the
    engine's target runs on one (nothing is built for a GPU run): a run under ``--isa avx2`` or ``--products int8``
    must say so beside its figures, since the same CPU gives other ones with its own build, and int8 products and
    the tiles other outputs."""
    from engines.model.native import step as native_step

    native = engine.target.native
    info = native_step.build_info() if native is not None else None
    if info is None:
        return {}
    build = {"native_isa": info.isa, "products": "int8"} if native.int8_products else {"native_isa": info.isa}
    if engine.dtype == "bfloat16" and native_step.amx():
        build["amx"] = True
    return build


def project_relative(path) -> str:
    """``data/prompts.jsonl`` rather than one machine's absolute path, so recorded results read the same anywhere."""
    try:
        return str(Path(path).resolve().relative_to(DEFAULT_PROMPTS.parent.parent))
    except ValueError:
        return str(path)
