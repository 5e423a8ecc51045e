"""The papers' analytic models, so every plot can lay theory beside measurement.

Leviathan et al. (2023), with a the per-token acceptance probability (the paper's α: each draft token
accepted independently with probability a), γ the draft length and c the cost of one draft step as a
fraction of one target step (verifying γ+1 tokens is assumed to cost one step):

    E[tokens per round] = (1 − a^(γ+1)) / (1 − a)
    speedup             = (1 − a^(γ+1)) / ((1 − a)(γ·c + 1))

The functions take a as ``alpha``. Measured, a is estimated by the per-position acceptance (accepted ÷
draft positions the target judged, ``Stats.per_token_acceptance``), not by the acceptance rate α of the
README's glossary (accepted ÷ drafted), which also counts drafts after a rejection that were never judged.

Draft trees (EAGLE-2) extend the model with ranks: see the section "draft trees" below. Speculation on
the verdict (Mirror-SD, SSD) has latency laws of its own: see the last section.
"""

from __future__ import annotations

import heapq
import json
import math
from pathlib import Path
from typing import Callable, Sequence


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if alpha == 1:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def expected_speedup(alpha: float, gamma: int, cost_ratio: float) -> float:
    if cost_ratio < 0:
        raise ValueError(f"cost_ratio must be >= 0, got {cost_ratio}")
    return expected_tokens_per_round(alpha, gamma) / (gamma * cost_ratio + 1)


def optimal_gamma(alpha: float, cost_ratio: float, max_gamma: int = 32) -> int:
    return max(range(1, max_gamma + 1), key=lambda g: expected_speedup(alpha, g, cost_ratio))


# --- draft trees ------------------------------------------------------------------------------------
# The same i.i.d. model, with ranks: at every position the target's token is the drafter's r-th choice
# with probability c_r (c_1 = top-1 agreement, c_1 + … + c_k = top-k coverage a_k). A tree node whose
# path takes ranks (r_1, …, r_d) is accepted exactly when the whole path is, with probability
# c_{r_1}·…·c_{r_d}, and each accepted node adds one token, so a round commits
#
#     E[tokens per round] = 1 + Σ_nodes Π c_{r_i}
#
# A chain (k = 1) gives (1 − a^{D+1})/(1 − a) with a = c_1; the full tree with k children under every
# node gives the same formula with a = a_k, at k + k² + … + k^D nodes. The best tree of N nodes is the N
# most probable paths (EAGLE-2 ranks by the drafter's own path probability for the same reason).

DEFAULT_AGREEMENT = Path(__file__).resolve().parent.parent / "data" / "bench" / "bf16" / "agreement-heldout.json"


def heldout_topk_agreement(drafter: str = "eagle", path: str | Path = DEFAULT_AGREEMENT) -> dict[int, float]:
    """Measured top-k coverage ``{k: a_k}`` of a shipped drafter (``specviz agreement``, held-out answers)."""
    record = json.loads(Path(path).read_text())["agreement"]
    if drafter not in record:
        raise ValueError(f"no agreement recorded for {drafter!r}; recorded: {sorted(record)}")
    return {int(k): float(v) for k, v in record[drafter].items()}


def rank_probabilities(coverage: dict[int, float], topk: int) -> list[float]:
    """c_1 … c_topk from cumulative coverage measured at a few k (e.g. 1, 2, 4, 8): between two measured k
    the extra coverage is shared evenly by the ranks in between; beyond the last measured k, nothing more."""
    if not coverage or min(coverage) != 1:
        raise ValueError("coverage must include k = 1 (the top-1 agreement)")
    if topk < 1:
        raise ValueError(f"topk must be >= 1, got {topk}")
    known = sorted(coverage)
    cumulative = []
    for k in range(1, topk + 1):
        below = max(m for m in known if m <= k)
        above = min((m for m in known if m >= k), default=below)
        weight = 0.0 if above == below else (k - below) / (above - below)
        cumulative.append(coverage[below] * (1 - weight) + coverage[above] * weight)
    return [cumulative[0]] + [b - a for a, b in zip(cumulative, cumulative[1:])]


def best_tree_paths(rank_probs: Sequence[float], depth: int, max_nodes: int) -> list[float]:
    """Acceptance probabilities of the ``max_nodes`` most probable paths of depth ≤ ``depth`` (each node has
    ``len(rank_probs)`` children), best first. A child is never likelier than its parent, so the best N
    paths always include their ancestors: they form a tree, found by expanding the likeliest node first."""
    if depth < 1 or max_nodes < 0:
        raise ValueError(f"need depth >= 1 and max_nodes >= 0, got {depth}, {max_nodes}")
    frontier = [(-c, 1) for c in rank_probs if c > 0]
    heapq.heapify(frontier)
    chosen: list[float] = []
    while frontier and len(chosen) < max_nodes:
        negative, level = heapq.heappop(frontier)
        chosen.append(-negative)
        if level < depth:
            for c in rank_probs:
                if c > 0:
                    heapq.heappush(frontier, (negative * c, level + 1))
    return chosen


