"""Measure every method's terms on this machine, from real runs (the experiments side of the regime map).

One session: each method beside its own ``ar`` run on the same prompt under the thread rule (:func:`measure_scoreboard`;
a fresh ``ar`` per method, because on a shared machine the load drifts between runs minutes apart), the
verify-cost curve for the hardware model of this machine, and from each run's events what its law needs —
τ, α, the per-position acceptance a, the rows each round sends to the target and the layers each forward
covers, the drafting, lane work, lane hops and bookkeeping in ``ar`` steps. The dashboard's Regime page reads
the file this writes: ``python -m specviz.regime.terms --out data/bench/bf16/regime-terms.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

from engines import Engine
from engines.core.trace import Check, LaneMessage, Lsa, ShallowVerification, StageCompute, Verification
from engines.engine import RunResult
from engines.model import verify_cost
from engines.storage import write_json_atomic

from ..experiments.scoreboard import Scoreboard, measure_scoreboard, use_thread_rule
from ..views.verdict_metrics import verdict_metrics
from .hardware import fit_this_machine, step_seconds
from .projection import MachineTerms, MethodTerms

# label → (method, options): the recorded bench run's configurations (data/bench/bf16/xeon-one-core-after)
METHODS: dict[str, tuple[str, dict]] = {
    "pld": ("pld", {}),
    "sps(draft=eagle,gamma=auto)": ("sps", dict(draft="eagle", gamma="auto")),
    "eesd(exit_layer=8,head=layer,gamma=auto)": ("eesd", dict(exit_layer=8, head="layer", gamma="auto")),
    "eagle": ("eagle", {}),
    "cats": ("cats", {}),
    "moa": ("moa", {}),
    "mirror": ("mirror", {}),
    "ssd": ("ssd", {}),
    "ppsd": ("ppsd", {}),
}
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "data" / "bench" / "bf16" / "regime-terms.json"


def _mean(values, default: float = 0.0) -> float:
    values = list(values)
    return statistics.fmean(values) if values else default


def _shares(engine: Engine, weight_bytes: float) -> tuple[int, float, float]:
    """(L, one layer's share of the weights, the LM head's share)."""
    config = engine.model.config
    head = config.vocab_size * config.hidden_size * 2
    layers = config.num_hidden_layers
    return layers, (weight_bytes - head) / layers / weight_bytes, head / weight_bytes


def _rows(run: RunResult) -> float:
    return _mean((1 + len(v.accepted) + len(v.rejected) for v in run.events if isinstance(v, Verification)), 1.0)


def method_terms(engine: Engine, label: str, method: str, board: Scoreboard, run: RunResult, ar_step: float,
                 weight_bytes: float) -> MethodTerms:
    """Read one run's terms (see the module docstring); ``ar_step`` is this session's measured ar seconds."""
    layers, layer, head = _shares(engine, weight_bytes)
    stats, config = run.stats, run.events[0].config if run.events else {}
    depth = max(board.max_depth, 1)
    calls = board.drafted_per_round if method in ("sps", "eesd", "pld", "cats") else depth
    c = board.draft / calls if calls else 0.0
    common = dict(label=label, method=method, tau=max(board.tau, 1.0), alpha=board.alpha,
                  a=stats.per_token_acceptance, gamma_bar=board.drafted_per_round, c=c,
                  other=board.other, measured_speedup=board.speedup, measured_verify=board.verify)
    rows = _rows(run)
    if method == "ppsd":
        checks = [e for e in run.events if isinstance(e, Check)]
        lanes = {e.lane for e in run.events if isinstance(e, StageCompute)}
        sends = [e.bytes for e in run.events if isinstance(e, LaneMessage)] or [engine.model.config.hidden_size * 2]
        a = sum(e.accepted for e in checks) / len(checks) if checks else 0.0
        exit_layer, head_layers = config["exit_layer"], 1 if config.get("head") == "layer" else 0
        # the slowest stage sets the tick: the first runs its layers, the exit head's layer and the LM head
        tick = max((exit_layer + head_layers) * layer + head, (layers - exit_layer) * layer + head)
        return MethodTerms(**{**common, "other": 0.0, "tau": 1.0, "c": 0.0, "a": a}, law="ppsd",
                           forwards=[["tick", 1.0, min(tick, 1.0)]], stages=max(len(lanes), 1), hops=1.0,
                           hop_bytes=_mean(sends))
    if method == "cats":
        dm, sv = config["dm_layer"], config["sv_layer"]
        svs = [e for e in run.events if isinstance(e, ShallowVerification)]
        return MethodTerms(**common, law="cats", draft=board.draft, forwards=[
            ["sv", _mean((len(e.drafts) for e in svs), 1.0), (sv - dm) * layer],
            ["reforward", _mean((1 + len(e.mismatches) for e in svs), 1.0), sv * layer],
            ["deep", rows, (layers - sv) * layer + head]])
    if method in ("mirror", "ssd"):
        metrics = verdict_metrics(run.events)
        hop = (metrics["message_ms"] or 0.0) / 1e3 / ar_step
        messages = [e.bytes for e in run.events if isinstance(e, LaneMessage)]
        per_round = len(messages) / max(stats.rounds, 1)
        hops = min(per_round, 2.0)
        ms = lambda key: (metrics[key] or 0.0) / 1e3 / ar_step  # noqa: E731
        miss = metrics["fallback_rate"] or 0.0
        common.update(c=(ms("rollout_ms") or 0.0) / depth, other=board.other)
        extra = dict(hops=hops, hop_bytes=_mean(messages), stages=2, draft=hop * 0)
        if method == "mirror":
            exit_layer = config["exit_layer"]
            fresh = ms("backup_ms") if metrics["backup_ms"] is not None else ms("rollout_ms")
            return MethodTerms(**common, law="mirror", **{**extra, "draft": ms("rollout_ms")}, fallback=miss * fresh,
                               # the early exit reads out through the LM head: part of T_prefix
                               forwards=[["prefix", rows, exit_layer * layer + head],
                                         ["suffix", rows, (layers - exit_layer) * layer + head]])
        return MethodTerms(**common, law="ssd", **{**extra, "draft": ms("draftwork_ms")},
                           fallback=miss * ms("backup_ms"), forwards=[["verify", rows, 1.0]])
    hidden = engine.model.config.hidden_size
    if method == "moa":  # the server's LSA each cycle (MoA's T_LSA), measured: drafter upkeep the chain law omits
        lsa = sum(e.seconds for e in run.events if isinstance(e, Lsa)) / max(stats.rounds, 1) / ar_step
        common["other"] = max(board.other, 0.0)
        common["upkeep"] = min(lsa, board.verify)
    features = 2 * hidden * board.tau if method in ("eagle", "moa") or config.get("draft") == "eagle" else 0.0
    return MethodTerms(**common, law="serial", draft=board.draft, forwards=[["verify", rows, 1.0]],
                       link_bytes=4 * (rows + board.tau) + features)


def lane_hop_seconds(runs: dict[str, RunResult]) -> float:
    """This machine's lane hop: the mean measured message between lanes in the Mirror-SD and SSD runs."""
    hops = [verdict_metrics(r.events)["message_ms"] for label, r in runs.items()
            if r.events and r.events[0].method in ("mirror", "ssd")]
    hops = [h for h in hops if h is not None]
    return _mean(hops) / 1e3


