"""``specviz bench``: every method on the same prompts, model, dtype and machine, in one run.

Methods are written ``name`` or ``name(option=value,...)``, e.g. ``sps(draft_layers=4,gamma=5)``;
``instrument=false`` turns detailed tracing off (to measure its overhead); ``threads=1`` runs the method
on one core with one thread (``ar(threads=1)`` is the one-lane baseline that virtual-clock rows are
compared with). ``hf_ar`` and ``hf_pld`` are Hugging Face ``generate`` on the same model; ``llamacpp_ar`` and
``llamacpp_lookup`` are llama.cpp on the same weights (:mod:`specviz.llamacpp_peer`; skipped with a note where
``make peers`` has not brought it). Runs are interleaved prompt by prompt, so slow drift
of the machine's speed spreads over all methods alike; ``ar`` always runs, as the speedup denominator.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm

from engines import Engine, get_method
from engines.lanes import pinned
from engines.memory_budget import weight_stream
from engines.model.step_choice import machine_name
from engines.model.verify_cost import measure_bandwidth, weight_bytes

from . import llamacpp_peer
from .hf_baselines import HF_METHODS, hf_generate
from .llamacpp_peer import PEER_METHODS
from .pipeline import pipeline_metrics
from .prompts import DEFAULT_PROMPTS, load_prompts
from .sweep import draft_seconds
from .theory import ppsd_tokens_per_s
from .verdict_views import verdict_metrics

DEFAULT_METHODS = ["ar", "hf_ar", "pld", "hf_pld", "sps(draft_layers=4)", "sps(draft_layers=26)",
                   "eesd(exit_layer=8)", "eesd(exit_layer=26)"]
TRAINED_METHODS = {  # method → the shipped drafter it needs
    "sps(draft=tiny)": "tiny", "sps(draft=tiny,full_vocab=true)": "tiny", "hf_assisted": "tiny",
    "sps(draft=eagle)": "eagle", "sps(draft=ss)": "ss", "eesd(exit_layer=8,head=norm)": "exit@8-norm",
    "eesd(exit_layer=8,head=layer)": "exit@8-layer", "eesd(exit_layer=15,head=norm)": "exit@15-norm",
    "eesd(exit_layer=3,head=cats)": "cats@3"}
ONE_LANE_AR = "ar(threads=1)"  # the baseline of virtual-clock rows: one lane, measured for real
_SPEC = re.compile(r"^\s*([a-z_]+)\s*(?:\((.*)\))?\s*$")


@dataclass
class MethodSpec:
    label: str
    name: str
    options: dict = field(default_factory=dict)
    instrument: bool = True
    threads: int | None = None  # None: the process's threads; 1: one core, one thread


def _value(text: str):
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()


def split_methods(text: str) -> list[str]:
    """Split on commas outside parentheses: ``ar,sps(gamma=3,draft_layers=4)`` → two specs."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_method(spec: str) -> MethodSpec:
    match = _SPEC.match(spec)
    if not match:
        raise ValueError(f"method spec {spec!r} is not of the form name or name(option=value,...)")
    name, body = match.group(1), match.group(2) or ""
    options = {}
    for item in filter(None, (s.strip() for s in body.split(","))):
        if "=" not in item:
            raise ValueError(f"method spec {spec!r}: option {item!r} must be option=value")
        key, value = item.split("=", 1)
        options[key.strip()] = _value(value)
    instrument = bool(options.pop("instrument", True))
    threads = options.pop("threads", None)
    if threads not in (None, 1):
        raise ValueError(f"method spec {spec!r}: threads must be 1 (one core, one thread) or left out, got {threads!r}")
    if name in HF_METHODS or name in PEER_METHODS:
        if options:
            raise ValueError(f"{name} takes no options, got {sorted(options)}")
    else:
        config = get_method(name).Config(**{k: v for k, v in options.items()
                                            if k in get_method(name).Config.option_names()})
        unknown = set(options) - set(config.option_names())
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} for method {name!r}; "
                             f"allowed: {config.option_names()}")
    return MethodSpec(spec.strip(), name, options, instrument, threads)


