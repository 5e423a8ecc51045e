"""The simulated client–server link (engines/network/link.py): real bytes on the wire, simulated seconds."""

import math

import pytest
import torch

from engines.network.link import (
    HEADER,
    PROFILES,
    Delivery,
    Link,
    LinkProfile,
    decode_draft,
    decode_verdict,
    dequantize_rows,
    encode_draft,
    encode_verdict,
    link_profile,
    quantize_rows,
    table7_bytes,
    transfer_seconds,
)

# --- profiles -----------------------------------------------------------------------------------------

def test_profiles_hold_the_papers_numbers():
    assert set(PROFILES) == {"local", "base", "5g", "4g"}
    assert PROFILES["local"] == LinkProfile("local", 0.0, 0.0, 0.0, None, 0.0)
    assert PROFILES["base"] == LinkProfile("base", 0.0045, 0.0, 0.0, 50e6, 0.0)
    assert PROFILES["5g"] == LinkProfile("5g", 0.0045, 0.010, 0.010, 50e6, 0.001)
    assert PROFILES["4g"] == LinkProfile("4g", 0.0045, 0.021, 0.019, 20e6, 0.001)


def test_link_profile_overrides_only_the_loss():
    assert link_profile("4g") is PROFILES["4g"]
    lossy = link_profile("4g", loss=0.05)
    assert lossy.loss == 0.05
    kept = (lossy.base_delay_s, lossy.jitter_mean_s, lossy.jitter_std_s, lossy.bandwidth_bps)
    assert kept == (0.0045, 0.021, 0.019, 20e6)
    assert link_profile("local", loss=0).loss == 0.0


@pytest.mark.parametrize("name, loss, message", [
    ("6g", None, "must be one of local, base, 5g, 4g"),
    ("5g", 1.0, r"loss must be in \[0, 1\), got 1.0"),
    ("5g", -0.1, r"loss must be in \[0, 1\), got -0.1"),
    ("5g", True, r"loss must be in \[0, 1\)"),
])
def test_bad_profile_requests_raise(name, loss, message):
    with pytest.raises(ValueError, match=message):
        link_profile(name, loss=loss)


def test_transfer_seconds_is_the_mean_lossless_formula():
    assert transfer_seconds(PROFILES["local"], 10**6) == 0.0
    assert transfer_seconds(PROFILES["base"], 1000) == pytest.approx(0.0045 + 8000 / 50e6)
    assert transfer_seconds(PROFILES["4g"], 20_000) == pytest.approx(0.0045 + 0.021 + 0.008)


# --- the link -----------------------------------------------------------------------------------------

def test_local_costs_nothing():
    link = Link(PROFILES["local"])
    d = link.send(b"x" * 100_000, "down")
    assert d == Delivery("down", 100_000, 0.0, 1, 67)


def test_base_link_time_is_delay_plus_bandwidth_and_packets_round_up():
    link = Link(PROFILES["base"])
    small, big = link.send(b"x" * 1500, "up"), link.send(b"x" * 15_001, "down")
    assert small.seconds == pytest.approx(0.0045 + 8 * 1500 / 50e6)
    assert big.seconds - small.seconds == pytest.approx(8 * 13_501 / 50e6)  # only the bandwidth term grows
    assert (small.packets, big.packets, link.send(b"", "up").packets) == (1, 11, 1)
    assert link.totals() == {"messages": 3, "resends": 0, "bytes_up": 1500, "bytes_down": 15_001,
                             "seconds_up": pytest.approx(2 * 0.0045 + 8 * 1500 / 50e6),
                             "seconds_down": pytest.approx(0.0045 + 8 * 15_001 / 50e6)}
    assert [d.bytes for d in link.log] == [1500, 15_001, 0]


def test_delays_are_seeded_and_reproducible():
    def run(seed):
        link = Link(PROFILES["5g"], seed=seed)
        return [link.send(b"x" * 400, "up").seconds for _ in range(20)]
    assert run(3) == run(3)
    assert run(3) != run(4)
    assert min(run(3)) >= 0.0045 + 8 * 400 / 50e6  # jitter is clipped at 0, never negative


