"""Reading recorded ``specviz bench`` runs back (``data/bench/**``): find them, load them, and tabulate them per
method and per prompt category, without a model (the dashboard's Results page, notebooks).

A run is a JSON file as :func:`specviz.bench.report.write_results` writes it: ``{"setup": {...}, "methods": {label:
{category: summary}}}``, where every label has an ``overall`` summary with ``tokens_per_s``. Other JSON files
in the folder (agreement tables, lane physics, the disconnection sweep) are not bench runs and are skipped.
Speedups are the recorded ones: against ``ar`` of the same run, a ``clock=virtual`` row against
``ar(threads=1)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

BENCH_DIR = Path(__file__).resolve().parents[2] / "data" / "bench"  # the project root: specviz/bench/ is two levels down
DEFAULT_RUN = "bf16/engine-after"  # the 36-prompt run of every method the README's table comes from
METRICS = {"speedup": "speedup", "tokens_per_s": "tok/s", "tau": "τ", "alpha": "α", "equals_ar": "output = ar"}


def is_bench_results(data) -> bool:
    if not isinstance(data, dict) or not isinstance(data.get("setup"), dict) or not isinstance(data.get("methods"), dict):
        return False
    methods = data["methods"]
    return bool(methods) and all(isinstance(m, dict) and isinstance(m.get("overall"), dict)
                                 and "tokens_per_s" in m["overall"] for m in methods.values())


def run_name(path: Path, root: Path) -> str:
    """``bf16/engine-after`` for ``bf16/engine-after/results.json``, ``greedy`` for ``greedy.json``."""
    relative = path.relative_to(root)
    return str(relative.parent if relative.name == "results.json" else relative.with_suffix("")).replace("\\", "/")


def run_path(name: str, root: Path = BENCH_DIR) -> Path | None:
    """The results file of run ``name`` (the inverse of :func:`run_name`), without reading every other run."""
    for path in (Path(root) / name / "results.json", Path(root) / f"{name}.json"):
        if path.exists():
            return path
    return None


def find_runs(root: Path = BENCH_DIR) -> dict[str, Path]:
    """Every recorded bench run under ``root``, by name, sorted by name."""
    runs = {}
    for path in sorted(Path(root).rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if is_bench_results(data):
            runs[run_name(path, Path(root))] = path
    return dict(sorted(runs.items()))


def load_results(path: Path) -> dict:
    data = json.loads(Path(path).read_text())
    if not is_bench_results(data):
        raise ValueError(f"{path} is not a specviz bench result (setup + methods with an overall summary)")
    return data


def default_run(names) -> str | None:
    names = list(names)
    return DEFAULT_RUN if DEFAULT_RUN in names else (names[0] if names else None)


def report_path(path: Path) -> Path | None:
    """The markdown report written beside the JSON (``results.md`` / ``greedy.md``), if there is one."""
    md = Path(path).with_suffix(".md")
    return md if md.exists() else None


def categories(results: Mapping) -> list[str]:
    """Prompt categories of the run, in recorded order (``overall`` left out)."""
    seen: list[str] = []
    for by_category in results["methods"].values():
        seen += [c for c in by_category if c != "overall" and c not in seen]
    return seen


def is_virtual(summary: Mapping) -> bool:
    return summary.get("clock") == "virtual"


def method_rows(results: Mapping, category: str = "overall") -> list[dict]:
    """One row per method for ``category``: tok/s, speedup, τ, α, draft cost c, share of answers equal to ar."""
    rows = []
    for label, by_category in results["methods"].items():
        s = by_category.get(category)
        if s is None:
            continue
        rows.append({"method": label + (" · clock=virtual" if is_virtual(s) else ""),
                     "tok/s": _round(s.get("tokens_per_s"), 1), "speedup": _round(s.get("speedup"), 2),
                     "τ": _round(s.get("tau"), 2), "α": _round(s.get("alpha"), 2),
                     "draft cost c": _round(s.get("draft_cost"), 2),
                     "output = ar": None if s.get("equals_ar") is None else
                     f"{s['equals_ar']:.0%}" + (" (other program, for information)" if s.get("peer") else ""),
                     "answers": s.get("turns"), "new tokens": s.get("new_tokens")})
    return rows


def category_rows(results: Mapping, metric: str = "speedup") -> list[dict]:
    """One row per method, one column per category (then overall), of ``metric`` (a key of :data:`METRICS`)."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    columns = categories(results) + ["overall"]
    rows = []
    for label, by_category in results["methods"].items():
        row = {"method": label}
        for category in columns:
            value = (by_category.get(category) or {}).get(metric)
            row[category] = None if value is None else round(value, 1 if metric == "tokens_per_s" else 2)
        rows.append(row)
    return rows