class Tally:
    """Raw counts summed over runs; ratios are taken at the end so long answers weigh more."""

    def __init__(self):
        self.new_tokens = self.decode_seconds = self.rounds = self.round_tokens = 0
        self.drafted = self.accepted = self.turns = self.equal_turns = 0
        self.draft_seconds = 0.0
        self.reached_by_position: list[int] = []
        self.passed_by_position: list[int] = []
        self.has_rounds = self.compared = False
        self.budgeted = False  # runs under a memory budget: flash traffic is summed too
        self.bytes_streamed = self.peak_resident_bytes = 0
        self.clock = "wall"
        self.pipeline = PipelineTally()
        self.verdict = VerdictTally()
        self.target_calls = 0
        self.link_seconds = 0.0  # client–server runs (engines.programs.client_server): the simulated link's share
        self.link_bytes = self.link_messages = self.link_resends = 0

    def add(self, new_tokens, decode_seconds, equal: bool | None, stats=None, draft_seconds: float = 0.0,
            target_calls: int | None = None, events=None, drafted: int | None = None, accepted: int | None = None):
        """``stats`` from the engine's runs; Hugging Face's give only ``target_calls`` (τ but no α), llama.cpp's
        prompt lookup ``target_calls``, ``drafted`` and ``accepted`` (τ and α)."""
        self.new_tokens += new_tokens
        self.decode_seconds += decode_seconds
        self.turns += 1
        self.equal_turns += bool(equal)
        self.compared = equal is not None
        if stats is None:
            if target_calls:
                self.rounds += target_calls - 1  # the first call is the prefill, which yields the first token
                self.round_tokens += max(new_tokens - 1, 0)
            if drafted is not None:
                self.drafted += drafted
                self.accepted += accepted or 0
        else:
            self.has_rounds = True
            self.rounds += stats.rounds
            self.round_tokens += stats.new_tokens - 1 if stats.new_tokens else 0
            self.drafted += stats.drafted
            self.accepted += stats.accepted
            self.draft_seconds += draft_seconds
            self.reached_by_position = _add_counts(self.reached_by_position, stats.reached_by_position)
            self.passed_by_position = _add_counts(self.passed_by_position, stats.passed_by_position)
            self.clock = stats.clock
            self.target_calls += stats.target_calls
            self.link_seconds += stats.link_seconds
            self.link_bytes += stats.link_bytes
            self.link_messages += stats.link_messages
            self.link_resends += stats.link_resends
            if events is not None:
                self.pipeline.add(pipeline_metrics(events))
                if any(e.kind == "cache_lookup" for e in events):
                    self.verdict.add(verdict_metrics(events), new_tokens, decode_seconds)
            if stats.peak_resident_bytes:
                self.budgeted = True
                self.bytes_streamed += stats.bytes_streamed
                self.peak_resident_bytes = max(self.peak_resident_bytes, stats.peak_resident_bytes)

    def summary(self, ar_tokens_per_s: float | None) -> dict:
        """``draft_cost``: seconds per drafted token ÷ seconds per AR token (c in Leviathan's model).
        ``alpha``: the acceptance rate α, accepted ÷ drafted. ``alpha_by_position`` (the key kept for stored
        results): the acceptance by draft position, at each draft depth accepted ÷ rounds that reached it —
        flat if the drafter is equally good everywhere in its window, falling if its own earlier guesses lead
        it astray."""
        tps = self.new_tokens / self.decode_seconds if self.decode_seconds else 0.0
        draft_cost = None
        if self.drafted and self.draft_seconds and ar_tokens_per_s:
            draft_cost = (self.draft_seconds / self.drafted) * ar_tokens_per_s
        return {
            "tokens_per_s": tps,
            "speedup": tps / ar_tokens_per_s if ar_tokens_per_s else None,
            "tau": self.round_tokens / self.rounds if self.rounds else None,
            "alpha": self.accepted / self.drafted if self.drafted else (0.0 if self.has_rounds else None),
            "equals_ar": (self.equal_turns / self.turns) if self.compared else None,
            "draft_cost": draft_cost,
            "alpha_by_position": [p / r for p, r in zip(self.passed_by_position, self.reached_by_position)],
            "rounds_by_position": list(self.reached_by_position),
            "new_tokens": self.new_tokens,
            "decode_seconds": self.decode_seconds,
            "turns": self.turns,
            "clock": self.clock,
            **(self.memory_summary() if self.budgeted else {}),
            **({"pipeline": self.pipeline.summary(tps)} if self.pipeline.runs else {}),
            **({"verdict": self.verdict.summary(tps)} if self.verdict.rounds else {}),
            **({"link": self.link_summary()} if self.link_messages else {}),
        }

    def link_summary(self) -> dict:
        """Per answer (turn): server calls (prefill + verifications) and bytes; the link's share of the time."""
        return {"server_calls_per_answer": self.target_calls / self.turns, "bytes_per_answer": self.link_bytes / self.turns,
                "link_share": self.link_seconds / self.decode_seconds if self.decode_seconds else 0.0,
                "messages": self.link_messages, "resends": self.link_resends}

    def memory_summary(self) -> dict:
        return {"bytes_streamed": self.bytes_streamed, "peak_resident_bytes": self.peak_resident_bytes,
                "bytes_per_token": self.bytes_streamed / self.new_tokens if self.new_tokens else 0.0}


