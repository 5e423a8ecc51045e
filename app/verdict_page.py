"""What the Mirror-SD and SSD pages share beyond the lane-page scaffold (:mod:`app.lanes_page`).

Streamlit-free, so it can be tested without a runtime: what the pages offer (the modes this machine can run,
the exit layers with a shipped head), the options and the plan of each press of Run, the formula explorers'
arithmetic, and the headline numbers with the latency law beside the measurement. The numbers themselves come
from :func:`specviz.views.verdict_metrics.verdict_metrics`; the laws from :mod:`specviz.theory`.
With Streamlit (the end of the module): the mode and lane boxes, the live two-lane Gantt beside the page's
second view, and the stored run's Gantt, metrics row and law table.
"""


from __future__ import annotations

import math
import re
from typing import Callable, Mapping, Sequence

import pandas as pd
import streamlit as st

from app.lanes_page import LanePage
from engines.core.trace import CacheLookup, Event, RunEnd, StageSpan
from engines.drafters.trained import available
from engines.lanes import lanes_unavailable
from specviz.theory import mirror_speedup_vs_sd, mirror_step_time, ssd_round_time, ssd_speedup_vs_sd
from specviz.views.verdict_gantt import verdict_gantt
from specviz.views.verdict_metrics import verdict_metrics

MODES = ("lanes", "serial")
MODE_LABELS = {"lanes": "lanes: the draft in a worker process on its own core (real overlap)",
               "serial": "serial: both lane programs in this process, one after the other (the 'before')"}
MIRROR_DRAFTS = ("ss", "tiny")
DRAFT_LABELS = {"ss": "ss: tiny's shape + 2 lookahead streams (speculative streaming)",
                "tiny": "tiny: 4 layers (the target's first two + two distilled)"}
EXIT_HEADS = ("model", "norm")
EXIT_HEAD_LABELS = {"model": "model: the model's own final norm + LM head on the hidden state after layer ℓ (the paper)",
                    "norm": "norm: the shipped exit head trained at ℓ (a deviation: a better proxy)"}
RULES = ("sample", "token_match")
RULE_LABELS = {"sample": "sample: min(1, p/q) rejection sampling",
               "token_match": "token_match: the paper's Eq. 3/11 (keep a draft while it equals the target's draw)"}
FANOUTS = ("uniform", "geometric")
BACKUPS = ("jit", "fast")
BACKUP_LABELS = {"jit": "jit: the draft decodes γ tokens on the critical path",
                 "fast": "fast: an n-gram lookup (nearly free, verified as point masses)"}
SD_BASELINE = "sps (same draft)"
_NORM_HEAD = re.compile(r"^exit@(\d+)-norm$")


# --- what the pages offer -----------------------------------------------------------------------------
def effective_mode(mode: str, capacity: int, unavailable: str | None = None) -> tuple[str, str | None]:
    """The mode a run can use here, and why it differs from the one asked for: ``lanes`` needs a second lane
    (core) for the draft, and a worker process (``unavailable``: why this PyTorch cannot start one, from
    :func:`engines.lanes.lanes_unavailable`); without either, the run is ``serial`` (the same tokens, nothing
    overlapping)."""
    if mode == "lanes" and unavailable:
        return "serial", (f"mode=lanes cannot run here: {unavailable}. The run uses **serial** mode instead: the "
                          f"same two lane programs and messages, one after the other, so nothing overlaps.")
    if mode != "lanes" or capacity >= 2:
        return mode, None
    return "serial", (f"mode=lanes needs 2 lanes (a core for the target and one for the draft) but this machine has "
                      f"{capacity}. The run uses **serial** mode instead: the same two lane programs and messages, "
                      f"one after the other, so nothing overlaps.")


def norm_exit_layers(names: Sequence[str] | None = None) -> list[int]:
    """Exit layers with a shipped ``exit@ℓ-norm`` head (``names``: the drafters available; default: data/drafts)."""
    return sorted(int(m.group(1)) for name in (available() if names is None else names)
                  if (m := _NORM_HEAD.match(name)))


def exit_layer_choices(exit_head: str, n_layers: int, names: Sequence[str] | None = None) -> list[int]:
    """Every layer 1..L−1 for the model's own head; only the layers with a shipped head for ``norm``."""
    return list(range(1, n_layers)) if exit_head == "model" else norm_exit_layers(names)


def default_exit_layer(choices: Sequence[int], n_layers: int) -> int:
    """Half depth (the paper's l_e = N/2, here ℓ = L/2), or the nearest offered layer."""
    half = n_layers // 2
    return min(choices, key=lambda layer: (abs(layer - half), -layer)) if choices else half


