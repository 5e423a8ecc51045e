"""A lanes run keeps its own pace while its consumer lingers on each commit (a dashboard drawing).

Before :mod:`engines.lanes.background`, the driver stopped its clock while the consumer held an event but
the workers went on computing, so a page that drew for 0.3–0.5 s per commit changed the tokens/s it showed
(``ssd`` up to 1.13×, ``ppsd`` 0.89× of its undisturbed speed). Now the driver runs in a thread of its own:
the whole run ends while its consumer still sleeps on the first commit, and the tokens/s it reports is the
undisturbed one. Tiny random model, real worker processes.
"""

from __future__ import annotations

import statistics
import time

import pytest

from engines import Engine
from engines.core.trace import Trace
from tests.conftest import tiny_llama
from tests.lane_processes import lane_workers

PROMPT = [1, 5, 9, 3, 7]
LINGER_S = 0.3


@pytest.fixture(scope="module")
def engine():
    engine = Engine(tiny_llama(vocab=64, layers=4, seed=3))
    yield engine
    engine.close()
    assert lane_workers() == []


def ppsd_run(engine: Engine, linger: bool) -> tuple[float, int]:
    """Tokens/s the run reports, and how many commits the consumer had read when the run's end was recorded.
    A lingering consumer sleeps on every commit until the run has ended (so a held run costs 48 × 0.3 s)."""
    trace = Trace()
    read, read_when_ended = 0, None
    for event in engine.generate(PROMPT, "ppsd", max_new_tokens=48, exit_layer=2, head="none", mode="lanes",
                                 trace=trace):
        if event.kind == "commit":
            read += 1
            if linger and not ended(trace):
                time.sleep(LINGER_S)
            if read_when_ended is None and ended(trace):
                read_when_ended = read
        if event.kind == "run_end":
            return event.stats["tokens_per_s"], read_when_ended or read
    raise AssertionError("the run never ended")


def ended(trace: Trace) -> bool:
    return any(event.kind == "run_end" for event in trace.events)


def test_a_lingering_consumer_does_not_change_a_lanes_runs_speed(engine):
    ppsd_run(engine, linger=False)  # workers start and warm up outside the comparison
    undisturbed, lingering, read_when_ended = [], [], []
    for _ in range(3):
        undisturbed.append(ppsd_run(engine, linger=False)[0])
        speed, read = ppsd_run(engine, linger=True)
        lingering.append(speed)
        read_when_ended.append(read)
    assert max(read_when_ended) <= 2, f"the run waited for its consumer: ended after {read_when_ended} commits read"
    ratio = statistics.median(lingering) / statistics.median(undisturbed)
    assert abs(ratio - 1) < 0.10, f"tokens/s changed by {ratio:.2f}× (undisturbed {undisturbed}, lingering {lingering})"
