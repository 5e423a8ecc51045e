"""The engine's public entry point: load a target once, then stream any method's run as events.

``Engine.generate`` validates everything first and only then returns the event stream, so a bad
argument raises ``ValueError`` before any work starts and nothing is left half-done.
"""

from __future__ import annotations

import numbers
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Sequence

import torch
from jinja2 import TemplateError

from engines.core.context import DecodeContext
from engines.core.sampling import Sampler
from engines.core.stats import Stats, compute_stats
from engines.core.trace import Event, RunEnd, RunStart, Trace
from engines.drafters.suffix import SuffixCorpus
from engines.drafters.trained import available, drafts_dir, load_trained
from engines.lanes import LaneGroup, LaneSpec, MessageCost, default_lanes, lane_capacity
from engines.lanes.background import in_background
from engines.lanes.runtime import load_message_cost, save_message_cost
from engines.memory_budget import weight_stream
from engines.methods import get_method
from engines.model.cuda_attention import choose_cuda_attention
from engines.model.footprint import check_load
from engines.model.kernels import install
from engines.model.layers import LayerStack
from engines.model.loading import DEFAULT_MODEL, LoadedModel, load_model, model_source
from engines.model.native.step import build_id as native_build_id
from engines.model.native.step import panels_id as native_panels_id
from engines.model.step_choice import describe, validate_dtype_device
from engines.model.verify_cost import VerifyCost, install_stack, load_curve, machine_key, measure, save_curve


PROMPT_KINDS = ("prompt must be text, a chat (a list of {'role': str, 'content': str} dicts) or a list of token "
                "ids")


