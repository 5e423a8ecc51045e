"""specviz.views.cats_cycles: CATS's views from hand-made events, the sweeps' bookkeeping with a fake engine, then
one short budgeted run of the real model (fp32).

The synthetic run below is small enough to check by hand: two streamed layers (2 and 3, 1 MB each, so 2 MB
per deep pass), a prefill and two cycles of γ = 3 drafts. In cycle 1 the shallow verifier disagrees at
position 1; the target accepts d_0, refuses d_1, takes the correction ĉ_1 and adds a bonus. In cycle 2 the
verifier agrees everywhere; the target accepts d_0 and refuses d_1.
"""

from __future__ import annotations

import json

import pytest

from engines.core.stats import Stats, compute_stats
from engines.core.trace import (
    Commit,
    DraftTree,
    KvRollback,
    Prefill,
    RunEnd,
    RunStart,
    ShallowVerification,
    StageSpan,
    StreamChunk,
    Verification,
)
from engines.engine import RunResult
from specviz.experiments import cats_sweeps
from specviz.theory import cats_cycle_seconds, cats_speedup, streamed_pass_seconds
from specviz.views import cats_costs, cats_sweep_figures
from specviz.views import cats_cycles as cv
from specviz.views.draft_trees import CORRECTION_LABEL, CORRECTION_SYMBOL, tree_figure

MB = 1_000_000
TOKENS = {10: " The", 11: " sky", 12: " is", 21: " sea", 40: " blue", 41: " red", 5: "x"}


def detokenize(ids):
    return "".join(TOKENS.get(i, f"<{i}>") for i in ids)


def memory(resident=2, layers=4, rate=100.0, stream="deep"):
    return {"memory_budget_mb": 3.5, "flash_mb_s": rate, "stream": stream, "chunk_layers": 1,
            "resident_layers": resident if stream == "deep" else 0,
            "held_per_round_layers": 0 if stream == "deep" else resident,
            "streamed_layers": list(range(resident, layers)) if stream == "deep" else list(range(layers)),
            "always_resident_bytes": 1_500_000, "resident_bytes": 3_500_000}


def deep_pass(start, read=0.02, compute=0.005):
    """Layers 2 and 3 streamed from ``start``: each read takes ``read``, each compute ``compute`` after it."""
    chunks, t = [], start
    for layer in (2, 3):
        chunks.append(StreamChunk(t=t + read + compute, layers=[layer], bytes=MB, load_start=t, load_end=t + read,
                                  compute_start=t + read, compute_end=t + read + compute, resident_bytes=4_500_000))
        t += read
    return chunks


def cats_cycle(round_, t, drafts, verifier, accepted, tried, next_token, next_fate, tokens, fates):
    """One cycle at ``t``: draft 30 ms, sv 10 ms, reforward 10 ms, then the deep pass inside verify 50 ms."""
    mismatches = [i for i, (d, c) in enumerate(zip(drafts, verifier)) if d != c]
    nodes = [{"id": i, "parent": i - 1, "token": d, "logprob": -0.1, "depth": i + 1, "score": -0.1 * (i + 1),
              "rank": 0, "sent": True, "source": "draft"} for i, d in enumerate(drafts)]
    for k, i in enumerate(mismatches):
        nodes.append({"id": len(drafts) + k, "parent": i - 1, "token": verifier[i], "logprob": 0.0, "depth": i + 1,
                      "score": -0.1 * i, "rank": 1, "sent": True, "source": "correction"})
    verify_start = t + 0.05
    return [
        StageSpan(t=t + 0.03, lane="cpu0", stage="draft", round=round_, start=t, end=t + 0.03),
        StageSpan(t=t + 0.04, lane="cpu0", stage="sv", round=round_, start=t + 0.03, end=t + 0.04),
        ShallowVerification(t=t + 0.04, round=round_, drafts=drafts, verifier=verifier, mismatches=mismatches),
        StageSpan(t=t + 0.05, lane="cpu0", stage="reforward", round=round_, start=t + 0.04, end=t + 0.05),
        DraftTree(t=t + 0.05, round=round_, drafter="cats(cats@1+cats@2)", nodes=nodes),
        *deep_pass(verify_start),
        StageSpan(t=t + 0.1, lane="cpu0", stage="verify", round=round_, start=verify_start, end=t + 0.1),
        Verification(t=t + 0.1, round=round_, accepted=accepted,
                     rejected=[n["id"] for n in nodes if n["id"] not in accepted], next_token=next_token,
                     next_fate=next_fate, nodes=[{"id": i, "outcome": o} for i, o in tried]),
        KvRollback(t=t + 0.1, round=round_, kept=len(accepted) + 1, dropped=len(nodes) - len(accepted)),
        Commit(t=t + 0.1, round=round_, tokens=tokens, fates=fates, pieces=[detokenize([x]) for x in tokens],
               drafted=len(nodes), accepted=len(accepted), draft_depth=len(drafts)),
    ]


