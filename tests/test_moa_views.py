"""specviz.views.moa_runs, the MoA formulas of specviz.theory and the message-size explorer, on real runs of a tiny
random target with random MoA drafters (saved and reloaded as shipped drafters, as in test_moa.py).

Every figure is built from the events of a real run; the numbers are checked against the events themselves
(link bytes = Σ LinkSend bytes, draft split = Σ DraftStep) and against the engine's own Stats; message sizes
against Table 7 plus the wire format's header and scales, to the byte.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
import pytest
import torch

from engines import Engine
from engines.core.trace import Commit, DraftStep, LinkSend, Lsa, StageSpan, Verification
from engines.drafters.moa_head import MoAHead, moa_name
from engines.drafters.trained import save_trained
from engines.network.link import PROFILES, table7_bytes
from specviz.theory import moa_break_even_tli, moa_cycle_seconds, server_calls_per_answer
from specviz.views import moa_bench_results, moa_messages
from specviz.views import moa_runs as mv
from tests.conftest import tiny_llama

PROMPT = [4, 4, 5, 6, 7]
HIDDEN, KV_WIDTH = 32, 16  # tiny_llama: hidden 32, 2 KV heads × head_dim 8
N_TOKENS = 16


def random_moa(stack, tli: int, lsa: bool = True, seed: int = 0) -> MoAHead:
    torch.manual_seed(seed)
    head = MoAHead(stack, torch.arange(stack.config.vocab_size), tli, lsa)
    with torch.no_grad():  # random but peaky, so drafts sometimes agree
        for p in head.parameters():
            if p.requires_grad and p.dim() == 2:
                p.mul_(4.0)
    return head.eval()


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    root = tmp_path_factory.mktemp("moa-view-drafts")
    engine = Engine(tiny_llama(vocab=16, layers=3, seed=4, logit_scale=3.0))
    stack = engine.target
    patch = pytest.MonkeyPatch()
    patch.setenv("SPECVIZ_DRAFTS", str(root))
    for tli, lsa in ((0, True), (1, True), (0, False)):
        card = {"name": moa_name(tli, lsa), "kind": "moa", "tli": tli, "lsa": lsa, "target_layers": stack.n_layers,
                "hidden_size": stack.config.hidden_size, "vocab_size": stack.config.vocab_size,
                "draft_vocab_size": stack.config.vocab_size}
        save_trained(card["name"], random_moa(stack, tli, lsa, seed=tli + 10 * lsa), card)
    yield engine
    patch.undo()


@pytest.fixture(scope="module")
def runs(engine) -> dict:
    """Client–server runs (lossless over 4G with extra loss so resends happen, one per TLI and −LSA), a lossy
    disconnected one, and a single-device one."""
    def run(**options):  # a fixed tree size: "auto" would first measure the tiny target's verify-cost curve
        return engine.run(PROMPT, "moa", max_new_tokens=N_TOKENS, depth=3, topk=3, total_tokens=8, **options)

    return {"tli1-4g": run(tli=1, network="4g", packet_loss=0.2, link_seed=3),
            "tli0-5g": run(tli=0, network="5g"),
            "nolsa-base": run(tli=0, lsa=False, network="base"),
            "connected-local": run(tli=1, network="local"),
            "lossy": run(tli=1, network="local", disconnect_after=4),
            "single": run(tli=0)}


def of(events, cls) -> list:
    return [e for e in events if isinstance(e, cls)]


def titles(fig: go.Figure) -> str:
    return fig.layout.title.text or ""


# --- metrics add up -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tli1-4g", "tli0-5g", "nolsa-base"])
def test_metrics_add_up_to_the_events_and_the_engines_stats(runs, name):
    result = runs[name]
    events, stats = result.events, result.stats
    m = mv.moa_metrics(events)
    sends = of(events, LinkSend)
    assert sends, "client–server runs always emit link_send"
    assert m["link_bytes"] == sum(e.bytes for e in sends) == stats.link_bytes
    assert m["link_bytes_up"] == sum(e.bytes for e in sends if e.direction == "up") > 0
    assert m["link_bytes_down"] == sum(e.bytes for e in sends if e.direction == "down") > 0
    assert m["link_seconds"] == pytest.approx(stats.link_seconds)
    assert m["link_seconds_up"] + m["link_seconds_down"] == pytest.approx(sum(e.seconds for e in sends))
    assert m["link_messages"] == stats.link_messages == len(sends)
    assert m["link_resends"] == stats.link_resends == sum(e.attempts - 1 for e in sends)
    steps = of(events, DraftStep)
    assert steps, "an instrumented client–server MoA run splits its drafting time"
    for part in mv.PARTS:
        assert m["draft_seconds"][part] == pytest.approx(sum(getattr(s, part) for s in steps))
    assert m["draft_total_s"] == pytest.approx(sum(s.sa + s.ca + s.tli + s.head for s in steps))
    assert m["lsa_seconds"] == pytest.approx(sum(e.seconds for e in of(events, Lsa)))
    assert m["server_calls"] == stats.target_calls and m["rounds"] == stats.rounds
    assert m["tau"] == pytest.approx(stats.mean_accepted_length)
    assert m["tokens_per_s"] == pytest.approx(stats.tokens_per_s)
    assert m["new_tokens"] == stats.new_tokens == N_TOKENS
    assert m["clock"] == "wall+link" and m["lossless"] and m["client_tokens"] == 0
    assert 0 < m["link_share"] < 1


def test_lossy_metrics_count_the_clients_own_tokens(runs):
    m = mv.moa_metrics(runs["lossy"].events)
    assert not m["lossless"] and m["client_tokens"] > 0
    assert m["server_calls"] == runs["lossy"].stats.target_calls < mv.moa_metrics(runs["connected-local"].events)[
        "server_calls"]


def test_tli_time_appears_only_with_tli(runs):
    assert mv.moa_metrics(runs["tli1-4g"].events)["draft_seconds"]["tli"] > 0
    assert mv.moa_metrics(runs["tli0-5g"].events)["draft_seconds"]["tli"] == 0


# --- figures from real runs -------------------------------------------------------------------------------
def test_draft_split_figure_stacks_the_draft_steps_beside_lsa(runs):
    events = runs["tli1-4g"].events
    fig = mv.draft_split_figure(events)
    by_name = {t.name.split(":")[0]: t for t in fig.data}
    assert set(by_name) == {"SA", "CA", "TLI", "head", "LSA (server, beside)"}
    steps = of(events, DraftStep)
    assert sum(by_name["SA"].y) == pytest.approx(1e3 * sum(s.sa for s in steps))
    assert sum(by_name["TLI"].y) == pytest.approx(1e3 * sum(s.tli for s in steps))
    lsa = [e for e in of(events, Lsa) if e.round > 0]
    assert sum(by_name["LSA (server, beside)"].y) == pytest.approx(1e3 * sum(e.seconds for e in lsa))
    assert list(by_name["SA"].x) == [r - 0.2 for r in sorted({s.round for s in steps})]
    assert "LOSSY" not in titles(fig)
    no_tli = {t.name.split(":")[0] for t in mv.draft_split_figure(runs["tli0-5g"].events).data}
    assert "TLI" not in no_tli and "SA" in no_tli


def test_gantt_has_client_link_and_server_rows_on_the_wall_link_clock(runs):
    events = runs["tli1-4g"].events
    fig = mv.client_server_gantt(events)
    assert "SIMULATED" in titles(fig) and "wall+link" in titles(fig)
    assert [t.split(" ·")[0] for t in fig.layout.yaxis.ticktext] == ["client", "link", "server"]
    sends = of(events, LinkSend)
    links = [t for t in fig.data if isinstance(t, go.Bar) and t.y[0] == mv.LINK_Y]
    assert sum(len(t.x) for t in links) == len(sends)
    starts = sorted(b for t in links for b in t.base)
    assert starts == pytest.approx(sorted(e.start for e in sends))
    assert sum(sum(t.x) for t in links) == pytest.approx(sum(e.seconds for e in sends))
    resent = [e for e in sends if e.attempts > 1]
    assert resent, "20 % packet loss on a seeded 4G link loses some messages"
    marked = [t for t in links if "lost and resent" in t.name]
    assert sum(len(t.x) for t in marked) == len(resent)
    assert any(t.name == "lost packet → resend" for t in fig.data)
    client = [t for t in fig.data if isinstance(t, go.Bar) and t.y[0] == mv.CLIENT_Y]
    drafts = [s for s in of(events, StageSpan) if s.stage == "draft"]
    assert sum(len(t.x) for t in client) == len(drafts)
    server_kinds = {t.name for t in fig.data if isinstance(t, go.Bar) and t.y[0] == mv.SERVER_Y}
    assert server_kinds == {"server: prefill", "server: verify", "server: LSA (end of verify)"}
    # LSA sits at the end of its round's verify span
    bars = mv.gantt_bars(events)
    verify = {b["round"]: b for b in bars if b["kind"] == "verify"}
    for b in bars:
        if b["kind"] == "lsa" and b["round"] in verify:
            assert b["end"] == verify[b["round"]]["end"] and b["start"] >= verify[b["round"]]["start"] - 1e-9
    window = mv.client_server_gantt(events, rounds=(2, 3))
    shown = sum(len(t.x) for t in window.data if isinstance(t, go.Bar))
    assert shown == sum(1 for b in mv.gantt_bars(events) if 2 <= b["round"] <= 3) > 0


def test_single_device_run_has_no_link_row_content(runs):
    fig = mv.client_server_gantt(runs["single"].events)
    assert "SIMULATED" not in titles(fig) and "no link" in titles(fig)
    assert not [t for t in fig.data if isinstance(t, go.Bar) and t.y[0] == mv.LINK_Y]
    assert mv.moa_metrics(runs["single"].events)["link_bytes"] == 0


@pytest.mark.parametrize("name, kind, tli", [("tli1-4g", "moa", 1), ("tli0-5g", "moa", 0),
                                             ("nolsa-base", "moa-nolsa", 0)])
def test_every_message_is_table_7_plus_header_and_scales(runs, name, kind, tli):
    events = runs[name].events
    assert mv.family(events) == kind and mv.run_tli(events) == tli
    rows = moa_messages.message_rows(events, hidden=HIDDEN, kv_width=KV_WIDTH)
    assert {r["direction"] for r in rows} == {"up", "down"}
    for row in rows:
        assert row["bytes"] == row["predicted"], row
    commits = {c.round: c for c in of(events, Commit)}
    up = next(r for r in rows if r["direction"] == "up")
    assert up["table7"] == 4 * commits[up["round"]].drafted == up["bytes"] - 4
    down = next(r for r in rows if r["direction"] == "down")
    verification = next(v for v in of(events, Verification) if v.round == down["round"])
    a = len(verification.accepted) + 1  # the accepted path and the server's own token
    width = HIDDEN if kind == "moa-nolsa" else 2 * KV_WIDTH * (tli + 1)
    assert down["bytes"] == 4 + 3 * a + a * (width + 2)
    if kind == "moa":
        assert down["table7"] == table7_bytes("moa", accepted=a, hidden=HIDDEN, kv_width=KV_WIDTH, tli=tli)["down"]
    sizes = moa_messages.measured_message_sizes(events, hidden=HIDDEN, kv_width=KV_WIDTH)
    assert sizes["up"] == pytest.approx(sizes["predicted_up"]) and sizes["down"] == pytest.approx(sizes["predicted_down"])
    prompt = [e for e in of(events, LinkSend) if e.round == 0]
    assert sizes["prompt_bytes"] == prompt[0].bytes and "gzip" in prompt[0].content


def test_message_size_figure_is_table_7_with_measured_runs_overlaid(runs):
    fig = moa_messages.message_size_figure(accepted=3, nodes=10, tli=1, hidden=HIDDEN, kv_width=KV_WIDTH,
                                 measured={"tli1": runs["tli1-4g"].events})
    bars = {t.name: t for t in fig.data if isinstance(t, go.Bar)}
    up, down = bars["Table 7 up: client → server (4n)"], bars["Table 7 down: server → client"]
    assert list(up.y) == [40, 40, 40]
    assert list(down.y) == [3 * 3 + 2 * 3 * KV_WIDTH * 2, 3 * 3 + 3 * HIDDEN, 9]
    marks = [t for t in fig.data if isinstance(t, go.Scatter)]
    sizes = moa_messages.measured_message_sizes(runs["tli1-4g"].events, HIDDEN, KV_WIDTH)
    assert sorted(t.y[0] for t in marks) == sorted([sizes["up"], sizes["down"]])
    assert "LOSSY" not in titles(fig)
    lossy = moa_messages.message_size_figure(hidden=HIDDEN, kv_width=KV_WIDTH, measured={"B=4": runs["lossy"].events})
    assert "LOSSY" in titles(lossy)


def test_a_lossy_run_says_so_in_every_title(runs):
    events = runs["lossy"].events
    assert events[0].lossless is False
    for fig in (mv.draft_split_figure(events), mv.client_server_gantt(events)):
        assert "LOSSY" in titles(fig)
    alone = [b for b in mv.gantt_bars(events) if b["kind"] == "alone"]
    assert alone and all(b["row"] == "client" for b in alone)
    assert "LOSSY" in titles(moa_bench_results.disconnection_curve(moa_bench_results.disconnection_points([1, 2], {1: [1, 3]})))


def test_figures_build_on_a_partial_run(runs):
    events = runs["tli1-4g"].events
    part = events[: int(0.3 * len(events))]
    for fig in (mv.draft_split_figure(part), mv.client_server_gantt(part)):
        assert isinstance(fig, go.Figure)
    assert mv.moa_metrics(part)["new_tokens"] < N_TOKENS
    assert mv.moa_metrics(events[:1])["tau"] is None


def test_showcase_round_has_the_longest_accepted_path(runs):
    events = runs["tli0-5g"].events
    chosen = mv.showcase_round(events)
    verifications = {v.round: len(v.accepted) for v in events if v.kind == "verification"}
    assert verifications[chosen] == max(verifications.values())


# --- disconnection ----------------------------------------------------------------------------------------
def test_disconnection_points_by_hand():
    connected = [1, 2, 3, 4, 5, 6, 7, 8]
    points = moa_bench_results.disconnection_points(connected, {math.inf: connected, 1: [1, 9, 3, 4, 5, 6, 7, 8],
                                                 10: [1, 2, 3, 4, 5, 6, 0, 0], "inf": connected})
    by = {p["label"]: p for p in points}
    assert [p["label"] for p in points][:2] == ["1", "10"]
    assert by["1"]["first_divergence"] == 1 and by["1"]["equal_fraction"] == pytest.approx(7 / 8)
    assert by["10"]["first_divergence"] == 6 and by["10"]["equal_fraction"] == pytest.approx(6 / 8)
    assert by["∞"]["first_divergence"] == 8 and by["∞"]["equal_fraction"] == 1.0
    short = moa_bench_results.disconnection_points(connected, {5: [1, 2, 3]})[0]
    assert short["first_divergence"] == 3 and short["equal_fraction"] == pytest.approx(3 / 8)


def test_disconnection_points_from_runs_know_where_the_client_took_over(runs):
    connected, lossy = runs["connected-local"], runs["lossy"]
    point = moa_bench_results.disconnection_points(connected.events, {4: lossy.events, None: connected.token_ids})[0]
    fates = [f for c in of(lossy.events, Commit) for f in c.fates]
    assert point["switch"] == fates.index("client") >= 4
    first = next((i for i, (a, b) in enumerate(zip(connected.token_ids, lossy.token_ids)) if a != b),
                 len(lossy.token_ids))
    assert point["first_divergence"] == first and point["first_divergence"] >= point["switch"]
    assert point["kept_after_switch"] == first - point["switch"]
    fig = moa_bench_results.disconnection_curve({"moa-tli1": moa_bench_results.disconnection_points(connected.token_ids,
                                                                        {4: lossy.events, "inf": connected.token_ids})})
    bars = [t for t in fig.data if isinstance(t, go.Bar)]
    assert list(bars[0].x) == ["after 4", "∞ (connected)"] and list(bars[0].y) == [first, N_TOKENS]


def test_disconnection_results_json():
    results = {"methods": {"moa(network=local)": {"1": {"kept_after_b": 2.5, "equal_share": 0.4, "prompts": []},
                                                  "10": {"kept_after_b": 7.0, "equal_share": 0.8, "prompts": []},
                                                  "inf": {"kept_after_b": None, "equal_share": 1.0, "prompts": []}}}}
    points = moa_bench_results.disconnection_points_from_results(results)["moa(network=local)"]
    assert [p["label"] for p in points] == ["1", "10", "∞"]
    assert [p["equal_fraction"] for p in points] == [0.4, 0.8, 1.0]
    fig = moa_bench_results.disconnection_curve(moa_bench_results.disconnection_points_from_results(results))
    assert list(fig.data[0].y) == [2.5, 7.0, None] and "LOSSY" in titles(fig)


# --- from bench results -----------------------------------------------------------------------------------
BENCH = {"setup": {}, "methods": {
    "eagle": {"overall": {"tau": 2.1, "speedup": 1.10, "tokens_per_s": 20.0}},
    "eagle(draft=eagle-matched)": {"overall": {"tau": 2.3, "speedup": 1.15, "tokens_per_s": 21.0}},
    "moa(tli=0)": {"overall": {"tau": 2.6, "speedup": 1.20, "tokens_per_s": 22.0}},
    "moa(tli=3)": {"overall": {"tau": 3.0, "speedup": 1.05, "tokens_per_s": 19.0}},
    "moa(drafter=moa-tli0-nolsa)": {"overall": {"tau": 2.4, "speedup": 1.12, "tokens_per_s": 21.5}},
}}


def test_short_labels():
    assert moa_bench_results.short_label("moa(tli=1)") == "moa-tli1"
    assert moa_bench_results.short_label("moa(tli=1, network=4g)") == "moa-tli1"
    assert moa_bench_results.short_label("moa(drafter=moa-tli0-nolsa)") == "−LSA (moa-tli0-nolsa)"
    assert moa_bench_results.short_label("moa(tli=0,lsa=false)") == "−LSA (moa-tli0-nolsa)"
    assert moa_bench_results.short_label("eagle(draft=eagle-matched, network=5g)") == "eagle-matched"
    assert moa_bench_results.short_label("eagle(draft=tiny,network=5g)") == "tiny"
    assert moa_bench_results.short_label("eagle") == "eagle" and moa_bench_results.short_label("moa") == "moa-tli0"
    assert moa_bench_results.short_label("moa(network=local, disconnect_after=10)") == "moa-tli0 disconnect_after=10"
    assert moa_bench_results.label_profile("moa(tli=1, network=4g)") == "4g" and moa_bench_results.label_profile("eagle") == "none"


def test_tau_by_drafter_figure():
    fig = moa_bench_results.tau_by_drafter_figure(BENCH["methods"])
    bars = fig.data[0]
    assert list(bars.x) == ["eagle", "eagle-matched", "moa-tli0", "moa-tli3", "−LSA (moa-tli0-nolsa)"]
    assert list(bars.y) == [2.1, 2.3, 2.6, 3.0, 2.4]
    assert list(fig.data[1].y) == [1.10, 1.15, 1.20, 1.05, 1.12]
    plain = moa_bench_results.tau_by_drafter_figure({"moa(tli=1)": {"tau": 2.0, "speedup": None}})
    assert list(plain.data[0].y) == [2.0] and "LOSSY" not in titles(plain)
    assert "LOSSY" in titles(moa_bench_results.tau_by_drafter_figure({"moa(network=local,disconnect_after=10)": {"tau": 2.0}}))


def test_network_figure_from_results_per_profile():
    def results(profile, calls):
        return {"methods": {f"moa(tli=0, network={profile})": {"overall": {
                                "tau": 2.5, "tokens_per_s": 10.0 * calls, "clock": "wall+link",
                                "link": {"server_calls_per_answer": calls}}},
                            f"eagle(draft=tiny, network={profile})": {"overall": {
                                "tau": 2.0, "tokens_per_s": 5.0 * calls, "link": {"server_calls_per_answer": calls + 1}}}}}

    fig = moa_bench_results.network_figure({"5g": results("5g", 20), "4g": results("4g", 30)})
    rows = moa_bench_results.network_rows({"5g": results("5g", 20), "4g": results("4g", 30)})
    assert {(r["profile"], r["drafter"], r["server_calls"]) for r in rows} == {
        ("5g", "moa-tli0", 20), ("5g", "tiny", 21), ("4g", "moa-tli0", 30), ("4g", "tiny", 31)}
    calls = [t for t in fig.data if t.xaxis == "x2"]
    assert {t.name: list(t.y) for t in calls} == {"moa-tli0": [20, 30], "tiny": [21, 31]}
    merged = {"methods": {**results("5g", 20)["methods"], **results("4g", 30)["methods"]}}
    assert {r["profile"] for r in moa_bench_results.network_rows(merged)} == {"5g", "4g"}
    assert "simulated" in titles(fig)


# --- theory -----------------------------------------------------------------------------------------------
def test_moa_cycle_seconds_is_the_derived_formula():
    # 10 ms draft + 20 ms RTT + 8·(64 + 1000) bits at 1 Mbit/s + 30 ms verify + 2 ms LSA
    assert moa_cycle_seconds(0.010, 0.020, 64, 1000, 1e6, 0.030, 0.002) == pytest.approx(
        0.010 + 0.020 + 8 * 1064 / 1e6 + 0.030 + 0.002)
    assert moa_cycle_seconds(0.01, 0.0, 1e9, 1e9, None, 0.02) == pytest.approx(0.03)  # unlimited link
    for bad in (dict(t_draft=-1), dict(rtt=-0.1), dict(bytes_up=-1), dict(bytes_down=-1), dict(t_verify=-1),
                dict(t_lsa=-1e-3)):
        args = dict(t_draft=0.01, rtt=0.01, bytes_up=10, bytes_down=10, bandwidth_bps=1e6, t_verify=0.01, t_lsa=0.0)
        args.update(bad)
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be >= 0"):
            moa_cycle_seconds(**args)
    for bandwidth in (0, -5):
        with pytest.raises(ValueError, match="bandwidth_bps must be > 0"):
            moa_cycle_seconds(0.01, 0.01, 10, 10, bandwidth, 0.01, 0.0)


def test_server_calls_per_answer():
    assert server_calls_per_answer(101, 4.0) == pytest.approx(26.0)  # prefill + 100/4 verifications
    assert server_calls_per_answer(100, 4.0, prefill=False) == pytest.approx(25.0)  # the paper's n/τ
    assert server_calls_per_answer(1, 2.0) == 1.0
    with pytest.raises(ValueError, match="new_tokens must be >= 0"):
        server_calls_per_answer(-1, 2.0)
    with pytest.raises(ValueError, match="tau must be >= 1"):
        server_calls_per_answer(10, 0.5)


def test_server_calls_match_a_real_run(runs):
    m = mv.moa_metrics(runs["tli0-5g"].events)
    assert server_calls_per_answer(m["new_tokens"], m["tau"]) == pytest.approx(m["server_calls"])


def test_break_even_tli_and_cycle_rows():
    assert moa_break_even_tli(576, 192) == 1  # SmolLM2: 384 < 576 at TLI 0, 768 > 576 at TLI 1
    assert moa_break_even_tli(4096, 1024) == 2  # Llama3-8B: 2048, 4096 (equal), 6144
    with pytest.raises(ValueError):
        moa_break_even_tli(0, 192)
    rows = moa_messages.cycle_time_rows(0.01, 0.03, 0.002, accepted=4, nodes=16)
    four_g = next(r for r in rows if r["profile"] == "4g" and r["drafter"] == "moa")
    down = table7_bytes("moa", accepted=4)["down"]
    assert four_g["transfer"] == pytest.approx(8 * (64 + down) / PROFILES["4g"].bandwidth_bps)
    assert four_g["rtt"] == pytest.approx(2 * (PROFILES["4g"].base_delay_s + PROFILES["4g"].jitter_mean_s))
    assert next(r for r in rows if r["drafter"] == "eagle")["lsa"] == 0.0
    assert isinstance(moa_messages.cycle_time_figure(0.01, 0.03, 0.002, 4, 16, tau=3.0), go.Figure)


def test_message_size_explorer_builds_and_reads_out():
    from specviz.widgets.theory_explorers import message_size_explorer, message_size_readout

    box = message_size_explorer()
    assert box.children
    text = message_size_readout(accepted=4, nodes=16, tli=0, kv_width=192, hidden=576)
    assert "1,548 bytes" in text and "2,316 bytes" in text and "TLI = 1" in text  # 12 + 4·384 vs 12 + 4·576
    assert "bigger" in message_size_readout(accepted=4, nodes=16, tli=1, kv_width=192, hidden=576)


# --- what the three attentions see (specviz.views.moa_attention) ------------------------------------------
def test_attention_maps_recompute_each_attention_and_draft_what_the_drafter_drafts(engine):
    from specviz.views.moa_attention import attention_figure, attention_maps

    gamma = 3
    maps = attention_maps(engine, PROMPT, drafter=moa_name(0), draft_tokens=gamma)
    assert maps["max_error"] < 1e-4, "weights × values through each module's output must give the module's own output"
    layers, n = engine.target.n_layers, len(PROMPT)
    assert maps["lsa"].shape == (layers, layers) and torch.allclose(maps["lsa"].sum(1), torch.ones(layers))
    sa = maps["sa"]
    assert sa.shape == (n + 1 + gamma, n + 1 + gamma)
    assert torch.isnan(sa[0, 1:]).all() and not torch.isnan(sa.tril()).any(), "SA is causal: NaN above the diagonal"
    assert torch.allclose(torch.nan_to_num(sa).sum(1), torch.ones(len(sa)))
    assert maps["ca"].shape == (gamma, 1 + n), "the root and the drafts read the null row and every verified token"
    assert torch.allclose(maps["ca"].sum(1), torch.ones(gamma))
    run = engine.run(PROMPT, "moa", tree=False, gamma=gamma, max_new_tokens=2 + gamma)
    tree = next(e for e in run.events if e.kind == "draft_tree")
    assert maps["root"] == run.token_ids[0]
    assert maps["drafted"] == [node["token"] for node in tree.nodes], "the chain the drafter itself drafts"
    fig = attention_figure(maps, lambda t: f"<{t}>")
    assert [trace.type for trace in fig.data] == ["heatmap"] * 3
    with pytest.raises(ValueError, match="draft_tokens"):
        attention_maps(engine, PROMPT, drafter=moa_name(0), draft_tokens=0)
    with pytest.raises(ValueError, match="with LSA"):
        attention_maps(engine, PROMPT, drafter=moa_name(0, lsa=False))
    with pytest.raises(ValueError, match="TLI = 0"):
        attention_maps(engine, PROMPT, drafter=moa_name(1))
