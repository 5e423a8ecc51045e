"""The scoreboard at the top of each method notebook: the method against ``ar`` on one prompt, measured there.

A reader should meet the verdict before the mechanism: is this method faster than plain decoding here, by
how much, and why. The "why" is arithmetic on the measured round, in units of one ``ar`` step
(``t_ar``, the time ``ar`` takes per token in the same notebook):

    S ≈ τ / R,   R = (decode time ÷ rounds) ÷ t_ar = V + D + O

V is the target's verification per round (its verify, shallow-verify and re-forward spans), D the drafting
the target waited for, O everything else (bookkeeping, transfers, idle lanes). Each term has an ideal —
τ as long as the draft (1 + γ̄), D = 0, V = one ``ar`` step, O = 0 — and :meth:`Scoreboard.counterfactuals`
gives the speedup with one term at its ideal and the others as measured. The term whose ideal gains the
most is the one that cost the speedup; the notebooks' diagnosis exercise asks the reader to name it.

The recorded figure below it comes from a ``specviz bench`` run stored under data/bench/, under that run's
own rule (its threads, dtype, prompts and machine, all named): it is shown apart and never compared with the
measured rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engines import Engine
from engines.core.trace import RunStart, StageSpan
from engines.engine import RunResult

from ..bench.recorded_runs import load_results, run_path

THREADS_PER_PROCESS = 1
THREAD_RULE = ("Thread rule (every timing measured in notebooks 00–09): one thread per model process. `ar` runs on one "
               "core; a method with lanes runs one core per lane, and its scoreboard says how many lanes it used.")
RECORDED_RUN = "bf16/xeon-one-core-after"  # every method, 6 prompts × 128 tokens, bf16
DRAFT_STAGES = ("draft", "wait")  # on the target lane: drafting, or idle until a draft lane delivers
TERMS = ("acceptance", "drafting", "verification", "overhead")
COST_TERMS = TERMS[1:]  # what the round spends, with the drafter's acceptance taken as given


def use_thread_rule() -> str:
    """Apply the thread rule to this process and return it, so each notebook states it in the same words."""
    torch.set_num_threads(THREADS_PER_PROCESS)
    return THREAD_RULE


@dataclass(frozen=True)
class Recorded:
    """The same method's figure in a stored bench run."""

    run: str
    label: str
    speedup: float
    tau: float
    machine: str
    setup: str  # prompts × tokens, dtype, threads


@dataclass
class Scoreboard:
    method: str
    label: str
    new_tokens: int
    tokens_per_s: float
    ar_tokens_per_s: float
    speedup: float
    tau: float
    alpha: float
    drafted_per_round: float  # γ̄
    max_depth: int  # the longest draft the target judged, in positions
    lanes: int
    equal_to_ar: bool | None  # greedy: the same tokens as ar; None when sampling
    round_cost: float  # R, in ar steps
    verify: float  # V
    draft: float  # D
    other: float  # O
    terms_measured: bool = True  # False: the run recorded no spans on the target lane (PPSD)
    recorded: Recorded | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ideal_tau(self) -> float:
        """Every draft accepted: 1 + the draft's length, a tree's depth where it is shallower than its nodes."""
        return 1.0 + (min(self.drafted_per_round, self.max_depth) if self.max_depth else self.drafted_per_round)

    def counterfactuals(self) -> dict[str, float]:
        """The speedup with one term at its ideal, the others as measured (see the module's docstring); empty
        where the round's terms were not measured."""
        if not self.terms_measured or self.round_cost <= 0:
            return {}
        r, tau = self.round_cost, self.tau
        return {
            "acceptance": max(self.ideal_tau, tau) / r,
            "drafting": tau / max(r - self.draft, 1e-9),
            "verification": tau / max(r - self.verify + min(self.verify, 1.0), 1e-9),
            "overhead": tau / max(r - self.other, 1e-9),
        }

    def costliest_term(self, among: tuple[str, ...] = TERMS) -> str | None:
        """The term whose ideal gains most; ``among`` narrows the question (the round's cost terms only, say,
        when the drafter is given and the question is what the round spends)."""
        unknown = [t for t in among if t not in TERMS]
        if unknown or not among:
            raise ValueError(f"among must be a non-empty subset of {TERMS}; got {among}")
        gains = self.counterfactuals()
        return max(among, key=gains.__getitem__) if gains else None

    def why(self) -> str:
        """One line: the round's arithmetic and the term that cost the most."""
        worst = self.costliest_term()
        if worst is None:
            return (f"τ = {self.tau:.2f} tokens per round at {self.tokens_per_s:.1f} tokens/s against `ar`'s "
                    f"{self.ar_tokens_per_s:.1f}; this method's target lane records no round spans to split.")
        return (f"τ = {self.tau:.2f} tokens per round for a round that costs {self.round_cost:.2f} `ar` steps "
                f"(verify {self.verify:.2f}, draft {self.draft:.2f}, other {self.other:.2f}), so S ≈ τ ÷ R = "
                f"{self.tau / self.round_cost:.2f}×; the term that cost the most is **{worst}** (at its ideal: "
                f"{self.counterfactuals()[worst]:.2f}×).")


