#!/usr/bin/env bash
# Prepares a GPU round through this workplace's device tool (docs/gpu.md, "How a round is run"): the tool sends the
# checkout's tracked files plus at most 8 carried paths, 64 MiB in all, to a bare machine that has torch and
# transformers but neither the model nor gguf nor plotly. The checkout tracks ~190 MiB (data/) and the GGUF is 94 MiB,
# so the model travels in two halves over two calls on the warm machine (it stays warm 30 s after a call).
#
#   scripts/device_round/prepare.sh          # wheels and GGUF halves into .gpu/ (ignored through .git/info/exclude)
#   scripts/device_round/trim-index.sh      # data/ out of git's index for the round only: 6 MiB then travels
#   device run "bash scripts/device_round/1-setup.sh"  carry: .gpu/whl .gpu/gguf.part0
#   device run "bash scripts/device_round/2-bench.sh"  carry: .gpu/gguf.part1 data/drafts/eagle
#   device run "bash scripts/device_round/3-train.sh 5"  carry: data/distill data/drafts/eagle3 data/drafts/eagle
#   device run "bash scripts/device_round/4-tests.sh"  carry: data/drafts/eagle data/drafts/tiny data/drafts/ss
#              data/drafts/exit@15-norm   (about 42 MiB with the 6 MiB tree)
#   scripts/device_round/restore-index.sh   # afterwards, at once
#
# Only call 1 carries the wheels (they stay installed in /tmp/site). Each call must start within 30 s of the last
# one's end, or the machine goes back and the halves with it.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
mkdir -p .git/info .gpu/whl
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
GGUF=$("$PY" -c "from engines.model.loading import _gguf_path; print(_gguf_path())")
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d .gpu/whl \
    "gguf==$("$PY" -c 'import importlib.metadata as m; print(m.version("gguf"))')" \
    "plotly==$("$PY" -c 'import plotly; print(plotly.__version__)')"
rm -f .gpu/gguf.part*
split -n 2 -d -a 1 "$GGUF" .gpu/gguf.part
md5sum "$GGUF" | cut -d' ' -f1 > .gpu/gguf.md5
ls -la .gpu .gpu/whl