def expected_tree_tokens(rank_probs: Sequence[float], depth: int, nodes: int | None = None) -> float:
    """E[tokens per round] of the best ``nodes``-node tree; ``None`` = the full tree (every node has
    ``len(rank_probs)`` children, down to ``depth``)."""
    if nodes is None:
        a = sum(rank_probs)
        return sum(a ** d for d in range(depth + 1))
    return 1.0 + sum(best_tree_paths(rank_probs, depth, nodes))


def full_tree_nodes(topk: int, depth: int) -> int:
    """k + k² + … + k^D: what verifying every branch would cost."""
    return sum(topk ** d for d in range(1, depth + 1))


def tree_speedup(tokens_per_round: float, nodes: int, depth: int, draft_cost: float,
                 verify_cost: Callable[[int], float]) -> float:
    """τ·cost(1) / (t_draft + cost(nodes + 1)), with t_draft = depth·c·cost(1): the drafter runs once per
    level (a level's nodes in one batched call), each call costing c target steps; the target verifies
    the root and the nodes in one forward whose cost ``verify_cost(n)`` comes from the machine's curve."""
    step = verify_cost(1)
    return tokens_per_round * step / (depth * draft_cost * step + verify_cost(nodes + 1))


# --- CATS under a memory budget (paper 004; a [derived] time model, docs/trees-and-cats.md) -------------
# Layers 1..ℓ_SV are resident; the deep layers stream from flash once per forward, chunk i+1 loading while
# chunk i computes, so a pass over them costs max(bytes / bandwidth, compute) (for chunks of equal size).
# A CATS cycle drafts γ times through the shallow layers, runs the shallow verifier and the re-forward,
# then one deep pass; autoregressive decoding pays one shallow and one deep pass per token:
#
#     T_cycle = γ·t_DM + t_SV + t_reforward + max(bytes_deep / B, t_deep)
#     T_AR    = t_shallow + max(bytes_deep / B, t_deep,AR)
#     speedup = τ · T_AR / T_cycle            BPT = bytes streamed per cycle / τ


def streamed_pass_seconds(deep_bytes: float, bandwidth_bytes_s: float, compute_seconds: float) -> float:
    if bandwidth_bytes_s <= 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth_bytes_s}")
    return max(deep_bytes / bandwidth_bytes_s, compute_seconds)


def cats_cycle_seconds(gamma: int, draft_step: float, shallow_verify: float, reforward: float, deep_bytes: float,
                       bandwidth_bytes_s: float, deep_compute: float) -> float:
    return gamma * draft_step + shallow_verify + reforward + streamed_pass_seconds(deep_bytes, bandwidth_bytes_s,
                                                                                   deep_compute)


def cats_speedup(tau: float, cycle_seconds: float, ar_token_seconds: float) -> float:
    """τ · T_AR / T_cycle: tokens per cycle over what autoregressive decoding takes for one token."""
    return tau * ar_token_seconds / cycle_seconds


def bytes_per_token(bytes_per_cycle: float, tau: float) -> float:
    """The paper's BPT: weight bytes streamed per cycle over the tokens a cycle commits (β̄ + 1 = τ)."""
    return bytes_per_cycle / tau


# --- PPSD (paper 003, Eqs. 4, 6, 7; docs/ppsd.md) -------------------------------------------------
def eesd_speedup(alpha: float, gamma: int, exit_layer: int, n_layers: int) -> float:
    """Eq. 4: early-exit self-speculation drafting γ tokens from layer ℓ of L, verifying with the rest,
    S_EESD = (1 − a^{γ+1})·L / ((1 − a)(γℓ + L)), a (``alpha``) the per-token acceptance probability (the
    paper's α; its N, E and ρ are L, ℓ and S_EESD here)."""
    if alpha >= 1:
        return (gamma + 1) * n_layers / (gamma * exit_layer + n_layers)
    return (1 - alpha ** (gamma + 1)) * n_layers / ((1 - alpha) * (gamma * exit_layer + n_layers))


