"""scripts/run_suite.py's side-by-side runner: at most `slots` at once, each log whole, the first failure kept."""

import os
import sys
from pathlib import Path

from tests.source_files import load_source

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "run_suite.py"


def test_side_by_side_keeps_each_log_whole_and_the_first_failure(capsys, tmp_path):
    runner = load_source("run_suite", SCRIPT)
    marks = tmp_path / "running"
    marks.mkdir()
    # each command marks itself while it runs, waits (up to 20 s) for a partner, then reports the most it saw
    # running at once over a further 0.3 s; the second and fourth fail
    body = ("import os, sys, time\n"
            "p = os.path.join(sys.argv[1], sys.argv[2]); open(p, 'w').close(); start = time.time(); most = 0\n"
            "while time.time() - start < 20 and len(os.listdir(sys.argv[1])) < 2: time.sleep(0.01)\n"
            "end = time.time() + 0.3\n"
            "while time.time() < end: most = max(most, len(os.listdir(sys.argv[1]))); time.sleep(0.01)\n"
            "print(sys.argv[2], 'saw', most); print(sys.argv[2], 'done'); os.remove(p); sys.exit(int(sys.argv[3]))")
    commands = [[sys.executable, "-c", body, str(marks), name, code]
                for name, code in (("first", "0"), ("second", "3"), ("third", "0"), ("fourth", "5"))]
    code, seconds = runner.run_side_by_side(commands, dict(os.environ), slots=2)
    out = capsys.readouterr().out
    assert code == 3 and seconds > 0
    for name in ("first", "second", "third", "fourth"):  # a command's two lines stay together
        lines = out.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{name} saw"))
        assert lines[at + 1] == f"{name} done"
        assert int(lines[at].split()[-1]) <= 2
    assert max(int(line.split()[-1]) for line in out.splitlines() if " saw " in line) == 2  # two did run at once


def test_the_longest_notebooks_start_first_and_the_rest_keep_their_order():
    runner = load_source("run_suite", SCRIPT)
    names = ["00_introduction", "01_a", "04_cats", "05_b", "07_ssd", "09_which_method_when", "10_new"]
    ordered = [p.stem for p in runner.notebook_order([Path(f"notebooks/{n}.ipynb") for n in names])]
    assert ordered[:4] == list(runner.LONGEST_FIRST)
    assert ordered[4:] == ["01_a", "05_b", "10_new"]
