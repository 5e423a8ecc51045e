"""A lanes run keeps its own pace while its consumer lingers on each commit (a dashboard drawing).

Before :mod:`engines.lanes.background`, the driver stopped its clock while the consumer held an event but
the workers went on computing, so a page that drew for 0.3–0.5 s per commit changed the tokens/s it showed
(``ssd`` up to 1.13×, ``ppsd`` 0.89× of its undisturbed speed). Now the driver runs in a thread of its own:
the whole run ends while its consumer still sleeps on its first commits, so nothing the consumer does can
reach the run's clock. That is what this test asserts; the tokens/s themselves are measured, not asserted
(speed is never asserted in tests): ``python scripts/lanes_clock.py`` times ``ppsd``, ``mirror`` and ``ssd``
lanes runs on the default model with and without a consumer lingering 0.3 s per commit. Tiny random model,
real worker processes.
"""

from __future__ import annotations

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


def commits_read_when_the_run_ended(engine: Engine) -> int:
    """How many commits a consumer lingering 0.3 s on each had read when the run recorded its end (it stops
    lingering then, so a run that waits for it costs 48 × 0.3 s)."""
    trace = Trace()
    read, read_when_ended = 0, None
    for event in engine.generate(PROMPT, "ppsd", max_new_tokens=48, exit_layer=2, head="none", mode="lanes",
                                 trace=trace):
        if event.kind == "commit":
            read += 1
            if not ended(trace):
                time.sleep(LINGER_S)
            if read_when_ended is None and ended(trace):
                read_when_ended = read
    return read_when_ended or read


def ended(trace: Trace) -> bool:
    return any(event.kind == "run_end" for event in trace.events)


def test_a_lanes_run_does_not_wait_for_a_lingering_consumer(engine):
    engine.run(PROMPT, "ppsd", max_new_tokens=8, exit_layer=2, head="none", mode="lanes")  # workers start first
    read = commits_read_when_the_run_ended(engine)
    assert read <= 2, f"the run waited for its consumer: it ended only after {read} of 48 commits were read"