def _lanes(result: RunResult) -> dict:
    """Which lane did what in this run (its RunStart, the first event)."""
    start = result.events[0] if result.events else None
    return (start.lanes or {}) if isinstance(start, RunStart) else {}


def round_terms(result: RunResult, ar_seconds_per_token: float) -> tuple[float, float, float, float] | None:
    """(R, V, D, O) of a run in ``ar`` steps per round, read from the target lane's spans: V its work, D its
    drafting and its waits for a draft on another lane (the draft time it could not hide), O the rest.
    ``None`` where the target lane recorded no spans (PPSD's pipeline records stage ticks instead)."""
    stats = result.stats
    rounds = max(stats.rounds, 1)
    r = stats.decode_seconds / rounds / ar_seconds_per_token
    lane = _lanes(result).get("target")
    spans = [e for e in result.events if isinstance(e, StageSpan) and e.lane == lane]
    if not spans:
        return None
    unit = rounds * ar_seconds_per_token
    draft = sum(e.end - e.start for e in spans if e.stage in DRAFT_STAGES) / unit
    verify = sum(e.end - e.start for e in spans if e.stage not in DRAFT_STAGES) / unit
    verify = min(verify, r)
    draft = min(draft, r - verify)
    return r, verify, draft, r - verify - draft


def recorded_figure(label: str, run: str = RECORDED_RUN) -> Recorded | None:
    """``label``'s overall row in a stored bench run, or None where that run lacks it."""
    path = run_path(run)
    if path is None:
        return None
    results = load_results(path)
    row = results["methods"].get(label, {}).get("overall")
    if not row:
        return None
    setup = results["setup"]
    return Recorded(run=run, label=label, speedup=row["speedup"], tau=row.get("tau", float("nan")),
                    machine=setup.get("machine", "?"),
                    setup=(f"{setup.get('n_prompts', '?')} prompts × {setup.get('max_new_tokens', '?')} tokens, "
                           f"{setup.get('dtype', '?')}, {setup.get('threads', '?')} threads"))


def measure_scoreboard(engine: Engine, prompt, method: str, *, max_new_tokens: int, label: str | None = None,
                       temperature: float = 0.0, seed: int = 0, ar: RunResult | None = None,
                       recorded_label: str | None = None, recorded_run: str = RECORDED_RUN,
                       **options) -> tuple[Scoreboard, RunResult, RunResult]:
    """Run ``ar`` (unless given) and ``method`` on ``prompt`` under the thread rule; return the scoreboard and
    both runs, so the notebook reuses them rather than running again."""
    if isinstance(max_new_tokens, int) and max_new_tokens < 2:  # anything else the engine's check names
        raise ValueError(f"max_new_tokens must be at least 2 for a speed comparison, got {max_new_tokens}")
    engine.check(prompt, method, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, **options)
    use_thread_rule()
    if ar is None:
        ar = engine.run(prompt, "ar", max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    run = engine.run(prompt, method, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, **options)
    ar_seconds_per_token = 1.0 / ar.stats.tokens_per_s
    terms = round_terms(run, ar_seconds_per_token)
    r, verify, draft, other = terms if terms else (0.0, 0.0, 0.0, 0.0)
    stats = run.stats
    board = Scoreboard(
        method=method, label=label or method, new_tokens=stats.new_tokens, tokens_per_s=stats.tokens_per_s,
        ar_tokens_per_s=ar.stats.tokens_per_s, speedup=stats.tokens_per_s / ar.stats.tokens_per_s,
        tau=stats.mean_accepted_length, alpha=stats.acceptance_rate,
        drafted_per_round=stats.drafted / max(stats.rounds, 1), max_depth=len(stats.reached_by_position),
        lanes=max(len(set(_lanes(run).values())), 1),
        equal_to_ar=(run.token_ids == ar.token_ids) if temperature == 0 else None,
        round_cost=r, verify=verify, draft=draft, other=other, terms_measured=terms is not None,
        recorded=recorded_figure(recorded_label or label or method, recorded_run))
    return board, run, ar
