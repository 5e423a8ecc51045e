"""The soak's tables, and whether each row meets its target: memory growth after warm-up ≤ 50 MB; threads,
open files and child processes back to (at most) their warm-up counts; every lane fault reported within 5 s
with nothing left behind; every Ctrl-C clean."""

from __future__ import annotations

from .cli_interrupt import InterruptResult
from .dashboard import DashboardResult
from .engine_runs import SoakRow
from .lane_faults import FaultResult
from .resources import Holdings

GROWTH_LIMIT_MB = 50.0
FAULT_LIMIT_S = 5.0


COUNTS = ("threads", "open_files", "children", "temporary")


def held_back(warm: Holdings, end: Holdings, names: tuple[str, ...] = COUNTS) -> list[str]:
    """What did not return to its warm-up count (empty: all did). ``temporary`` counts the whole temporary
    directory's ``specviz-*`` entries, so it means something only where nothing else of the project runs."""
    return [name for name in names if getattr(end, name) > getattr(warm, name)]


def total_mb(h: Holdings) -> float:
    return h.rss_mb + h.children_rss_mb


def verdict(growth_mb: float, warm: Holdings, end: Holdings) -> str:
    problems = ([f"+{growth_mb:.0f} MB"] if growth_mb > GROWTH_LIMIT_MB else []) + held_back(warm, end)
    return "yes" if not problems else "no: " + ", ".join(problems)


def counts(h: Holdings) -> str:
    return f"{h.threads} / {h.open_files} / {h.children} / {h.temporary}"


def engine_table(rows: list[SoakRow]) -> str:
    lines = ["| run | runs | tokens | s | MB warm → end (workers') | growth MB | threads / files / children / temp, "
             "warm → end | meets |", "|---|--:|--:|--:|---|--:|---|---|"]
    for r in rows:
        lines.append(f"| {r.name} | {r.runs} | {r.tokens:,} | {r.seconds:.0f} | {r.warm.rss_mb:,.0f} → {r.end.rss_mb:,.0f}"
                     f" ({r.warm.children_rss_mb:,.0f} → {r.end.children_rss_mb:,.0f}) | {r.growth_mb:+.1f} | "
                     f"{counts(r.warm)} → {counts(r.end)} | {verdict(r.growth_mb, r.warm, r.end)} |")
    return "\n".join(lines)


def fault_table(results: list[FaultResult]) -> str:
    lines = ["| fault | method | runs | reported (LaneError) | within 5 s | slowest s | orphans | leftover files | "
             "next run equal | other outcomes |", "|---|---|--:|--:|--:|--:|--:|--:|--:|---|"]
    keys = sorted({(r.fault, r.method) for r in results})
    for fault, method in keys:
        group = [r for r in results if (r.fault, r.method) == (fault, method)]
        errors = [r for r in group if r.outcome == "error"]
        quick = [r for r in errors if r.seconds_to_error is not None and r.seconds_to_error <= FAULT_LIMIT_S]
        slowest = max((r.seconds_to_error or 0.0 for r in errors), default=0.0)
        other = ", ".join(f"{r.outcome}: {r.message}" for r in group if r.outcome != "error") or "–"
        lines.append(f"| {fault} | {method} | {len(group)} | {len(errors)} | {len(quick)} | {slowest:.2f} | "
                     f"{sum(r.orphans for r in group)} | {sum(r.leftover for r in group)} | "
                     f"{sum(r.next_run_ok for r in group)} | {other} |")
    messages = sorted({r.message for r in results if r.outcome == "error"})
    lines += ["", "What the errors said:"] + [f"- {m}" for m in messages]
    return "\n".join(lines)


def faults_meet(results: list[FaultResult]) -> bool:
    return all(r.outcome == "error" and r.seconds_to_error is not None and r.seconds_to_error <= FAULT_LIMIT_S
               and not r.orphans and not r.leftover and r.next_run_ok for r in results)


def interrupt_table(results: list[InterruptResult]) -> str:
    lines = ["| method | Ctrl-C after first token, s | exit code | exit took s | printed tokens and stats | "
             "traceback | processes left | clean |", "|---|--:|--:|--:|---|---|--:|---|"]
    for r in results:
        lines.append(f"| {r.method} | {r.at_s} | {r.returncode} | {r.seconds_to_exit} | {r.printed_stats} | "
                     f"{r.traceback} | {r.children_left} | {'yes' if r.clean else 'no'} |")
    return "\n".join(lines)


def dashboard_table(result: DashboardResult, warmup_minutes: float) -> str:
    """The server's own memory is what must not grow; its lane workers are not counted in the growth: each
    lanes page starts the workers its method needs (their size is that method's layers and drafter), so their
    memory follows the page last used, and their own growth over runs is the engine part's to measure."""
    warm, end = result.warm_and_end(warmup_minutes)
    growth = end.rss_mb - warm.rss_mb
    lines = [f"| minutes (warm-up) | sessions | visits | server MB warm → end (workers') | server growth MB | "
             "threads / files / children / temp, warm → end | page exceptions | server tracebacks | "
             "session failures | meets |",
             "|--:|--:|--:|---|--:|---|--:|--:|--:|---|"]
    ok = verdict(growth, warm, end)
    if result.page_errors or result.log_tracebacks:
        ok = "no: exceptions" if ok == "yes" else ok + ", exceptions"
    lines.append(f"| {result.minutes:g} ({warmup_minutes:g}) | {result.sessions} | {sum(result.actions.values())} | "
                 f"{warm.rss_mb:,.0f} → {end.rss_mb:,.0f} ({warm.children_rss_mb:,.0f} → {end.children_rss_mb:,.0f}) | "
                 f"{growth:+.1f} | {counts(warm)} → {counts(end)} | {len(result.page_errors)} | "
                 f"{len(result.log_tracebacks)} | {len(result.session_failures)} | {ok} |")
    slope = server_trend_mb_per_10_min(result, warmup_minutes)
    if slope is not None:
        lines += ["", f"The server's memory after warm-up, fitted by least squares over every minute's sample: "
                      f"{slope:+.1f} MB per 10 minutes (single samples move by tens of MB as runs start and end)."]
    lines += ["", "Visits (page/ending): " + ", ".join(f"{k} {v}" for k, v in sorted(result.actions.items()))]
    lines += ["", "Server samples (minute: MB, workers' MB, threads, files, children): " + "; ".join(
        f"{t / 60:.0f}: {h.rss_mb:,.0f}, {h.children_rss_mb:,.0f}, {h.threads}, {h.open_files}, {h.children}"
        for t, h in result.samples)]
    for title, items in (("Page exceptions", result.page_errors), ("Server tracebacks", result.log_tracebacks),
                         ("Session failures", result.session_failures)):
        if items:
            lines += ["", f"{title}:"] + [f"- {item}" for item in items]
    return "\n".join(lines)


def server_trend_mb_per_10_min(result: DashboardResult, warmup_minutes: float) -> float | None:
    """The least-squares slope of the server's resident memory over the samples after warm-up."""
    points = [(t / 60, h.rss_mb) for t, h in result.samples if t >= warmup_minutes * 60]
    if len(points) < 3:
        return None
    mean_t = sum(t for t, _ in points) / len(points)
    mean_m = sum(m for _, m in points) / len(points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    return 10 * sum((t - mean_t) * (m - mean_m) for t, m in points) / spread if spread else None