class PipelineTally:
    """Pipelined runs' time accounts (:func:`specviz.pipeline.pipeline_metrics`), pooled over turns."""

    def __init__(self):
        self.runs = self.ticks = self.tokens = 0
        self.span = self.message_bytes = 0.0
        self.busy: dict[str, float] = defaultdict(float)
        self.stage_seconds: dict[str, list[float]] = defaultdict(list)
        self.message_seconds: list[float] = []
        self.stages = 0
        self.checks = self.accepted = 0
        self.serial = False

    def add(self, metrics: dict) -> None:
        if not metrics:
            return
        self.runs += 1
        self.serial = metrics["mode"] == "serial"
        self.ticks += metrics["ticks"]
        self.tokens += metrics["tokens"]
        self.span += metrics["span"]
        self.stages = metrics["stages"]
        self.checks += metrics["checks"]
        self.accepted += metrics["accepted"]
        self.message_bytes += metrics["message_bytes_per_token"] * metrics["tokens"]
        self.message_seconds.append(metrics["message_seconds"])
        for lane, seconds in metrics["busy"].items():
            self.busy[lane] += seconds
        for lane, seconds in metrics["stage_seconds"].items():
            self.stage_seconds[lane].append(seconds)

    def summary(self, tokens_per_s: float) -> dict:
        """Eq. 6 at the pooled per-position acceptance (``alpha``: accepted ÷ drafts the last stage judged, the
        per-token acceptance probability the formula takes) with one tick = the slowest stage's median
        compute + the message time."""
        from statistics import median

        alpha = self.accepted / self.checks if self.checks else 0.0
        stage = {lane: median(values) for lane, values in self.stage_seconds.items()}
        message = median(self.message_seconds)
        eq6 = None if self.serial else ppsd_tokens_per_s(alpha, self.stages, max(stage.values()) + message)
        return {"stages": self.stages, "alpha": alpha, "ticks_per_token": self.ticks / max(self.tokens, 1),
                "tick_seconds": self.span / max(self.ticks, 1), "stage_seconds": stage,
                "idle": {lane: 1 - busy / self.span for lane, busy in self.busy.items()},
                "message_seconds": message, "message_bytes_per_token": self.message_bytes / max(self.tokens, 1),
                "eq6_tokens_per_s": eq6, "of_eq6": tokens_per_s / eq6 if eq6 else None}