def speedups(results: Mapping, category: str = "overall") -> tuple[list[str], list[float | None], list[str]]:
    """(labels, speedups, hover notes) of every method in ``category``, for a bar chart."""
    labels, values, notes = [], [], []
    for label, by_category in results["methods"].items():
        s = by_category.get(category)
        if s is None:
            continue
        labels.append(label + (" · virtual" if is_virtual(s) else ""))
        values.append(s.get("speedup"))
        tau, alpha = s.get("tau"), s.get("alpha")
        notes.append(f"{s.get('tokens_per_s', 0):.1f} tok/s · τ {_fmt(tau)} · α {_fmt(alpha)}"
                     + (" · against ar(threads=1)" if is_virtual(s) else ""))
    return labels, values, notes


def skipped_notes(results: Mapping) -> list[str]:
    """Rows asked for that did not run on the recording machine, each with why (``llamacpp_ar: skipped — run
    `make peers` (…)``)."""
    return [f"{label}: {note}" for label, note in (results["setup"].get("skipped") or {}).items()]


def peer_line(results: Mapping) -> str | None:
    """What measured the llama.cpp rows, if the run has any."""
    peer = results["setup"].get("peer")
    if not peer or not any((m.get("overall") or {}).get("peer") for m in results["methods"].values()):
        return None
    return (f"llama.cpp rows: llama-cpp-python {peer.get('llama_cpp_python', '?')} (llama.cpp "
            f"{peer.get('llama_cpp_commit', '?')}) on `{peer.get('gguf', '?')}`, the engine's weights converted; their "
            "output = ar is for information (other kernels round differently).")


def setup_line(results: Mapping) -> str:
    """The run's setup in a sentence."""
    s = results["setup"]
    parts = [s.get("model", "?"), s.get("dtype", "?"), s.get("device", "?")]
    if s.get("threads"):
        parts.append(f"{s['threads']} threads")
    line = " · ".join(str(p) for p in parts)
    if s.get("n_prompts") is not None:
        line += f" · {s['n_prompts']} prompts from `{s.get('prompts', '?')}`"
    if s.get("max_new_tokens") is not None:
        line += f" · {s['max_new_tokens']} new tokens"
    if s.get("temperature") is not None:
        line += f" · temperature {s['temperature']}"
    if s.get("complete") is False:
        line += " · **partial: the run stopped early**"
    ceiling = s.get("ceiling")
    if ceiling:
        line += f" · bandwidth ceiling {ceiling['tokens_per_s']:.0f} tok/s"
    if s.get("machine"):
        line += f" · {s['machine']}"
    if s.get("step"):
        line += f" · step: {s['step']}"
    return line


def run_title(name: str, results: Mapping) -> str:
    s = results["setup"]
    prompts = f"{s['n_prompts']} prompts · " if s.get("n_prompts") is not None else ""
    return f"{name} — {prompts}{len(results['methods'])} methods · T={s.get('temperature', '?')} · {s.get('dtype', '?')}"


def _round(value, digits: int):
    return None if value is None else round(value, digits)


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.2f}"
