"""Lane D as a worker process: load only the draft (and the target's lower layers it is built from), once,
then serve runs; and the preload that pays for that load before any run's clock starts."""

from __future__ import annotations

from functools import lru_cache

import torch

from engines.core.sampling import Sampler
from engines.lanes import Lane, Message, Recv, Send
from engines.programs.verdict.branch_rollout import BranchDrafter
from engines.programs.verdict.draft_lane import draft_lane
from engines.programs.verdict.wire import Plan


@lru_cache(maxsize=2)
def _draft_module(source: str, dtype: str, device: str, draft: str) -> torch.nn.Module:
    """A trained draft by name (built on the target's lower layers from ``source``), or a causal LM's directory."""
    from engines.drafters.registry import VERDICT, drafter_kind_names
    from engines.drafters.trained import load_trained, read_card, shipped_kind
    from engines.model.layers import LayerStack
    from engines.model.loading import DTYPES, load_layers

    if shipped_kind(draft) not in drafter_kind_names(VERDICT):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(draft, dtype=DTYPES[dtype], local_files_only=True)
        model.config._attn_implementation = "sdpa"
        return model.to(device).eval()
    layers = read_card(draft)["layers"]
    stack = LayerStack(load_layers(source, dtype, device, range(layers), embed=True, head=True))
    return load_trained(draft, stack)[0]


def draft_worker(lane: Lane, source: str, dtype: str, draft: str, capacity: int, temperature: float, top_p: float,
                 seed: int | None, plan: dict, lanes: list[str]):
    """Lane D in a worker process: load (once) only the draft (and the target's lower layers it is built
    from), then serve one run."""
    device = lane.name if lane.name.startswith("cuda") else "cpu"
    module = _draft_module(source, dtype, device, draft)
    sampler = Sampler(temperature, top_p, seed).for_lane(1)  # a CPU generator, as in serial mode: the same draws
    named = Lane(1, lanes[1], lane.now)
    plan = Plan(**plan)
    return draft_lane(named, BranchDrafter(module, draft, capacity, plan.positions), plan, sampler, lanes)


def preload_worker(lane: Lane, source: str, dtype: str, draft: str):
    """Load the draft on lane D before any run's clock starts (its first run would otherwise pay for it)."""
    device = lane.name if lane.name.startswith("cuda") else "cpu"
    _draft_module(source, dtype, device, draft)
    return _say_ready()


def _say_ready():
    yield Send(0, Message("end"))


def await_ready():
    """Lane T's side of :func:`preload_worker`."""
    yield Recv(1)