def finish(events):
    stats = compute_stats(events, end_time=events[-1].t)
    ids = [x for e in events if isinstance(e, Commit) for x in e.tokens]
    return events + [RunEnd(t=events[-1].t, token_ids=ids, text=detokenize(ids), stats=stats.to_dict(),
                             stop_reason="max_new_tokens")]


def start(method="cats", lossless=True, **memory_options):
    return [RunStart(t=0.0, method=method, config={}, model="m", device="cpu", dtype="float32", lanes={},
                     lossless=lossless, prompt_tokens=3, max_new_tokens=6, temperature=0.0,
                     memory=memory(**memory_options))]


def prefill():
    return [*deep_pass(0.0), Prefill(t=0.06, n_tokens=3, seconds=0.06),
            Commit(t=0.1, round=0, tokens=[5], fates=["target"], pieces=["x"], drafted=0, accepted=0)]


def cats_events(lossless=True):
    events = start(lossless=lossless) + prefill()
    events += cats_cycle(1, 0.1, [10, 11, 12], [10, 21, 12], accepted=[0, 3],
                         tried=[(0, "accepted"), (1, "rejected"), (3, "accepted")], next_token=40, next_fate="bonus",
                         tokens=[10, 21, 40], fates=["accepted", "accepted", "bonus"])
    events += cats_cycle(2, 0.2, [10, 11, 12], [10, 11, 12], accepted=[0], tried=[(0, "accepted"), (1, "rejected")],
                         next_token=41, next_fate="correction", tokens=[10, 41], fates=["accepted", "correction"])
    return finish(events)


def ar_events(rounds=3, step=0.06):
    """ar: each round a verify span of ``step`` whose last 45 ms is the deep pass (reads 20 ms, compute 5 ms)."""
    events = start("ar") + prefill()
    t = 0.1
    for round_ in range(1, rounds + 1):
        pass_start = t + step - 0.045
        events += [*deep_pass(pass_start),
                   StageSpan(t=t + step, lane="cpu0", stage="verify", round=round_, start=t, end=t + step),
                   Commit(t=t + step, round=round_, tokens=[40 + round_], fates=["target"], pieces=["y"], drafted=0,
                          accepted=0)]
        t += step
    return finish(events)


