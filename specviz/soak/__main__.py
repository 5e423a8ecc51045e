"""``python -m specviz.soak`` (``make soak``): run the soak's parts and print (and save) their tables."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from engines.storage import write_json_atomic, write_text_atomic

from . import cli_interrupt, dashboard, engine_runs, lane_faults, report

PARTS = ("engine", "long", "faults", "interrupt", "dashboard")
# seconds each unit took in the soak of 2026-11-27 on a 2-core AMD EPYC (Zen 4), bf16, beside other test runs
# (data/soak/amd-epyc-f25m17): 2,375 s for 2,000 runs, 56 s for 4,000 tokens, ~640 s for 50 faults (each with
# its check run); what the opening estimate is made of
SECONDS_PER_RUN, SECONDS_PER_LONG_TOKEN, SECONDS_PER_FAULT, SECONDS_PER_INTERRUPT = 1.2, 0.014, 13.0, 20.0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m specviz.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which parts, comma-separated ({', '.join(PARTS)})")
    parser.add_argument("--runs", type=int, default=200, help="runs of each method (default 200)")
    parser.add_argument("--tokens", type=int, default=24, help="new tokens per run (default 24)")
    parser.add_argument("--long-tokens", type=int, default=4000, help="the long ar run's tokens (default 4000)")
    parser.add_argument("--faults", type=int, default=50, help="lane faults (default 50)")
    parser.add_argument("--interrupts", type=int, default=2, help="Ctrl-C runs per method, ar and ssd (default 2)")
    parser.add_argument("--minutes", type=float, default=30.0, help="the dashboard's minutes (default 30)")
    parser.add_argument("--sessions", type=int, default=3, help="browser sessions at once (default 3)")
    parser.add_argument("--methods", default="", help="the engine part's methods (default: every method)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the engine rows a stopped soak of the same parts, --runs and --tokens saved")
    parser.add_argument("--out", default="", help="folder for soak.json and soak.md (default: data/soak/<cpu>); "
                        "a soak of some parts writes soak-<parts>.json and .md beside them")
    args = parser.parse_args(argv)
    for name in ("runs", "tokens", "long_tokens", "faults", "interrupts", "sessions"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    unknown = set(args.parts.split(",")) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {sorted(unknown)}; the parts are {', '.join(PARTS)}")
    return args


def machine() -> str:
    from engines.model.verify_cost import _cpu_name

    name, family, model, arch, cores = (_cpu_name().split("|") + [""] * 5)[:5]
    return f"{name}, family {family} model {model}, {cores} cores, {arch}, {platform.system()}"


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[2], timeout=10).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def estimate_minutes(args, parts: list[str], methods: int) -> float:
    seconds = 0.0
    seconds += SECONDS_PER_RUN * args.runs * methods * args.tokens / 24 if "engine" in parts else 0
    seconds += SECONDS_PER_LONG_TOKEN * args.long_tokens if "long" in parts else 0
    seconds += SECONDS_PER_FAULT * args.faults if "faults" in parts else 0
    seconds += SECONDS_PER_INTERRUPT * args.interrupts * 2 if "interrupt" in parts else 0
    seconds += args.minutes * 60 + 60 if "dashboard" in parts else 0
    return seconds / 60


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse(argv)
    parts = args.parts.split(",")
    methods = [m for m in args.methods.split(",") if m] or engine_runs.all_methods()
    from tqdm import tqdm

    from engines import Engine

    started = time.time()
    print(f"soak on {machine()} at {commit()}: about {estimate_minutes(args, parts, len(methods)):.0f} minutes "
          f"({', '.join(parts)})", flush=True)
    record: dict = {"machine": machine(), "commit": commit(), "started": time.strftime("%Y-%m-%d %H:%M"),
                    "settings": vars(args)}
    sections: list[str] = []
    engine = None
    if {"engine", "long", "faults"} & set(parts):
        engine = Engine.load()
        record["dtype"] = engine.dtype
    out = Path(args.out) if args.out else Path("data/soak") / machine_folder()
    # a soak of some parts is saved beside the whole soak's record, never over it
    name = "soak" if set(parts) == set(PARTS) else "soak-" + "-".join(p for p in PARTS if p in parts)
    done = resumable_rows(out / f"{name}.json", args) if args.resume else {}

    def save(rows: list) -> None:  # after every row: a soak stopped at any moment keeps what it measured
        record["engine"] = [r.as_dict() for r in rows]
        write_json_atomic(out / f"{name}.json", record, indent=1)

    if "engine" in parts:
        rows = [done[m] for m in methods if m in done]
        todo = [m for m in methods if m not in done]
        if done:
            print(f"resuming: {', '.join(done)} already measured in {out / name}.json", flush=True)
        with tqdm(total=args.runs * len(todo), desc="engine runs", unit="run") as bar:
            for method in todo:
                rows.append(engine_runs.soak_method(engine, method, args.runs, args.tokens,
                                                    warmup=max(2, args.runs // 10),
                                                    progress=lambda m, i, n: bar.update(1)))
                save(rows)
        rows.sort(key=lambda r: methods.index(r.name))
        if "long" in parts:
            rows.append(engine_runs.soak_long_run(engine, args.long_tokens))
        record["engine"] = [r.as_dict() for r in rows]
        sections.append("## Every method in one process\n\n" + report.engine_table(rows))
    elif "long" in parts:
        rows = [engine_runs.soak_long_run(engine, args.long_tokens)]
        record["engine"] = [r.as_dict() for r in rows]
        sections.append("## One long run\n\n" + report.engine_table(rows))
    if "faults" in parts:
        why = lane_faults.unavailable_reason()
        if why:
            sections.append(f"## Lane faults\n\nskipped: {why}")
        else:
            with tqdm(total=args.faults, desc="lane faults", unit="fault") as bar:
                faults = lane_faults.soak_faults(engine, args.faults, progress=lambda i, n: bar.update(1))
            record["faults"] = [f.as_dict() for f in faults]
            sections.append("## Lane faults\n\n" + report.fault_table(faults))
    if engine is not None:
        engine.close()
        del engine
    if "interrupt" in parts:
        why = cli_interrupt.unavailable_reason()
        if why:
            sections.append(f"## Ctrl-C\n\nskipped: {why}")
        else:
            interrupts = cli_interrupt.soak_interrupts(each=args.interrupts)
            record["interrupts"] = [i.as_dict() for i in interrupts]
            sections.append("## Ctrl-C on `specviz generate`\n\n" + report.interrupt_table(interrupts))
    if "dashboard" in parts:
        why = dashboard.unavailable_reason()
        if why:
            sections.append(f"## The dashboard\n\nskipped: {why}")
        else:
            with tqdm(total=round(args.minutes), desc="dashboard", unit="min") as bar:
                def tick(minute: float) -> None:
                    bar.n = min(round(minute), bar.total)
                    bar.refresh()
                result = dashboard.soak_dashboard(args.minutes, args.sessions, progress=tick)
            warmup = args.minutes / 3  # by then every page and method has been visited and loaded
            record["dashboard"] = {**result.as_dict(), "warmup_minutes": warmup}
            sections.append(f"## The dashboard, {args.sessions} browser sessions\n\n"
                            + report.dashboard_table(result, warmup))
    minutes = (time.time() - started) / 60
    record["minutes"] = round(minutes, 1)
    text = (f"# Soak: {record['machine']}, {record.get('dtype', 'default dtype')}, commit {record['commit']}, "
            f"{record['started']}, {minutes:.0f} minutes\n\n" + "\n\n".join(sections) + "\n")
    print("\n" + text)
    write_json_atomic(out / f"{name}.json", record, indent=1)
    write_text_atomic(out / f"{name}.md", text)
    print(f"saved {out / name}.md and {name}.json")
    return 0


def resumable_rows(path: Path, args) -> dict:
    """The engine rows a stopped soak saved, by method, where it ran with the same runs and tokens."""
    from engines.storage import read_json_record

    saved = read_json_record(path, "the soak's saved rows", then="the soak starts afresh")
    if not saved or saved.get("settings", {}).get("runs") != args.runs \
            or saved.get("settings", {}).get("tokens") != args.tokens:
        return {}
    return {row["name"]: engine_runs.SoakRow.from_dict(row) for row in saved.get("engine", [])
            if row["runs"] == args.runs}


def machine_folder() -> str:
    from engines.model.verify_cost import _cpu_name

    name, family, model = (_cpu_name().split("|") + [""] * 3)[:3]
    slug = "-".join(name.lower().replace("(r)", "").replace("(tm)", "").split())[:40] or platform.machine()
    return f"{slug}-f{family}m{model}" if family else slug


if __name__ == "__main__":
    sys.exit(main())