def mirror_options(gamma: int, kappa: int, exit_layer: int, exit_head: str, draft: str, rule: str, mode: str) -> dict:
    return {"gamma": gamma, "kappa": kappa, "exit_layer": exit_layer, "exit_head": exit_head, "draft": draft,
            "rule": rule, "mode": mode}


def ssd_options(lookahead: int, fanout: str, f: int, budget: int, c: float, backup: str, mode: str,
                draft: str = "tiny") -> dict:
    return {"lookahead": lookahead, "fanout": fanout, "f": f, "budget": budget, "c": float(c), "backup": backup,
            "draft": draft, "mode": mode}


def run_label(method: str, options: Mapping) -> str:
    return f"{method} {options['mode']}"


def run_plan(method: str, options: dict, compare: bool) -> dict[str, tuple[str, dict]]:
    """Display name → (method, options) for one press of Run: the method's run first (it streams), then, when
    comparing, synchronous SD (``sps``) with the same draft and window, the paper's "vanilla SD"."""
    plan = {run_label(method, options): (method, options)}
    if compare:
        window = options["gamma"] if method == "mirror" else options["lookahead"]
        plan[SD_BASELINE] = ("sps", {"gamma": window, "draft": options["draft"]})
    return plan


def needs_warmup(method: str, options: Mapping) -> bool:
    """A lanes run counts starting the draft's worker process (and its loading of the draft) as its own time;
    a 1-token run first makes the measured run find it ready."""
    return method in ("mirror", "ssd") and options.get("mode") == "lanes"


def pin_to_one_core(method: str, options: Mapping, one_core: bool) -> bool:
    """Whether a run is held to one core and one thread (``engines.lanes.pinned``): every run but a lanes run,
    which places its own lanes, when the page compares lane with lane."""
    return one_core and not (method in ("mirror", "ssd") and options.get("mode") == "lanes")


# --- the formula explorers ------------------------------------------------------------------------------
def draft_gen_by_gamma(t_step: float, eta: float, max_gamma: int = 12) -> dict[int, float]:
    """T_gen(γ) = ⌈γ/η̄⌉ · t_step: speculative streaming yields η̄ tokens per internal draft step (§3.6)."""
    return {g: math.ceil(g / eta) * t_step for g in range(1, max_gamma + 1)}


def mirror_explorer(t_prefix_ms: float, t_suffix_ms: float, t_step_ms: float, eta: float, gamma: int, t_rv_ms: float,
                    ff: float) -> dict:
    """The Mirror explorer's numbers (seconds in, ms out): T_gen(γ), T_SD, T_Mirror (Eq. 10/14), S, and the
    [derived] E[T_step] with fallbacks; plus ``gen`` (γ → seconds) for :func:`specviz.views.mirror_sd.mirror_law_figure`."""
    t_prefix, t_suffix, t_rv = t_prefix_ms / 1e3, t_suffix_ms / 1e3, t_rv_ms / 1e3
    gen = draft_gen_by_gamma(t_step_ms / 1e3, eta, max(12, gamma))
    t_gen = gen[gamma]
    sd = t_prefix + t_suffix + t_gen
    step = mirror_step_time(t_prefix, t_suffix, t_gen, t_rv)
    expected = mirror_step_time(t_prefix, t_suffix, t_gen, t_rv, ff)
    return {"gen": gen, "t_gen_ms": 1e3 * t_gen, "fits": t_gen <= t_suffix, "t_sd_ms": 1e3 * sd,
            "t_mirror_ms": 1e3 * step, "speedup": mirror_speedup_vs_sd(t_prefix, t_suffix, t_gen, t_rv),
            "t_step_ms": 1e3 * expected, "speedup_with_ff": sd / expected}


def ssd_explorer(t_verify_ms: float, t_draft_k_ms: float, t_draftwork_ms: float, t_comm_ms: float, t_backup_ms: float,
                 hit_rate: float) -> dict:
    """The SSD round-time explorer's numbers: SD's round, SSD's E[T_round] (§5.6), their ratio, the §5.6
    speedup (draft work hidden, no messages) and its bound at h = 1."""
    s = {k: v / 1e3 for k, v in dict(t_verify=t_verify_ms, t_draft_k=t_draft_k_ms, t_draftwork=t_draftwork_ms,
                                     t_comm=t_comm_ms, t_backup=t_backup_ms).items()}
    ssd = ssd_round_time(s["t_verify"], s["t_comm"], hit_rate, s["t_backup"], s["t_draftwork"])
    sd = s["t_draft_k"] + s["t_verify"]
    return {"t_sd_ms": 1e3 * sd, "t_round_ms": 1e3 * ssd, "ratio": sd / ssd,
            "hidden": s["t_draftwork"] <= s["t_verify"],
            "speedup": ssd_speedup_vs_sd(s["t_draft_k"], s["t_verify"], hit_rate, s["t_backup"]),
            "bound": 1 + s["t_draft_k"] / s["t_verify"]}