# --- reading events ---------------------------------------------------------------------------------
def test_cycles_chunks_and_bytes():
    events = cats_events()
    assert cv.cats_cycles(events) == [1, 2]
    assert cv.cycle_bounds(events) == {0: (0.0, 0.1), 1: (0.1, pytest.approx(0.2)), 2: (pytest.approx(0.2),
                                                                                         pytest.approx(0.3))}
    assert [r for r, _ in cv.chunk_cycles(events)] == [0, 0, 1, 1, 2, 2]
    assert cv.deep_layer_start(events) == 2
    assert cv.decode_bytes_per_token(events) == pytest.approx(4 * MB / 5), "two passes' bytes over the 5 cycle tokens"
    assert events[-1].stats["bytes_per_token"] == pytest.approx(6 * MB / 6), "the stats count the prefill too"
    assert cv.memory_caption(events) == "layers 1–2 resident, 3–4 streamed at 100 MB/s (deep; budget 3.5 MB)"
    assert cv.showcase_cycle(events) == 1, "the cycle whose correction the target tried"
    caption = cv.cycle_caption(events, 1, detokenize)
    assert "disagreed at position 1 (1 correction sibling)" in caption and "accepted 2 nodes" in caption
    assert "ending on the correction “␣sea”" in caption and "+ 1 bonus" in caption and "2.0 MB" in caption
    assert "agreed with every draft" in cv.cycle_caption(events, 2)
    with pytest.raises(ValueError, match=r"cycles that do: \[1, 2\]"):
        cv.cycle_events(events, 7)


def test_verdicts_and_confusion_counts():
    events = cats_events()
    records = cv.verdicts(events)
    assert [(r["round"], r["position"], r["sv_agrees"], r["target_accepts"], r["correction"]) for r in records] == [
        (1, 0, True, True, None), (1, 1, False, False, "accepted"), (2, 0, True, True, None), (2, 1, True, False, None)]
    summary = cv.confusion_counts(events)
    assert summary["cells"] == {(True, True): 2, (True, False): 1, (False, True): 0, (False, False): 1}
    assert summary["positions"] == 4 and summary["corrections_taken"] == 1
    twice = cv.confusion_counts(events[:-1] + events)  # runs read one after another pool
    assert twice["positions"] == 8 and twice["corrections_taken"] == 2


# --- figures ----------------------------------------------------------------------------------------
def test_cycle_tree_marks_corrections():
    events = cats_events()
    fig = cv.cycle_tree_figure(events, 1, detokenize)
    traces = {t.name: t for t in fig.data if t.name}
    accepted = traces["accepted path"]
    assert list(accepted.text) == ["␣The", "␣sea"]
    assert list(accepted.marker.symbol) == ["circle", CORRECTION_SYMBOL], "the accepted correction is a hexagon"
    assert CORRECTION_LABEL in traces
    assert "SV disagreed at d1" in fig.layout.title.text and "2 accepted + 1 bonus" in fig.layout.title.text
    assert "␣The" not in traces["root"].text and list(traces["root"].text) == ["x"], "hangs off the last committed token"
    mask = cv.cycle_mask_figure(events, 1, detokenize)
    assert mask.layout.title.text.startswith("Cycle 1: attention mask, root + 4 nodes")
    assert [list(row) for row in mask.data[0].z][4] == [2, 2, 0, 0, 2], "ĉ_1 sees the root, d_0 and itself"
    chain = cv.cycle_tree_figure(events, 2)
    assert CORRECTION_LABEL not in {t.name for t in chain.data}
    assert all(t.marker.symbol == "circle" for t in chain.data if t.name in ("accepted path", "tried, rejected"))
    assert "SV agreed with every draft" in chain.layout.title.text


def test_tree_figure_without_corrections_keeps_scalar_markers():
    tree = DraftTree(t=0.0, round=1, drafter="eagle", nodes=[
        {"id": i, "parent": i - 1, "token": 10 + i, "logprob": -0.5, "depth": i + 1} for i in range(3)])
    fig = tree_figure(tree)
    assert all(isinstance(t.marker.symbol, str) for t in fig.data if t.marker and t.marker.symbol)


