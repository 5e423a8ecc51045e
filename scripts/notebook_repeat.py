"""Run one notebook N times in one process with nbclient, as nbmake runs it, and print every slow cell.

This is how the notebooks' two-minute stall was found (``notebooks/conftest.py``): a cell that takes exactly the
cell timeout while its outputs and the kernel's ``idle`` came seconds in is a reply the client's poll missed.
``--log`` writes nbclient's debug log (every message with its time) for reading such a run afterwards;
``--no-guard`` runs without the guard, to see the stall again.

    SPECVIZ_QUICK=1 .venv/bin/python scripts/notebook_repeat.py notebooks/03_draft_trees.ipynb --runs 12
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from store_notebook_outputs import slice_client_polls  # scripts/ is on sys.path when this runs as a script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--timeout", type=int, default=120, help="seconds a cell may take (nbmake's quick mode: 120)")
    parser.add_argument("--slow", type=float, default=5.0, help="print cells that took longer than this")
    parser.add_argument("--log", type=Path, default=None, help="write nbclient's debug log here")
    parser.add_argument("--no-guard", action="store_true", help="leave the client's polls unsliced")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    if not args.no_guard:
        slice_client_polls()
    if args.log:
        logging.basicConfig(level=logging.DEBUG, filename=args.log,
                            format="%(relativeCreated)9.0f %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = args.notebook.resolve()
    for run in range(args.runs):
        nb = nbformat.read(path, as_version=4)
        started: dict[int, float] = {}
        client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        client.on_cell_start = lambda cell, cell_index: started.__setitem__(cell_index, time.monotonic())

        def executed(cell, cell_index, execute_reply=None, run=run):
            took = time.monotonic() - started[cell_index]
            if took > args.slow:
                print(f"run {run}: cell {cell_index} took {took:.1f} s", flush=True)

        client.on_cell_executed = executed
        begun = time.monotonic()
        client.execute()
        print(f"run {run}: {time.monotonic() - begun:.1f} s", flush=True)


if __name__ == "__main__":
    main()