def ppsd_speedup(alpha: float, exit_layer: int, n_layers: int, head_layers: float = 0.0) -> float:
    """Eq. 6: S_PPSD = L / (aℓ + (1 − a)·⌈L/ℓ⌉·ℓ), a (``alpha``) the per-token acceptance probability: an
    accepted token costs one tick of ℓ layers, a rejected one a whole pipeline of P = ⌈L/ℓ⌉ ticks.
    ``head_layers`` adds the exit head's cost to each tick in layer-equivalents, the [derived] variant
    L / ((ℓ + head_layers)(a + (1 − a)P))."""
    stages = math.ceil(n_layers / exit_layer)
    return n_layers / ((exit_layer + head_layers) * (alpha + (1 - alpha) * stages))


def ppsd_gain(alpha: float, gamma: int, exit_layer: int, n_layers: int) -> float:
    """Eq. 7: the gain S_PPSD ÷ S_EESD, PPSD over EESD at the same exit. At a = 1 (every draft accepted) this
    is (γ + L/ℓ)/(γ + 1), not the paper's stated γ + L/ℓ (docs/ppsd.md): the plots draw the formula."""
    return ppsd_speedup(alpha, exit_layer, n_layers) / eesd_speedup(alpha, gamma, exit_layer, n_layers)


def ppsd_tokens_per_s(alpha: float, stages: int, tick_seconds: float) -> float:
    """Eq. 6 in time units, 1 / (tick·(a + (1 − a)P)): one token per tick when accepted, P ticks when
    rejected; a (``alpha``) the per-token acceptance probability."""
    return 1.0 / (tick_seconds * (alpha + (1 - alpha) * stages))


# --- speculation on the verdict: Mirror-SD (paper 000) and SSD (paper 002); docs/mirror-and-ssd.md ----------
# Both hide the draft's work for round t+1 under the target's verification of round t. Mirror starts it
# mid-verification from the early exit (after layers 1..l_e), SSD at verification start from the draft's own
# logits; a verdict the draft did not prepare for costs a fresh window on the critical path.
#
#     Mirror (Eq. 10/14):  T_Mirror = T^{1:l_e} + T_rv + max(T^{l_e+1:N}, T_gen)   (+ FF·T_gen, [derived])
#     SSD:                 E[T_round] = max(T_v, T_draftwork) + T_comm + (1 − P(hit))·T_backup


def _check_rate(name: str, value: float) -> None:
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


def _check_times(**times: float) -> None:
    for name, value in times.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def mirror_step_time(t_prefix: float, t_suffix: float, t_draft_gen: float, t_rv: float,
                     fallback_rate: float = 0.0, t_fallback: float | None = None) -> float:
    """E[T_step] of one Mirror-SD round (the paper's Eq. 10): T^{1:l_e} + T_rv + max(T^{l_e+1:N}, T_gen) + FF·T_gen.

    The paper's latency law (Eq. 10/14) has no fallback term; the [derived] ``FF·T_gen`` adds the fresh rollout
    a fallback puts on the critical path, so the law can be laid beside measured rounds. ``t_fallback`` is that
    fresh rollout's own cost where it is measured (one chain of γ tokens is cheaper than the κ(γ+1)-branch tree
    of ``t_draft_gen``); ``None`` uses T_gen, as docs/mirror-and-ssd.md writes it."""
    _check_rate("fallback_rate", fallback_rate)
    fresh = t_draft_gen if t_fallback is None else t_fallback
    _check_times(t_prefix=t_prefix, t_suffix=t_suffix, t_draft_gen=t_draft_gen, t_rv=t_rv, t_fallback=fresh)
    return t_prefix + t_rv + max(t_suffix, t_draft_gen) + fallback_rate * fresh


def mirror_speedup_vs_sd(t_prefix: float, t_suffix: float, t_draft_gen: float, t_rv: float) -> float:
    """The paper's step speedup S over vanilla SD (its App. C), T_SD / T_Mirror with T_SD = T_target + T_gen:
    (T_target + T_gen)/(T_target + T_rv) while the draft fits in the overlap budget Δ = T^{l_e+1:N}, else
    (T^{1:l_e} + Δ + T_gen)/(T^{1:l_e} + T_gen + T_rv). Mirror wins (S > 1) iff T_rv < min(Δ, T_gen)."""
    _check_times(t_prefix=t_prefix, t_suffix=t_suffix, t_draft_gen=t_draft_gen, t_rv=t_rv)
    target = t_prefix + t_suffix
    if t_draft_gen <= t_suffix:
        return (target + t_draft_gen) / (target + t_rv)
    return (t_prefix + t_suffix + t_draft_gen) / (t_prefix + t_draft_gen + t_rv)