def test_gantt_lanes_and_cycles():
    events = cats_events()
    fig = cv.gantt_figure(events)
    bars = {t.name: t for t in fig.data}
    reads = bars["flash read of a streamed chunk"]
    assert set(reads.y) == {cv.IO_LANE} and len(reads.x) == 6
    assert list(reads.base)[:2] == [0.0, pytest.approx(20.0)] and all(x == pytest.approx(20.0) for x in reads.x)
    computes = bars["compute of a streamed chunk"]
    assert set(computes.y) == {cv.COMPUTE_LANE} and all(x == pytest.approx(5.0) for x in computes.x)
    assert computes.width < reads.width, "chunk computes are drawn thin, inside the verify span"
    assert len(bars[cv.STAGE_LABELS["draft"]].x) == 2 and len(bars[cv.STAGE_LABELS["prefill"]].x) == 1
    assert [a.text for a in fig.layout.annotations] == ["prefill", "cycle 1", "cycle 2"]
    assert len([s for s in fig.layout.shapes if s.type == "rect"]) == 3
    one = cv.gantt_figure(events, [2])
    assert len({t.name: t for t in one.data}["flash read of a streamed chunk"].x) == 2
    assert tuple(one.layout.xaxis.range) == (pytest.approx(200.0), pytest.approx(300.0))
    assert "cycle 2 · layers 1–2 resident" in one.layout.title.text
    assert list(one.data[-2].customdata) == ["layer 3 · 1.00 MB (50 MB/s)", "layer 4 · 1.00 MB (50 MB/s)"]
    assert cv.STAGE_LABELS["prefill"] not in {t.name for t in one.data}
    with pytest.raises(ValueError, match="no such cycle"):
        cv.gantt_figure(events, [9])


def test_confusion_figure_cells():
    fig = cv.confusion_figure(cats_events())
    heat = fig.data[0]
    assert [list(row) for row in heat.z] == [[2, 1], [0, 1]]
    assert "1 correction(s) taken" in heat.text[1][1] and "67% of row" in heat.text[0][0]
    assert "4 judged draft positions" in fig.layout.title.text and "agree on 75%" in fig.layout.title.text


def test_lossy_runs_say_so_everywhere():
    events = cats_events(lossless=False)
    assert cv.is_lossy(events) and not cv.is_lossy(cats_events())
    for fig in (cv.cycle_tree_figure(events, 1), cv.gantt_figure(events, [1]), cv.confusion_figure(events)):
        assert "LOSSY" in fig.layout.title.text
    assert "LOSSY" in cv.cycle_caption(events, 1)
    assert "LOSSY" not in cv.gantt_figure(cats_events()).layout.title.text


# --- costs and the time model -----------------------------------------------------------------------
def test_run_costs_by_hand():
    costs = cats_costs.run_costs(cats_events())
    assert (costs.rounds, costs.tokens, costs.draft_steps, costs.deep_passes) == (2, 5, 6, 2)
    assert costs.tau == 2.5 and costs.gamma == 3 and costs.draft_step == pytest.approx(0.01)
    assert costs.sv_per_cycle == pytest.approx(0.01) and costs.reforward_per_cycle == pytest.approx(0.01)
    assert costs.deep_wall_per_pass == pytest.approx(0.045) and costs.deep_compute_per_pass == pytest.approx(0.01)
    assert costs.deep_bytes_per_pass == 2 * MB, "bytes streamed ÷ target calls, from the stats"
    assert costs.deep_pass_bytes == 4 * MB and costs.read_mb_s == pytest.approx(50.0)
    assert costs.other_per_cycle == pytest.approx(0.1 - 0.03 - 0.01 - 0.01 - 0.045)
    assert cats_costs.RunCosts.from_dict(json.loads(json.dumps(costs.to_dict()))) == costs
    pooled = costs + costs
    assert pooled.tau == costs.tau and pooled.rounds == 4


