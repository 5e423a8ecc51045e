"""The live-run explorer: a real run on the default model, its card, its ar comparison and, once it ends, the
round-by-round figure a stored notebook keeps as its static image."""

from __future__ import annotations

import ipywidgets as W

from specviz.widgets import run_explorers


def test_a_live_run_ends_with_its_tokens_drawn_round_by_round(real_engine, monkeypatch):
    shown = []  # outside a kernel an Output widget captures nothing: record what it is given
    monkeypatch.setattr(run_explorers, "display", shown.append)
    explorer = run_explorers.live_run_explorer(real_engine, "Name three colours.", method="pld", max_new_tokens=8)
    stream, status, plot = explorer.children[-3:]
    assert "tokens/s" in stream.value and "identical to ar" in status.value
    assert isinstance(plot, W.Output)
    (figure,) = shown
    assert sum(len(trace.x) for trace in figure.data) == 8  # every committed token, one cell each
