"""Run the test suite and the notebooks, then print how long set-up, tests and notebooks took.

`make test` calls this after set-up, so every log (a student's terminal, CI's) ends with the budget it
spent: the suite must fit in 15 minutes on a 2-core machine, and a slow new test shows here first. Both
halves always run (a failing test does not hide the notebooks' time); the exit status is non-zero if
either failed.

    python scripts/run_suite.py [--since EPOCH] [--all] [--no-notebooks] [--full-notebooks] [--workers N]
                                [--notebook-workers N] [PYTEST_ARGS ...]

``--since``: when `make` started (set-up is the time from then to now). ``--all``: the tests marked
``slow`` too (`make test-all`). Notebooks run under nbmake in quick mode (``SPECVIZ_QUICK=1``: fewer
tokens, one sweep point, fast emulated flash; every cell still runs) unless ``--full-notebooks``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_CELL_TIMEOUT_S = 300  # one cell at full size; a hang fails in minutes, never at CI's limit
# In quick mode no cell takes more than ~20 s, so a cell that takes 2 minutes has hung. A quick-mode notebook
# gets two minutes a cell and one rerun, which the log shows as RERUN: a notebook that really fails fails twice.
# The stall that once cost about two minutes in every fourth run (a kernel idle while nbclient waited on a reply
# already sent, for exactly the cell timeout) was nbclient's poll missing its wake-up; notebooks/conftest.py
# now cuts every wait into half-second polls.
QUICK_CELL_TIMEOUT_S = 120
QUICK_RERUNS = 1
# Three pytest-xdist workers for the tests, each computing on one thread (tests/conftest.py; OMP_NUM_THREADS
# for every process a test starts): much of the suite waits on process starts (each pays ~6 s of importing
# torch and transformers), model loads, pages and lanes, which overlap. Measured on a 2-core Xeon: 408 s on two
# workers where one after another the whole suite took 688 s; later, with 1,126 tests, 634 s on two workers
# and 569 s on three. ``--workers 1`` runs them one at a time with the machine's threads.
WORKERS = 3
# Two notebooks at a time, each computing on one thread, as the tests do: a notebook spends much of its time
# starting a kernel, importing and drawing, which overlap. Kernels started side by side can race for the same
# TCP ports (jupyter/jupyter_client#487), so in parallel each kernel talks over Unix sockets instead
# (notebooks/conftest.py, SPECVIZ_KERNEL_TRANSPORT=ipc); Windows has none, and runs them one at a time.
NOTEBOOK_WORKERS = 1 if os.name == "nt" else 2
# Each notebook runs in a pytest process of its own. In one process, nbclient and the fifth kernel in a row
# (04_cats after 00–03) both sat idle for about two minutes, each waiting on the other (py-spy: the kernel in
# its event loop, nbclient in its own), and then went on: 04_cats took 137 s there, three times out of three,
# and 18–20 s alone, after 00–02, or after 00 and 03. A process per notebook costs ~2 s each and avoids it
# (all nine: 156 s, 04_cats 19 s, on a 2-core Xeon).
# The longest start first, so that no slot idles at the end while one long notebook finishes: in name order
# 09 (40 s) began last, beside nothing (quick mode on a 2-core Xeon: 04 57 s, 09 40 s, 00 40 s, 07 36 s, the rest
# 22-32 s). A notebook not named here runs after these, in name order.
LONGEST_FIRST = ("04_cats", "09_which_method_when", "00_introduction", "07_ssd")


def run(command: list[str], env: dict[str, str]) -> tuple[int, float]:
    started = time.monotonic()
    print("+", " ".join(command), flush=True)
    code = subprocess.call(command, cwd=ROOT, env=env)
    return code, time.monotonic() - started


def run_side_by_side(commands: list[list[str]], env: dict[str, str], slots: int) -> tuple[int, float]:
    """Run ``commands`` at most ``slots`` at a time; each one's output is printed whole when it ends (so two
    logs never interleave). Returns the first non-zero exit status (else 0) and the wall time."""
    started = time.monotonic()
    waiting, running, first_failure = list(commands), [], 0
    while waiting or running:
        while waiting and len(running) < slots:
            command = waiting.pop(0)
            log = tempfile.TemporaryFile()
            running.append((command, log, subprocess.Popen(command, cwd=ROOT, env=env, stdout=log,
                                                           stderr=subprocess.STDOUT)))
        time.sleep(0.2)
        for entry in [entry for entry in running if entry[2].poll() is not None]:
            command, log, process = entry
            running.remove(entry)
            log.seek(0)
            print("+", " ".join(command), flush=True)
            sys.stdout.write(log.read().decode(errors="replace"))
            sys.stdout.flush()
            log.close()
            first_failure = first_failure or process.returncode
    return first_failure, time.monotonic() - started


def notebook_order(notebooks: list[Path]) -> list[Path]:
    """``notebooks`` with those in :data:`LONGEST_FIRST` first, in its order; the others after, as given."""
    rank = {stem: i for i, stem in enumerate(LONGEST_FIRST)}
    return sorted(notebooks, key=lambda path: rank.get(path.stem, len(rank)))


def minutes(seconds: float) -> str:
    return f"{seconds / 60:4.1f} min ({seconds:5.0f} s)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--since", type=float, default=None, help="epoch seconds when set-up began")
    parser.add_argument("--all", action="store_true", help="also the tests marked slow")
    parser.add_argument("--no-notebooks", action="store_true")
    parser.add_argument("--full-notebooks", action="store_true", help="notebooks at full size, not quick mode")
    parser.add_argument("--workers", type=int, default=WORKERS, help="parallel pytest workers (1: none)")
    parser.add_argument("--notebook-workers", type=int, default=NOTEBOOK_WORKERS,
                        help="notebooks run at a time (1: one after another)")
    args, pytest_args = parser.parse_known_args()

    setup = time.time() - args.since if args.since else None
    for name in ("workers", "notebook_workers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    parallel = ["-n", str(args.workers)] if args.workers > 1 else []
    test_env = {**env, "OMP_NUM_THREADS": "1"} if parallel else env
    python = sys.executable
    marker = [] if args.all else ["-m", "not slow"]
    test_code, test_time = run([python, "-m", "pytest", "-q", "--durations=15", *parallel, *marker, *pytest_args,
                                "tests"], test_env)

    notebook_code, notebook_time = 0, None
    if not args.no_notebooks:
        notebook_env = {**env, "SPECVIZ_QUICK": "0" if args.full_notebooks else "1"}
        sizes = ([f"--nbmake-timeout={NOTEBOOK_CELL_TIMEOUT_S}"] if args.full_notebooks else
                 [f"--nbmake-timeout={QUICK_CELL_TIMEOUT_S}", f"--reruns={QUICK_RERUNS}"])
        if args.notebook_workers > 1:
            notebook_env.update(OMP_NUM_THREADS="1", SPECVIZ_KERNEL_TRANSPORT="ipc")
        commands = [[python, "-m", "pytest", "-q", "-rR", "--durations=0", "--timeout=900", "--nbmake", *sizes,
                     str(notebook.relative_to(ROOT))]  # one pytest process each (see above)
                    for notebook in notebook_order(sorted((ROOT / "notebooks").glob("*.ipynb")))]
        notebook_code, notebook_time = run_side_by_side(commands, notebook_env, args.notebook_workers)

    rows = [("set-up", setup), ("tests" + (" (all)" if args.all else ""), test_time),
            ("notebooks" + ("" if args.full_notebooks else " (quick mode)"), notebook_time)]
    total = sum(seconds for _, seconds in rows if seconds is not None)
    print("\nsuite durations")
    for name, seconds in rows:
        if seconds is not None:
            print(f"  {name:24s} {minutes(seconds)}")
    print(f"  {'total':24s} {minutes(total)}   (budget: 15 min on a 2-core machine)")
    verdict = "passed" if test_code == 0 and notebook_code == 0 else "FAILED"
    print(f"  tests exit {test_code}, notebooks exit {notebook_code}: {verdict}")
    return 0 if verdict == "passed" else 1


if __name__ == "__main__":
    sys.exit(main())