def test_time_model_is_theory_at_the_measured_costs():
    cats, ar = cats_costs.run_costs(cats_events()), cats_costs.run_costs(ar_events())
    model = cats_costs.TimeModel.from_costs(cats, ar)
    expected = cats_cycle_seconds(3, 0.01, 0.01, 0.01, 2 * MB, 100 * MB, 0.01) + cats.other_per_cycle
    assert model.cycle_seconds(100) == pytest.approx(expected)
    assert model.ar_token_seconds(100) == pytest.approx(0.015 + streamed_pass_seconds(2 * MB, 100 * MB, 0.01))
    assert model.speedup(100) == pytest.approx(cats_speedup(2.5, expected, model.ar_token_seconds(100)))
    assert model.bytes_per_token == pytest.approx(2 * MB / 2.5)
    assert model.asymptote == pytest.approx(2.5)
    assert model.speedup(1) == pytest.approx(2.5, rel=0.05), "at a crawl only the bytes per token matter"
    assert model.cycle_seconds(100) <= cats.cycle_seconds + 1e-12, "max(io, compute) never exceeds the pass's wall"
    with pytest.raises(ValueError, match="memory-budget runs"):
        cats_costs.TimeModel.from_costs(cats_costs.RunCosts(rounds=1, tokens=1), ar)


def test_layer_time_model_for_the_sliders():
    model = cats_costs.layer_time_model([10 * MB] * 30, sv_layer=15, tau=2.0, gamma=5, dm_layer=3, layer_seconds=0.001,
                                head_seconds=0.002)
    assert model.deep_bytes == 150 * MB and model.deep_compute == pytest.approx(0.015)
    assert model.draft_step == pytest.approx(0.005) and model.shallow_verify == pytest.approx(0.014)
    assert model.reforward == pytest.approx(0.015) and model.ar_other == pytest.approx(0.017)
    more_resident = cats_costs.layer_time_model([10 * MB] * 30, sv_layer=20, tau=2.0, gamma=5)
    assert more_resident.bytes_per_token < model.bytes_per_token, "a larger budget streams less per token"
    with pytest.raises(ValueError, match="dm_layer"):
        cats_costs.layer_time_model([MB] * 30, sv_layer=3, tau=2.0, gamma=5, dm_layer=3)
    readout = cats_sweep_figures.cats_theory_readout(model, 1000)
    assert "150.0 MB" in readout and "75.0 MB" in readout and f"{model.speedup(1000):.2f}×" in readout
    fig = cats_sweep_figures.cats_theory_figure(model, 1000)
    assert fig.data[1].x == (1000,) and {t.name for t in fig.data if t.type == "bar"} >= {"draft", "sv", "other"}


# --- sweeps: bookkeeping with a fake engine ---------------------------------------------------------
class FakeEngine:
    """Records runs; every cats run is the synthetic one above, every other run the ar one."""

    def __init__(self):
        self.calls = []

    def run(self, prompt, method, **options):
        self.calls.append((method, options))
        events = cats_events() if method in ("cats", "eesd") else ar_events()
        return RunResult(method, {}, events[-1].token_ids, events[-1].text, Stats.from_dict(events[-1].stats), events)


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(cats_sweeps, "memory_settings", lambda engine, layers, rate, stream="deep":
                        {"memory_budget_mb": 100.0 + layers, "flash_mb_s": rate, "stream": stream})
    monkeypatch.setattr(cats_sweeps, "shipped_cats_layers", lambda role=None: {"draft": [3], "shallow_verifier": [10, 15]}[role])
    return FakeEngine()