# --- the numbers --------------------------------------------------------------------------------------
METRIC_HELP = {
    "tok/s": "New tokens per second of decoding (prefill excluded), all rounds.",
    "law tok/s vs measured (steady)": "The latency law at this run's own measured costs (Mirror: T_prefix + T_rv + "
                                      "max(T_suffix, T_rollout) + FF·T_fallback, Eq. 10/14 + the derived fallback "
                                      "term; SSD: max(T_v, T_glue + T_rollout) + T_comm + (1 − h)·T_backup, "
                                      "§5.6; a serial run, which overlaps nothing: the sum of the same costs), as "
                                      "τ / E[T_round]; then the measured tokens/s from the second round on (the law "
                                      "models a steady round: no lane start-up, no first window).",
    "τ (tokens / round)": "Tokens committed per verification round (accepted drafts + the target's own token).",
    "acceptance": "Accepted drafts ÷ drafted tokens (α = E[A]/γ; the SSD paper's ρ).",
    "hit rate": "Verdicts whose next window was already in the cache (Mirror: root or depth hits; the rest are "
                "fallbacks, a fresh rollout on the critical path; SSD: the rest run the backup).",
    "draft ms hidden · exposed": "Mean draft-lane work per round that ran while the target computed (hidden: free) "
                                 "and the rest (exposed: the target had nothing to do). Serial mode hides nothing.",
}


