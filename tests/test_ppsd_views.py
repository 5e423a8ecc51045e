"""specviz.views.ppsd_runs: PPSD's figures from real runs of a tiny random model, and the paper's formulas.

The runs are real ``ppsd`` runs (head "none": the model's own norm and LM head at layer 2 of 4, so P = 2
stages) in ``serial`` mode, which needs no worker process, and in ``virtual`` mode for the clock label.
Virtual mode's message cost is fixed here so that a fresh checkout never starts lane workers to measure it.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from engines import Engine
from engines.core.trace import Check, Prefill, RunStart, StageCompute, StageSpan
from engines.lanes import MessageCost
from specviz.theory import eesd_speedup, ppsd_gain, ppsd_speedup
from specviz.views import ppsd_runs as pv
from specviz.views import ppsd_theory
from specviz.views.ppsd_pipeline import gantt_rows, text_strip
from tests.conftest import tiny_llama

PROMPT = [3, 14, 15, 9, 26, 5, 35]
N_LAYERS, EXIT = 4, 2


@pytest.fixture(scope="module")
def engine() -> Engine:
    engine = Engine(tiny_llama(vocab=64, layers=N_LAYERS))
    engine.message_cost = lambda: MessageCost(latency_s=1e-4, bytes_per_s=1e9)  # virtual mode's only input from lanes
    yield engine
    engine.close()


def ppsd(engine: Engine, mode: str = "serial", tokens: int = 24) -> list:
    return engine.run(PROMPT, "ppsd", max_new_tokens=tokens, exit_layer=EXIT, head="none", mode=mode).events


@pytest.fixture(scope="module")
def serial(engine) -> list:
    return ppsd(engine)


@pytest.fixture(scope="module")
def virtual(engine) -> list:
    return ppsd(engine, "virtual", 12)


def bars_by_fate(fig) -> dict[str, object]:
    names = {label: fate for fate, label in pv.FATE_LABELS.items()}
    return {names[trace.name]: trace for trace in fig.data if trace.type == "bar"}


# --- the Gantt --------------------------------------------------------------------------------------
def test_gantt_draws_one_bar_per_stage_compute_coloured_by_fate(serial):
    computes = [e for e in serial if isinstance(e, StageCompute)]
    fig = pv.lane_gantt_figure({"ppsd": serial})
    assert pv.gantt_bar_count(fig) == len(computes) > 2 * 12
    assert fig.layout.barmode == "overlay", "bars of one row must not be offset by fate"
    rows = list(fig.layout.yaxis.categoryarray)
    assert rows == ["ppsd · cpu0/stage1", "ppsd · cpu0/stage2"]
    bars = pv.run_bars(serial)
    fates = {row["fate"] for row in bars}
    traces = bars_by_fate(fig)
    assert set(traces) == fates and "prefill" in fates
    assert fates <= {"prefill", "accepted", "rejected", "flushed", "unused"}
    assert {"accepted", "rejected"} & fates, "a real run judges its drafts"
    for fate, trace in traces.items():
        assert trace.marker.color == pv.FATE_COLOURS[fate]
        assert len(trace.y) == sum(r["fate"] == fate for r in bars)
    changed = [(a["fate"], b["fate"]) for a, b in zip(gantt_rows(serial), bars) if a["fate"] != b["fate"]]
    assert all(new == "unused" for _, new in changed), "only drafts judged after the end are re-labelled"
    expected = sorted((c.start, c.end) for c in computes)
    drawn = sorted((b, b + x) for t in traces.values() for b, x in zip(t.base, t.x))
    assert [v for pair in drawn for v in pair] == pytest.approx([v for pair in expected for v in pair])
    prefill = traces["prefill"]
    assert len(prefill.y) == 2, "the prompt goes through both stages once"
    assert "clock=virtual" not in fig.layout.title.text
    assert any(a.text.startswith("end ") and "tok/s" in a.text for a in fig.layout.annotations)


def test_gantt_checks_line_up_with_the_last_stage(serial):
    """Every committed tick's last-stage bar is coloured by its Check's verdict; drafts judged after the last
    committed token (in flight when the run ended) are 'unused'."""
    fig = pv.lane_gantt_figure({"ppsd": serial})
    limit = len(PROMPT) + len(serial[-1].token_ids)
    verdicts = {e.tick: ("accepted" if e.accepted else "rejected") if e.position < limit else "unused"
                for e in serial if isinstance(e, Check)}
    assert pv.uncommitted_ticks(serial) == {t for t, v in verdicts.items() if v == "unused"}
    last = [e for e in serial if isinstance(e, StageCompute) and e.stage == 1 and e.rows == 1]
    traces = bars_by_fate(fig)
    for compute in last:
        fate = verdicts[compute.tick]
        trace = traces[fate]
        assert any(y == "ppsd · cpu0/stage2" and b == pytest.approx(compute.start)
                   for y, b in zip(trace.y, trace.base))


def test_gantt_redraws_from_partial_event_lists(serial):
    """The dashboard redraws while the run streams: every prefix draws, with its computes so far, and ticks
    not judged yet are 'in flight', never 'unused' (which means the run ended first)."""
    saw_pending = False
    for k in range(1, len(serial), 3):
        prefix = serial[:k]
        fig = pv.lane_gantt_figure({"ppsd": prefix})
        assert pv.gantt_bar_count(fig) == sum(isinstance(e, StageCompute) for e in prefix)
        fates = set(bars_by_fate(fig))
        assert "unused" not in fates
        saw_pending |= "pending" in fates
        assert list(fig.layout.yaxis.categoryarray) == ["ppsd · cpu0/stage1", "ppsd · cpu0/stage2"]
    assert saw_pending
    assert "pending" not in bars_by_fate(pv.lane_gantt_figure({"ppsd": serial}))


def test_gantt_of_ar_eesd_and_ppsd_on_one_axis(engine, serial):
    ar = engine.run(PROMPT, "ar", max_new_tokens=12).events
    eesd = engine.run(PROMPT, "eesd", gamma=5, exit_layer=EXIT, head="none", max_new_tokens=12).events
    fig = pv.lane_gantt_figure({"ar": ar, "eesd γ=5": eesd, "ppsd": serial})
    assert list(fig.layout.yaxis.categoryarray) == ["ar · cpu0", "eesd γ=5 · cpu0", "ppsd · cpu0/stage1",
                                                     "ppsd · cpu0/stage2"]
    spans = [e for e in ar + eesd if isinstance(e, StageSpan)]
    prefills = [e for e in ar + eesd if isinstance(e, Prefill)]
    computes = [e for e in serial if isinstance(e, StageCompute)]
    assert pv.gantt_bar_count(fig) == len(spans) + len(prefills) + len(computes)
    traces = bars_by_fate(fig)
    assert traces["verify"].marker.color == pv.FATE_COLOURS["verify"]
    assert len(traces["draft"].y) == sum(s.stage == "draft" for s in spans) > 0
    assert set(traces["draft"].y) == {"eesd γ=5 · cpu0"}
    assert len([a for a in fig.layout.annotations if a.text.startswith("end ")]) == 3


def test_virtual_runs_say_clock_virtual_everywhere(serial, virtual):
    assert next(e for e in virtual if isinstance(e, RunStart)).clock == "virtual"
    fig = pv.lane_gantt_figure({"ppsd serial": serial, "ppsd virtual": virtual})
    assert "clock=virtual for ppsd virtual" in fig.layout.title.text
    rows = list(fig.layout.yaxis.categoryarray)
    assert [r for r in rows if "clock=virtual" in r] == ["ppsd virtual [clock=virtual] · cpu0/stage1",
                                                         "ppsd virtual [clock=virtual] · cpu0/stage2"]
    assert "clock=virtual" in fig.layout.xaxis.title.text
    point = pv.measured_point(virtual, label="ℓ=2")
    assert point["clock"] == "virtual" and point["label"] == "ℓ=2 [clock=virtual]"
    rows = pv.run_metrics_rows({"serial": serial, "virtual": virtual}, N_LAYERS, baseline=None)
    assert [(r["run"], r["clock"]) for r in rows] == [("serial", "wall"), ("virtual [clock=virtual]", "virtual")]
    assert rows[1]["Eq. 6 tok/s (measured a, tick)"] > 0, "a virtual run is a pipeline in (virtual) time"
    assert "clock=virtual" not in pv.lane_gantt_figure({"ppsd": serial}).layout.title.text


def test_metrics_rows_put_eq6_beside_the_measurement(engine, serial):
    ar = engine.run(PROMPT, "ar", max_new_tokens=24).events
    rows = {r["run"]: r for r in pv.run_metrics_rows({"ar": ar, "ppsd": serial}, N_LAYERS)}
    assert rows["ar"]["per-position acceptance"] is None and rows["ar"]["S vs ar"] == pytest.approx(1.0)
    row = rows["ppsd"]
    end, base = serial[-1], ar[-1]
    assert row["S vs ar"] == pytest.approx(end.stats["tokens_per_s"] / base.stats["tokens_per_s"])
    assert row["per-position acceptance"] == pytest.approx(end.stats["per_token_acceptance"])
    measured = row["per-position acceptance"]
    assert row["Eq. 6 S (measured a)"] == pytest.approx(ppsd_speedup(measured, EXIT, N_LAYERS))
    assert row["stages P"] == 2 and 1.0 <= row["ticks/token"] <= 3.0, "1 if every draft is accepted, about P if none is"
    assert row["tick ms"] > 0
    assert row["Eq. 6 tok/s (measured a, tick)"] is None, "a serial run's stages never overlap: Eq. 6 does not apply"
    assert re.fullmatch(r"cpu0/stage1 \d+% · cpu0/stage2 \d+%", row["idle"])
    point = pv.measured_point(serial, ar, "ppsd")
    assert (point["method"], point["exit_layer"], point["head"], point["clock"]) == ("ppsd", EXIT, "none", "wall")


# --- the text strip ---------------------------------------------------------------------------------
def test_text_strip_html_from_a_real_run(engine, serial):
    strip = text_strip(serial, pv.one_token(engine.detokenize))
    checks = [e for e in serial if isinstance(e, Check)]
    markup = pv.text_strip_html(strip)
    rejected = sum(not c.accepted for c in checks)
    assert markup.count("<s ") == rejected
    assert markup.count("background:#c8e6c9") == rejected, "each rejection is followed by the target's correction"
    assert markup.count("<span") == len(checks), "accepted drafts and corrections are spans, rejections <s>"
    kept = pv.committed_strip(strip, serial)
    committed = "".join(p["text"] for p in kept if p["fate"] != "rejected")
    assert committed == serial[-1].text, "the strip without its struck-out drafts is the committed text"
    assert len(kept) <= len(strip) and pv.committed_strip(strip, serial[:-1]) == strip, "a live run is not cut"


def test_text_strip_html_styles_and_escapes():
    markup = pv.text_strip_html([{"text": " a<b", "fate": "accepted", "position": 3},
                                 {"text": " x", "fate": "rejected", "position": 4},
                                 {"text": "\n", "fate": "correction", "position": 4}])
    assert "<span title=\"accepted at position 3\"> a&lt;b</span>" in markup
    assert re.search(r"<s [^>]*color:#c62828[^>]*> x</s>", markup)
    assert re.search(r"<span [^>]*background:#c8e6c9[^>]*>↵</span>", markup)


# --- the formulas -----------------------------------------------------------------------------------
def test_gain_heatmap_draws_eq7_and_its_alpha_one_value():
    n, gamma = 30, 5
    alphas, exits, grid = ppsd_theory.gain_grid(n, gamma)
    assert alphas[-1] == 1.0 and exits == list(range(1, n))
    for e, row in zip(exits, grid):
        assert row[-1] == pytest.approx((gamma + n / e) / (gamma + 1)), "gain at a = 1: (γ + L/ℓ)/(γ + 1)"
        assert row[-1] != pytest.approx(gamma + n / e), "not the paper's stated γ + L/ℓ"
        assert row[10] == pytest.approx(ppsd_gain(alphas[10], gamma, e, n))
    fig = ppsd_theory.gain_heatmap_figure(n, gamma)
    heat = fig.data[0]
    assert heat.type == "heatmap" and [list(r) for r in heat.z] == grid
    formula, claim = fig.data[1], fig.data[2]
    assert list(formula.y) == pytest.approx([(gamma + n / e) / (gamma + 1) for e in exits])
    assert list(claim.y) == pytest.approx([gamma + n / e for e in exits])
    note = fig.layout.title.text
    assert "(γ + L/ℓ)/(γ + 1)" in note and f"{(gamma + 2) / (gamma + 1):.2f}" in note  # ℓ = 15


def test_speedup_surface_lines_and_measured_markers():
    points = [{"position_acceptance": 0.6, "exit_layer": 15, "speedup": 1.2, "label": "ppsd lanes", "clock": "wall"},
              {"position_acceptance": 0.5, "exit_layer": 6, "speedup": 1.5, "label": "ppsd ℓ=6", "clock": "virtual"},
              {"position_acceptance": 0.6, "exit_layer": 15, "speedup": 0.8, "label": "eesd", "clock": "wall", "method": "eesd"}]
    fig = ppsd_theory.speedup_surface_figure(30, 5, points)
    lines = [t for t in fig.data if t.mode == "lines"]
    assert len(lines) == 2 * len(ppsd_theory.SHIPPED_EXITS)
    e15 = [t for t in lines if t.name == "ℓ = 15 (P = 2)"]
    assert e15[0].y[60] == pytest.approx(ppsd_speedup(0.6, 15, 30)) and e15[0].xaxis == "x"
    assert e15[1].y[60] == pytest.approx(eesd_speedup(0.6, 5, 15, 30)) and e15[1].xaxis == "x2"
    markers = {t.name: t for t in fig.data if t.mode == "markers"}
    virtual = markers["measured: ppsd ℓ=6 [clock=virtual]"]
    assert virtual.marker.symbol == "diamond-open"
    assert markers["measured: ppsd lanes"].marker.symbol == "diamond"
    assert markers["measured: eesd"].xaxis == "x2" and markers["measured: ppsd lanes"].xaxis == "x"


def test_speedup_vs_exit_marks_virtual_points():
    points = [{"exit_layer": e, "head": head, "speedup": s, "clock": clock, "position_acceptance": 0.5}
              for e, s in ((6, 1.4), (15, 1.1)) for head in ("norm", "layer") for clock in ("wall", "virtual")]
    points.append({"exit_layer": 3, "head": "layer", "speedup": None, "clock": "wall", "position_acceptance": 0.5})
    fig = ppsd_theory.speedup_vs_exit_figure(points, n_layers=30)
    lines = {t.name: t for t in fig.data if t.mode == "lines+markers"}
    assert set(lines) == {"layer head (wall clock)", "layer head [clock=virtual]", "norm head (wall clock)",
                          "norm head [clock=virtual]"}
    assert lines["norm head [clock=virtual]"].marker.symbol == "circle-open"
    assert lines["norm head (wall clock)"].marker.symbol == "circle"
    assert list(lines["layer head (wall clock)"].x) == [6, 15], "sorted by ℓ, the point without a speedup left out"
    eq6 = next(t for t in fig.data if t.name == "Eq. 6 at each point's per-position acceptance")
    assert eq6.y[0] == pytest.approx(ppsd_speedup(0.5, 6, 30))
    assert "clock=virtual" in fig.layout.title.text


def test_formula_readout_and_figure():
    readout = ppsd_theory.formula_readout(0.6, 8, 5, 32)
    assert "⌈32/8⌉ = <b>4</b>" in readout
    assert f"<b>{ppsd_speedup(0.6, 8, 32):.2f}×</b>" in readout
    assert f"<b>{ppsd_gain(0.6, 5, 8, 32):.2f}</b>" in readout
    fig = ppsd_theory.formula_figure(0.6, 8, 5, 32)
    assert fig.data[1].y[0] == pytest.approx(ppsd_speedup(0.6, 8, 32))
    assert fig.data[3].y[0] == pytest.approx(eesd_speedup(0.6, 5, 8, 32))
    assert f"P = {math.ceil(32 / 8)} stages" in fig.layout.title.text


def test_formula_explorer_builds():
    from specviz.widgets.theory_explorers import ppsd_formula_explorer

    box = ppsd_formula_explorer(alpha=0.7, exit_layer=10, gamma=5)
    readout = box.children[0].children[1]
    assert f"{ppsd_speedup(0.7, 10, 30):.2f}×" in readout.value
    sliders = box.children[0].children[0].children
    sliders[1].value = 5  # ℓ
    assert f"{ppsd_speedup(0.7, 5, 30):.2f}×" in readout.value


def test_a_virtual_run_is_compared_with_one_lane_never_with_a_multithreaded_wall_clock(engine, virtual):
    from engines.lanes import pinned

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        everywhere = engine.run(PROMPT, "ar", max_new_tokens=24).events
    finally:
        torch.set_num_threads(threads)
    with pinned("cpu0"):
        one_lane = engine.run(PROMPT, "ar", max_new_tokens=24).events
    assert pv.measured_point(virtual, everywhere)["speedup"] is None  # a replayed clock ÷ two threads: refused
    assert pv.measured_point(virtual, one_lane)["speedup"] is not None
    runs = {"ar": everywhere, "ar (one core)": one_lane, "ppsd": virtual}
    assert pv.baseline_for(virtual, runs) is one_lane
    assert pv.baseline_for(everywhere, runs) is everywhere  # a wall-clock run: ar at its fastest
    rows = {r["run"].split(" [")[0]: r for r in pv.run_metrics_rows(runs, N_LAYERS)}
    one_lane_speed = one_lane[-1].stats["tokens_per_s"]
    assert rows["ppsd"]["S vs ar"] == pytest.approx(virtual[-1].stats["tokens_per_s"] / one_lane_speed)


def test_the_recorded_exit_sweep_becomes_points():
    import json
    from pathlib import Path

    recorded = json.loads((Path(__file__).parents[1] / "data/bench/bf16/ppsd-exits/results.json").read_text())
    points = ppsd_theory.exit_points_from_bench(recorded)
    assert {(p["exit_layer"], p["head"]) for p in points if p["clock"] == "virtual"} == {
        (e, h) for e in (15, 10, 8, 6, 5, 3) for h in ("layer", "norm")}
    assert all(p["speedup"] > 0 for p in points)
    fig = ppsd_theory.speedup_vs_exit_figure(points, n_layers=30)
    assert any("clock=virtual" in (trace.name or "") for trace in fig.data)
