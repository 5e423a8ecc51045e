"""Execute the teaching notebooks and store their outputs in them, small enough for the repository.

GitHub shows a notebook's stored outputs but runs no JavaScript: a plotly figure stored as its JSON (or
as plotly.js HTML) shows nothing there, and widget state costs hundreds of kB for nothing. This script
executes each notebook with nbclient (kernel ``python3``, in the notebook's own folder,
``HF_HUB_OFFLINE=1``) and then shrinks what the run left:

- every plotly figure (``application/vnd.plotly.v1+json``, or ``text/html`` carrying plotly.js) becomes
  a static PNG rendered from the figure's JSON by kaleido (plotly's exporter);
- every ipywidgets view becomes what it showed when its cell finished (its ``Output`` widgets' figures, as
  PNGs), then a one-line note that it is interactive; the notebook's widget state is dropped;
- long text is cut to its first lines, and an HTML output over a size cap is dropped.

``make notebook-outputs`` installs kaleido (the ``outputs`` extra; it drives the system Chromium) and
runs this over every notebook; tests/test_notebook_outputs.py checks the result stays small. nbmake
re-executes the notebooks in ``make test`` without writing back, so stored outputs stay as committed; it
runs them in quick mode (``SPECVIZ_QUICK=1``: small sizes, see specviz/quick.py), whereas this script
always runs them in full (it sets ``SPECVIZ_QUICK=0`` for the kernel).

    .venv/bin/python scripts/store_notebook_outputs.py [NOTEBOOK.ipynb ...]   # default: notebooks/*.ipynb
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

CELL_TIMEOUT_S = 900  # as `make test`'s nbmake run: the slowest cells run sweeps on one CPU core
SKIP_TAG = "skip-execution"  # nbclient (and so nbmake) leaves cells with this tag unexecuted
PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PNG_WIDTH = 900  # layout pixels when the figure sets no width: about GitHub's notebook column
PNG_MAX_WIDTH = 1000  # a figure's own width is kept up to this
PNG_HEIGHT = 500  # plotly's own default, for a figure that sets no height
PNG_SCALE = 1  # 1 layout pixel = 1 image pixel: sharp enough on GitHub, a third of scale 2's bytes
MAX_TEXT_LINES = 60  # a stream or text/plain output keeps this many lines, then a "trimmed" marker
MAX_HTML_BYTES = 100_000  # a pandas table is a few kB; anything bigger is dropped (text/plain stays)
WIDGET_NOTE = "(interactive widget: run the notebook to use it)"
WIDGET_STATE_NOTE = "(interactive widget: its initial state is shown above; run the notebook to use it)"
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
PLOTLY_NOTE = "(plotly figure: run the notebook to see it)"

Render = Callable[[dict], bytes]  # a plotly figure's JSON -> PNG bytes


# --- recognising what to convert --------------------------------------------------------------------

_PLOTLY_HTML = re.compile(r"Plotly\.newPlot|cdn\.plot\.ly|window\.PlotlyConfig|plotly-latest|plotly\.min\.js")


def is_plotly_html(html: str) -> bool:
    """True for HTML that draws a plotly figure with plotly.js (the `notebook`/`iframe` renderers' output)."""
    return bool(_PLOTLY_HTML.search(html))


def figure_from_plotly_html(html: str) -> dict | None:
    """The figure a ``Plotly.newPlot(id, data, layout, config)`` call in ``html`` draws, or None."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"Plotly\.newPlot\(\s*", html):
        pos = match.end()
        try:
            _, pos = decoder.raw_decode(html, pos)  # the div's id, a JSON string
            parts = []
            for _ in range(2):  # data, then layout
                pos = html.index(",", pos) + 1
                while html[pos].isspace():
                    pos += 1
                value, pos = decoder.raw_decode(html, pos)
                parts.append(value)
        except (ValueError, IndexError):
            continue
        data, layout = parts
        if isinstance(data, list) and isinstance(layout, dict):
            return {"data": data, "layout": layout}
    return None


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def trim_text(text: str, max_lines: int = MAX_TEXT_LINES) -> str:
    """The first ``max_lines`` lines of ``text`` and a marker saying how many were cut."""
    lines = text.splitlines(keepends=True)
    if len(lines) <= max_lines:
        return text
    kept = "".join(lines[:max_lines])
    if not kept.endswith("\n"):
        kept += "\n"
    return kept + f"… {len(lines) - max_lines} lines trimmed\n"


# --- shrinking a notebook's outputs -----------------------------------------------------------------

def _figure_size(fig: dict) -> tuple[int, int]:
    layout = fig.get("layout") or {}
    width = layout.get("width")
    width = min(int(width), PNG_MAX_WIDTH) if isinstance(width, (int, float)) else PNG_WIDTH
    height = layout.get("height")
    return width, int(height) if isinstance(height, (int, float)) else PNG_HEIGHT


def _figure_title(fig: dict) -> str:
    title = (fig.get("layout") or {}).get("title")
    text = title.get("text") if isinstance(title, dict) else title
    return " ".join(re.sub(r"<[^>]+>", " ", text).split()) if isinstance(text, str) else ""


def _note(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_output("display_data", data={"text/plain": text})


def widget_outputs(state: dict, model_id: str) -> list[dict]:
    """What a widget showed when its cell finished: the outputs its ``Output`` widgets held (nbclient records
    them in the notebook's widget state) and the text of its ``HTML`` widgets (a live run's token stream and
    stats), depth first through the children, in the order they are laid out."""
    model = state.get(model_id) or {}
    inner = model.get("state", {})
    found = []
    if model.get("model_name") == "OutputModel":
        found = list(inner.get("outputs", []))
    elif model.get("model_name") == "HTMLModel" and str(inner.get("value", "")).strip():
        found = [{"output_type": "display_data", "metadata": {},
                  "data": {"text/html": inner["value"], "text/plain": "<HTML widget>"}}]
    for child in inner.get("children", []):
        if isinstance(child, str) and child.startswith("IPY_MODEL_"):
            found += widget_outputs(state, child.removeprefix("IPY_MODEL_"))
    return found


def _with_metadata(output: dict) -> dict:
    """A display output as nbformat wants it (an ``Output`` widget's record may omit its empty metadata)."""
    if output.get("output_type") in ("display_data", "execute_result") and "metadata" not in output:
        return {**output, "metadata": {}}
    return output


def _shrink_output(output: nbformat.NotebookNode, render: Render | None, stats: dict,
                   widget_state: dict) -> list[nbformat.NotebookNode]:
    """The small, static outputs that stand for ``output``: usually one; a widget becomes what it showed
    at the end of its cell (figures as PNGs), then a note that it is interactive."""
    kind = output.get("output_type")
    if kind == "stream":
        output["text"] = trim_text(_text(output.get("text", "")))
        return [output]
    if kind not in ("display_data", "execute_result"):
        return [output]  # errors stay whole: a stored traceback is what a reader needs to see
    data = output.get("data", {})
    if WIDGET_MIME in data:
        stats["widgets"] += 1
        shown = [shrunk for inner in widget_outputs(widget_state, data[WIDGET_MIME].get("model_id", ""))
                 for shrunk in _shrink_output(nbformat.from_dict(_with_metadata(inner)), render, stats, widget_state)]
        return shown + [_note(WIDGET_STATE_NOTE if shown else WIDGET_NOTE)]
    fig = data.get(PLOTLY_MIME)
    html = _text(data["text/html"]) if "text/html" in data else None
    if fig is None and html is not None and is_plotly_html(html):
        fig = figure_from_plotly_html(html)
        if fig is None:  # plotly HTML we cannot read a figure from: nothing GitHub could show anyway
            stats["figures_lost"] += 1
            return [_note(PLOTLY_NOTE)]
    if fig is not None:
        if render is None:
            raise ValueError("a plotly figure needs a renderer (kaleido) to become a PNG")
        width, height = _figure_size(fig)
        layout = {**(fig.get("layout") or {}), "width": width, "height": height}
        png = render({"data": fig.get("data", []), "layout": layout})
        stats["pngs"] += 1
        title = _figure_title(fig)
        bundle = {"image/png": base64.b64encode(png).decode("ascii"),
                  "text/plain": f"<plotly figure{': ' + title if title else ''}>"}
        new = nbformat.v4.new_output(kind, data=bundle)
        if kind == "execute_result":
            new["execution_count"] = output.get("execution_count")
        return [new]
    if html is not None and len(html.encode()) > MAX_HTML_BYTES:
        stats["html_dropped"] += 1
        del data["text/html"]
        if not data:
            return [_note(f"(an HTML output of {len(html.encode()) // 1000} kB was dropped: run the notebook to see it)")]
    if "text/plain" in data:
        data["text/plain"] = trim_text(_text(data["text/plain"]))
    return [output]


def shrink_notebook(nb: nbformat.NotebookNode, render: Render | None = None) -> dict:
    """Rewrite ``nb``'s outputs in place to small, static ones; return counts of what changed.

    ``render`` turns a plotly figure's JSON into PNG bytes (``kaleido_renderer`` gives one); it is only
    called when the notebook holds a plotly figure. A widget is stored as what it showed when its cell
    finished, read from the widget state nbclient saved, and the state is then dropped. Execution counts and
    cell metadata are kept.
    """
    stats = {"pngs": 0, "widgets": 0, "html_dropped": 0, "figures_lost": 0}
    widget_state = nb.metadata.get("widgets", {}).get(WIDGET_STATE_MIME, {}).get("state", {})
    for cell in nb.cells:
        if cell.get("cell_type") == "code":
            cell["outputs"] = [shrunk for output in cell.get("outputs", [])
                               for shrunk in _shrink_output(output, render, stats, widget_state)]
    nb.metadata.pop("widgets", None)  # ipywidgets' saved state: large, and useless without a kernel
    return stats


def optimize_png(png: bytes) -> bytes:
    """A 256-colour palette PNG of ``png`` (plotly's flat colours survive it; about a third of the bytes)."""
    try:
        from PIL import Image
    except ImportError:
        return png
    image = Image.open(io.BytesIO(png)).convert("RGB")
    out = io.BytesIO()
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, format="png", optimize=True)
    return out.getvalue() if out.tell() < len(png) else png


@contextlib.contextmanager
def kaleido_renderer() -> Iterator[Render]:
    """A figure-to-PNG function backed by one kaleido server (one Chromium) for the whole run.

    kaleido 1.x drives a Chrome/Chromium it finds on PATH (Debian's ``chromium``; ``BROWSER_PATH``
    names another). MathJax is off: the figures use no LaTeX, and its default source is a CDN.
    """
    try:
        import kaleido
    except ImportError as error:
        raise SystemExit(f"{error}: install the outputs extra first (make notebook-outputs does)") from error

    def render(fig: dict) -> bytes:
        # kaleido directly, not plotly.io.to_image: that passes per-call options a running server ignores
        # (with a warning per figure); the size comes from the layout shrink_notebook set
        layout = fig.get("layout", {})
        opts = dict(format="png", width=layout.get("width", PNG_WIDTH), height=layout.get("height", PNG_HEIGHT),
                    scale=PNG_SCALE)
        return optimize_png(kaleido.calc_fig_sync(fig, opts=opts))

    try:  # one figure without the server first: a browser that cannot start raises here, whereas a server
        # whose browser failed leaves its callers waiting forever
        kaleido.calc_fig_sync({"data": [], "layout": {}}, opts=dict(format="png", width=50, height=50),
                              kopts=dict(mathjax=False))
    except Exception as error:
        raise SystemExit(f"kaleido cannot render ({type(error).__name__}: {error}); it needs Chrome or Chromium: "
                         "`make browser-deps` installs Debian's, BROWSER_PATH names another") from error
    kaleido.start_sync_server(mathjax=False, silence_warnings=True)
    try:
        yield render
    finally:
        kaleido.stop_sync_server(silence_warnings=True)


# --- executing ----------------------------------------------------------------------------------------

def kernel_environment() -> None:
    """Environment the kernel inherits: no model hub, full mode, and figures emitted as plotly's JSON mimetype.

    Under ipykernel plotly already picks ``plotly_mimetype``, but VS Code, Colab and others switch it to
    HTML renderers; PLOTLY_RENDERER (read by plotly.io at import) pins it.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    # Stored outputs always come from a full run: `make test` runs the notebooks with SPECVIZ_QUICK=1 (small
    # sizes, specviz/quick.py), and a shell that still has it set must not store quick-mode outputs.
    os.environ["SPECVIZ_QUICK"] = "0"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ["PLOTLY_RENDERER"] = "plotly_mimetype"


def slice_client_polls() -> None:
    """Load the guard nbmake's runs get from ``notebooks/conftest.py``: a reply the client's poll missed then
    costs half a second, not the whole ``CELL_TIMEOUT_S``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("notebooks_poll_guard", NOTEBOOKS / "conftest.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def execute(nb: nbformat.NotebookNode, cwd: Path, label: str = "") -> None:
    """Run every cell of ``nb`` in a fresh ``python3`` kernel started in ``cwd``, one progress line per cell."""
    from nbclient import NotebookClient
    from tqdm import tqdm  # a dependency of transformers, so always here

    kernel_environment()
    slice_client_polls()
    cells = sum(cell.cell_type == "code" for cell in nb.cells)
    bar = tqdm(total=cells, desc=label, unit="cell", leave=False, file=sys.stderr)

    # store_widget_state stays on (nbclient's Output-widget handling needs it: off, it raises KeyError);
    # shrink_notebook drops the state afterwards. record_timing off: no timestamps churning cell metadata.
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}}, coalesce_streams=True,
                            record_timing=False, on_cell_complete=lambda **_: bar.update(1))
    try:
        client.execute()
    finally:
        bar.close()