def test_cats_sweep_skips_missing_adapters_and_shares_baselines(fake):
    ticks = []
    sweep = cats_sweeps.cats_sweep(fake, "p", sv_layers=(2, 5, 10, 15), gammas=(3, 5), max_new_tokens=8, flash_mb_s=500,
                          progress=lambda i, n: ticks.append((i, n)))
    assert [s["sv_layer"] for s in sweep["skipped"]] == [2, 5]
    assert "not above the draft layer" in sweep["skipped"][0]["reason"]
    assert "no shipped adapter cats@5" in sweep["skipped"][1]["reason"] and "[10, 15]" in sweep["skipped"][1]["reason"]
    assert any("ℓ_SV = 5 skipped" in note for note in sweep["notes"])
    methods = [(m, o.get("sv_layer"), o.get("gamma"), o["memory_budget_mb"]) for m, o in fake.calls]
    assert methods == [("ar", None, None, 110.0), ("ar", None, None, 115.0), ("cats", 10, 5, 110.0),
                       ("cats", 15, 5, 115.0), ("cats", 15, 3, 115.0)], "one ar per budget; γ = 5 at 15 reused"
    assert all(o["temperature"] == 0.0 and o["flash_mb_s"] == 500 and o["max_new_tokens"] == 8 for _, o in fake.calls)
    assert ticks == [(i, 5) for i in range(1, 6)]
    assert [p["sv_layer"] for p in sweep["sv_points"]] == [10, 15]
    assert [p["gamma"] for p in sweep["gamma_points"]] == [3, 5]
    point = sweep["sv_points"][0]
    ar_speed = ar_events()[-1].stats["tokens_per_s"]
    assert point["speedup"] == pytest.approx(cats_events()[-1].stats["tokens_per_s"] / ar_speed)
    assert point["bpt"] == pytest.approx(0.8 * MB) and point["ar_bpt"] == pytest.approx(2 * MB)
    fig = cats_sweep_figures.sweep_figure(sweep, "sv_layer")
    assert {t.name for t in fig.data} == {"cats", "ar"} and "ℓ_SV = 5 skipped" in fig.layout.title.text
    assert list(next(t for t in fig.data if t.name == "cats" and t.xaxis == "x").y) == pytest.approx([0.8, 0.8])
    assert len(cats_sweep_figures.sweep_figure(sweep, "gamma").data) == 3
    with pytest.raises(ValueError, match="along"):
        cats_sweep_figures.sweep_figure(sweep, "depth")


def test_cats_sweep_with_kangaroo_and_without_verifiers(fake, monkeypatch):
    sweep = cats_sweeps.cats_sweep(fake, "p", sv_layers=(15,), gammas=(5,), kangaroo=True)
    assert [m for m, _ in fake.calls] == ["ar", "cats", "eesd"]
    assert fake.calls[2][1]["exit_layer"] == 3 and fake.calls[2][1]["head"] == "cats"
    assert sweep["sv_points"][0]["kangaroo_speedup"] > 0
    assert cats_sweeps.KANGAROO in {t.name for t in cats_sweep_figures.sweep_figure(sweep).data}
    monkeypatch.setattr(cats_sweeps, "shipped_cats_layers", lambda role=None: [3] if role == "draft" else [])
    empty = cats_sweeps.cats_sweep(FakeEngine(), "p", sv_layers=(15,), gammas=(5,))
    assert not empty["sv_points"] and not empty["gamma_points"]
    assert any("γ sweep skipped" in note for note in empty["notes"])
    cats_sweep_figures.sweep_figure(empty)  # draws, saying nothing was measured
    monkeypatch.setattr(cats_sweeps, "shipped_cats_layers", lambda role=None: [])
    with pytest.raises(ValueError, match="no shipped CATS draft adapter cats@3"):
        cats_sweeps.cats_sweep(FakeEngine(), "p")


def test_bandwidth_sweep_and_figure(fake):
    sweep = cats_sweeps.bandwidth_sweep(fake, "p", (100, 400), max_new_tokens=8)
    assert [(p["method"], p["flash_mb_s"]) for p in sweep["points"]] == [
        ("ar", 100), ("kangaroo", 100), ("cats", 100), ("ar", 400), ("kangaroo", 400), ("cats", 400)]
    assert [o["flash_mb_s"] for _, o in fake.calls] == [100] * 3 + [400] * 3
    assert sweep["points"][0]["speedup"] == 1.0
    models = cats_costs.sweep_models(sweep)
    assert set(models) == {"kangaroo", "cats"} and models["cats"].tau == 2.5
    fig = cats_sweep_figures.bandwidth_figure(sweep)
    names = {t.name for t in fig.data}
    assert "cats: measured" in names and any(n.startswith("cats: time model (τ = 2.50)") for n in names)
    line = next(t for t in fig.data if t.name.startswith("cats: time model"))
    assert line.y[0] == pytest.approx(models["cats"].speedup(50.0))
    assert fig.layout.xaxis.type == "log"
    with pytest.raises(ValueError, match="bandwidths"):
        cats_sweeps.bandwidth_sweep(fake, "p", (0,))