def _short(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _check_unicode(text: str, what: str) -> None:
    """Text a tokenizer can take: encodable as UTF-8 (a lone surrogate, from broken decoding, is not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{what} must be valid Unicode text: character {error.start:,} is a lone surrogate "
                         f"({text[error.start]!r})") from None


@dataclass
class RunResult:
    method: str
    config: dict
    token_ids: list[int]
    text: str
    stats: Stats
    events: list[Event]


class Engine:
    def __init__(self, model: torch.nn.Module, tokenizer=None, name: str = "custom", fp32_head: bool = False,
                 row_invariant: bool | None = None, fused: bool = True):
        """``fp32_head``: where the model runs in a 16-bit dtype, compute its final norm and LM head in
        fp32 (see :meth:`engines.model.layers.LayerStack.use_fp32_head`). ``row_invariant``: verify n tokens
        with the bits n one-token steps would give (see :mod:`engines.model.exact_numerics`); ``None`` turns it
        on for 16-bit dtypes on the CPU, where it keeps greedy output equal to ``ar``'s at no cost.
        ``fused``: run the layers through :class:`~engines.model.fused_layer.FusedLlamaLayer` (the same bits,
        faster); ``False`` runs the Hugging Face layers as they are."""
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.target = LayerStack(model)
        if self.target.device.type == "cuda":
            choose_cuda_attention()  # cuDNN's attention would build a graph for every new key length
        self.target.use_fp32_head(fp32_head)
        self.target.prepare_inference(row_invariant, fused)
        self._fused = fused
        # the curve's name: fixed at load, as a memory budget later swaps the fused layers out and back
        self._small_m = self.target.packed_head is not None and self.target.packed_head.small_m
        self.context_window = getattr(model.config, "max_position_embeddings", 2048)
        self._drafts: dict[str, LayerStack] = {}
        self._draft_sources: dict[str, Path] = {}
        self._trained: dict[str, torch.nn.Module] = {}
        self._verify_cost: VerifyCost | None = None
        self._verify_cost_key = ""
        self._memory = weight_stream.BudgetSlot(self.target, name)  # no budget until one is set
        self.lane_spec = LaneSpec()  # where lane workers run: spawned here, or joining from other hosts
        self._lanes: LaneGroup | None = None
        self._lanes_source: Path | None = None
        self._temporary: list[weakref.finalize] = []  # removes the folders saved for lane workers
        # every run's answer, for the suffix drafter (engines.drafters.suffix): the earlier answers of this engine's
        # bench run or dashboard session
        self.suffix_corpus = SuffixCorpus()
        self._longest_token: int | None = None

    @classmethod
    def load(cls, model: str = DEFAULT_MODEL, dtype: str | None = None, device: str = "cpu",
             fp32_head: bool = False, row_invariant: bool | None = None, fused: bool = True) -> "Engine":
        """Load a model; where this machine's verify-cost curve is cached, run its tuned kernels. A model this
        machine has too little memory available for is refused first (:mod:`engines.model.footprint`)."""
        dtype, device = validate_dtype_device(dtype, device, model)
        check_load(model, model_source(model), dtype, device)  # a ValueError with the numbers, not an OOM kill
        loaded: LoadedModel = load_model(model, dtype, device)
        engine = cls(loaded.model, loaded.tokenizer, loaded.name, fp32_head, row_invariant, fused)
        engine.verify_cost(measure_if_missing=False)
        return engine

    @property
    def step_description(self) -> str:
        """Which decode step runs, in which dtype, and why that dtype (see :mod:`engines.model.step_choice`)."""
        if not self._fused:
            return f"{self.dtype} through Hugging Face's layers (fused=False)"
        native = self.target.native
        said = describe(self.dtype, self.name, native=native is not None)
        return said + ("; int8 products (SPECVIZ_PRODUCTS=int8: inputs quantized to int8 against the GGUF's blocks, "
                       "other outputs than the exact products')" if native is not None and native.int8_products else "")

    @property
    def dtype(self) -> str:
        return str(self.target.dtype).removeprefix("torch.")

    @property
    def device(self) -> str:
        return str(self.target.device)

    @property
    def eos_ids(self) -> frozenset:
        eos = getattr(self.model.config, "eos_token_id", None)
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            eos = self.tokenizer.eos_token_id
        return frozenset(eos if isinstance(eos, list) else [] if eos is None else [eos])

    # --- prompts and text ------------------------------------------------------------------------
    def encode(self, prompt: str | Sequence[dict] | Sequence[int]) -> list[int]:
        """A string is one user turn, a list of dicts a chat, a list of ints raw token ids.

        Anything else is a ``ValueError`` saying what a prompt may be, and so is an empty prompt, text that is not
        valid Unicode (a lone surrogate) or too long for any prompt of it to fit the context window, a chat turn
        without a string ``role`` and ``content``, and a token id outside the vocabulary: the tokenizer never sees
        what would make it raise something else, and never works through more text than could fit.
        """
        if isinstance(prompt, str):
            if not prompt.strip():
                raise ValueError("prompt must not be empty")
            prompt = [{"role": "user", "content": prompt}]
        elif isinstance(prompt, torch.Tensor):
            prompt = prompt.reshape(-1).tolist()
        if isinstance(prompt, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(prompt, Iterable):
            raise ValueError(f"{PROMPT_KINDS}, got {type(prompt).__name__}")
        prompt = list(prompt)
        if not prompt:
            raise ValueError("prompt must not be empty")
        if all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in prompt):
            return self._token_ids(prompt)
        if self.tokenizer is None:
            raise ValueError("this engine has no tokenizer: pass the prompt as a list of token ids")
        for i, turn in enumerate(prompt):
            if not (isinstance(turn, Mapping) and isinstance(turn.get("role"), str)
                    and isinstance(turn.get("content"), str)):
                raise ValueError(f"{PROMPT_KINDS}; item {i} is {_short(turn)}")
            _check_unicode(turn["content"], f"prompt (turn {i})" if len(prompt) > 1 else "prompt")
        self._check_characters(sum(len(turn["content"]) for turn in prompt))
        if getattr(self.tokenizer, "chat_template", None):
            try:
                ids = self.tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
            except TemplateError as error:  # the template's own rule (roles that must alternate, …)
                raise ValueError(f"the tokenizer's chat template refused the prompt: {error}") from None
            return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        return self.tokenizer.encode("\n".join(m["content"] for m in prompt))

    def _token_ids(self, ids: list) -> list[int]:
        vocab = self.target.backbone.embed_tokens.num_embeddings
        for i, token in enumerate(ids):
            if not 0 <= token < vocab:
                raise ValueError(f"prompt token id {token} at position {i} is outside the vocabulary [0, {vocab})")
        return [int(token) for token in ids]

    @property
    def longest_token_chars(self) -> int | None:
        """The most characters one token of this tokenizer stands for (its longest vocabulary entry: bytes for a
        byte-level vocabulary, so never fewer than the characters it decodes to); ``None`` without a tokenizer or
        where it cannot list its vocabulary (a custom tokenizer with no ``get_vocab``): then no bound is set."""
        vocabulary = getattr(self.tokenizer, "get_vocab", None)
        if self._longest_token is None and vocabulary is not None:
            self._longest_token = max((len(t) for t in vocabulary()), default=1)
        return self._longest_token

    def _check_characters(self, n_chars: int) -> None:
        """Text whose characters could not fit the context window even at the tokenizer's longest token each is
        refused before tokenizing (which takes about 1.5 s and ~1 GB a megabyte of text): the bound assumes the
        tokenizer's normalizer drops no characters, as byte-level and SentencePiece vocabularies' do not."""
        longest = self.longest_token_chars
        if longest is not None and n_chars > self.context_window * longest:
            raise ValueError(f"prompt is {n_chars:,} characters, more than the context window of "
                             f"{self.context_window:,} tokens can hold (no token covers more than {longest} "
                             f"characters: at most {self.context_window * longest:,} characters could fit, and text "
                             f"usually takes 3–5 characters a token)")

    def detokenize(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return "".join(f" {i}" for i in ids)
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # --- what verification costs here ------------------------------------------------------------
    def verify_cost(self, measure_if_missing: bool = True, remeasure: bool = False,
                    progress=None) -> VerifyCost | None:
        """This machine's verify-cost curve (see :mod:`engines.model.verify_cost`), installing its kernels.

        Cached on disk for named models; a model built in memory (``name="custom"``) is measured once
        per engine. Measuring takes a few seconds on the default model (every kernel, n = 1..16).
        """
        name = (self.name + ("+fp32head" if self.target.fp32_head is not None else "")
                + ("+rowinv" if self.target.row_invariant else "") + ("+fused" if self._fused else "")
                + ("+smallm" if self._small_m else "")
                + (f"+native-{native_build_id()}{native_panels_id()}" if self.target.native is not None else ""))
        with self._memory.full_shapes():  # a memory budget empties layers: the key names the whole model
            key = machine_key(self.model, name, self.target.dtype, self.target.device, torch.get_num_threads())
        if self._verify_cost is not None and self._verify_cost_key == key and not remeasure:
            return self._verify_cost
        curve = None if remeasure or self.name == "custom" else load_curve(key)
        if curve is None:
            if not (measure_if_missing or remeasure):
                return None
            prefix = min(256, self.context_window // 2)
            max_tokens = min(16, self.context_window - prefix)
            with self._memory.lifted():  # compute cost is measured on the whole model, never through flash
                curve = measure(self.target, name, max_tokens=max_tokens, prefix=prefix, progress=progress)
            if self.name != "custom":
                save_curve(curve)
        self._verify_cost, self._verify_cost_key = curve, key
        self.use_kernels(curve)
        return curve

    def use_kernels(self, curve: VerifyCost) -> None:
        """Run the target and every loaded drafter with the kernels the curve chose."""
        plan = curve.plan()
        install_stack(self.target, curve.plan(self.target.row_invariant))
        for module in self._trained.values():
            install(module, plan)
        for stack in self._drafts.values():
            install(stack.model, plan)

    # --- drafts ----------------------------------------------------------------------------------
    def add_draft(self, name: str, model: torch.nn.Module, tokenizer=None) -> None:
        """Register a draft model under ``name`` (``sps --draft NAME``); it must share our tokenizer."""
        if tokenizer is not None and self.tokenizer is not None:
            if tokenizer.get_vocab() != self.tokenizer.get_vocab():
                raise ValueError(f"draft {name!r} uses a different tokenizer from the target; "
                                 "speculative decoding needs the draft to share the target's vocabulary")
        if model.config.vocab_size != self.model.config.vocab_size:
            raise ValueError(f"draft {name!r} has vocabulary size {model.config.vocab_size}, "
                             f"the target {self.model.config.vocab_size}")
        self._drafts[name] = LayerStack(model)

    def draft_stack(self, name: str) -> LayerStack:
        if name not in self._drafts:
            try:
                loaded = load_model(name, self.dtype, self.device.split(":")[0])
            except OSError as error:  # transformers' message talks about hub repos we never reach
                trained = ", ".join(available()) or "none"  # a shipped name missing from SPECVIZ_DRAFTS lands here
                raise ValueError(f"draft {name!r} is neither a trained drafter in {drafts_dir()} (there: {trained}), "
                                 f"a local model directory nor a model in the local Hugging Face cache (nothing is "
                                 f"downloaded): {error}") from None
            self.add_draft(name, loaded.model, loaded.tokenizer)
        return self._drafts[name]

    def draft_source(self, name: str) -> Path:
        """A directory a lane worker loads the registered draft ``name`` from: its own, or (a model built in
        memory) its weights saved once to a temporary directory."""
        if Path(name).is_dir():
            return Path(name)
        if name not in self._draft_sources:
            model = self.draft_stack(name).model
            self._draft_sources[name] = self._temporary_folder("specviz-lanes-draft-", model.save_pretrained)
        return self._draft_sources[name]

    def _temporary_folder(self, prefix: str, save) -> Path:
        """A new temporary folder that ``save`` (a model's ``save_pretrained``) fills, removed by :meth:`close`,
        when this engine is collected or at exit (``weakref.finalize``), and at once if ``save`` fails: weights
        saved for lane workers (hundreds of MB for a real draft) must not pile up in the temporary directory."""
        folder = Path(tempfile.mkdtemp(prefix=prefix))
        remove = weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)
        try:
            save(folder, safe_serialization=True)
        except BaseException:
            remove()
            raise
        self._temporary.append(remove)
        return folder

    def trained_drafter(self, name: str) -> torch.nn.Module:
        """A drafter shipped in ``data/drafts`` (see :mod:`engines.drafters.trained`), loaded once."""
        if name not in self._trained:
            self._trained[name], _ = load_trained(name, self.target)
            if self._verify_cost is not None:
                install(self._trained[name], self._verify_cost.plan())
        return self._trained[name]

    # --- memory budget (see engines.memory_budget.weight_stream) -----------------------------------------------
    def set_memory_budget(self, memory_budget_mb: float | None, flash_mb_s: float | None = None,
                          stream: str = "deep", chunk_layers: int = 1) -> None:
        """Hold the target to ``memory_budget_mb`` MB for every later run; ``None`` removes the budget,
        restoring every layer's weights and removing the hooks.

        The layers that do not fit stream from per-layer files at ``flash_mb_s`` MB/s (``None``: unthrottled),
        ``chunk_layers`` at a time; ``stream`` is ``"deep"`` or ``"all"`` (the CATS paper's two modes). The
        budget covers the target's layers only: separate drafters stay resident (load them before setting it).
        """
        budget = weight_stream.memory_budget(memory_budget_mb, flash_mb_s, stream, chunk_layers)
        if budget is not None:
            weight_stream.plan_residency(self.target, budget)
        self._memory.set(budget)

    @property
    def memory_budget(self) -> weight_stream.MemoryBudget | None:
        return self._memory.budget

    # --- lanes (engines.lanes) ---------------------------------------------------------------------
    def lane_group(self, lanes: list[str]) -> LaneGroup:
        """Worker processes for ``lanes`` (rank 0 is this process), started on first use and reused by
        every later run that needs the same lanes; a run that fails or is abandoned closes them."""
        group = self._lanes
        if group is None or list(group.spec.lanes) != list(lanes) or not group.started:
            if group is not None:
                group.close()
            spec = replace(self.lane_spec, lanes=tuple(lanes))
            self._lanes = group = LaneGroup(spec, self.model.config.hidden_size, self.target.dtype)
            group.start()
            save_message_cost(group.message_cost)
        return group

    def lanes_source(self) -> Path:
        """A directory the workers load their layers from: the model's own, or (a model built in memory)
        its weights saved once to a temporary directory."""
        if self._lanes_source is None:
            if self.name != "custom":
                self._lanes_source = model_source(self.name)
            else:
                self._lanes_source = self._temporary_folder("specviz-lanes-model-", self.model.save_pretrained)
        return self._lanes_source

    def message_cost(self) -> MessageCost:
        """What a message between two lanes costs here (virtual mode's clocks need it): measured when lanes
        start, cached per host; measured with a two-lane group if never measured before."""
        cost = load_message_cost()
        if cost is None:
            self.lane_group(list(default_lanes(2, "cpu")) if lane_capacity("cpu") >= 2 else ["cpu0", "cpu0"])
            cost = self._lanes.message_cost
        return cost

    def close(self) -> None:
        """Stop this engine's lane workers (if any) and remove the folders saved for them; the engine stays
        usable and restarts them (saving again) on demand."""
        if self._lanes is not None:
            self._lanes.close()
            self._lanes = None
        if self._temporary:
            for remove in self._temporary:
                remove()
            self._temporary.clear()
            self._lanes_source = None
            self._draft_sources.clear()

    # --- running ---------------------------------------------------------------------------------
    def generate(self, prompt, method: str = "ar", *, max_new_tokens: int = 128, temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = 0, instrument: bool = True,
                 trace: Trace | None = None, memory_budget_mb: float | None = None, flash_mb_s: float | None = None,
                 stream: str = "deep", stop_at_eos: bool = True, **options) -> Iterator[Event]:
        """Validate, then return the run's event stream (commits carry the text as it is produced).

        ``memory_budget_mb``, ``flash_mb_s``, ``stream``: run under a memory budget, as
        :meth:`set_memory_budget` describes, for this run only (the target's layers only: drafters stay
        resident); left unset, the engine's own budget applies, if it has one.
        ``stop_at_eos=False`` decodes all ``max_new_tokens`` through end-of-text tokens (llama.cpp's
        ``--ignore-eos``): what a soak or a timing run needs, whatever the model would say.
        """
        method_cls = get_method(method)
        if not isinstance(stop_at_eos, bool):
            raise ValueError(f"stop_at_eos must be True or False, got {_short(stop_at_eos)}")
        if trace is not None and not isinstance(trace, Trace):
            raise ValueError(f"trace must be a Trace to collect the run's events into, got {_short(trace)}")
        unknown = set(options) - set(method_cls.Config.option_names())
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} for method {method!r}; "
                             f"allowed: {method_cls.Config.option_names() or 'none'}")
        config = method_cls.Config(**options)
        config.validate(self.target.n_layers)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        max_new_tokens = int(max_new_tokens)
        budget = weight_stream.memory_budget(memory_budget_mb, flash_mb_s, stream)
        if budget is not None:
            weight_stream.plan_residency(self.target, budget)  # a budget below the head's size fails here
        sampler = Sampler(temperature, top_p, seed)
        prompt_ids = self.encode(prompt)
        self.check_context(len(prompt_ids), max_new_tokens)
        instance = method_cls(config, self)
        instance.check_sampling(sampler.greedy)
        instance.prepare()
        if trace is None:
            trace = Trace(detailed=instrument)
        else:  # a trace passed in collects this run too; the flag still decides what is recorded
            trace.detailed = instrument
        if self.device.startswith("cuda"):
            trace.device_sync = lambda device=self.target.device: torch.cuda.synchronize(device)
        ctx = DecodeContext(self.target, prompt_ids, max_new_tokens, sampler, trace,
                            self.eos_ids if stop_at_eos else frozenset(), self.detokenize,
                            lane="cuda:0" if self.device.startswith("cuda") else "cpu0")
        return self._stream(instance, ctx, temperature, budget)

    def check_context(self, prompt_tokens: int, max_new_tokens: int) -> None:
        """``ValueError`` unless the prompt and ``max_new_tokens`` fit the context window together, naming what
        fits. Every draft stays inside it too: chains and trees draft at most the tokens left to commit (the last
        round's draft is cut short), PPSD's first stage sends no draft past the window, and Mirror-SD's and SSD's
        draft lane cuts its windows at the window's end (``tests/test_hostile_input.py``)."""
        window = self.context_window
        if prompt_tokens >= window:
            raise ValueError(f"prompt ({prompt_tokens:,} tokens) exceeds the context window of {window:,} tokens: "
                             f"at most {window - 1:,} prompt tokens fit, leaving 1 for max_new_tokens")
        if prompt_tokens + max_new_tokens > window:
            raise ValueError(f"prompt ({prompt_tokens:,} tokens) + max_new_tokens ({max_new_tokens:,}) exceeds the "
                             f"context window of {window:,} tokens: with this prompt at most {window - prompt_tokens:,} "
                             f"new tokens fit (max_new_tokens <= {window - prompt_tokens:,})")

    def check(self, prompt, method: str = "ar", **kwargs) -> None:
        """Raise the ``ValueError`` :meth:`generate` would raise for these arguments, and run nothing (what the
        run needs is loaded, as ``generate`` loads it): a helper that runs several configurations checks them all
        before its first run, so a bad one is refused before any work rather than after the others ran."""
        self.generate(prompt, method, **kwargs).close()

    def _stream(self, method, ctx: DecodeContext, temperature: float,
                budget: weight_stream.MemoryBudget | None = None) -> Iterator[Event]:
        """The run under ``budget`` (or the engine's own): the reader thread lives exactly as long as the run."""
        with self._memory.run(budget, ctx.trace.now) as streamer:
            yield from self._stream_run(method, ctx, temperature, streamer)

    def _stream_run(self, method, ctx: DecodeContext, temperature: float,
                    streamer: weight_stream.WeightStreamer | None) -> Iterator[Event]:
        """Hand each event to the consumer so that whatever it does with it (render, print, sleep) is never
        timed as decoding: with the run's clock stopped on one process; a lanes run, whose workers would go
        on computing meanwhile, runs in a thread of its own and never waits for the consumer."""
        events = self._run_events(method, ctx, temperature, streamer)
        try:
            if method.runs_in_processes:
                yield from in_background(events)
                return
            for event in events:
                ctx.trace.hold()
                try:
                    yield event
                finally:
                    ctx.trace.release()
        finally:
            ctx.trace.use_clock(None)  # a virtual-clock run that failed leaves the trace on the wall clock

    def _run_events(self, method, ctx: DecodeContext, temperature: float,
                    streamer: weight_stream.WeightStreamer | None) -> Iterator[Event]:
        trace = ctx.trace
        first = len(trace.events)  # a trace passed in may hold earlier runs: stats come from this one only
        yield trace.emit(RunStart(
            t=trace.now(), method=method.name, config=method.config.to_dict(), model=self.name,
            device=self.device, dtype=self.dtype, lanes=method.lanes(ctx),
            lossless=method.lossless, prompt_tokens=len(ctx.prompt_ids), max_new_tokens=ctx.max_new_tokens,
            temperature=temperature, memory=streamer.describe() if streamer is not None else None,
            clock=method.clock, threads=torch.get_num_threads()))
        token_ids: list[int] = []
        stop_reason = "max_new_tokens"
        steps = method.decode(ctx)
        native = self.target.native
        trusted = native.trusted_during(ctx) if native is not None else nullcontext()
        while True:
            # only around the engine's own work, never the consumer's code: no autograd, and the target's
            # weights checked once in this run (NativeStep.trusted_during)
            with torch.inference_mode(), trusted:
                event = next(steps, None)
            if event is None:
                break
            if getattr(event, "kind", "") == "commit":
                token_ids.extend(event.tokens)
                if event.tokens and event.tokens[-1] in ctx.eos_ids:
                    stop_reason = "eos"
            if streamer is not None:  # the chunks this event's work streamed come first
                for chunk in streamer.events_before(event):
                    yield trace.emit(chunk)
            yield trace.emit(event)
        if streamer is not None:
            streamer.stop()  # a chunk read ahead but never used still crossed the flash: it counts
            for chunk in streamer.drain():
                yield trace.emit(chunk)
        trace.sync()  # the last kernels finish inside the run's time, instrumented or not
        end = trace.now()
        stats = compute_stats(trace.events[first:], end_time=end)
        self.suffix_corpus.add(ctx.prompt_ids, token_ids)
        yield trace.emit(RunEnd(t=end, token_ids=token_ids, text=self.detokenize(token_ids),
                                stats=stats.to_dict(), stop_reason=stop_reason))

    def run(self, prompt, method: str = "ar", **kwargs) -> RunResult:
        """Run to the end and return the result (the same events ``generate`` streams)."""
        events = list(self.generate(prompt, method, **kwargs))
        end: RunEnd = events[-1]
        return RunResult(method, events[0].config, end.token_ids, end.text, Stats.from_dict(end.stats), events)
