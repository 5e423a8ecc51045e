"""Traces serialize to JSON lines, replay to the same stats, reach live subscribers, and can be slimmed."""

from engines import Trace, compute_stats, read_jsonl, write_jsonl
from engines.core.stats import Stats
from engines.core.trace import Commit, DraftTree, StageSpan, Verification
from specviz.views.chain import draft_depth_acceptance_figure


def test_jsonl_round_trip_and_replayed_stats(tiny_engine, tmp_path):
    result = tiny_engine.run([1, 2, 3], "sps", max_new_tokens=12, gamma=3, draft_layers=1)
    path = tmp_path / "run.jsonl"
    write_jsonl(result.events, path)
    replayed = read_jsonl(path)
    assert [e.to_dict() for e in replayed] == [e.to_dict() for e in result.events]
    assert compute_stats(replayed) == result.stats


def test_trace_contents_describe_every_round(tiny_engine):
    result = tiny_engine.run([1, 2, 3], "sps", max_new_tokens=12, gamma=3, draft_layers=1)
    trees = [e for e in result.events if isinstance(e, DraftTree)]
    verdicts = [e for e in result.events if isinstance(e, Verification)]
    commits = [e for e in result.events if isinstance(e, Commit) and e.round > 0]
    assert len(trees) == len(verdicts) == len(commits) == result.stats.rounds
    for tree, verdict, commit in zip(trees, verdicts, commits):
        assert [n["parent"] for n in tree.nodes] == list(range(-1, len(tree.nodes) - 1))
        assert len(verdict.accepted) >= commit.accepted  # the token budget may cut the last round short
        assert commit.tokens[: commit.accepted] == [tree.nodes[i]["token"] for i in verdict.accepted][: commit.accepted]
    stages = {e.stage for e in result.events if isinstance(e, StageSpan)}
    assert stages == {"draft", "verify"}


def test_live_subscriber_sees_events_as_they_happen(tiny_engine):
    seen = []
    trace = Trace()
    trace.subscribe(lambda e: seen.append(e.kind))
    stream = tiny_engine.generate([1, 2, 3], "pld", max_new_tokens=5, trace=trace)
    first = next(stream)
    assert seen == ["run_start"] and first.kind == "run_start"
    list(stream)
    assert seen[-1] == "run_end" and "commit" in seen


def test_instrumentation_off_keeps_tokens_and_stats(tiny_engine):
    full = tiny_engine.run([1, 2, 3], "sps", max_new_tokens=12, gamma=2, draft_layers=1)
    slim = tiny_engine.run([1, 2, 3], "sps", max_new_tokens=12, gamma=2, draft_layers=1, instrument=False)
    assert slim.token_ids == full.token_ids
    assert not any(isinstance(e, (DraftTree, Verification, StageSpan)) for e in slim.events)
    assert (slim.stats.rounds, slim.stats.accepted) == (full.stats.rounds, full.stats.accepted)


def test_stats_definitions():
    """τ counts the bonus/correction; prefill's token belongs to no round; α per position."""
    commits = [Commit(t=0.1, round=0, tokens=[5], fates=["target"], pieces=["a"], drafted=0, accepted=0),
               Commit(t=0.2, round=1, tokens=[1, 2, 3], fates=["accepted", "accepted", "correction"],
                      pieces=["b", "c", "d"], drafted=4, accepted=2),
               Commit(t=0.3, round=2, tokens=[4], fates=["correction"], pieces=["e"], drafted=4, accepted=0)]
    stats: Stats = compute_stats(commits, end_time=0.3)
    assert stats.new_tokens == 5 and stats.rounds == 2 and stats.target_calls == 3
    assert stats.mean_accepted_length == 2.0
    assert stats.acceptance_rate == 2 / 8
    assert stats.acceptance_by_position == [0.5, 1.0, 0.0]
    assert stats.positions_tested == 4 and stats.per_token_acceptance == 0.5
    assert stats.reached_by_position == [2, 1, 1] and stats.passed_by_position == [1, 1, 0]
    figure = draft_depth_acceptance_figure({"run": commits})
    assert list(figure.data[0].y) == [0.5, 1.0, 0.0] and list(figure.data[0].customdata) == [2, 1, 1]


def test_a_slow_consumer_is_not_timed_as_decoding(tiny_engine):
    """The dashboard renders at every commit; that time must not count as the method's."""
    import time

    fast = tiny_engine.run([1, 2, 3], "ar", max_new_tokens=8).stats.decode_seconds
    slow_events = []
    for event in tiny_engine.generate([1, 2, 3], "ar", max_new_tokens=8):
        slow_events.append(event)
        if event.kind == "commit":
            time.sleep(0.25)  # 8 commits: 2 s if the clock kept running
    slow = slow_events[-1].stats["decode_seconds"]
    assert slow < fast + 0.5 < 2.0


def test_a_reused_trace_gives_each_run_its_own_stats_and_honours_instrument(tiny_engine):
    from engines import Trace

    trace = Trace()
    first = tiny_engine.run([1, 2, 3], "sps", max_new_tokens=6, draft_layers=1, gamma=2, trace=trace)
    second = tiny_engine.run([1, 2, 3], "sps", max_new_tokens=4, draft_layers=1, gamma=2, trace=trace,
                             instrument=False)
    assert first.stats.new_tokens == 6 and second.stats.new_tokens == 4
    assert not any(e.kind == "draft_tree" for e in second.events)
    assert len(trace.events) == len(first.events) + len(second.events)


def test_inference_mode_stays_inside_the_engine(tiny_engine):
    import torch

    for _event in tiny_engine.generate([1, 2, 3], "sps", max_new_tokens=6, draft_layers=1, gamma=2):
        assert not torch.is_inference_mode_enabled()


def test_spans_wait_for_the_device_when_timing_and_the_run_always_does(tiny_engine):
    """On CUDA a clock read right after queuing kernels times the launch, not the work: a detailed trace
    waits for the device at every timestamp, an uninstrumented run at the prefill's ends and the run's end."""
    from engines import Trace

    for instrument in (True, False):
        waits = []
        trace = Trace()
        trace.device_sync = lambda: waits.append(1)
        result = tiny_engine.run([1, 2, 3], "sps", max_new_tokens=6, draft_layers=1, gamma=2, trace=trace,
                                 instrument=instrument)
        spans = sum(event.kind == "stage_span" for event in result.events)
        if instrument:
            assert len(waits) > 2 * spans > 0
        else:
            assert len(waits) == 3 and spans == 0
