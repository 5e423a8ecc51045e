#!/usr/bin/env bash
# For a device round only: drop data/drafts, data/distill and data/bench from git's index and ignore them, so the
# checkout's tracked files are about 6 MiB and travel (the device tool sends what git tracks, 64 MiB at most with
# the carried paths). Nothing is deleted from disk. Commit nothing until scripts/device_round/restore-index.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "commit or stash your changes first" >&2; exit 1; }
git rm -r -q --cached data/drafts data/distill data/bench
printf '/data/drafts/\n/data/distill/\n/data/bench/\n' >> .git/info/exclude
git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {printf "tracked now: %.1f MiB\n", s / 1048576}'
