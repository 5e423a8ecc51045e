"""CATS's costs read from a run's events (:class:`RunCosts`: stage seconds, bytes streamed, τ per cycle) and the
§7.6 time model evaluated at them (:class:`TimeModel`, :mod:`specviz.theory`): the numbers behind the sweep
figures (:mod:`specviz.views.cats_sweep_figures`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Sequence

from engines.core.trace import Commit, Event, RunEnd, StageSpan, StreamChunk

from ..theory import bytes_per_token, cats_cycle_seconds, cats_speedup, streamed_pass_seconds
from .cats_cycles import MB, chunk_cycles, cycle_bounds, decode_bytes_per_token, deep_layer_start, run_start


# --- measured stage costs and the §7.6 time model -------------------------------------------------
@dataclass
class RunCosts:
    """Totals over one run's decoding cycles (the prefill left out), poolable with ``+``.

    ``deep_*``: the chunks streamed on every forward (layers past the resident ones); ``deep_wall`` runs
    from a cycle's first deep read to its last deep compute. ``bytes_streamed`` and ``target_calls`` come
    from the run's stats: in ``deep`` mode every target call streams the same deep layers once.
    """

    rounds: int = 0
    tokens: int = 0
    draft_steps: int = 0
    draft: float = 0.0
    sv: float = 0.0
    reforward: float = 0.0
    round_wall: float = 0.0
    deep_wall: float = 0.0
    deep_compute: float = 0.0
    deep_read: float = 0.0  # the deep chunks' reads, load_start → load_end, summed
    deep_passes: int = 0
    deep_pass_bytes: int = 0  # bytes of the deep chunks, over the same passes (all modes)
    bytes_streamed: int = 0
    target_calls: int = 0
    stream: str = "deep"

    def __add__(self, other: "RunCosts") -> "RunCosts":
        if self.stream != other.stream:
            raise ValueError("cannot pool runs of different stream modes")
        return RunCosts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)
                           if f.name != "stream"}, stream=self.stream)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict) -> "RunCosts":
        return cls(**{f.name: record[f.name] for f in fields(cls) if f.name in record})

    # per cycle
    @property
    def tau(self) -> float:
        return self.tokens / self.rounds if self.rounds else 0.0

    @property
    def gamma(self) -> float:
        return self.draft_steps / self.rounds if self.rounds else 0.0

    @property
    def draft_step(self) -> float:
        return self.draft / self.draft_steps if self.draft_steps else 0.0

    @property
    def sv_per_cycle(self) -> float:
        return self.sv / self.rounds if self.rounds else 0.0

    @property
    def reforward_per_cycle(self) -> float:
        return self.reforward / self.rounds if self.rounds else 0.0

    @property
    def deep_compute_per_pass(self) -> float:
        return self.deep_compute / self.deep_passes if self.deep_passes else 0.0

    @property
    def deep_wall_per_pass(self) -> float:
        return self.deep_wall / self.deep_passes if self.deep_passes else 0.0

    @property
    def deep_bytes_per_pass(self) -> float:
        """From the stats in ``deep`` mode (bytes streamed ÷ target calls); from the deep chunks otherwise."""
        if self.stream == "deep" and self.target_calls:
            return self.bytes_streamed / self.target_calls
        return self.deep_pass_bytes / self.deep_passes if self.deep_passes else 0.0

    @property
    def read_mb_s(self) -> float:
        """The rate the deep reads reached (MB/s): below the throttle's where the reader thread's own CPU
        work (parsing, copying the weights) cannot keep up."""
        return self.deep_pass_bytes / MB / self.deep_read if self.deep_read else 0.0

    @property
    def other_per_cycle(self) -> float:
        """Everything in a cycle outside the draft, sv and reforward stages and the deep pass: layers
        ℓ_SV..deep start for Kangaroo and ar, the LM head, the walk, cache rollback, bookkeeping."""
        rest = self.round_wall - self.draft - self.sv - self.reforward - self.deep_wall
        return max(rest, 0.0) / self.rounds if self.rounds else 0.0

    @property
    def cycle_seconds(self) -> float:
        return self.round_wall / self.rounds if self.rounds else 0.0


def run_costs(events: Sequence[Event]) -> RunCosts:
    """What a run's decoding cycles cost, stage by stage, from its spans, chunks, commits and stats."""
    start = run_start(events)
    end = next((e for e in reversed(events) if isinstance(e, RunEnd)), None)
    bounds = cycle_bounds(events)
    costs = RunCosts(stream=((start.memory or {}).get("stream", "deep") if start else "deep"))
    for event in events:
        if isinstance(event, Commit) and event.round > 0:
            costs.rounds += 1
            costs.tokens += len(event.tokens)
            costs.draft_steps += event.draft_depth if event.draft_depth is not None else event.drafted
            first, last = bounds[event.round]
            costs.round_wall += last - first
        elif isinstance(event, StageSpan) and event.round > 0 and event.stage in ("draft", "sv", "reforward"):
            setattr(costs, event.stage, getattr(costs, event.stage) + event.end - event.start)
    deep_from = deep_layer_start(events)
    passes: dict[int, list[StreamChunk]] = {}
    for round_, chunk in chunk_cycles(events):
        if round_ > 0 and min(chunk.layers) >= deep_from and chunk.compute_end is not None:
            passes.setdefault(round_, []).append(chunk)
    for chunks in passes.values():
        costs.deep_passes += 1
        costs.deep_wall += max(c.compute_end for c in chunks) - min(c.load_start for c in chunks)
        costs.deep_compute += sum(c.compute_end - c.compute_start for c in chunks)
        costs.deep_read += sum(c.load_end - c.load_start for c in chunks)
        costs.deep_pass_bytes += sum(c.bytes for c in chunks)
    if end is not None:
        costs.bytes_streamed = end.stats.get("bytes_streamed", 0)
        costs.target_calls = end.stats.get("target_calls", 0)
    return costs