class VerdictTally:
    """Mirror-SD / SSD runs' time accounts (:func:`specviz.verdict_views.verdict_metrics`), pooled over turns:
    rates and per-round times weighted by rounds; the latency law's tokens/s pooled as predicted time."""

    FIELDS = ("hit_rate", "exposed_draft_ms", "hidden_draft_ms", "prefix_ms", "suffix_ms", "verify_ms", "glue_ms",
              "rollout_ms", "backup_ms", "message_ms")

    def __init__(self):
        self.rounds = 0
        self.weighted: dict[str, float] = defaultdict(float)
        self.weights: dict[str, float] = defaultdict(float)
        self.law_seconds = self.law_tokens = 0.0

    def add(self, metrics: dict, new_tokens: int, decode_seconds: float) -> None:
        rounds = metrics.get("rounds") or 0
        self.rounds += rounds
        for key in self.FIELDS:
            if metrics.get(key) is not None:
                self.weighted[key] += metrics[key] * rounds
                self.weights[key] += rounds
        law = (metrics.get("law") or {}).get("tokens_per_s")
        if law:
            self.law_seconds += new_tokens / law
            self.law_tokens += new_tokens

    def summary(self, tokens_per_s: float) -> dict:
        out = {key: self.weighted[key] / self.weights[key] if self.weights[key] else None for key in self.FIELDS}
        law = self.law_tokens / self.law_seconds if self.law_seconds else None
        return {**out, "rounds": self.rounds, "law_tokens_per_s": law, "of_law": tokens_per_s / law if law else None}


def _add_counts(a: list[int], b: list[int]) -> list[int]:
    return [x + y for x, y in zip_longest(a, b, fillvalue=0)]


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
            "machine": machine_name(), "torch": torch.__version__,
            "prompts": project_relative(prompts_path), "n_prompts": n_prompts, "max_new_tokens": max_new_tokens,
            "temperature": temperature, "complete": complete}


def project_relative(path) -> str:
    """``data/prompts.jsonl`` rather than one machine's absolute path, so recorded results read the same anywhere."""
    try:
        return str(Path(path).resolve().relative_to(DEFAULT_PROMPTS.parent.parent))
    except ValueError:
        return str(path)


def _fmt(value, pattern="{:.2f}"):
    return "—" if value is None else pattern.format(value)


