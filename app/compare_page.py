"""The Compare page's logic, kept out of the page so it can be tested without Streamlit: labels for the
configurations, the comparison table, and which runs go into the overlaid figures.

Numbers come from the engine's own stats (``RunEnd.stats``, or :func:`engines.core.stats.compute_stats` for a run
the Stop button ended): tok/s over decode time, τ = tokens per verification call (``mean_accepted_length``),
α = accepted ÷ drafted (``acceptance_rate``). Speedup is against the ``ar`` run of the same prompt and settings
on the same engine, measured in the same session (``engine_cache.ar_baseline``).
"""

from __future__ import annotations

from typing import Sequence

from app import method_options as mo
from app.live import Batch

DEFAULT_METHODS = ("pld", "eagle", "sps", "eesd")
AR_LABEL = "ar (baseline)"  # configuration i starts as DEFAULT_METHODS[i]
COLUMNS = ("configuration", "status", "tok/s", "speedup vs ar", "τ", "α", "target calls", "new tokens",
           "output = ar")
COLUMN_HELP = {
    "tok/s": "Generated tokens per second of decoding (prefill excluded).",
    "speedup vs ar": "tok/s ÷ the tok/s of ar on the same prompt and settings, measured in this session.",
    "τ": "Mean tokens committed per target verification call (accepted drafts + the target's own token).",
    "α": "Acceptance rate: accepted draft tokens ÷ drafted tokens.",
    "target calls": "Forward passes of the full target model: the prefill plus one per round.",
    "output = ar": "Whether the text equals ar's token for token (greedy only: sampled runs differ by design).",
}


def labels(configs: Sequence[tuple[str, dict]]) -> list[str]:
    """One label per configuration (``sps(gamma=3)``); a repeated one gets ``#2``, ``#3``."""
    out, seen = [], {}
    for method, options in configs:
        label = mo.config_label(method, options)
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out


def equals_ar(record: dict, ar: dict | None, temperature: float) -> str:
    if ar is None:
        return "— (no ar run)"
    if temperature > 0:
        return "— (sampled)"
    if record.get("stopped"):
        return "— (stopped)"
    ours, theirs = record.get("token_ids"), ar.get("token_ids")
    same = ours == theirs if ours is not None and theirs is not None else record["text"] == ar["text"]
    return "yes" if same else "no"


def table_rows(batch: Batch) -> list[dict]:
    """One row per configuration (run, stopped, failed or not reached), then the ``ar`` baseline."""
    ar = batch.ar
    ar_rate = ar["stats"]["tokens_per_s"] if ar else None
    rows = []
    for index, label in enumerate(labels(batch.configs)):
        record = batch.runs[index] if index < len(batch.runs) else None
        row = dict.fromkeys(COLUMNS)
        row["configuration"] = label
        if record is None:
            row["status"] = "not run (stopped)" if batch.stopped else "not run"
        elif "error" in record:
            row["status"] = "error: " + record["error"]
        else:
            stats = record["stats"]
            row.update({
                "status": f"stopped after {stats['new_tokens']} tokens" if record["stopped"] else "done",
                "tok/s": round(stats["tokens_per_s"], 1),
                "speedup vs ar": round(stats["tokens_per_s"] / ar_rate, 2) if ar_rate else None,
                "τ": round(stats["mean_accepted_length"], 2),
                "α": round(stats["acceptance_rate"], 2) if stats["drafted"] else None,
                "target calls": stats["target_calls"],
                "new tokens": stats["new_tokens"],
                "output = ar": equals_ar(record, ar, batch.settings.get("temperature", 0.0)),
            })
        rows.append(row)
    if ar is not None:
        stats = ar["stats"]
        rows.append({**dict.fromkeys(COLUMNS), "configuration": AR_LABEL, "status": batch.ar_source,
                     "tok/s": round(stats["tokens_per_s"], 1), "speedup vs ar": 1.0,
                     "τ": round(stats["mean_accepted_length"], 2), "target calls": stats["target_calls"],
                     "new tokens": stats["new_tokens"], "output = ar": "—"})
    return rows


def figure_runs(batch: Batch, with_ar: bool = True) -> dict[str, list]:
    """Label → events of every configuration that produced tokens (and ``ar``), for the overlaid figures."""
    runs = {label: record["events"] for label, record in zip(labels(batch.configs), batch.runs)
            if "error" not in record and record["events"]}
    if with_ar and batch.ar is not None:
        runs[AR_LABEL] = batch.ar["events"]
    return runs


def drafting_runs(batch: Batch) -> dict[str, list]:
    """The runs that drafted something (the acceptance-by-depth figure has nothing to say about the others)."""
    return {label: events for label, events in figure_runs(batch, with_ar=False).items()
            if any(getattr(e, "drafted", 0) for e in events)}
