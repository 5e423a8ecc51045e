"""specviz.views.verdict_metrics and the Mirror-SD / SSD latency laws of specviz.theory, on stored traces.

No model runs here: the traces in tests/data/verdict/ were recorded with SmolLM2-135M on CPU as

    Engine.load(dtype="bfloat16").run("Write a short story about a robot learning to paint.", method,
                                      max_new_tokens=64, **options)

with ``method`` and ``options`` as in the file names:

* ``mirror_gamma5_kappa4_exit15_norm_lanes``: mirror, gamma=5, kappa=4, exit_layer=15, exit_head="norm",
  draft="ss", rule="sample", mode="lanes", temperature 0;
* ``mirror_gamma5_kappa4_exit15_model_serial``: the same with exit_head="model", mode="serial";
* ``ssd_lookahead5_geometric_budget12_c0.5_jit_lanes_T1``: ssd, lookahead=5, fanout="geometric", budget=12,
  c=0.5, backup="jit", draft="tiny", mode="lanes", temperature=1.0.

To keep them small only rounds 0..20 were kept (every event whose ``round`` is ≤ 20) and RunEnd was dropped,
so each is what a dashboard holds while the run is still streaming. "Partial" tests cut them again to their
first 30% of events.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path

import plotly.graph_objects as go
import pytest

from engines.core.trace import (
    Backup,
    BranchRollout,
    CacheBuild,
    CacheLookup,
    Commit,
    EeMessage,
    LaneMessage,
    Prefill,
    ReuseDecision,
    RunStart,
    StageSpan,
    read_jsonl,
)
from engines.programs.verdict.speculation_cache import geometric_fanout, predicted_hit_rate, uniform_fanout
from specviz.theory import law_tokens_per_s, mirror_speedup_vs_sd, mirror_step_time, ssd_round_time, ssd_speedup_vs_sd
from specviz.views import mirror_sd, ssd, verdict_gantt
from specviz.views import verdict_metrics as vv

TRACES = Path(__file__).resolve().parent / "data" / "verdict"
MIRROR_LANES = "mirror_gamma5_kappa4_exit15_norm_lanes"
MIRROR_SERIAL = "mirror_gamma5_kappa4_exit15_model_serial"
SSD = "ssd_lookahead5_geometric_budget12_c0.5_jit_lanes_T1"
ALL = (MIRROR_LANES, MIRROR_SERIAL, SSD)
ROUNDS = 20


def load(name: str) -> list:
    return read_jsonl(TRACES / f"{name}.jsonl")


@pytest.fixture(scope="module")
def runs() -> dict[str, list]:
    return {name: load(name) for name in ALL}


def partial(events: list) -> list:
    return events[: int(0.3 * len(events))]


def of(events, cls) -> list:
    return [e for e in events if isinstance(e, cls)]


def verdicts(events) -> list[Commit]:
    return [c for c in of(events, Commit) if c.round >= 1]


def draft_seconds(events) -> float:
    """Glue spans, rollouts and backups: everything the draft lane did, straight from the events."""
    target = of(events, RunStart)[0].lanes["target"]
    glue = [s.end - s.start for s in of(events, StageSpan) if s.lane != target]
    return sum(glue) + sum(e.end - e.start for e in events if isinstance(e, (BranchRollout, Backup)))


# --- theory: hand-computed values ---------------------------------------------------------------------
def test_mirror_step_time_is_eq_14_plus_the_fallback_term():
    # draft fits under the suffix: T = prefix + rv + suffix
    assert mirror_step_time(0.020, 0.030, 0.010, 0.002) == pytest.approx(0.052)
    # draft longer than the suffix: T = prefix + rv + gen
    assert mirror_step_time(0.020, 0.030, 0.050, 0.002) == pytest.approx(0.072)
    # FF·T_gen on top, or FF·T_fallback when the fresh rollout's cost is measured
    assert mirror_step_time(0.020, 0.030, 0.050, 0.002, fallback_rate=0.5) == pytest.approx(0.097)
    assert mirror_step_time(0.020, 0.030, 0.050, 0.002, 0.5, t_fallback=0.010) == pytest.approx(0.077)
    with pytest.raises(ValueError):
        mirror_step_time(0.02, 0.03, 0.01, 0.002, fallback_rate=1.5)
    with pytest.raises(ValueError):
        mirror_step_time(-0.02, 0.03, 0.01, 0.002)


def test_mirror_speedup_vs_sd_both_cases_of_section_3_6():
    assert mirror_speedup_vs_sd(0.020, 0.030, 0.010, 0.002) == pytest.approx(0.060 / 0.052)
    assert mirror_speedup_vs_sd(0.020, 0.030, 0.050, 0.002) == pytest.approx(0.100 / 0.072)
    for gen in (0.005, 0.03, 0.08):  # S = T_SD / T_Mirror in both cases
        t_sd = 0.05 + gen
        assert mirror_speedup_vs_sd(0.02, 0.03, gen, 0.004) == pytest.approx(t_sd / mirror_step_time(0.02, 0.03, gen, 0.004))
    # Mirror wins iff T_rv < min(Δ, T_gen)
    assert mirror_speedup_vs_sd(0.02, 0.03, 0.01, 0.009) > 1 > mirror_speedup_vs_sd(0.02, 0.03, 0.01, 0.011)


def test_ssd_round_time_and_speedup():
    assert ssd_round_time(0.030, 0.001, 0.25, 0.020, 0.040) == pytest.approx(0.040 + 0.001 + 0.015)
    assert ssd_round_time(0.030, 0.001, 0.25, 0.020) == pytest.approx(0.030 + 0.001 + 0.015)
    assert ssd_round_time(0.030, 0.0, 1.0, 0.020, 0.010) == pytest.approx(0.030), "all hits: the backup never runs"
    assert ssd_speedup_vs_sd(0.05, 0.03, 0.5, 0.02) == pytest.approx(2.0)
    assert ssd_speedup_vs_sd(0.05, 0.03, 1.0, 0.02) == pytest.approx(1 + 0.05 / 0.03), "the bound at P(hit) = 1"
    with pytest.raises(ValueError):
        ssd_round_time(0.03, 0.0, -0.1, 0.02)
    assert law_tokens_per_s(1.5, 0.05) == pytest.approx(30.0)
    with pytest.raises(ValueError):
        law_tokens_per_s(1.5, 0.0)


# --- metrics ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("cut", ["whole", "partial"])
def test_metrics_count_what_the_events_say(runs, name, cut):
    events = runs[name] if cut == "whole" else partial(runs[name])
    m = vv.verdict_metrics(events)
    commits, lookups = verdicts(events), of(events, CacheLookup)
    assert m["method"] == name.split("_")[0]
    assert m["mode"] == ("serial" if "serial" in name else "lanes")
    assert m["rounds"] == len(commits) == (ROUNDS if cut == "whole" else m["rounds"]) > 0
    assert m["tau"] == pytest.approx(sum(len(c.tokens) for c in commits) / len(commits))
    assert 1 <= m["tau"] <= 6
    assert m["acceptance"] == pytest.approx(sum(c.accepted for c in commits) / sum(c.drafted for c in commits))
    hits = sum(x.hit for x in lookups)
    assert m["hit_rate"] == pytest.approx(hits / len(lookups))
    assert m["fallback_rate"] == pytest.approx(1 - m["hit_rate"])
    split = vv.draft_time_split(events)
    assert m["hidden_draft_ms"] + m["exposed_draft_ms"] == pytest.approx(
        1e3 * sum(r["draft_s"] for r in split) / len(split))
    assert m["rollout_ms"] > 0 and m["glue_ms"] > 0 and m["tokens_per_s"] > 0 and m["message_ms"] is not None
    if name.startswith("mirror"):
        assert m["prefix_ms"] > 0 and m["suffix_ms"] > 0 and m["verify_ms"] is None
    else:
        assert m["verify_ms"] > 0 and m["prefix_ms"] is None


def test_metrics_whole_traces_pin_the_recorded_numbers(runs):
    lanes, serial, ssd = (vv.verdict_metrics(runs[n]) for n in ALL)
    assert (lanes["hits"], lanes["lookups"]) == (9, 20)
    assert (serial["hits"], serial["lookups"]) == (3, 20)
    assert (ssd["hits"], ssd["lookups"]) == (6, 20)
    assert serial["hidden_draft_ms"] == 0, "serial mode overlaps nothing"
    assert lanes["hidden_draft_ms"] > 10 and ssd["hidden_draft_ms"] > 10
    assert ssd["exposed_draft_ms"] > ssd["hidden_draft_ms"], "at B = 12 the tree outlasts verification"
    # the message hops are sub-millisecond on one host; serial ones are a function call
    assert 0.2 < lanes["message_ms"] < 3 and serial["message_ms"] < 0.05
    assert set(lanes["message_ms_by_kind"]) == {"ee", "verdict", "window"}
    assert set(ssd["message_ms_by_kind"]) == {"verdict", "window"}, "SSD has no early exit"


@pytest.mark.parametrize("name", [MIRROR_LANES, SSD])
def test_the_latency_law_predicts_steady_lanes_throughput(runs, name):
    law = vv.verdict_metrics(runs[name])["law"]
    assert 0.85 < law["ratio"] < 1.15, law
    assert law["no_overlap_tokens_per_s"] < law["tokens_per_s"], "overlap must be what the law gains"


def test_serial_runs_reach_the_no_overlap_prediction(runs):
    """Nothing overlaps in serial mode: its law is the no-overlap sum, and the run reaches it."""
    m = vv.verdict_metrics(runs[MIRROR_SERIAL])
    assert m["law"]["tokens_per_s"] == m["law"]["no_overlap_tokens_per_s"]
    assert m["law"]["ratio"] == pytest.approx(1.0, abs=0.15)


def test_the_law_uses_the_theory_functions(runs):
    m = vv.verdict_metrics(runs[SSD])
    hops = m["message_ms_by_kind"]
    step = ssd_round_time(m["verify_ms"] / 1e3, (hops["verdict"] + hops["window"]) / 1e3, m["hit_rate"],
                          m["backup_ms"] / 1e3, m["draftwork_ms"] / 1e3)
    assert m["law"]["step_ms"] == pytest.approx(1e3 * step)
    assert m["law"]["tokens_per_s"] == pytest.approx(m["tau"] / step)


# --- hidden and exposed draft time ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("cut", ["whole", "partial"])
def test_hidden_and_exposed_sum_to_the_draft_work(runs, name, cut):
    events = runs[name] if cut == "whole" else partial(runs[name])
    split = vv.draft_time_split(events)
    assert [r["round"] for r in split] == sorted({r["round"] for r in split})
    for row in split:
        assert row["hidden_s"] + row["exposed_s"] == pytest.approx(row["draft_s"])
        assert row["glue_s"] + row["rollout_s"] + row["backup_s"] == pytest.approx(row["draft_s"])
        assert row["hidden_s"] >= 0 and row["exposed_s"] >= 0
    assert sum(r["draft_s"] for r in split) == pytest.approx(draft_seconds(events))
    assert split[0]["round"] == 0 and split[0]["backup_s"] > 0, "round 0 is the first window"
    if "serial" in name:
        assert all(r["hidden_s"] == 0 for r in split)
    else:
        assert sum(r["hidden_s"] for r in split) > 0
        # a backup after a miss sits on the critical path: the target never computes under it
        backups = of(events, Backup)
        covered = vv.target_compute(events)
        assert all(sum(b - a for a, b, hid in vv._split(x.start, x.end, covered) if hid) < 1e-3 for x in backups)


# --- the Gantt -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("cut", ["whole", "partial"])
def test_gantt_draws_every_span_and_splits_draft_work(runs, name, cut):
    events = runs[name] if cut == "whole" else partial(runs[name])
    fig = verdict_gantt.verdict_gantt(events)
    bars = [t for t in fig.data if t.type == "bar"]
    target = of(events, RunStart)[0].lanes["target"]
    target_spans = [s for s in of(events, StageSpan) if s.lane == target]
    on_target = sum(len(t.y) for t in bars if t.y[0] == vv.TARGET_Y)
    assert on_target == len(target_spans) + len(of(events, Prefill))
    drawn = sum(x for t in bars if t.y[0] == vv.DRAFT_Y for x in t.x)
    assert drawn == pytest.approx(draft_seconds(events))
    hidden = [t for t in bars if t.name.endswith("— hidden")]
    exposed = [t for t in bars if t.name.endswith("— exposed")]
    split = vv.draft_time_split(events)
    assert sum(x for t in hidden for x in t.x) == pytest.approx(sum(r["hidden_s"] for r in split))
    assert sum(x for t in exposed for x in t.x) == pytest.approx(sum(r["exposed_s"] for r in split))
    assert all(t.marker.pattern.shape == "/" for t in hidden)
    if "serial" in name:
        assert not hidden
    else:
        assert hidden and any("rollout" in t.name for t in hidden)
    assert all(t.marker.line.color == vv.MISS_RED for t in exposed)
    assert any("backup" in t.name or "fallback" in t.name for t in exposed), "a miss's backup is exposed"
    messages = [m for m in of(events, LaneMessage) if m.what in vv.RENDEZVOUS]
    assert verdict_gantt.arrow_count(fig) == len(messages) > 0
    kinds = {t.name for t in fig.data if t.type == "scatter"}
    assert kinds == {verdict_gantt.MESSAGE_LABELS[m.what] for m in messages}


def test_gantt_rounds_window_and_startup_note(runs):
    events = runs[MIRROR_LANES]
    fig = verdict_gantt.verdict_gantt(events, rounds=(2, 4))
    bars = verdict_gantt.gantt_bars(events)
    chosen = [b for b in bars if 2 <= b["round"] <= 4]
    assert sum(len(t.y) for t in fig.data if t.type == "bar") == len(chosen)
    assert verdict_gantt.arrow_count(fig) == sum(1 for m in of(events, LaneMessage) if m.what in vv.RENDEZVOUS and 2 <= m.round <= 4)
    assert "rounds 2–4" in fig.layout.title.text
    whole = verdict_gantt.verdict_gantt(events)
    first_draft = min(b["start"] for b in bars if b["lane"] == "draft")
    assert whole.layout.xaxis.range[0] <= first_draft < 0.1 and not whole.layout.annotations


def test_gantt_view_skips_a_slow_lane_start_up():
    """Lanes mode can spend seconds starting the draft lane before the first window: the first "wait" covers
    it. The view starts at the first window and says what it left out."""
    events = [RunStart(t=0.0, method="ssd", config={"mode": "lanes"}, model="m", device="cpu", dtype="bf16",
                       lanes={"target": "cpu0", "draft": "cpu1"}, lossless=True, prompt_tokens=4, max_new_tokens=8,
                       temperature=0.0),
              Prefill(t=0.07, n_tokens=4, seconds=0.07),
              Backup(t=3.85, lane="cpu1", round=0, backup="initial", tokens=5, start=3.80, end=3.85),
              StageSpan(t=3.86, lane="cpu0", stage="wait", round=1, start=0.07, end=3.86),
              StageSpan(t=3.90, lane="cpu0", stage="verify", round=1, start=3.86, end=3.90)]
    fig = verdict_gantt.verdict_gantt(events)
    assert 3.7 < fig.layout.xaxis.range[0] <= 3.80
    assert any("3.80 s before" in a.text and "start-up" in a.text for a in fig.layout.annotations)
    assert sum(len(t.y) for t in fig.data if t.type == "bar") == 4, "the bars are all still there"


def test_message_hops_measure_pickup_not_queueing(runs):
    hops = vv.message_hops(runs[MIRROR_LANES])
    timed = [h for h in hops if h["seconds"] is not None]
    assert len(timed) >= len(hops) - 1
    assert all(0 <= h["seconds"] < 0.005 for h in timed), "a hop that waited for busy work would be tens of ms"
    # a verdict arrives while the draft lane still rolls out the tree: it is picked up only after that
    rollouts = {r.round: r for r in of(runs[MIRROR_LANES], BranchRollout)}
    late = [h for h in timed if h["what"] == "verdict" and h["round"] in rollouts and h["sent"] < rollouts[h["round"]].end]
    assert late and all(h["received"] >= rollouts[h["round"]].end - 1e-9 for h in late)


# --- Mirror: hypothesis grid, Ω_κ, fallback heatmap, the law figure ----------------------------------
def shapes(fig, name: str) -> list:
    return [s for s in fig.layout.shapes if s.name == name]


@pytest.mark.parametrize("name", [MIRROR_LANES, MIRROR_SERIAL])
def test_hypothesis_grid_marks_the_verdict(runs, name):
    events = runs[name]
    messages = {e.round: e for e in of(events, EeMessage)}
    decisions = {e.round: e for e in of(events, ReuseDecision)}
    commits = {c.round: c for c in verdicts(events)}
    seen = set()
    for r, decision in decisions.items():
        fig = mirror_sd.hypothesis_grid(events, r, token_text=lambda t: f"<{t}>")
        ee, commit = messages[r], commits[r]
        heat = fig.data[0]
        assert len(heat.z) == len(ee.ids) and len(heat.z[0]) == 4
        assert heat.text[0][0] == f"<{ee.ids[0][0]}>"
        a = commit.accepted
        hit = decision.outcome != "fallback"
        assert len(shapes(fig, "reused root")) == int(hit)
        assert ("fallback" in fig.layout.title.text) == (not hit)
        assert len(shapes(fig, "not reached")) == len(ee.ids) - a - 1
        assert len(shapes(fig, "accepted")) == sum(t in ee.ids[j] for j, t in enumerate(commit.tokens[:a]))
        if hit:
            box = shapes(fig, "reused root")[0]
            assert (box.x0 + 0.5, box.y0 + 0.5) == (decision.rank, a)
        seen.add(hit)
    assert seen == {True, False}, "the stored rounds hold both hits and fallbacks"
    default = mirror_sd.hypothesis_grid(events)
    assert f"Round {max(messages)}:" in default.layout.title.text


def test_hypothesis_grid_on_a_live_round_and_before_any_message(runs):
    events = runs[MIRROR_LANES]
    i = max(i for i, e in enumerate(events) if isinstance(e, EeMessage))
    live = events[: i + 1]  # the message is out, the verdict is not
    fig = mirror_sd.hypothesis_grid(live)
    assert "verdict pending" in fig.layout.title.text and not fig.layout.shapes
    assert "No early-exit message" in mirror_sd.hypothesis_grid(events[:3]).layout.title.text
    with pytest.raises(ValueError):
        mirror_sd.hypothesis_grid(events, 999)


def test_overlap_rate_hand_computed():
    events = [EeMessage(t=1.0, round=1, exit_layer=15, ids=[[5, 6], [7, 8], [9, 10]],
                        logprobs=[[-0.1, -2.0]] * 3, bytes=0),
              Commit(t=1.1, round=1, tokens=[5, 8, 3], fates=["accepted", "accepted", "correction"], pieces=[""] * 3,
                     drafted=2, accepted=2),
              EeMessage(t=2.0, round=2, exit_layer=15, ids=[[1, 2], [3, 4]], logprobs=[[-0.1, -2.0]] * 2, bytes=0),
              Commit(t=2.1, round=2, tokens=[2], fates=["correction"], pieces=[""], drafted=1, accepted=0),
              EeMessage(t=3.0, round=3, exit_layer=15, ids=[[1, 2]], logprobs=[[-0.1, -2.0]], bytes=0)]
    o = mirror_sd.overlap_rate(events)
    # round 1: 5 (rank 0) in, 8 (rank 1) in, c = 3 out; round 2: c = 2 (rank 1) in; round 3 has no verdict yet
    assert o == dict(omega=0.75, positions=4, in_top_k=3, outside=1, rank_counts=[1, 2], kappa=2, exit_layer=15,
                     rounds=2)


@pytest.mark.parametrize("name", [MIRROR_LANES, MIRROR_SERIAL])
def test_overlap_rate_on_traces_bounds_the_fallbacks(runs, name):
    events = runs[name]
    o = mirror_sd.overlap_rate(events)
    commits = verdicts(events)
    assert o["rounds"] == len(commits)
    assert o["positions"] == sum(c.accepted + 1 for c in commits)
    assert sum(o["rank_counts"]) == o["in_top_k"] == o["positions"] - o["outside"]
    # every reused root is a correction inside the top-κ, counted at its rank
    hits = Counter(d.rank for d in of(events, ReuseDecision) if d.outcome != "fallback")
    assert all(o["rank_counts"][rank] >= n for rank, n in hits.items())
    assert 0 < o["omega"] < 1
    assert o["kappa"] == 4 and o["exit_layer"] == 15
    assert mirror_sd.overlap_rate(partial(events))["positions"] < o["positions"]


def test_norm_exit_overlaps_more_than_the_model_head(runs):
    norm, model = (mirror_sd.fallback_point(runs[n]) for n in (MIRROR_LANES, MIRROR_SERIAL))
    assert norm["omega"] > model["omega"] and norm["fallback_rate"] < model["fallback_rate"]


def test_fallback_heatmap_places_each_point():
    points = [dict(kappa=2, exit_layer=15, fallback_rate=0.8, omega=0.3),
              dict(kappa=4, exit_layer=15, fallback_rate=0.6, omega=0.5),
              dict(kappa=4, exit_layer=20, fallback_rate=0.4, omega=0.7)]
    fig = mirror_sd.fallback_heatmap(points)
    ff, bound = fig.data
    assert list(ff.x) == ["2", "4"] and list(ff.y) == ["15", "20"]
    assert list(ff.z[0]) == [0.8, 0.6] and list(ff.z[1]) == [None, 0.4]
    assert list(bound.z[0]) == pytest.approx([0.7, 0.5]) and bound.z[1][1] == pytest.approx(0.3)
    assert bound.text[1][0] == "" and ff.text[0][0] == "0.80"


def test_mirror_law_figure_marks_the_zero_slope_region():
    gen = {1: 0.010, 2: 0.020, 3: 0.029, 4: 0.040, 5: 0.050}
    fig = mirror_sd.mirror_law_figure(0.020, 0.030, 0.002, gen)
    step = next(t for t in fig.data if t.name == "Mirror step")
    assert list(step.y[:3]) == pytest.approx([52.0] * 3), "flat while T_gen ≤ Δ"
    assert list(step.y[3:]) == pytest.approx([62.0, 72.0])
    (region,) = [s for s in fig.layout.shapes if s.type == "rect"]
    assert (region.x0, region.x1) == (0.5, 3.5)
    assert "γ ≤ 3" in fig.layout.title.text
    none = mirror_sd.mirror_law_figure(0.020, 0.005, 0.002, gen)
    assert not [s for s in none.layout.shapes if s.type == "rect"] and "never fits" in none.layout.title.text


def test_mirror_law_figure_sets_each_gamma_against_its_own_runs_suffix():
    gen = {3: 0.0186, 5: 0.0496, 7: 0.0873}
    suffix = {3: 0.0180, 5: 0.0214, 7: 0.0239}  # γ = 3's rollout is under γ = 5's suffix, not under its own
    fig = mirror_sd.mirror_law_figure(0.020, suffix, 0.002, gen)
    assert not [s for s in fig.layout.shapes if s.type == "rect"] and "at no γ measured" in fig.layout.title.text
    budget = next(t for t in fig.data if t.name.startswith("Δ"))
    assert list(budget.y) == pytest.approx([18.0, 21.4, 23.9])
    step = next(t for t in fig.data if t.name == "Mirror step")
    assert list(step.y) == pytest.approx([40.6, 71.6, 109.3])
    fits = mirror_sd.mirror_law_figure(0.020, {**suffix, 3: 0.0190}, 0.002, gen)
    assert "at γ = 3" in fits.layout.title.text and len([s for s in fits.layout.shapes if s.type == "rect"]) == 1
    with pytest.raises(ValueError, match="cover the γ"):
        mirror_sd.mirror_law_figure(0.020, {5: 0.02}, 0.002, gen)


# --- SSD: cache table, k histogram, miss vs fan-out, SAGUARO trade-off, fan-out ------------------------
def test_cache_table_colours_hits_and_boxes_the_verdict(runs):
    events = runs[SSD]
    builds = {b.round: b for b in of(events, CacheBuild)}
    lookups = {x.round: x for x in of(events, CacheLookup)}
    hits = [x for x in lookups.values() if x.hit]
    assert hits and len(hits) < len(lookups)
    for r in (hits[0].round, next(x.round for x in lookups.values() if not x.hit)):
        fig = ssd.ssd_cache_table(events, r, token_text=lambda t: f"<{t}>")
        heat = fig.data[0]
        slots = max(f for b in builds.values() for f in b.fanout)
        assert len(heat.z) == len(builds[r].fanout) == 6 and len(heat.z[0]) == slots
        assert sum(v for row in heat.z for v in row) * len(lookups) == pytest.approx(len(hits))
        for k, token, rank, _ in builds[r].entries:
            assert heat.text[k][rank] == f"<{token}>"
        assert sum(1 for row in heat.text for cell in row if cell) == len(builds[r].entries)
        lookup = lookups[r]
        if lookup.hit:
            (box,) = shapes(fig, "hit")
            assert (box.x0 + 0.5, box.y0 + 0.5) == (lookup.rank, lookup.accepted)
        else:
            (box,) = shapes(fig, "miss")
            assert box.y0 + 0.5 == lookup.accepted and "miss" in fig.layout.title.text
    assert f"Round {max(builds)}:" in ssd.ssd_cache_table(events).layout.title.text
    live = events[: max(i for i, e in enumerate(events) if isinstance(e, CacheBuild)) + 1]
    assert "verdict pending" in ssd.ssd_cache_table(live).layout.title.text


def synthetic_commits(a_p: float, k_max: int, n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    events = []
    for r in range(1, n + 1):
        k = 0
        while k < k_max and rng.random() < a_p:
            k += 1
        events.append(Commit(t=float(r), round=r, tokens=[1] * (k + 1), fates=["accepted"] * k + ["correction"],
                             pieces=[""] * (k + 1), drafted=k_max, accepted=k))
    return events


def test_k_histogram_fits_a_p_on_synthetic_and_stored_rounds(runs):
    synthetic = synthetic_commits(0.6, 5, 3000)
    assert 0.57 < ssd.fit_acceptance(synthetic) < 0.63
    fig = ssd.k_histogram(synthetic)
    bars, law = fig.data
    assert list(bars.x) == list(range(6)) and sum(bars.y) == 3000
    assert sum(law.y) == pytest.approx(3000)
    assert law.y[0] == pytest.approx(3000 * (1 - ssd.fit_acceptance(synthetic)))
    assert f"a = {ssd.fit_acceptance(synthetic):.3f}" in fig.layout.title.text
    events = runs[SSD]
    rounds = [c for c in verdicts(events) if c.drafted]
    a_p = ssd.fit_acceptance(events)
    assert a_p == pytest.approx(sum(c.accepted for c in rounds) /
                                (sum(c.accepted for c in rounds) + sum(c.accepted < c.drafted for c in rounds)))
    assert sum(ssd.k_histogram(events).data[0].y) == len(rounds)
    assert "no verified round yet" in ssd.k_histogram(events[:4]).layout.title.text


def synthetic_lookups(r: float, n: int, seed: int = 0) -> list:
    """Ranks with miss(F) = P(rank ≥ F) = F^(−r): rank = ⌈Y⌉ − 1 for a Pareto Y ≥ 1."""
    rng = random.Random(seed)
    return [CacheLookup(t=float(i), round=i, accepted=0, token=0, hit=False,
                        rank=math.ceil((1 - rng.random()) ** (-1 / r)) - 1) for i in range(n)]


def test_hit_rate_vs_fanout_recovers_r_on_synthetic_ranks(runs):
    fig = ssd.hit_rate_vs_fanout(synthetic_lookups(0.8, 4000))
    measured, fit = fig.data[:2]
    r = float(fit.name.split("r = ")[1])
    assert 0.7 < r < 0.9
    assert list(measured.y) == sorted(measured.y, reverse=True) and measured.x[0] == 1
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    stored = ssd.hit_rate_vs_fanout(runs[SSD])
    curve = ssd.miss_curve(runs[SSD])
    assert [m for _, m in curve] == sorted((m for _, m in curve), reverse=True)
    assert any(t.name.startswith("this run") for t in stored.data)
    mirror = ssd.miss_curve(runs[MIRROR_LANES])
    assert len(mirror) == 4, "Mirror's ranks exist only inside the top-κ"


def test_acceptance_vs_hit_contours_follow_the_model(runs):
    points = [ssd.tradeoff_point(runs[SSD]), dict(c=1.0, acceptance=0.10, hit_rate=0.2, tokens_per_s=12.0)]
    fig = ssd.acceptance_vs_hit(points, lookahead=5, t_verify=0.030, t_backup=0.020, t_comm=0.001, t_draftwork=0.040)
    contour, scatter = fig.data
    assert contour.type == "contour" and scatter.type == "scatter"
    assert list(scatter.text) == ["C = 0.5", "C = 1.0"]
    i, j = 10, 40  # α = y[10], h = x[40] = 1
    assert contour.z[i][j] == pytest.approx((5 * contour.y[i] + 1) / ssd_round_time(0.030, 0.001, 1.0, 0.020, 0.040))
    # costs left out come from the points' own measurements (tradeoff_point carries them)
    auto = ssd.acceptance_vs_hit(points[:1])
    assert auto.data[0].type == "contour" and "γ = 5" in auto.layout.title.text
    bare = ssd.acceptance_vs_hit(points[1:])
    assert [t.type for t in bare.data] == ["scatter"] and "no contours" in bare.layout.title.text


def test_fanout_figure_geometric_beside_uniform():
    fig = ssd.fanout_figure(0.6, 0.5, 24, 7)
    geometric, uniform, law = fig.data
    assert list(geometric.y) == geometric_fanout(7, 24, 0.6, 0.5) and sum(geometric.y) == 24
    assert list(uniform.y) == uniform_fanout(7, 3)
    assert geometric.y[0] > geometric.y[-2], "more guesses where verdicts land"
    g, u = predicted_hit_rate(list(geometric.y), 0.6, 0.5), predicted_hit_rate(list(uniform.y), 0.6, 0.5)
    assert g > u
    assert f"geometric {g:.3f}" in fig.layout.title.text and f"uniform {u:.3f}" in fig.layout.title.text
    assert sum(law.y) == pytest.approx(1.0)


def test_fanout_explorer_redraws_on_a_slider():
    from specviz.widgets.theory_explorers import fanout_explorer

    box = fanout_explorer(a_p=0.6, r=0.5, budget=24, lookahead=7)
    sliders = {s.description.split(" ")[0]: s for s in box.children[0].children[0].children}
    readout = box.children[0].children[1]
    assert set(sliders) == {"a", "r", "F", "γ"}  # specviz.notation: a, F (the budget), γ
    assert str(geometric_fanout(7, 24, 0.6, 0.5)) in readout.value
    sliders["F"].value = 12
    assert str(geometric_fanout(7, 12, 0.6, 0.5)) in readout.value


# --- partial and empty event lists ------------------------------------------------------------------------
FIGURES = (verdict_gantt.verdict_gantt, mirror_sd.hypothesis_grid, ssd.ssd_cache_table, ssd.k_histogram, ssd.hit_rate_vs_fanout)


@pytest.mark.parametrize("name", ALL)
def test_every_view_draws_a_partial_run(runs, name):
    events = partial(runs[name])
    assert events and not any(e.kind == "run_end" for e in events)
    for view in FIGURES:
        assert isinstance(view(events), go.Figure), view.__name__
    assert vv.verdict_metrics(events)["law"] is not None
    assert isinstance(mirror_sd.overlap_rate(events), dict)


def test_every_view_survives_an_empty_run():
    for view in FIGURES:
        assert isinstance(view([]), go.Figure), view.__name__
    m = vv.verdict_metrics([])
    assert m["rounds"] == 0 and m["tau"] is None and m["law"] is None and m["hit_rate"] is None
    assert vv.draft_time_split([]) == [] and mirror_sd.overlap_rate([])["omega"] is None


def test_waits_after_lookup_groups_the_next_rounds_wait_by_hit_and_miss():
    events = [RunStart(t=0.0, method="ssd", config={}, model="m", device="cpu", dtype="float32",
                       lanes={"target": "T", "draft": "D"}, lossless=True, prompt_tokens=3, max_new_tokens=4,
                       temperature=0.0),
              CacheLookup(t=0.1, round=1, accepted=0, token=3, hit=True, rank=0),
              StageSpan(t=0.2, lane="T", stage="wait", round=2, start=0.15, end=0.2),
              CacheLookup(t=0.3, round=2, accepted=1, token=4, hit=False, rank=-1),
              StageSpan(t=0.5, lane="T", stage="wait", round=3, start=0.3, end=0.5),
              StageSpan(t=0.5, lane="D", stage="wait", round=3, start=0.3, end=0.9)]
    after = vv.waits_after_lookup(events)
    assert after["hit"] == pytest.approx([0.05]) and after["miss"] == pytest.approx([0.2])