def ssd_round_time(t_verify: float, t_comm: float, hit_rate: float, t_backup: float,
                   t_draftwork: float = 0.0) -> float:
    """E[T_round] of SSD at batch 1 ([derived]; docs/mirror-and-ssd.md): max(T_v, T_draftwork) + T_comm +
    (1 − P(hit))·T_backup.

    The draft's per-round work (glue forward + γ tree steps over Σ F_A branches) is hidden while it fits under
    the target's verification T_v; past that it sets the pace. A miss adds the backup on the critical path."""
    _check_rate("hit_rate", hit_rate)
    _check_times(t_verify=t_verify, t_comm=t_comm, t_backup=t_backup, t_draftwork=t_draftwork)
    return max(t_verify, t_draftwork) + t_comm + (1 - hit_rate) * t_backup


def ssd_speedup_vs_sd(t_draft_k: float, t_verify: float, hit_rate: float, t_backup: float) -> float:
    """SSD over synchronous SD at the same acceptance ([derived]; docs/mirror-and-ssd.md):
    (T_d(γ) + T_v)/(T_v + (1 − h)·T_backup), h the hit rate.
    At h = 1 this is the bound 1 + T_d(γ)/T_v: drafting disappears from the round entirely."""
    _check_rate("hit_rate", hit_rate)
    _check_times(t_draft_k=t_draft_k, t_verify=t_verify, t_backup=t_backup)
    return (t_draft_k + t_verify) / (t_verify + (1 - hit_rate) * t_backup)


def law_tokens_per_s(tokens_per_round: float, step_seconds: float) -> float:
    """A latency law in throughput units: τ tokens committed per round over the round's predicted seconds."""
    if step_seconds <= 0:
        raise ValueError(f"step_seconds must be > 0, got {step_seconds}")
    return tokens_per_round / step_seconds


# --- Mixture of Attentions, client–server (paper 001; docs/moa.md) ---------------------------------------
# MoA keeps the serial draft → verify loop; in client–server mode each cycle also crosses the link twice:
#
#     T_cycle = T_draft,client + RTT + 8·(bytes_up + bytes_down)/BW + T_verify,server + T_LSA      [derived]
#     server calls per answer ≈ n_generated / τ                                               (paper)
#
# with bytes_up = 4M and bytes_down = 3A + 2A·E_kv·(TLI+1) (Table 7, :func:`engines.network.link.table7_bytes`).


def moa_cycle_seconds(t_draft: float, rtt: float, bytes_up: float, bytes_down: float, bandwidth_bps: float | None,
                      t_verify: float, t_lsa: float = 0.0) -> float:
    """One client–server cycle ([derived]; docs/moa.md): T_draft + RTT + 8(bytes_up + bytes_down)/BW +
    T_verify + T_LSA. ``bandwidth_bps`` in bits per second; ``None`` (or ∞) = an unlimited link (no transfer
    term). RTT is both one-way delays of the cycle's two messages; losses and resends are not modelled."""
    _check_times(t_draft=t_draft, rtt=rtt, bytes_up=bytes_up, bytes_down=bytes_down, t_verify=t_verify, t_lsa=t_lsa)
    if bandwidth_bps is not None and not bandwidth_bps > 0:
        raise ValueError(f"bandwidth_bps must be > 0 (None = unlimited), got {bandwidth_bps}")
    transfer = 0.0 if bandwidth_bps is None or math.isinf(bandwidth_bps) else 8 * (bytes_up + bytes_down) / bandwidth_bps
    return t_draft + rtt + transfer + t_verify + t_lsa


def server_calls_per_answer(new_tokens: float, tau: float, prefill: bool = True) -> float:
    """Calls to the target per answer of ``new_tokens`` at τ tokens per verification.

    ``prefill=True`` counts as the engine does (``Stats.target_calls``): the prefill call yields the first token
    and each verification τ more, so 1 + (n − 1)/τ. ``prefill=False`` is the paper's ≈ n/τ (Table 3's "calls")."""
    _check_times(new_tokens=new_tokens)
    if not tau >= 1:
        raise ValueError(f"tau must be >= 1 (the bonus token alone makes 1), got {tau}")
    if not prefill:
        return new_tokens / tau
    return 1 + max(new_tokens - 1, 0) / tau if new_tokens else 0.0


def moa_break_even_tli(hidden: int, kv_width: int) -> int:
    """The smallest TLI at which MoA's downlink activations per token, 2·E_kv·(TLI+1), exceed EAGLE's E: from
    there on MoA sends more bytes per accepted token than EAGLE (Table 7)."""
    if hidden <= 0 or kv_width <= 0:
        raise ValueError(f"hidden and kv_width must be > 0, got {hidden} and {kv_width}")
    return max(0, hidden // (2 * kv_width))  # 2·E_kv·(t+1) > E  ⇔  t + 1 > E/(2E_kv)  ⇔  t ≥ ⌊E/(2E_kv)⌋
