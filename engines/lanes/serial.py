"""Serial and virtual-clock modes: every lane's program in this one process, lane after lane.

Serial mode is the reference the parallel run must match token for token, and the "before" picture: the
same schedule with nothing overlapping. Virtual mode runs the same computation serially but gives each
lane a clock of its own that advances only while that lane computes and jumps forward when a message it
waits for arrives later (sent time + measured message cost): the schedule replayed as if every lane had
its own core. Its times are real per-operation costs measured on this machine, never wall-clock time,
and every output says ``clock=virtual``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Generator, Iterator

from engines.lanes.messages import Emit, Message, Recv, Send


@dataclass
class MessageCost:
    """What one message costs between lanes: a fixed latency plus bytes over a bandwidth (measured by
    :func:`engines.lanes.runtime.measure_message_cost`)."""

    latency_s: float
    bytes_per_s: float

    def seconds(self, nbytes: int) -> float:
        return self.latency_s + nbytes / self.bytes_per_s


class LaneClocks:
    """One clock per lane for virtual mode: it runs (at the trace's wall rate, consumer holds excluded)
    only while its lane computes."""

    def __init__(self, n: int, wall: Callable[[], float], cost: MessageCost):
        self.wall, self.cost = wall, cost
        self.base = [wall()] * n
        self.resumed_at: float | None = None
        self.current: int | None = None

    def now(self, rank: int | None = None) -> float:
        rank = self.current if rank is None else rank
        if rank is None:
            return max(self.base)
        if rank == self.current and self.resumed_at is not None:
            return self.base[rank] + self.wall() - self.resumed_at
        return self.base[rank]

    def resume(self, rank: int) -> None:
        self.current, self.resumed_at = rank, self.wall()

    def pause(self) -> None:
        if self.current is not None:
            self.base[self.current] = self.now(self.current)
        self.current = self.resumed_at = None

    def arrive(self, rank: int, message: Message) -> None:
        """The lane waited for ``message``: its clock cannot be earlier than the message's arrival."""
        arrival = message.blob.get("_sent_at", 0.0) + self.cost.seconds(message.nbytes())
        self.base[rank] = max(self.base[rank], arrival)
        if self.current == rank:
            self.resumed_at = self.wall()


class Lane:
    """What a lane program may ask of its runtime besides messages: its rank, name and clock."""

    def __init__(self, rank: int, name: str, now: Callable[[], float]):
        self.rank, self.name, self.now = rank, name, now


Program = Generator[object, object, None]


def run_serial(programs: dict[int, Program], clocks: LaneClocks | None = None) -> Iterator[object]:
    """Drive lane programs cooperatively; yields what they :class:`Emit`.

    Each lane runs until it waits on a message not yet sent; channels are FIFO and every lane receives
    from one named source at a time, so the order lanes take turns in never changes what they compute.
    """
    queues: dict[tuple[int, int], deque] = {}
    waiting: dict[int, Recv | None] = {rank: None for rank in programs}
    replies: dict[int, object] = {rank: None for rank in programs}
    alive = dict(programs)
    while alive:
        progressed = False
        for rank in sorted(alive):
            program = alive[rank]
            if clocks:
                clocks.resume(rank)
            try:
                while True:
                    recv = waiting[rank]
                    if recv is not None:
                        queue = queues.get((recv.src, rank))
                        if not queue:
                            break
                        message = queue.popleft()
                        if clocks:
                            clocks.arrive(rank, message)
                        replies[rank], waiting[rank] = message, None
                    progressed = True
                    try:
                        op = program.send(replies[rank])
                    except StopIteration:
                        del alive[rank]
                        break
                    replies[rank] = None
                    if isinstance(op, Recv):
                        waiting[rank] = op
                    elif isinstance(op, Send):
                        if clocks:
                            op.message.blob["_sent_at"] = clocks.now(rank)
                        queues.setdefault((rank, op.dst), deque()).append(op.message)
                    elif isinstance(op, Emit):
                        if clocks:
                            clocks.pause()
                        yield op.event
                        if clocks:
                            clocks.resume(rank)
                    else:
                        raise TypeError(f"a lane program yielded {op!r}")
            finally:
                if clocks:
                    clocks.pause()
        if alive and not progressed:
            raise RuntimeError(f"lanes {sorted(alive)} all wait for messages nobody sends (a schedule bug)")