def store(path: Path, render: Render) -> dict:
    """Execute the notebook at ``path``, shrink its outputs and write it back; return what was measured."""
    nb = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    execute(nb, path.parent, label=path.name)
    executed = time.perf_counter()
    stats = shrink_notebook(nb, render)
    nbformat.validate(nb)
    from engines.storage import write_text_atomic  # here: the helpers above, imported by tests, need no engine

    text = nbformat.writes(nb)
    write_text_atomic(path, text if text.endswith("\n") else text + "\n")  # as nbformat.write ends it
    return {**stats, "execute_s": executed - started, "render_s": time.perf_counter() - executed,
            "bytes": path.stat().st_size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    paths = parser.parse_args(argv).notebooks or sorted(NOTEBOOKS.glob("*.ipynb"))
    failed = []
    with kaleido_renderer() as render:
        for path in paths:
            path = path.resolve()
            print(f"{path.name}: executing …", flush=True)
            try:
                done = store(path, render)
            except Exception as error:  # one failing notebook is reported, not written, and the rest go on
                failed.append(path.name)
                print(f"{path.name}: FAILED, left unchanged: {type(error).__name__}: {str(error)[-2000:]}",
                      file=sys.stderr, flush=True)
                continue
            print(f"{path.name}: {done['bytes'] / 1e3:.0f} kB, {done['pngs']} PNGs, {done['widgets']} widgets noted; "
                  f"executed in {done['execute_s']:.0f} s, figures rendered in {done['render_s']:.1f} s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
