"""Which dtype and which step the engine decodes with on this machine: the faster, measured here once.

A CPU flag does not say which is faster. On a 2-core AMD EPYC (Zen 4) with AVX-512 BF16, PyTorch's bf16 path
decoded at 26–29 tokens/s and its fp32 path at 36–41, although the flag said bf16; which wins depends on the
kernels that run (the native step, oneDNN, MKL), the memory, the thread count. So the first time a model is
loaded without a dtype, both dtypes are loaded and their decode steps timed, interleaved so that a busy machine
slows both alike, and the faster is kept in the cache (``<cache_dir>/step_choice/``) with what was measured and
why. The engine, the bench, the CLI and the dashboard report that record (:func:`describe`).
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

from engines.model.loading import DEFAULT_MODEL, check_dtype_device, load_model
from engines.model.machine import cache_dir
from engines.model.native import step as native_step
from engines.storage import discard_damaged, read_json_record, write_json_atomic

DTYPES = ("float32", "bfloat16")
PREFIX = 256  # cached tokens before the timed steps: a typical point in a benchmark turn
REPEATS = 12


@dataclass
class StepChoice:
    dtype: str  # the default
    ms_per_token: dict  # "dtype/path" → median ms of one decode step (a one-token forward and the head)
    machine: str
    threads: int
    measured_at: str

    def path(self, dtype: str) -> str:
        """The step that runs in ``dtype``: the native one wherever it was measured (every process of a run must
        compute alike, lane workers included, so the path is not switched per dtype); PyTorch's elsewhere."""
        return "native" if f"{dtype}/native" in self.ms_per_token else "pytorch"

    def step_ms(self, dtype: str) -> float:
        return self.ms_per_token[f"{dtype}/{self.path(dtype)}"]

    @property
    def why(self) -> str:
        other = next(d for d in DTYPES if d != self.dtype)
        measured = ", ".join(f"{key} {ms:.1f}" for key, ms in self.ms_per_token.items())
        return (f"{self.dtype} is the default here: one decode step took {self.step_ms(self.dtype):.1f} ms against "
                f"{self.step_ms(other):.1f} ms in {other} (ms by dtype/step: {measured}; {self.threads} threads, "
                f"measured {self.measured_at} on {self.machine})")


def machine_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what the platform says elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _path(model: str) -> Path:
    threads = torch.get_num_threads()
    build = (native_step.build_id() or "pytorch") + native_step.panels_id()
    label = f"{model}|{machine_name()}|{threads}|{torch.__version__}|{build}"
    safe = "".join(c if c.isalnum() else "-" for c in label)[:160]
    return cache_dir() / "step_choice" / f"{safe}.json"


WHAT = "the dtype and step choice"
THEN = "it will be measured again"


def cached(model: str = DEFAULT_MODEL) -> StepChoice | None:
    """The choice measured here before, or ``None`` (then it is measured): none yet, or a damaged record,
    reported once by name and set aside."""
    path = _path(model)
    record = read_json_record(path, WHAT, then=THEN)
    if record is None:
        return None
    try:
        choice = StepChoice(**record)
        choice.why  # noqa: B018 - a record that cannot say why (a timing missing, not a number) is damaged
    except (TypeError, KeyError, ValueError, AttributeError) as error:
        discard_damaged(path, WHAT, f"not a choice: {error!r}", then=THEN)
        return None
    return choice


def _step_ms(stacks: dict, repeats: int) -> dict[str, float]:
    """Median ms of one decode step per dtype and path, all of them interleaved."""
    runs = [(dtype, path) for dtype, stack in stacks.items()
            for path in (("native", "pytorch") if stack.native is not None else ("pytorch",))]
    samples: dict[str, list[float]] = {f"{dtype}/{path}": [] for dtype, path in runs}
    caches = {}
    with torch.inference_mode():
        for dtype, stack in stacks.items():
            caches[dtype] = stack.new_cache(PREFIX + 1)
            stack.forward([(7 * i + 3) % stack.config.vocab_size for i in range(PREFIX)], caches[dtype])
        for repeat in range(repeats + 1):  # the first round warms up
            for dtype, path in runs:
                stacks[dtype].use_native(path == "native")
                start = time.perf_counter()
                stacks[dtype].forward([5], caches[dtype])
                if repeat:
                    samples[f"{dtype}/{path}"].append(time.perf_counter() - start)
                caches[dtype].crop(PREFIX)
    return {key: 1e3 * statistics.median(s) for key, s in samples.items()}


def measure(model: str = DEFAULT_MODEL, progress: Callable[[str], None] | None = None) -> StepChoice:
    from engines.model.layers import LayerStack

    say = progress or (lambda text: print(f"specviz: {text}", file=sys.stderr, flush=True))
    say("choosing the default dtype and step on this machine (once): timing a decode step in float32 and bfloat16")
    stacks = {}
    for dtype in DTYPES:
        stack = LayerStack(load_model(model, dtype, "cpu").model)
        stack.prepare_inference()
        stacks[dtype] = stack
    ms = _step_ms(stacks, REPEATS)
    choice = StepChoice("", {key: round(value, 3) for key, value in ms.items()}, machine_name(),
                        torch.get_num_threads(), time.strftime("%Y-%m-%d"))
    choice.dtype = min(DTYPES, key=choice.step_ms)
    write_json_atomic(_path(model), asdict(choice), indent=1)
    say(choice.why)
    return choice


def default_dtype(model: str = DEFAULT_MODEL, progress: Callable[[str], None] | None = None) -> str:
    """The faster dtype for ``model`` on this CPU: from the cache, measured first if it is not there."""
    choice = cached(model) or measure(model, progress)
    return choice.dtype


def validate_dtype_device(dtype: str | None, device: str, model: str = DEFAULT_MODEL) -> tuple[str, str]:
    """The dtype and device a load will use: ``dtype`` ``None`` is bf16 on a GPU and, on a CPU, the faster
    of the two measured here (:func:`default_dtype`); ``ValueError`` for anything not allowed."""
    check_dtype_device(dtype or "float32", device)  # a bad device fails before anything is measured
    if dtype is None:
        dtype = "bfloat16" if device == "cuda" else default_dtype(model)
    return dtype, device


def describe(dtype: str, model: str = DEFAULT_MODEL, native: bool = True) -> str:
    """One line for the bench, the CLI and the dashboard: which step runs in ``dtype`` and why that dtype."""
    choice = cached(model)
    path = "the native step (engines/model/native/step.c)" if native else "PyTorch's path"
    if choice is None:
        return f"{dtype} through {path} (chosen by the caller; no measurement recorded here)"
    if choice.dtype == dtype:
        return f"{dtype} through {path}: {choice.why}"
    return f"{dtype} through {path}, chosen by the caller ({choice.why})"
