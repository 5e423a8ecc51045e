"""Messages over ``torch.distributed`` point-to-point, in as few transfers as possible.

A gloo send waits until the receiver has posted a matching receive; if the receive comes late, the data
moves only when the sender's message thread next gets a core — on two cores busy computing, that cost
whole milliseconds per transfer. So on gloo every channel keeps a receive *posted in advance* for the
next message from each peer, and a message travels as one fixed-size *frame* (header, one row of
activations, the JSON blob) that lands in that posted buffer at once. Only what does not fit (a
prompt's activations, a draft distribution) follows as separate transfers.

A send must be waited on for gloo to finish it; a sender thread does that, so two lanes that send to
each other at the same moment never deadlock. Receives block; what keeps a blocked wait from hanging
forever is the driver's monitor (:class:`~engines.lanes.runtime.LaneGroup`): it kills a lane that has
exited or stopped answering, which fails the wait at once, and ``on_error`` turns that failure into a
:class:`~engines.lanes.messages.LaneError` naming the lane.
"""

from __future__ import annotations

import json
import queue
import threading
from typing import Callable, NoReturn

import torch

from engines.lanes.messages import HEADER_FIELDS, Message, message_from

FRAME_BYTES = 16384
HEADER_BYTES = 8 * (len(HEADER_FIELDS) + 1)  # the header, plus one field saying what rides inline
FRAME_TAG, PAYLOAD_TAG = 0, 1
INLINE_HIDDEN, INLINE_BLOB = 1, 2


class Channel:
    def __init__(self, group, hidden_size: int, dtype: torch.dtype, device: torch.device,
                 on_error: Callable[[Exception], NoReturn], peers: list[int]):
        self.group, self.hidden_size, self.dtype, self.device = group, hidden_size, dtype, device
        self.on_error = on_error
        self.prepost = device.type == "cpu"  # NCCL matches by order and size only: no receives in advance
        self._posted: dict[int, tuple[object, torch.Tensor]] = {}
        if self.prepost:
            for peer in peers:
                self._post(peer)
        self._sending: queue.Queue = queue.Queue()
        self._send_error: Exception | None = None
        threading.Thread(target=self._complete_sends, name="lane-sender", daemon=True).start()

    # --- sending ---------------------------------------------------------------------------------
    def send(self, dst: int, message: Message) -> None:
        """Issue the message's transfers; the sender thread sees them through."""
        if self._send_error is not None:
            self.on_error(self._send_error)
        blob = message.blob_bytes()
        hidden = None if message.hidden is None else message.hidden.contiguous()
        header = message.header(0 if blob is None else blob.numel())
        parts, extra, inline, used = [], [], 0, HEADER_BYTES
        if hidden is not None:
            size = hidden.numel() * hidden.element_size()
            if hidden.device.type == "cpu" and used + size <= FRAME_BYTES:
                parts.append(hidden.view(-1).view(torch.uint8))
                inline, used = inline | INLINE_HIDDEN, used + size
            else:
                extra.append(hidden)
        if message.probs is not None:
            extra.append(message.probs.contiguous())
        if blob is not None:
            if used + blob.numel() <= FRAME_BYTES:
                parts.append(blob)
                inline, used = inline | INLINE_BLOB, used + blob.numel()
            else:
                extra.append(blob)
        frame = torch.zeros(FRAME_BYTES, dtype=torch.uint8)
        frame[:HEADER_BYTES] = torch.cat([header, torch.tensor([inline])]).view(torch.uint8)
        offset = HEADER_BYTES
        for part in parts:
            frame[offset:offset + part.numel()] = part
            offset += part.numel()
        self._issue(frame, dst, FRAME_TAG)
        for tensor in extra:
            self._issue(tensor, dst, PAYLOAD_TAG)

    def _issue(self, tensor: torch.Tensor, dst: int, tag: int) -> None:
        if self.device.type == "cuda":
            tensor = tensor.to(self.device)
        try:
            work = self.group.send([tensor], dst, tag if self.prepost else 0)
        except Exception as error:  # the peer is already gone
            self.on_error(error)
        self._sending.put((work, tensor))

    def _complete_sends(self) -> None:
        while True:
            work, _tensor = self._sending.get()  # the tensor stays referenced until its send is done
            if work is None:  # closed
                self._sending.task_done()
                return
            try:
                work.wait()
            except Exception as error:
                self._send_error = error
            finally:
                self._sending.task_done()

    def close(self) -> None:
        """End the sender thread (after the sends already issued)."""
        self._sending.put((None, None))

    def flush(self) -> None:
        """Wait until every message sent so far is out (the end of a request)."""
        self._sending.join()
        if self._send_error is not None:
            self.on_error(self._send_error)

    # --- receiving -------------------------------------------------------------------------------
    def _post(self, src: int) -> None:
        frame = torch.empty(FRAME_BYTES, dtype=torch.uint8, device=self.device)
        try:
            self._posted[src] = (self.group.recv([frame], src, FRAME_TAG), frame)
        except Exception as error:
            self.on_error(error)

    def recv(self, src: int) -> Message:
        """The next message from ``src``."""
        if self.prepost:
            work, frame = self._posted.pop(src)
            self.wait(work)
        else:
            frame = self._recv(torch.empty(FRAME_BYTES, dtype=torch.uint8, device=self.device), src)
        frame = frame.cpu()
        fields = frame[:HEADER_BYTES].view(torch.int64)
        message, rows, size, blob = message_from(fields[:-1])
        if self.prepost and message.kind != "shutdown":
            # the next message from src finds its buffer waiting; after a shutdown none comes, and the
            # driver may already have closed the connection (posting on it would read as the driver lost)
            self._post(src)
        inline = int(fields[-1])
        offset = HEADER_BYTES
        if rows:
            shape = (1, rows, self.hidden_size)
            if inline & INLINE_HIDDEN:
                nbytes = rows * self.hidden_size * torch.tensor([], dtype=self.dtype).element_size()
                message.hidden = frame[offset:offset + nbytes].clone().view(self.dtype).view(shape)
                offset += nbytes
            else:
                message.hidden = self._recv(torch.empty(shape, dtype=self.dtype, device=self.device), src)
        if size:
            message.probs = self._recv(torch.empty(size, dtype=torch.float32, device=self.device), src)
        if blob:
            if inline & INLINE_BLOB:
                raw = frame[offset:offset + blob]
            else:
                raw = self._recv(torch.empty(blob, dtype=torch.uint8, device=self.device), src).cpu()
            message.blob = json.loads(bytes(raw.tolist()))
        return message

    def _recv(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        try:
            work = self.group.recv([tensor], src, PAYLOAD_TAG if self.prepost else 0)
        except Exception as error:
            self.on_error(error)
        self.wait(work)
        return tensor

    def wait(self, work) -> None:
        try:
            work.wait()
        except Exception as error:  # a peer died or was killed by the monitor
            self.on_error(error)