def test_shipped_cats_layers_reads_roles(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_DRAFTS", str(tmp_path))
    for name, role in (("cats@3", "draft"), ("cats@10", "shallow_verifier"), ("cats@7", None), ("eagle", None)):
        (tmp_path / name).mkdir()
        card = {"name": name} | ({"cats_role": role} if role else {})
        (tmp_path / name / "card.json").write_text(json.dumps(card))
    (tmp_path / "cats@20").mkdir()  # being written: no card yet
    assert cats_sweeps.shipped_cats_layers() == [3, 7, 10]
    assert cats_sweeps.shipped_cats_layers("draft") == [3, 7]
    assert cats_sweeps.shipped_cats_layers("shallow_verifier") == [7, 10]


# --- the real model -----------------------------------------------------------------------------------
def test_real_budgeted_cats_run(real_engine):
    """One short cats run with layers 1..15 resident at a fast bandwidth: every view draws, the costs add
    up to the run's own statistics, and the time model never exceeds what the cycles took."""
    settings = cats_sweeps.memory_settings(real_engine, 15, 4000.0)
    run = real_engine.run("List three primary colours.", "cats", max_new_tokens=12, **settings)
    events, stats = run.events, run.stats
    assert stats.bytes_streamed > 0 and events[0].memory["resident_layers"] == 15
    cycles = cv.cats_cycles(events)
    assert len(cycles) == stats.rounds > 1
    costs = cats_costs.run_costs(events)
    assert costs.rounds == stats.rounds and costs.tokens == stats.new_tokens - 1
    drafted = {e.round: len(e.drafts) for e in events if e.kind == "sv_pass"}  # γ = 5, fewer when fewer tokens are left
    assert costs.deep_passes == stats.rounds and costs.gamma == pytest.approx(sum(drafted.values()) / len(drafted))
    assert max(drafted.values()) == 5 and costs.gamma <= 5
    assert costs.deep_bytes_per_pass == stats.bytes_streamed / stats.target_calls
    assert costs.deep_bytes_per_pass == pytest.approx(costs.deep_pass_bytes / costs.deep_passes), \
        "every pass streams layers 15..29 once, the prefill's too"
    judged = cv.confusion_counts(events)
    trees = {e.round: e for e in events if isinstance(e, DraftTree)}
    expected = 0
    for v in (e for e in events if isinstance(e, Verification)):
        drafts = [i for i in v.accepted if trees[v.round].nodes[i]["source"] == "draft"]
        expected += min(len(drafts) + 1, drafted[v.round])  # accepted drafts, then the one refused (unless all passed)
    assert judged["positions"] == expected
    assert sum(v for (_, accepts), v in judged["cells"].items() if accepts) == stats.accepted - judged["corrections_taken"]
    for round_ in cycles:
        cv.cycle_tree_figure(events, round_, real_engine.detokenize)
        assert len(cv.gantt_figure(events, [round_]).data) == 6  # 4 stages, reads, chunk computes
    ar = real_engine.run("List three primary colours.", "ar", max_new_tokens=12, **settings)
    assert ar.token_ids == run.token_ids, "greedy cats writes what ar writes (fp32), budget or not"
    model = cats_costs.TimeModel.from_runs([events], [ar.events])
    assert 0 < model.cycle_seconds(4000.0) <= costs.cycle_seconds + 1e-9
    assert 0 < model.ar_token_seconds(4000.0) <= cats_costs.run_costs(ar.events).cycle_seconds + 1e-9
    rows = cats_costs.costs_rows({"ar": ar.events, "cats": events})
    assert rows[1]["γ̄"] == costs.gamma and rows[1]["BPT MB"] < rows[0]["BPT MB"] * 1.01
