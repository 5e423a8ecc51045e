"""What ``specviz bench`` adds up per method and prompt category while it runs: tokens, seconds, τ, α, target calls
(:class:`Tally`), and the pipelined (:class:`PipelineTally`) and verdict (:class:`VerdictTally`) methods' own
numbers.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import zip_longest

from ..theory import ppsd_tokens_per_s
from ..views.ppsd_pipeline import pipeline_metrics
from ..views.verdict_metrics import verdict_metrics


class Tally:
    """Raw counts summed over runs; ratios are taken at the end so long answers weigh more."""

    def __init__(self):
        self.new_tokens = self.decode_seconds = self.rounds = self.round_tokens = 0
        self.drafted = self.accepted = self.turns = self.equal_turns = 0
        self.draft_seconds = 0.0
        self.reached_by_position: list[int] = []
        self.passed_by_position: list[int] = []
        self.has_rounds = self.compared = False
        self.budgeted = False  # runs under a memory budget: flash traffic is summed too
        self.bytes_streamed = self.peak_resident_bytes = 0
        self.clock = "wall"
        self.pipeline = PipelineTally()
        self.verdict = VerdictTally()
        self.target_calls = 0
        self.link_seconds = 0.0  # client–server runs (engines.programs.client_server): the simulated link's share
        self.link_bytes = self.link_messages = self.link_resends = 0

    def add(self, new_tokens, decode_seconds, equal: bool | None, stats=None, draft_seconds: float = 0.0,
            target_calls: int | None = None, events=None, drafted: int | None = None, accepted: int | None = None):
        """``stats`` from the engine's runs; Hugging Face's give only ``target_calls`` (τ but no α), llama.cpp's
        prompt lookup ``target_calls``, ``drafted`` and ``accepted`` (τ and α)."""
        self.new_tokens += new_tokens
        self.decode_seconds += decode_seconds
        self.turns += 1
        self.equal_turns += bool(equal)
        self.compared = equal is not None
        if stats is None:
            if target_calls:
                self.rounds += target_calls - 1  # the first call is the prefill, which yields the first token
                self.round_tokens += max(new_tokens - 1, 0)
            if drafted is not None:
                self.drafted += drafted
                self.accepted += accepted or 0
        else:
            self.has_rounds = True
            self.rounds += stats.rounds
            self.round_tokens += stats.new_tokens - 1 if stats.new_tokens else 0
            self.drafted += stats.drafted
            self.accepted += stats.accepted
            self.draft_seconds += draft_seconds
            self.reached_by_position = _add_counts(self.reached_by_position, stats.reached_by_position)
            self.passed_by_position = _add_counts(self.passed_by_position, stats.passed_by_position)
            self.clock = stats.clock
            self.target_calls += stats.target_calls
            self.link_seconds += stats.link_seconds
            self.link_bytes += stats.link_bytes
            self.link_messages += stats.link_messages
            self.link_resends += stats.link_resends
            if events is not None:
                self.pipeline.add(pipeline_metrics(events))
                if any(e.kind == "cache_lookup" for e in events):
                    self.verdict.add(verdict_metrics(events), new_tokens, decode_seconds)
            if stats.peak_resident_bytes:
                self.budgeted = True
                self.bytes_streamed += stats.bytes_streamed
                self.peak_resident_bytes = max(self.peak_resident_bytes, stats.peak_resident_bytes)

    def summary(self, ar_tokens_per_s: float | None) -> dict:
        """``draft_cost``: seconds per drafted token ÷ seconds per AR token (c in Leviathan's model).
        ``alpha``: the acceptance rate α, accepted ÷ drafted. ``alpha_by_position`` (the key kept for stored
        results): the acceptance by draft position, at each draft depth accepted ÷ rounds that reached it —
        flat if the drafter is equally good everywhere in its window, falling if its own earlier guesses lead
        it astray."""
        tps = self.new_tokens / self.decode_seconds if self.decode_seconds else 0.0
        draft_cost = None
        if self.drafted and self.draft_seconds and ar_tokens_per_s:
            draft_cost = (self.draft_seconds / self.drafted) * ar_tokens_per_s
        return {
            "tokens_per_s": tps,
            "speedup": tps / ar_tokens_per_s if ar_tokens_per_s else None,
            "tau": self.round_tokens / self.rounds if self.rounds else None,
            "alpha": self.accepted / self.drafted if self.drafted else (0.0 if self.has_rounds else None),
            "equals_ar": (self.equal_turns / self.turns) if self.compared else None,
            "draft_cost": draft_cost,
            "alpha_by_position": [p / r for p, r in zip(self.passed_by_position, self.reached_by_position)],
            "rounds_by_position": list(self.reached_by_position),
            "new_tokens": self.new_tokens,
            "decode_seconds": self.decode_seconds,
            "turns": self.turns,
            "clock": self.clock,
            **(self.memory_summary() if self.budgeted else {}),
            **({"pipeline": self.pipeline.summary(tps)} if self.pipeline.runs else {}),
            **({"verdict": self.verdict.summary(tps)} if self.verdict.rounds else {}),
            **({"link": self.link_summary()} if self.link_messages else {}),
        }

    def link_summary(self) -> dict:
        """Per answer (turn): server calls (prefill + verifications) and bytes; the link's share of the time."""
        return {"server_calls_per_answer": self.target_calls / self.turns, "bytes_per_answer": self.link_bytes / self.turns,
                "link_share": self.link_seconds / self.decode_seconds if self.decode_seconds else 0.0,
                "messages": self.link_messages, "resends": self.link_resends}

    def memory_summary(self) -> dict:
        return {"bytes_streamed": self.bytes_streamed, "peak_resident_bytes": self.peak_resident_bytes,
                "bytes_per_token": self.bytes_streamed / self.new_tokens if self.new_tokens else 0.0}


class PipelineTally:
    """Pipelined runs' time accounts (:func:`specviz.views.ppsd_pipeline.pipeline_metrics`), pooled over turns."""

    def __init__(self):
        self.runs = self.ticks = self.tokens = 0
        self.span = self.message_bytes = 0.0
        self.busy: dict[str, float] = defaultdict(float)
        self.stage_seconds: dict[str, list[float]] = defaultdict(list)
        self.message_seconds: list[float] = []
        self.stages = 0
        self.checks = self.accepted = 0
        self.serial = False

    def add(self, metrics: dict) -> None:
        if not metrics:
            return
        self.runs += 1
        self.serial = metrics["mode"] == "serial"
        self.ticks += metrics["ticks"]
        self.tokens += metrics["tokens"]
        self.span += metrics["span"]
        self.stages = metrics["stages"]
        self.checks += metrics["checks"]
        self.accepted += metrics["accepted"]
        self.message_bytes += metrics["message_bytes_per_token"] * metrics["tokens"]
        self.message_seconds.append(metrics["message_seconds"])
        for lane, seconds in metrics["busy"].items():
            self.busy[lane] += seconds
        for lane, seconds in metrics["stage_seconds"].items():
            self.stage_seconds[lane].append(seconds)

    def summary(self, tokens_per_s: float) -> dict:
        """Eq. 6 at the pooled per-position acceptance (``position_acceptance``, the estimate of a: accepted ÷ drafts the last stage judged, the
        per-token acceptance probability the formula takes) with one tick = the slowest stage's median
        compute + the message time."""
        from statistics import median

        alpha = self.accepted / self.checks if self.checks else 0.0
        stage = {lane: median(values) for lane, values in self.stage_seconds.items()}
        message = median(self.message_seconds)
        eq6 = None if self.serial else ppsd_tokens_per_s(alpha, self.stages, max(stage.values()) + message)
        return {"stages": self.stages, "position_acceptance": alpha, "ticks_per_token": self.ticks / max(self.tokens, 1),
                "tick_seconds": self.span / max(self.ticks, 1), "stage_seconds": stage,
                "idle": {lane: 1 - busy / self.span for lane, busy in self.busy.items()},
                "message_seconds": message, "message_bytes_per_token": self.message_bytes / max(self.tokens, 1),
                "eq6_tokens_per_s": eq6, "of_eq6": tokens_per_s / eq6 if eq6 else None}


def position_acceptance(pipeline: dict) -> float | None:
    """A pipeline summary's per-position acceptance (estimates a). Runs recorded before the key was renamed stored it as
    ``alpha`` (the letter the notation keeps for accepted ÷ drafted); their JSON under data/bench/ is read as is."""
    return pipeline.get("position_acceptance", pipeline.get("alpha"))


class VerdictTally:
    """Mirror-SD / SSD runs' time accounts (:func:`specviz.views.verdict_metrics.verdict_metrics`), pooled over turns:
    rates and per-round times weighted by rounds; the latency law's tokens/s pooled as predicted time."""

    FIELDS = ("hit_rate", "exposed_draft_ms", "hidden_draft_ms", "prefix_ms", "suffix_ms", "verify_ms", "glue_ms",
              "rollout_ms", "backup_ms", "message_ms")

    def __init__(self):
        self.rounds = 0
        self.weighted: dict[str, float] = defaultdict(float)
        self.weights: dict[str, float] = defaultdict(float)
        self.law_seconds = self.law_tokens = 0.0

    def add(self, metrics: dict, new_tokens: int, decode_seconds: float) -> None:
        rounds = metrics.get("rounds") or 0
        self.rounds += rounds
        for key in self.FIELDS:
            if metrics.get(key) is not None:
                self.weighted[key] += metrics[key] * rounds
                self.weights[key] += rounds
        law = (metrics.get("law") or {}).get("tokens_per_s")
        if law:
            self.law_seconds += new_tokens / law
            self.law_tokens += new_tokens

    def summary(self, tokens_per_s: float) -> dict:
        out = {key: self.weighted[key] / self.weights[key] if self.weights[key] else None for key in self.FIELDS}
        law = self.law_tokens / self.law_seconds if self.law_seconds else None
        return {**out, "rounds": self.rounds, "law_tokens_per_s": law, "of_law": tokens_per_s / law if law else None}


def _add_counts(a: list[int], b: list[int]) -> list[int]:
    return [x + y for x, y in zip_longest(a, b, fillvalue=0)]