@dataclass
class TimeModel:
    """§7.6's [derived] time model with measured inputs (seconds, bytes):

        T_cycle(B) = γ·t_DM + t_SV + t_ref + max(bytes_deep / B, t_deep) + t_other
        T_AR(B)    = t_other,AR + max(bytes_deep,AR / B, t_deep,AR)
        S          = τ · T_AR / T_cycle,        BPT = bytes_deep / τ

    (B the flash bandwidth.)

    ``t_other`` (the LM head, the walk, rollback; for Kangaroo also its resident layers above ℓ_DM) is not
    in :func:`specviz.theory.cats_cycle_seconds`; it is added so that the model meets the measurement at
    the measured bandwidth instead of overestimating the speedup by a constant. Kangaroo is the same model
    with t_SV = t_ref = 0.
    """

    tau: float
    gamma: float
    draft_step: float
    shallow_verify: float
    reforward: float
    other: float
    deep_bytes: float
    deep_compute: float
    ar_other: float
    ar_deep_bytes: float
    ar_deep_compute: float

    @classmethod
    def from_costs(cls, method: RunCosts, ar: RunCosts) -> "TimeModel":
        if not method.deep_passes or not ar.deep_passes:
            raise ValueError("the time model needs memory-budget runs (StreamChunk events) of the method and of ar")
        return cls(tau=method.tau, gamma=method.gamma, draft_step=method.draft_step,
                   shallow_verify=method.sv_per_cycle, reforward=method.reforward_per_cycle,
                   other=method.other_per_cycle, deep_bytes=method.deep_bytes_per_pass,
                   deep_compute=method.deep_compute_per_pass, ar_other=ar.other_per_cycle,
                   ar_deep_bytes=ar.deep_bytes_per_pass, ar_deep_compute=ar.deep_compute_per_pass)

    @classmethod
    def from_runs(cls, method_runs: Sequence[Sequence[Event]], ar_runs: Sequence[Sequence[Event]]) -> "TimeModel":
        return cls.from_costs(pool(run_costs(r) for r in method_runs), pool(run_costs(r) for r in ar_runs))

    def cycle_seconds(self, flash_mb_s: float) -> float:
        return cats_cycle_seconds(self.gamma, self.draft_step, self.shallow_verify, self.reforward, self.deep_bytes,
                                  flash_mb_s * MB, self.deep_compute) + self.other

    def ar_token_seconds(self, flash_mb_s: float) -> float:
        return self.ar_other + streamed_pass_seconds(self.ar_deep_bytes, flash_mb_s * MB, self.ar_deep_compute)

    def speedup(self, flash_mb_s: float) -> float:
        return cats_speedup(self.tau, self.cycle_seconds(flash_mb_s), self.ar_token_seconds(flash_mb_s))

    @property
    def bytes_per_token(self) -> float:
        return bytes_per_token(self.deep_bytes, self.tau)

    @property
    def asymptote(self) -> float:
        """The speedup as the bandwidth falls to nothing: τ · bytes_deep,AR / bytes_deep (bytes rule everything)."""
        return self.tau * self.ar_deep_bytes / self.deep_bytes if self.deep_bytes else float("inf")

    def to_dict(self) -> dict:
        return asdict(self)