def measure_terms(engine: Engine, prompt: str, *, max_new_tokens: int, methods: dict | None = None,
                  progress=None) -> tuple[MachineTerms, dict[str, Scoreboard]]:
    """Run ``ar`` and every method once on ``prompt``; return the session's terms and the scoreboards."""
    use_thread_rule()
    methods = METHODS if methods is None else methods
    curve = engine.verify_cost()
    if curve is None:
        raise ValueError("this engine has no verify-cost curve to fit the hardware model to")
    boards, runs, ar_steps = {}, {}, {}
    for label, (method, options) in methods.items():
        if progress:
            progress(label)
        # ar again beside each method: on a shared machine the load drifts between runs minutes apart
        board, run, ar = measure_scoreboard(engine, prompt, method, max_new_tokens=max_new_tokens, label=label,
                                            recorded_label=label, **options)
        boards[label], runs[label], ar_steps[label] = board, run, 1.0 / ar.stats.tokens_per_s
    # W is the weights as the model holds them (the presets project those); a step here may read fewer bytes (the
    # GGUF's blocks, curve.weight_bytes), so this machine is fitted as getting through W at the rate it does
    weight_bytes = float(verify_cost.weight_bytes(engine.model, held=True))
    through = curve.bandwidth_gb_s * weight_bytes / curve.weight_bytes
    here = fit_this_machine(curve.seconds, int(weight_bytes), through, lane_hop_seconds(runs))
    terms = [MethodTerms(label="ar", method="ar", law="ar", tau=1.0, alpha=0.0, a=0.0, gamma_bar=0.0, c=0.0,
                         measured_speedup=1.0, measured_verify=1.0)]
    terms += [method_terms(engine, label, methods[label][0], boards[label], runs[label], ar_steps[label], weight_bytes)
              for label in methods]
    setup = dict(machine=platform.processor() or platform.machine(), cores=here.lanes, dtype=str(engine.target.dtype),
                 max_new_tokens=max_new_tokens, threads=1, prompt=prompt[:80])
    return MachineTerms(weight_bytes=weight_bytes, ar_step_model=step_seconds(here, weight_bytes, 1),
                        ar_tokens_per_s=1.0 / statistics.median(ar_steps.values()), this_machine=here, methods=terms,
                        setup=setup), boards


def load_terms(path: str | Path = DEFAULT_OUT) -> MachineTerms:
    path = Path(path)
    if not path.exists():
        raise ValueError(f"path {path} does not exist: measure it with python -m specviz.regime.terms")
    return MachineTerms.from_dict(json.loads(path.read_text()))


def main(argv: list[str] | None = None) -> None:
    from ..prompts import load_prompts
    from .projection import check_rows

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=0, help="index into data/prompts.jsonl")
    args = parser.parse_args(argv)
    engine = Engine.load(dtype="bfloat16")
    try:
        terms, _ = measure_terms(engine, load_prompts()[args.prompt].turns[0], max_new_tokens=args.max_new_tokens,
                                 progress=lambda label: print(f"measuring {label}", flush=True))
    finally:
        engine.close()
    write_json_atomic(args.out, terms.to_dict(), indent=1)
    for row in check_rows(terms):
        print(f"{row['label']:45s} projected {row['projected']:.2f}  measured {row['measured']:.2f}  "
              f"ratio {row['ratio']:.2f}")


if __name__ == "__main__":
    main()
