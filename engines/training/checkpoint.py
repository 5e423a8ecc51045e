"""A training run's checkpoint: enough to resume :func:`engines.training.train.fit` after a kill and end where an
unbroken run would have ended.

Why this much: a two-hour CPU run is long enough to be stopped (a time limit, the out-of-memory killer, a
machine taken back), and restarting it from step 0 would waste everything before. So the checkpoint holds each
student's trained tensors and its optimizer and schedule, the step, the planned step count (a time budget fixes
it after the probe steps), the loss curves, the seconds spent, the positions seen and the random states
(noise, MoA's block masks); batches are rebuilt from the seed, so step k of a resumed run reads the batch step
k of the unbroken one would. The file is written whole or not at all (:mod:`engines.storage`), and its
fingerprint (students, recipe, data) must match the run that reads it, so a checkpoint is never resumed into a
different run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from engines.storage import discard_damaged, staged_file

FORMAT = 1


def fingerprint(names: list[str], config_fields: dict, n_batches: int, n_parameters: int) -> str:
    """What must be equal for a checkpoint to belong to this run: its students, recipe and data size."""
    record = {"format": FORMAT, "students": names, "config": config_fields, "batches": n_batches,
              "parameters": n_parameters}
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def trained_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters being trained (frozen parts come from the target again at resume)."""
    return {name: p.detach().cpu().clone() for name, p in module.named_parameters() if p.requires_grad}


def save(path: str | Path, state: dict) -> Path:
    """``state`` written whole over ``path`` (a kill while writing leaves the previous checkpoint)."""
    with staged_file(path) as staging:
        torch.save({"format": FORMAT, **state}, staging)
    return Path(path)


def load(path: str | Path, expected_fingerprint: str) -> dict | None:
    """The checkpoint at ``path`` if there is one for this run; ``None`` where there is none. A file that does not
    read is said, set aside and ignored (the run starts over); one from another run is a ValueError naming it."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a damaged pickle raises anything from EOFError to UnpicklingError
        discard_damaged(path, "the training checkpoint", f"{type(error).__name__}: {error}",
                        then="the run starts from step 0")
        return None
    if state.get("fingerprint") != expected_fingerprint:
        raise ValueError(f"checkpoint {path} belongs to another run (other students, recipe or corpus): delete it "
                         "or pass another --checkpoint")
    return state


def rng_state(students) -> dict:
    """Random states a resumed run must continue from: torch's global one and each student's own generator."""
    return {"torch": torch.get_rng_state(),
            "students": {s.name: s.generator.get_state() for s in students if hasattr(s, "generator")}}


def restore_rng(state: dict, students) -> None:
    torch.set_rng_state(state["torch"])
    for s in students:
        if hasattr(s, "generator") and s.name in state["students"]:
            s.generator.set_state(state["students"][s.name])