def _fmt(value: float | None, spec: str = ".1f", unit: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{unit}"


def metric_values(metrics: Mapping) -> dict[str, str]:
    """A run's headline numbers, formatted, keyed by label; :data:`METRIC_HELP` explains each."""
    law = metrics.get("law") or {}
    measured = metrics.get("steady_tokens_per_s")
    return {
        "tok/s": _fmt(metrics.get("tokens_per_s")),
        "law tok/s vs measured (steady)": f"{_fmt(law.get('tokens_per_s'))} vs {_fmt(measured)}",
        "τ (tokens / round)": _fmt(metrics.get("tau"), ".2f"),
        "acceptance": _fmt(metrics.get("acceptance"), ".2f"),
        "hit rate": _fmt(metrics.get("hit_rate"), ".2f"),
        "draft ms hidden · exposed": (f"{_fmt(metrics.get('hidden_draft_ms'))} · "
                                      f"{_fmt(metrics.get('exposed_draft_ms'))}"),
    }


MIRROR_COSTS = (("prefix_ms", "T^{1:ℓ}: target prefix (layers 1..ℓ + early exit)", "T^{1:ℓ}"),
                ("suffix_ms", "Δ = T^{ℓ+1:L}: target suffix (layers ℓ+1..L + verify)", "max(Δ, T_gen)"),
                ("glue_ms", "draft glue (the draft over the window under verification)", "— (hidden: before ee)"),
                ("rollout_ms", "T_gen: branch rollout of the (γ+1)·κ roots", "max(Δ, T_gen)"),
                ("backup_ms", "fallback: a fresh rollout after a miss", "FF · T_fallback"),
                ("ee", "T_rv^ee: early-exit message hop", "T_rv"),
                ("verdict", "T_rv^fv: verdict message hop", "T_rv"),
                ("window", "window message hop (draft → target)", "—"),
                ("wait_ms", "target wait for the next window (per round, from round 2)", "—"))
SSD_COSTS = (("verify_ms", "T_v: target verify (the whole target over the window)", "max(T_v, T_draftwork)"),
             ("glue_ms", "T_glue: the draft over the window under verification", "T_draftwork"),
             ("rollout_ms", "tree rollout of Σ F_A branches", "T_draftwork"),
             ("backup_ms", "T_backup: backup after a miss", "(1 − h) · T_backup"),
             ("verdict", "verdict message hop (target → draft)", "T_comm"),
             ("window", "window message hop (draft → target)", "T_comm"),
             ("wait_ms", "target wait for the next window (per round, from round 2)", "—"))


def cost_rows(metrics: Mapping) -> list[dict]:
    """The measured per-round costs (mean ms per occurrence) and the term of the law each one enters."""
    hops = metrics.get("message_ms_by_kind") or {}
    rows = []
    for key, label, term in (MIRROR_COSTS if metrics.get("method") == "mirror" else SSD_COSTS):
        value = metrics.get(key) if key.endswith("_ms") else hops.get(key)
        rows.append({"cost": label, "measured ms": None if value is None else round(value, 2), "in the law as": term})
    return rows


def law_rows(metrics: Mapping, sd_events: Sequence[Event] | None = None) -> list[dict]:
    """The law beside the measurement: tokens/s predicted at the measured costs with and without overlap, the
    measured tokens/s, and — with a synchronous SD run of the same draft — the speedup over SD the paper's
    formula gives at these costs beside the measured one."""
    law = metrics.get("law") or {}
    rows = [{"quantity": f"step time by the law: {law.get('formula', '—')}", "law": _round(law.get("step_ms")),
             "measured": _round(1e3 * metrics["tau"] / metrics["steady_tokens_per_s"])
             if metrics.get("tau") and metrics.get("steady_tokens_per_s") else None, "unit": "ms / round"},
            {"quantity": "tokens/s by the law vs measured from round 2", "law": _round(law.get("tokens_per_s")),
             "measured": _round(metrics.get("steady_tokens_per_s")), "unit": "tok/s"},
            {"quantity": "tokens/s with nothing overlapped (what serial mode should reach)",
             "law": _round(law.get("no_overlap_tokens_per_s")), "measured": None, "unit": "tok/s"},
            {"quantity": "measured ÷ law", "law": None, "measured": _round(law.get("ratio"), 3), "unit": "ratio"}]
    sd = sd_speedup(metrics, sd_events) if sd_events else None
    if sd is not None:
        rows.append({"quantity": sd["label"], "law": _round(sd["law"], 3), "measured": _round(sd["measured"], 3),
                     "unit": "× over sps"})
    return rows


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def sd_draft_seconds(events: Sequence[Event]) -> float | None:
    """Synchronous SD's mean draft time per round, T_d(γ), from an ``sps`` run's "draft" spans."""
    spans = [e.end - e.start for e in events if isinstance(e, StageSpan) and e.stage == "draft"]
    return sum(spans) / len(spans) if spans else None


def sd_speedup(metrics: Mapping, sd_events: Sequence[Event]) -> dict | None:
    """The speedup over synchronous SD by the method's formula at the measured costs, and measured.

    Mirror: the paper's S (§3.6) with T_gen = the measured rollout, T_rv = the ee and verdict hops (no fallbacks,
    as the paper's formula has none). SSD: §5.6, (T_d(γ) + T_v)/(T_v + (1 − h)·T_backup) with T_d(γ) from
    the sps run's draft spans. Measured: tokens/s over the sps run's tokens/s."""
    end = next((e for e in reversed(sd_events) if isinstance(e, RunEnd)), None)
    if end is None or not metrics.get("tokens_per_s"):
        return None
    measured = metrics["tokens_per_s"] / end.stats["tokens_per_s"]
    hops = metrics.get("message_ms_by_kind") or {}
    ms = lambda key: (metrics.get(key) or 0.0) / 1e3  # noqa: E731
    law = None
    if metrics.get("method") == "mirror" and metrics.get("prefix_ms") and metrics.get("suffix_ms"):
        t_rv = ((hops.get("ee") or 0.0) + (hops.get("verdict") or 0.0)) / 1e3
        law = mirror_speedup_vs_sd(ms("prefix_ms"), ms("suffix_ms"), ms("rollout_ms"), t_rv)
        label = "speedup over SD: the paper's S at the measured costs (no fallbacks) vs measured"
    elif metrics.get("method") == "ssd" and metrics.get("verify_ms") and metrics.get("hit_rate") is not None:
        t_d = sd_draft_seconds(sd_events)
        if t_d is not None:
            law = ssd_speedup_vs_sd(t_d, ms("verify_ms"), metrics["hit_rate"], ms("backup_ms"))
        label = "speedup over SD: §5.6 (T_d(γ) + T_v)/(T_v + (1 − h)·T_backup) vs measured"
    else:
        return None
    return {"label": label, "law": law, "measured": measured}


def run_caption(events: Sequence[Event]) -> str:
    """What ran where, in a line: the options, the lanes, the tokens."""
    start = events[0]
    end = next((e for e in reversed(events) if isinstance(e, RunEnd)), None)
    options = ", ".join(f"{k}={v}" for k, v in start.config.items())
    lanes = " · ".join(f"{role} on {lane}" for role, lane in start.lanes.items())
    tokens = f"{end.stats['new_tokens']} new tokens ({end.stop_reason})" if end is not None else "running"
    sampling = "greedy" if start.temperature == 0 else f"temperature {start.temperature:g}"
    return f"{start.method}({options}) · {lanes} · {tokens} · {sampling} · lossless"


def rounds_with(events: Sequence[Event], cls) -> list[int]:
    """The rounds for which the run emitted an event of type ``cls`` (e.g. EeMessage, CacheBuild)."""
    return sorted({e.round for e in events if isinstance(e, cls)})


def round_slider(events: Sequence[Event], cls, title: str, key: str) -> int | None:
    """A round picker under ``title`` over the rounds with a ``cls`` event, opening on :func:`default_round`;
    ``None`` (and nothing drawn) when there is none."""
    rounds = rounds_with(events, cls)
    if not rounds:
        return None
    st.subheader(title)
    first = default_round(events, cls)
    return st.select_slider("round", rounds, value=first, key=key) if len(rounds) > 1 else rounds[0]


def default_round(events: Sequence[Event], cls) -> int | None:
    """The round a view opens on: the last one with an event of type ``cls`` whose verdict is known (a cache
    lookup), so the realized outcome shows; else the last one with ``cls``."""
    rounds = rounds_with(events, cls)
    decided = set(rounds_with(events, CacheLookup))
    known = [r for r in rounds if r in decided]
    return known[-1] if known else (rounds[-1] if rounds else None)


# --- the pages' shared Streamlit pieces ---------------------------------------------------------------
ONE_CORE_HELP = "Run the serial schedule and sps on one core with one thread, as each lane of a lanes run does."


def lane_options(page: LanePage, compare_label: str, compare_help: str) -> None:
    """The mode (lanes falls back to serial where it cannot run here) and the two lane boxes, in the method box."""
    page.mode_select(MODES, MODE_LABELS, lambda asked: effective_mode(asked, page.capacity, lanes_unavailable()))
    page.lane_checkboxes(compare_label, compare_help, True, ONE_CORE_HELP)


def run(page: LanePage, options: dict, view: Callable[[list], object], view_key: str) -> None:
    """A press of Run: the method (then sps with the same draft, when comparing), its Gantt and ``view(events)``
    (the page's second figure) redrawn live in the page's two areas."""
    gantt_area, view_area = page.areas

    def draw_live(runs: dict[str, dict], drawn: int) -> None:
        events = runs[page.main]["events"]
        gantt_area.plotly_chart(verdict_gantt(events), key=page.key(f"live:gantt:{drawn}"))
        view_area.plotly_chart(view(events), key=page.key(f"live:{view_key}:{drawn}"))

    page.run(run_plan(page.method, options, page.compare), needs_warmup=needs_warmup,
             pin=lambda name, method, run_options: pin_to_one_core(method, run_options, page.one_core),
             draw_live=draw_live)


def show_run(page: LanePage, record: dict, baseline: str) -> None:
    """The stored run's Gantt (the live view cleared), metrics row and the latency law beside the measurement.
    ``baseline``: how the page names sps with the same draft ("vanilla SD", "synchronous SD")."""
    gantt_area, view_area = page.areas
    events = record["runs"][record["main"]]["events"]
    metrics = verdict_metrics(events)
    gantt_area.plotly_chart(verdict_gantt(events), key=page.key("gantt"))
    view_area.empty()
    show_metrics(record, metrics)
    show_law(record, metrics, page.prefix, baseline)


def show_metrics(record: dict, metrics: dict) -> None:
    values = metric_values(metrics)
    for column, (label, value) in zip(st.columns(len(values)), values.items()):
        column.metric(label, value, help=METRIC_HELP[label])
    st.caption(run_caption(record["runs"][record["main"]]["events"]))


def show_law(record: dict, metrics: dict, key_prefix: str, baseline: str) -> None:
    """``baseline``: how the page names sps with the same draft ("vanilla SD", "synchronous SD")."""
    st.subheader("The latency law beside the measurement")
    sd = record["runs"].get(SD_BASELINE)
    left, right = st.columns(2)
    left.dataframe(pd.DataFrame(law_rows(metrics, sd["events"] if sd else None)).set_index("quantity"),
                   key=f"{key_prefix}law_table")
    right.dataframe(pd.DataFrame(cost_rows(metrics)).set_index("cost"), key=f"{key_prefix}cost_table")
    st.caption("The law's inputs are this run's own means, so 'measured ÷ law' is what the law leaves out: in lanes "
               "mode mostly the two processes slowing each other down and messages that wait for a busy receiver. "
               "A serial run should come near the no-overlap line." + ("" if sd else " Tick 'also run sps' for the "
                                                                       f"speedup over {baseline}."))