def to_markdown(results: dict) -> str:
    setup, methods = results["setup"], results["methods"]
    numerics = {True: ", row-invariant", False: ", PyTorch's attention"}.get(setup.get("row_invariant"), "")
    lines = [f"# specviz bench — {setup['model']} ({setup['dtype']}, {setup['device']}, {setup['threads']} threads"
             f"{numerics})",
             "", ("" if setup.get("complete", True) else "**Partial: the run stopped early.** ") +
             f"{setup['n_prompts']} prompts from `{setup['prompts']}`, {setup['max_new_tokens']} new tokens, "
             f"temperature {setup['temperature']}. Speedup is against `ar` measured in the same run; τ counts the "
             "bonus/correction token; α = accepted ÷ drafted.", "",
             *([f"Machine: {setup['machine']}. Step: {setup['step']}.", ""] if setup.get("step") else []),
             "## Overall", "", "| method | tokens/s | speedup | τ | α | draft cost c | output = ar |",
             "|---|---|---|---|---|---|---|"]
    virtual = {label for label, m in methods.items() if m["overall"].get("clock") == "virtual"}
    for label, by_category in methods.items():
        o = by_category["overall"]
        if label not in virtual:
            lines.append(f"| {label} | {o['tokens_per_s']:.1f} | {_fmt(o['speedup'])}× | {_fmt(o['tau'])} | "
                         f"{_fmt(o['alpha'])} | {_fmt(o.get('draft_cost'))} | {_fmt(o['equals_ar'], '{:.0%}')} |")
    lines += peer_notes(setup, methods)
    if virtual:
        lines += ["", "## clock=virtual", "", "Computed for real, one thread, stage after stage; the times are "
                  "replayed on one clock per lane as if each lane had its own core (`engines/lanes/serial.py`). "
                  f"Speedup is against `{ONE_LANE_AR}`, one lane's real speed — never against the wall-clock rows.",
                  "", "| method (clock=virtual) | tokens/s | speedup | α | output = ar |", "|---|---|---|---|---|"]
        for label in virtual:
            o = methods[label]["overall"]
            lines.append(f"| {label} | {o['tokens_per_s']:.1f} | {_fmt(o['speedup'])}× | {_fmt(o['alpha'])} | "
                         f"{_fmt(o['equals_ar'], '{:.0%}')} |")
    ceiling = setup.get("ceiling")
    if ceiling and "ar" in methods:
        lines += ["", f"Ceiling on this machine: {ceiling['tokens_per_s']:.0f} tokens/s (every weight read once per "
                  f"token: {ceiling['weight_bytes'] / 1e6:.0f} MB at the {ceiling['bandwidth_gb_s']:.0f} GB/s of a "
                  f"large read measured here); `ar` runs at "
                  f"{methods['ar']['overall']['tokens_per_s'] / ceiling['tokens_per_s']:.0%} of it."]
    categories = [c for c in next(iter(methods.values())) if c != "overall"]
    lines += ["", "## Per category: speedup (τ, α)", "",
              "| method | " + " | ".join(categories) + " |", "|---" * (len(categories) + 1) + "|"]
    for label, by_category in methods.items():
        cells = [f"{_fmt(by_category[c]['speedup'])}× ({_fmt(by_category[c]['tau'])}, {_fmt(by_category[c]['alpha'])})"
                 for c in categories]
        lines.append(f"| {label}{' · clock=virtual' if label in virtual else ''} | " + " | ".join(cells) + " |")
    return "\n".join(lines + position_table(methods) + pipeline_table(methods) + verdict_table(methods) +
                     link_table(methods) + memory_table(setup, methods)) + "\n"


def peer_notes(setup: dict, methods: dict) -> list[str]:
    """Lines under the overall table: rows skipped here and why, and what measured llama.cpp's rows."""
    lines = [f"- `{label}`: {note}" for label, note in (setup.get("skipped") or {}).items()]
    peer = setup.get("peer")
    if peer and any(m["overall"].get("peer") for m in methods.values()):
        lines.append(f"- llama.cpp rows: llama-cpp-python {peer['llama_cpp_python']} (llama.cpp "
                     f"{peer['llama_cpp_commit']}) in this process on `{peer['gguf']}`, converted from the engine's "
                     f"weights; the same prompt token ids, threads and eos; `llamacpp_ar`: {peer['llamacpp_ar']}; "
                     f"`llamacpp_lookup`: {peer['llamacpp_lookup']}. Their *output = ar* is for information: "
                     "other kernels round differently, so a greedy answer may part from `ar`'s at a near-tie.")
    return [""] + lines if lines else []


def link_table(methods: dict) -> list[str]:
    """Client–server rows (clock wall+link): measured compute plus the simulated network's seconds."""
    rows = {label: m["overall"]["link"] for label, m in methods.items() if "link" in m["overall"]}
    if not rows:
        return []
    lines = ["", "## Client–server over a simulated link", "",
             "tokens/s on the `wall+link` clock: compute measured on this machine, link seconds simulated and added "
             "(`engines/programs/client_server.py`). Server calls = prefill + one verification per cycle.", "",
             "| method | tokens/s | τ | server calls / answer | KB / answer | link share of time | resends |",
             "|---|---|---|---|---|---|---|"]
    for label, link in rows.items():
        o = methods[label]["overall"]
        lines.append(f"| {label} | {o['tokens_per_s']:.1f} | {_fmt(o['tau'])} | {link['server_calls_per_answer']:.1f} | "
                     f"{link['bytes_per_answer'] / 1e3:.1f} | {link['link_share']:.0%} | {link['resends']} |")
    return lines


