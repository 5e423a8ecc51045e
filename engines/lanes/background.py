"""A lanes run keeps its own pace, whatever its consumer does with the events.

A run on one process stops its clock while the consumer holds an event (:meth:`engines.core.trace.Trace.hold`):
nothing else computes meanwhile, so the pause is simply not counted. A lanes run cannot do that: its
worker processes keep computing while the driver waits on a consumer (a dashboard drawing, a notebook
printing), so the tokens/s it reported depended on how long the page took to draw. So the driver runs
in a thread of its own and hands each event through a queue that never blocks it; the consumer reads at
its own pace and the run's clock is the plain wall clock of the run itself.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator, TypeVar

T = TypeVar("T")
_END = object()


def in_background(events: Iterator[T]) -> Iterator[T]:
    """Run ``events`` to its end in a thread, yielding what it produced in order; its error is re-raised
    here. If the consumer stops early, the run stops at its next event and is closed (lanes shut down)."""
    handoff: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()

    def produce() -> None:
        try:
            for event in events:
                handoff.put((event, None))
                if stop.is_set():
                    break
            handoff.put((_END, None))
        except BaseException as error:  # noqa: BLE001 - handed to the consumer's thread, raised there
            handoff.put((_END, error))
        finally:
            events.close()

    thread = threading.Thread(target=produce, name="specviz-lanes-run", daemon=True)
    thread.start()
    try:
        while True:
            event, error = handoff.get()
            if event is _END:
                if error is not None:
                    raise error
                return
            yield event
    finally:
        stop.set()
        thread.join()
