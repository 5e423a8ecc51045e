"""What lanes send each other, and what a lane program asks its runtime for.

A lane program is a generator: it yields :class:`Recv` (and gets a :class:`Message` back), :class:`Send`
and :class:`Emit`. It never touches a socket or a clock of its own, so the same program runs in a
worker process over ``torch.distributed`` (lanes mode), beside the other lanes in one process (serial
mode) or on a replayed clock (virtual mode) — and commits the same tokens in all three.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import torch

# message kinds (the first header field)
KINDS = ("act", "reply", "end", "configure", "ping", "shutdown", "start", "ee", "verdict", "window")
HEADER_FIELDS = ("kind", "epoch", "tick", "position", "token", "flag", "rows", "probs", "blob")


@dataclass
class Message:
    """``hidden`` ``[1, rows, d]`` activations; ``probs`` ``[V]`` a draft distribution; ``blob`` small JSON
    (settings, and the events a worker recorded, which ride to the driver on its replies)."""

    kind: str
    epoch: int = 0
    tick: int = 0
    position: int = 0
    token: int = -1
    flag: int = 0
    hidden: torch.Tensor | None = None
    probs: torch.Tensor | None = None
    blob: dict = field(default_factory=dict)

    def header(self, blob_bytes: int) -> torch.Tensor:
        rows = 0 if self.hidden is None else self.hidden.shape[1]
        size = 0 if self.probs is None else self.probs.numel()
        return torch.tensor([KINDS.index(self.kind), self.epoch, self.tick, self.position, self.token, self.flag,
                             rows, size, blob_bytes], dtype=torch.int64)

    def blob_bytes(self) -> torch.Tensor | None:
        if not self.blob:
            return None
        return torch.frombuffer(bytearray(json.dumps(self.blob).encode()), dtype=torch.uint8)

    def nbytes(self) -> int:
        """Bytes on the wire (header, activations, distribution; the JSON blob is counted apart)."""
        total = len(HEADER_FIELDS) * 8
        for tensor in (self.hidden, self.probs):
            if tensor is not None:
                total += tensor.numel() * tensor.element_size()
        return total


def message_from(header: torch.Tensor) -> tuple[Message, int, int, int]:
    """A message from its header, and the sizes of the payloads still to receive (rows, probs, blob)."""
    values = header.tolist()
    kind, epoch, tick, position, token, flag, rows, size, blob = values
    return Message(KINDS[kind], epoch, tick, position, token, flag), rows, size, blob


@dataclass
class Recv:
    src: int


@dataclass
class Send:
    dst: int
    message: Message


@dataclass
class Emit:
    event: object  # an engines.core.trace.Event


class LaneError(RuntimeError):
    """A lane crashed, was killed, hung or failed to start: raised in the caller, naming the lane."""


class LanesUnavailable(LaneError, ValueError):
    """Lanes mode cannot run in this PyTorch at all (no ``torch.distributed``). A :class:`LaneError`, and a
    ``ValueError`` as well: like too few cores, it is a mode this machine does not offer, so every caller that
    reports bad input (the dashboard's pages, the CLI) shows its message instead of a traceback."""