def pipeline_table(methods: dict) -> list[str]:
    """Where pipelined runs spent their time, and Eq. 6 at their measured per-position acceptance and tick
    cost."""
    rows = {label: m["overall"]["pipeline"] for label, m in methods.items() if "pipeline" in m["overall"]}
    if not rows:
        return []
    lines = ["", "## Pipelines: where the time went (overall)", "",
             "Ticks per token: stage-1 steps per committed token (1 if every draft is accepted, S if none is). "
             "Stage ms: median compute per stage; idle: each lane's idle share of the decode time; message: median "
             "wait from one stage's end to the next one's start on the same tick. Per-position acceptance a: "
             "accepted ÷ drafts the last stage judged. Eq. 6 is 1 / (tick·(a + (1 − a)S)) with tick = slowest "
             "stage + message.", "",
             "| method | clock | S | per-position acceptance | ticks/token | tick ms | stage ms | idle | message ms | "
             "bytes/token | tokens/s | Eq. 6 tokens/s | of Eq. 6 |", "|---" * 13 + "|"]
    for label, p in rows.items():
        o = methods[label]["overall"]
        stage = " / ".join(f"{v * 1e3:.1f}" for v in p["stage_seconds"].values())
        idle = " / ".join(f"{v:.0%}" for v in p["idle"].values())
        lines.append(f"| {label} | {o.get('clock', 'wall')} | {p['stages']} | {p['alpha']:.2f} | "
                     f"{p['ticks_per_token']:.2f} | {p['tick_seconds'] * 1e3:.1f} | {stage} | {idle} | "
                     f"{p['message_seconds'] * 1e3:.2f} | {p['message_bytes_per_token']:.0f} | {o['tokens_per_s']:.1f} | "
                     f"{_fmt(p['eq6_tokens_per_s'], '{:.1f}')} | {_fmt(p['of_eq6'], '{:.0%}')} |")
    return lines


