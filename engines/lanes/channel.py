"""Messages over ``torch.distributed`` point-to-point.

Gloo's point-to-point operations only make progress inside ``wait()``, so waits block; what keeps a
blocked wait from hanging forever is the driver's monitor (:class:`~engines.lanes.runtime.LaneGroup`):
it kills a lane that has exited or stopped answering, which fails the wait at once, and ``on_error``
turns that failure into a :class:`~engines.lanes.messages.LaneError` naming the lane.
"""

from __future__ import annotations

import json
from typing import Callable, NoReturn

import torch

from .messages import HEADER_FIELDS, Message, message_from


class Channel:
    def __init__(self, group, hidden_size: int, dtype: torch.dtype, device: torch.device,
                 on_error: Callable[[Exception], NoReturn]):
        self.group, self.hidden_size, self.dtype, self.device = group, hidden_size, dtype, device
        self.on_error = on_error
        self._sending: list[tuple[object, torch.Tensor]] = []

    def send(self, dst: int, message: Message) -> None:
        """Queue the message; its buffers stay referenced until the next send or :meth:`flush` completes it."""
        self.flush()
        blob = message.blob_bytes()
        tensors = [message.header(0 if blob is None else blob.numel())]
        tensors += [t.contiguous() for t in (message.hidden, message.probs) if t is not None]
        if blob is not None:
            tensors.append(blob)
        for tensor in tensors:
            if tensor.device != self.device and self.device.type == "cuda":
                tensor = tensor.to(self.device)
            self._sending.append((self.group.send([tensor], dst, 0), tensor))

    def flush(self) -> None:
        for work, _tensor in self._sending:
            self.wait(work)
        self._sending = []

    def recv(self, src: int) -> Message:
        """The next message from ``src``."""
        header = self._recv(torch.empty(len(HEADER_FIELDS), dtype=torch.int64, device=self.device), src)
        message, rows, size, blob = message_from(header)
        if rows:
            message.hidden = self._recv(torch.empty(1, rows, self.hidden_size, dtype=self.dtype, device=self.device), src)
        if size:
            message.probs = self._recv(torch.empty(size, dtype=torch.float32, device=self.device), src)
        if blob:
            message.blob = json.loads(bytes(self._recv(torch.empty(blob, dtype=torch.uint8, device=self.device), src).tolist()))
        return message

    def _recv(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        self.wait(self.group.recv([tensor], src, 0))
        return tensor

    def wait(self, work) -> None:
        try:
            work.wait()
        except Exception as error:  # a peer died or was killed by the monitor
            self.on_error(error)