def pool(costs) -> RunCosts:
    costs = list(costs)
    if not costs:
        raise ValueError("nothing to pool")
    total = costs[0]
    for item in costs[1:]:
        total = total + item
    return total


def layer_time_model(layer_bytes: Sequence[int], sv_layer: int, tau: float, gamma: int, dm_layer: int = 3,
                     layer_seconds: float = 0.0012, head_seconds: float = 0.002) -> TimeModel:
    """The same model for a slider: layers 1..``sv_layer`` resident, the rest streamed once per forward.

    Compute is ``layer_seconds`` per layer per forward (a handful of tokens cost about what one does on a
    CPU) and ``head_seconds`` per adapter + LM head call; with t_layer and t_head those two:
    t_DM = ℓ_DM·t_layer + t_head, t_SV = (ℓ_SV − ℓ_DM)·t_layer + t_head, t_ref = ℓ_SV·t_layer,
    t_deep = (L − ℓ_SV)·t_layer, t_other = t_head; ar pays ℓ_SV·t_layer + t_head besides its deep pass."""
    n = len(layer_bytes)
    if not 1 <= dm_layer < sv_layer < n:
        raise ValueError(f"need 1 <= dm_layer ({dm_layer}) < sv_layer ({sv_layer}) < {n}")
    deep = float(sum(layer_bytes[sv_layer:]))
    return TimeModel(tau=tau, gamma=gamma, draft_step=dm_layer * layer_seconds + head_seconds,
                     shallow_verify=(sv_layer - dm_layer) * layer_seconds + head_seconds,
                     reforward=sv_layer * layer_seconds, other=head_seconds, deep_bytes=deep,
                     deep_compute=(n - sv_layer) * layer_seconds, ar_other=sv_layer * layer_seconds + head_seconds,
                     ar_deep_bytes=deep, ar_deep_compute=(n - sv_layer) * layer_seconds)


def costs_rows(runs: dict[str, Sequence[Event]]) -> list[dict]:
    """Per run, what one cycle costs on average (ms, MB): the time model's inputs, side by side."""
    rows = []
    for name, events in runs.items():
        c = run_costs(events)
        end = events[-1]
        rows.append({"run": name, "τ": c.tau, "cycle ms": 1e3 * c.cycle_seconds,
                     "draft step ms": 1e3 * c.draft_step if c.draft_steps else None,
                     "γ̄": c.gamma, "sv ms": 1e3 * c.sv_per_cycle, "reforward ms": 1e3 * c.reforward_per_cycle,
                     "deep pass ms": 1e3 * c.deep_wall_per_pass, "deep compute ms": 1e3 * c.deep_compute_per_pass,
                     "other ms": 1e3 * c.other_per_cycle, "MB per pass": c.deep_bytes_per_pass / MB,
                     "reads MB/s": c.read_mb_s,
                     "BPT MB": decode_bytes_per_token(events) / MB, "tok/s": end.stats["tokens_per_s"]})
    return rows


def sweep_models(sweep: dict) -> dict[str, TimeModel]:
    """Per method (not ar), the time model on its costs pooled over every bandwidth, against ar's."""
    by_method: dict[str, list[RunCosts]] = {}
    for p in sweep["points"]:
        by_method.setdefault(p["method"], []).append(RunCosts.from_dict(p["costs"]))
    if "ar" not in by_method:
        raise ValueError("the sweep has no ar runs to model against")
    ar = pool(by_method["ar"])
    return {m: TimeModel.from_costs(pool(c), ar) for m, c in by_method.items() if m != "ar"}