def verdict_table(methods: dict) -> list[str]:
    """Where Mirror-SD and SSD runs spent their time, and their latency law at the measured costs."""
    rows = {label: m["overall"]["verdict"] for label, m in methods.items() if "verdict" in m["overall"]}
    if not rows:
        return []
    lines = ["", "## Speculating on the verdict: where the time went (overall)", "",
             "Per round: hit = cache lookups that found the verdict's window; exposed = draft time the target "
             "waited for (backups after misses, draft work that outlasted verification, message hops); hidden = "
             "draft work overlapped by the target's compute. Target ms: prefix (layers 1..l_e + early exit) / "
             "suffix (the rest + verification) for Mirror, verify for SSD. Draft ms: glue / rollout (all branches "
             "as one tree) / backup. Law: Mirror's Eq. 10 + FF·T_gen, SSD's §5.6 round time, at the same costs.",
             "", "| method | hit | exposed ms | hidden ms | target ms | glue / rollout / backup ms | message ms | "
             "tokens/s | law tokens/s | of law |", "|---" * 10 + "|"]
    for label, v in rows.items():
        o = methods[label]["overall"]
        target = (f"{_fmt(v['prefix_ms'], '{:.1f}')} / {_fmt(v['suffix_ms'], '{:.1f}')}" if v["prefix_ms"] is not None
                  else _fmt(v["verify_ms"], "{:.1f}"))
        draft = " / ".join(_fmt(v[k], "{:.1f}") for k in ("glue_ms", "rollout_ms", "backup_ms"))
        lines.append(f"| {label} | {_fmt(v['hit_rate'], '{:.0%}')} | {_fmt(v['exposed_draft_ms'], '{:.1f}')} | "
                     f"{_fmt(v['hidden_draft_ms'], '{:.1f}')} | {target} | {draft} | {_fmt(v['message_ms'], '{:.2f}')} | "
                     f"{o['tokens_per_s']:.1f} | {_fmt(v['law_tokens_per_s'], '{:.1f}')} | {_fmt(v['of_law'], '{:.0%}')} |")
    categories = [c for c in methods[next(iter(rows))] if c != "overall"]
    lines += ["", "Per category: hit rate · exposed draft ms per round", "",
              "| method | " + " | ".join(categories) + " |", "|---" * (len(categories) + 1) + "|"]
    for label in rows:
        cells = []
        for category in categories:
            v = methods[label][category].get("verdict") or {}
            cells.append(f"{_fmt(v.get('hit_rate'), '{:.0%}')} · {_fmt(v.get('exposed_draft_ms'), '{:.1f}')}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def memory_table(setup: dict, methods: dict) -> list[str]:
    """Markdown rows of flash traffic per method, for a bench run under a memory budget."""
    memory = setup.get("memory_budget")
    if not memory:
        return []
    flash = "unthrottled" if memory.get("flash_mb_s") is None else f"{memory['flash_mb_s']:g} MB/s"
    lines = ["", "## Memory budget", "", f"{memory['memory_budget_mb']:g} MB of weights resident, flash {flash}, "
             f"stream={memory['stream']} (see `engines/memory_budget/weight_stream.py`).", "",
             "| method | MB streamed per token | peak MB resident |", "|---|---|---|"]
    for label, by_category in methods.items():
        o = by_category["overall"]
        if "bytes_per_token" in o:
            lines.append(f"| {label} | {o['bytes_per_token'] / 1e6:.2f} | {o['peak_resident_bytes'] / 1e6:.1f} |")
    return lines


def position_table(methods: dict) -> list[str]:
    """Markdown rows of the acceptance by draft position (overall: accepted ÷ rounds that reached each
    depth), for the methods that drafted."""
    by_label = {label: m["overall"].get("alpha_by_position") or [] for label, m in methods.items()}
    by_label = {label: alphas for label, alphas in by_label.items() if alphas}
    if not by_label:
        return []
    depth = max(len(alphas) for alphas in by_label.values())
    lines = ["", "## Acceptance by draft position (overall)", "",
             "Accepted ÷ rounds that reached the position: the first column is how often the drafter's first "
             "guess is right, the rest show whether its later guesses hold up. Each rejection ends a round, so "
             "deeper positions are reached by fewer rounds and read noisier.", "",
             "| method | " + " | ".join(str(d) for d in range(1, depth + 1)) + " |", "|---" * (depth + 1) + "|"]
    for label, alphas in by_label.items():
        cells = [_fmt(a) for a in alphas] + ["—"] * (depth - len(alphas))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def write_results(results: dict, out_dir) -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "results.json", out / "results.md"
    json_path.write_text(json.dumps(results, indent=2))
    md_path.write_text(to_markdown(results))
    return json_path, md_path


def pooled_speedups(parts: list[tuple[dict, set[str] | None, set[str]]]) -> dict[str, dict]:
    """Overall speed pooled over parts of several runs (see ``scripts/pool_bench.py``): Σ new tokens ÷ Σ
    decode seconds per method, against ``ar`` pooled over the same parts, and the mean of the categories'
    draft costs c. ``parts``: (results, categories to take or None for all, categories to leave out)."""
    tokens: dict[str, float] = defaultdict(float)
    seconds: dict[str, float] = defaultdict(float)
    costs: dict[str, list[float]] = defaultdict(list)
    taken: set[str] = set()
    for results, keep, drop in parts:
        for method, categories in results["methods"].items():
            for category, row in categories.items():
                if category == "overall" or category in drop or (keep is not None and category not in keep):
                    continue
                tokens[method] += row["new_tokens"]
                seconds[method] += row["decode_seconds"]
                if row.get("draft_cost") is not None:
                    costs[method].append(row["draft_cost"])
                taken.add(category)
    if "ar" not in tokens:
        raise ValueError("every part must include ar, the baseline the speedups are against")
    ar = tokens["ar"] / seconds["ar"]
    return {m: {"tokens_per_s": tokens[m] / seconds[m], "speedup": tokens[m] / seconds[m] / ar,
                "mean_draft_cost": sum(costs[m]) / len(costs[m]) if costs[m] else None,
                "categories": sorted(taken)} for m in tokens}
