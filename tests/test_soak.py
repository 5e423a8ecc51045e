"""The soak's short form (``make soak`` is the long one, docs/soak.md): a few runs of a one-process and a lanes
method, one of each lane fault and one Ctrl-C, on the real model. What each asserts is what the long form
measures over hours: nothing grows, nothing is left behind, every fault is reported within seconds."""

from __future__ import annotations

import pytest

from specviz.soak import cli_interrupt, lane_faults
from specviz.soak.engine_runs import soak_method
from specviz.soak.report import held_back


def test_repeated_runs_hold_nothing_more(real_engine):
    """A lanes method: the driver's threads, sockets and worker are what could pile up between runs."""
    row = soak_method(real_engine, "ssd", runs=5, max_new_tokens=8, warmup=2)
    assert row.tokens == 5 * 8, "every run decodes its tokens through end-of-text"
    # not the temporary directory: tests running beside this one make and remove their own entries there
    assert held_back(row.warm, row.end, ("threads", "open_files", "children")) == [], (row.warm, row.end)
    assert row.growth_mb < 50, row.as_dict()
    real_engine.close()


@pytest.mark.skipif(lane_faults.unavailable_reason() is not None, reason=str(lane_faults.unavailable_reason()))
def test_each_lane_fault_is_reported_within_seconds_and_leaves_nothing(real_engine, monkeypatch):
    monkeypatch.setattr(lane_faults, "LANE_METHODS", ("ssd",))
    results = lane_faults.soak_faults(real_engine, len(lane_faults.FAULTS), max_new_tokens=32)
    assert [r.fault for r in results] == list(lane_faults.FAULTS)
    for r in results:
        assert r.outcome == "error", r
        assert r.seconds_to_error <= 5.0, r
        assert (r.orphans, r.leftover, r.next_run_ok) == (0, 0, True), r
    assert "connection to the driver" in results[2].message  # its gloo pair or its store: whichever fails first


@pytest.mark.skipif(cli_interrupt.unavailable_reason() is not None, reason=str(cli_interrupt.unavailable_reason()))
def test_ctrl_c_on_generate_prints_what_it_made_and_leaves_nothing():
    result = cli_interrupt.interrupt_generate("ssd", at_s=1.0, max_new_tokens=400)
    assert result.clean, result