def test_5g_mean_delay_matches_the_clipped_normal():
    link = Link(PROFILES["5g"], seed=0)
    mean = sum(link.send(b"x" * 100, "up").seconds for _ in range(4000)) / 4000
    mu, sigma = 0.010, 0.010  # E[max(0, N(mu, sigma))] = mu·Φ(mu/sigma) + sigma·φ(mu/sigma)
    clipped = mu * 0.5 * (1 + math.erf(1 / math.sqrt(2))) + sigma * math.exp(-0.5) / math.sqrt(2 * math.pi)
    expected = 0.0045 + clipped + 8 * 100 / 50e6 + 0.001 * Link.RTO_S  # + rare resends
    assert mean == pytest.approx(expected, abs=1e-3)


def test_high_loss_resends_and_each_resend_costs_one_timeout():
    lossless, lossy = Link(PROFILES["base"]), Link(link_profile("base", loss=0.5), seed=1)
    for _ in range(20):
        lossless.send(b"x" * 3000, "down")
        lossy.send(b"x" * 3000, "down")
    assert lossless.totals()["resends"] == 0
    assert lossy.totals()["resends"] >= 20  # a 2-packet message gets through with probability 1/4
    one_try = 0.0045 + 8 * 3000 / 50e6
    for d in lossy.log:
        assert d.packets == 2
        assert d.seconds == pytest.approx((d.attempts - 1) * Link.RTO_S + one_try)
    assert lossy.totals()["resends"] == sum(d.attempts - 1 for d in lossy.log)
    assert lossy.totals()["seconds_down"] > lossless.totals()["seconds_down"] + 20 * Link.RTO_S


def test_bad_direction_raises():
    with pytest.raises(ValueError, match="direction must be 'up' or 'down', got 'sideways'"):
        Link(PROFILES["local"]).send(b"x", "sideways")


# --- the wire format ----------------------------------------------------------------------------------

def test_draft_round_trip_and_exact_bytes():
    tokens, parents = [1, 2, 0xABCDEF], [-1, 0, 0]
    payload = encode_draft(tokens, parents)
    assert payload.hex() == "01030000" + "010000" + "020000" + "efcdab" + "000101"
    assert decode_draft(payload) == (tokens, parents)
    assert decode_draft(encode_draft([], [])) == ([], [])
    full = encode_draft(list(range(255)), [-1] + list(range(254)))
    assert decode_draft(full) == (list(range(255)), [-1] + list(range(254)))


def test_verdict_round_trips():
    assert decode_verdict(encode_verdict([7, 2**24 - 1])) == ([7, 2**24 - 1], None)
    assert decode_verdict(encode_verdict([])) == ([], None)
    assert decode_verdict(encode_verdict([], compress=True)) == ([], None)
    x = torch.tensor([[127.0, -63.0, 1.0], [0.0, 0.0, 0.0]])  # scale 1: exact; an all-zero row stays zero
    ids, back = decode_verdict(encode_verdict([5, 6], x))
    assert ids == [5, 6] and back.dtype == torch.float32 and torch.equal(back, x)
    rows = torch.randn(30, 64, generator=torch.Generator().manual_seed(0))
    plain, packed = encode_verdict([1], rows), encode_verdict([1], rows, compress=True)
    assert plain[0] == 0x42 and packed[0] == 0xC2  # verdict | activations (| gzipped)
    ids_a, a = decode_verdict(plain)
    ids_b, b = decode_verdict(packed)
    assert ids_a == ids_b == [1] and a.shape == (30, 64) and torch.equal(a, b)
    for empty in (torch.zeros(0, 7), torch.zeros(3, 0)):
        ids, back = decode_verdict(encode_verdict([9], empty))
        assert ids == [9] and back.shape == empty.shape


def test_gzip_shrinks_a_repetitive_message():
    rows = torch.randn(40, 64, generator=torch.Generator().manual_seed(1)).round()
    assert len(encode_verdict([1], rows, compress=True)) < 0.6 * len(encode_verdict([1], rows))


