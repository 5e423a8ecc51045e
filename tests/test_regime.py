"""The regime projection on hand-built terms (no model): its laws' limits, the hardware model, the presets."""

import math

import pytest

from specviz.regime.hardware import CLIENT_4G, GPU, LAPTOP, PHONE, Hardware, fit_this_machine, step_seconds
from specviz.regime.projection import MachineTerms, MethodTerms, check_rows, projected_speedup, projection_table

W = 269e6
HERE = Hardware("here", bandwidth=15e9, compute=70e9, lanes=2, link_latency=1e-3, link_bandwidth=15e9,
                step_overhead=1e-3, overlap=0.0)


def _terms(*methods):
    ar = MethodTerms(label="ar", method="ar", law="ar", tau=1.0, alpha=0.0, a=0.0, gamma_bar=0.0, c=0.0,
                     measured_speedup=1.0)
    return MachineTerms(weight_bytes=W, ar_step_model=step_seconds(HERE, W, 1), ar_tokens_per_s=40.0,
                        this_machine=HERE, methods=[ar, *methods])


def chain(tau=2.0, c=0.1, rows=5, draft=0.4, label="sps"):
    return MethodTerms(label=label, method="sps", law="serial", tau=tau, alpha=0.5, a=0.5, gamma_bar=4, c=c,
                       forwards=[["verify", rows, 1.0]], draft=draft, measured_speedup=1.0)


@pytest.mark.parametrize("hw", [HERE, LAPTOP, PHONE, GPU, CLIENT_4G])
def test_ar_projects_to_one_everywhere(hw):
    terms = _terms()
    assert projected_speedup(terms, terms.methods[0], hw) == 1.0


def test_free_drafting_with_nothing_accepted_projects_to_one_verification_of_one_row():
    """τ = 1, no drafting cost, one row verified: the round is an ar step."""
    terms = _terms(chain(tau=1.0, c=0.0, rows=1, draft=0.0))
    for hw in (HERE, LAPTOP, GPU, PHONE):
        assert projected_speedup(terms, terms.methods[1], hw) == pytest.approx(1.0)


def test_more_bandwidth_never_slows_a_memory_bound_method():
    terms = _terms(chain())
    m = terms.methods[1]
    machines = [GPU.with_numbers(bandwidth=b * 1e9) for b in (500, 1000, 3350, 8000)]
    rounds = [m.tau * step_seconds(hw, W, 1) / projected_speedup(terms, m, hw) for hw in machines]
    assert rounds == sorted(rounds, reverse=True), "a round never takes longer with more bandwidth"


def test_rows_are_nearly_free_on_a_gpu_and_expensive_here():
    terms = _terms(chain(tau=3.0, c=0.05, rows=16, draft=0.2))
    m = terms.methods[1]
    assert projected_speedup(terms, m, GPU) > 2.0 > projected_speedup(terms, m, HERE)


def test_a_round_trip_per_token_makes_every_accepted_token_pay():
    """Over 4G ar pays a round trip per token, a chain one per round: S approaches τ."""
    terms = _terms(chain(tau=3.0))
    assert projected_speedup(terms, terms.methods[1], CLIENT_4G) == pytest.approx(3.0, rel=0.1)


def test_overlap_laws_lose_their_overlap_on_one_lane():
    mirror = MethodTerms(label="mirror", method="mirror", law="mirror", tau=2.0, alpha=0.5, a=0.5, gamma_bar=3,
                         c=0.3, draft=0.8, hops=2, forwards=[["prefix", 4, 0.4], ["suffix", 4, 0.6]])
    terms = _terms(mirror)
    assert projected_speedup(terms, mirror, HERE) > projected_speedup(terms, mirror, HERE.with_numbers(lanes=1))


def test_ppsd_law_at_full_acceptance_is_one_token_a_tick():
    ppsd = MethodTerms(label="ppsd", method="ppsd", law="ppsd", tau=1.0, alpha=1.0, a=1.0, gamma_bar=1, c=0.0,
                       forwards=[["tick", 1, 0.5]], stages=2)
    terms = _terms(ppsd)
    hw = HERE.with_numbers(link_latency=0.0)
    assert projected_speedup(terms, ppsd, hw) == pytest.approx(step_seconds(hw, W, 1) / step_seconds(hw, W, 1, 0.5))


def test_flash_streams_what_the_budget_leaves_out():
    assert step_seconds(PHONE, W, 1) > step_seconds(PHONE.with_numbers(memory_budget=math.inf), W, 1) * 5


def test_check_rows_compare_projection_with_measurement():
    terms = _terms(chain())
    rows = check_rows(terms)
    assert [r["label"] for r in rows] == ["ar", "sps"]
    assert rows[1]["ratio"] == pytest.approx(rows[1]["projected"] / rows[1]["measured"])
    assert set(projection_table(terms, [HERE, GPU])["sps"]) == {"here", GPU.name}


def test_the_fit_reproduces_the_curve_it_was_fitted_to():
    straight = {n: 0.020 + 0.004 * n for n in range(1, 17)}
    hw = fit_this_machine(straight, int(W), bandwidth_gb_s=15.0, lane_hop_s=1e-3)
    assert all(step_seconds(hw, W, n) == pytest.approx(t, rel=0.03) for n, t in straight.items())
    # a roofline that bends where arithmetic overtakes memory: flat for few rows, steeper after
    truth = Hardware("truth", bandwidth=15e9, compute=W / 0.003, lanes=2, link_latency=1e-3, link_bandwidth=15e9,
                     step_overhead=0.002, overlap=0.6)
    bent = {n: step_seconds(truth, W, n) for n in range(1, 17)}
    hw = fit_this_machine(bent, int(W), bandwidth_gb_s=15.0, lane_hop_s=1e-3)
    assert all(step_seconds(hw, W, n) == pytest.approx(t, rel=0.03) for n, t in bent.items())
    assert hw.overlap > 0.3, "a bent curve is read as memory and arithmetic overlapping"


@pytest.mark.parametrize("field,value", [("bandwidth", 0), ("compute", -1), ("lanes", 0), ("overlap", 2),
                                         ("link_latency", -1), ("memory_budget", 0)])
def test_bad_numbers_name_their_field(field, value):
    with pytest.raises(ValueError, match=field):
        GPU.with_numbers(**{field: value})


def test_terms_round_trip_through_json():
    terms = _terms(chain())
    again = MachineTerms.from_dict(terms.to_dict())
    assert again.methods[1] == terms.methods[1] and again.this_machine == terms.this_machine
    assert CLIENT_4G == Hardware.from_dict(CLIENT_4G.to_dict())


def test_the_4g_client_is_notebook_08s_simulated_4g_link():
    """One source of truth for 4G: the regime map's client and the MoA runs use the same link profile."""
    from engines.network.link import PROFILES, transfer_seconds

    profile = PROFILES["4g"]
    assert CLIENT_4G.link_latency == pytest.approx(profile.base_delay_s + profile.jitter_mean_s)
    assert CLIENT_4G.link_latency == transfer_seconds(profile, 0)
    assert CLIENT_4G.link_bandwidth == pytest.approx(profile.bandwidth_bps / 8), "bytes/s, the link's bits/s ÷ 8"
