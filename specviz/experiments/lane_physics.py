"""``specviz lanes-physics``: the measurement the parallel methods stand on.

Decoding this model is memory-bound: a second thread in one process gains little, while two processes,
each on its own core with one thread, each keep (almost) their whole speed side by side. Three numbers
say it: one-token decode steps per second with the process's threads, with one thread on one core, and
two one-thread decoders running at once in two lanes (the driver and one worker).
"""

from __future__ import annotations

import time

import torch

from engines import Engine
from engines.core.trace import Trace
from engines.lanes import Emit, Message, Recv, Send, pinned
from engines.model.layers import LayerStack


def decode_rate(stack: LayerStack, steps: int, prefix: int = 32) -> float:
    """Whole-model one-token steps per second after a ``prefix``-token prompt (the cost of ``ar``)."""
    with torch.inference_mode():
        cache = stack.new_cache(prefix + steps + 8)
        logits = stack.forward(list(range(1, prefix + 1)), cache)
        token = int(logits[-1].argmax())
        for _ in range(3):  # warm-up steps, then crop them away
            stack.forward([token], cache)
        cache.crop(prefix)
        start = time.perf_counter()
        for _ in range(steps):
            token = int(stack.forward([token], cache)[-1].argmax())
        return steps / (time.perf_counter() - start)


def worker_decode(lane, source: str, dtype: str, n_layers: int, steps: int):
    """A lane program: load the whole model, decode, report the rate to the driver."""
    from engines.model.loading import load_layers

    stack = LayerStack(load_layers(source, dtype, "cpu", range(n_layers), embed=True, head=True))
    yield Send(0, Message("reply"))  # loaded: both start decoding at once
    yield Recv(0)
    yield Send(0, Message("reply", blob={"steps_per_s": decode_rate(stack, steps)}))


def driver_decode(lane, stack: LayerStack, steps: int):
    yield Recv(1)
    yield Send(1, Message("act"))
    mine = decode_rate(stack, steps)
    reply = yield Recv(1)
    yield Emit((mine, reply.blob["steps_per_s"]))


def measure(engine: Engine, steps: int = 96) -> dict:
    threads = torch.get_num_threads()
    all_threads = decode_rate(engine.target, steps)
    with pinned("cpu0"):
        one_thread = decode_rate(engine.target, steps)
    group = engine.lane_group(["cpu0", "cpu1"])
    args = {"source": str(engine.lanes_source()), "dtype": engine.dtype, "n_layers": engine.target.n_layers,
            "steps": steps}
    with pinned("cpu0"):
        program = driver_decode(None, engine.target, steps)
        ((driver, worker),) = list(group.run(program, Trace(), {1: {"program": "specviz.experiments.lane_physics:worker_decode",
                                                                   "args": args}}))
    return {"model": engine.name, "dtype": engine.dtype, "threads": threads, "steps": steps,
            "steps_per_s": {f"one process, {threads} threads": all_threads, "one process, 1 thread": one_thread,
                            "two 1-thread lanes side by side (each)": [driver, worker],
                            "two 1-thread lanes side by side (sum)": driver + worker},
            "second_thread_gain": all_threads / one_thread, "second_lane_gain": (driver + worker) / one_thread}


def to_markdown(result: dict) -> str:
    rates = result["steps_per_s"]
    lines = [f"| decoding {result['model']} ({result['dtype']}) | tokens/s |", "|---|---|"]
    for label, value in rates.items():
        shown = " + ".join(f"{v:.1f}" for v in value) if isinstance(value, list) else f"{value:.1f}"
        lines.append(f"| {label} | {shown} |")
    lines.append(f"\nA second thread: {result['second_thread_gain']:.2f}×; a second lane: "
                 f"{result['second_lane_gain']:.2f}×.")
    return "\n".join(lines)