def test_int8_error_is_at_most_half_a_step_per_row():
    x = torch.randn(16, 100, generator=torch.Generator().manual_seed(2)) * torch.logspace(-3, 3, 16)[:, None]
    values, scales = quantize_rows(x)
    assert values.dtype == torch.int8 and scales.dtype == torch.float16 and scales.shape == (16,)
    assert values.abs().max() == 127
    err = (x - dequantize_rows(values, scales)).abs().amax(dim=1)
    assert bool((err <= scales.float() * 0.5 * (1 + 1e-3)).all())
    torch.testing.assert_close(scales.float(), x.abs().amax(dim=1) / 127, rtol=1e-3, atol=0)


def test_sizes_are_table7_plus_header_and_row_scales():
    """Draft: Table 7's 4M + the 4-byte header. Verdict: 3A + A·W (one byte per value) + 4 + 2 bytes
    (one float16 scale) per activation row."""
    assert HEADER.size == 4
    m, a, kv, tli, hidden = 12, 4, 192, 1, 576
    assert table7_bytes("moa", nodes=m, accepted=a, kv_width=kv, tli=tli) == {"up": 48, "down": 3 * 4 + 4 * 768}
    draft = encode_draft([3] * m, [-1] + list(range(m - 1)))
    assert len(draft) == table7_bytes("tiny", nodes=m)["up"] + 4 == 52
    moa = encode_verdict([1] * a, torch.randn(a, 2 * kv * (tli + 1)))
    assert len(moa) == table7_bytes("moa", accepted=a, kv_width=kv, tli=tli)["down"] + 4 + 2 * a == 3096
    eagle = encode_verdict([1] * a, torch.randn(a, hidden))
    assert len(eagle) == table7_bytes("eagle", accepted=a, hidden=hidden)["down"] + 4 + 2 * a
    assert len(encode_verdict([1] * a)) == table7_bytes("tiny", accepted=a)["down"] + 4 == 16


def test_table7_formulas():
    assert table7_bytes("tiny", nodes=10, accepted=3) == {"up": 40, "down": 9}
    assert table7_bytes("eagle", nodes=10, accepted=3, hidden=4096) == {"up": 40, "down": 9 + 3 * 4096}
    assert table7_bytes("moa", accepted=3, kv_width=1024, tli=3, bytes_per_value=2) == \
        {"up": 0, "down": 9 + 2 * 3 * 1024 * 4 * 2}


@pytest.mark.parametrize("call, message", [
    (lambda: encode_draft(list(range(256)), [-1] * 256), "at most 255 nodes"),
    (lambda: encode_draft([2**24], [-1]), r"token ids must be in \[0, 2\^24\)"),
    (lambda: encode_draft([-1], [-1]), r"token ids must be in \[0, 2\^24\)"),
    (lambda: encode_draft([1, 2], [-1]), "same length"),
    (lambda: encode_draft([1, 2], [-1, 1]), "parent must be -1"),
    (lambda: encode_verdict([2**24]), r"token ids must be in \[0, 2\^24\)"),
    (lambda: encode_verdict([1] * 256), "at most 255 tokens"),
    (lambda: encode_verdict([1], torch.zeros(2, 3, 4)), "must be 2-D"),
    (lambda: encode_verdict([1], torch.tensor([[float("nan")]])), "must be finite"),
    (lambda: decode_draft(encode_verdict([1])), "payload kind must be 1"),
    (lambda: decode_verdict(encode_draft([1], [-1])), "payload kind must be 2"),
    (lambda: decode_verdict(b"\x02"), "at least the 4-byte header"),
    (lambda: decode_draft(encode_draft([1, 2], [-1, 0])[:-1]), "8-byte body"),
    (lambda: table7_bytes("glide", nodes=1), "method must be one of moa, eagle, tiny"),
    (lambda: table7_bytes("moa", nodes=-1), "nodes must be an integer >= 0"),
    (lambda: table7_bytes("moa", bytes_per_value=0), "bytes_per_value must be > 0"),
])
def test_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()
