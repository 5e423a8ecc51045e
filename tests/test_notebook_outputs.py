"""The notebooks carry their executed outputs, small and visible on GitHub (scripts/store_notebook_outputs.py).

The first tests read the committed notebooks (no execution): they fail until `make notebook-outputs` has
been run after the notebooks last changed. The rest test the script's post-processing on a synthetic
notebook; only the PNG rendering needs kaleido (the optional `outputs` extra).
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import nbformat
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from tests.source_files import load_source

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

# A notebook's ~10-15 figures as 900-px palette PNGs are 10-40 kB each (a third more in base64), its
# source and tables ~50 kB: a few hundred kB in all. 1.5 MB leaves room for more figures, and still
# catches what blows a notebook up: interactive plotly JSON, plotly.js HTML, widget state.
MAX_NOTEBOOK_BYTES = 1_500_000
# One PNG of a busy figure is under 100 kB; one output past this is something that should not be stored.
MAX_OUTPUT_BYTES = 300_000

store = load_source("store_notebook_outputs", ROOT / "scripts" / "store_notebook_outputs.py")


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _outputs(nb: nbformat.NotebookNode):
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            for output in cell.get("outputs", []):
                yield index, output


def _must_run(cell) -> bool:
    return (cell.cell_type == "code" and cell.source.strip() != ""
            and store.SKIP_TAG not in cell.get("metadata", {}).get("tags", []))


# --- the committed notebooks ----------------------------------------------------------------------------

def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 9


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_small(path):
    size = path.stat().st_size
    assert size <= MAX_NOTEBOOK_BYTES, f"{path.name} is {size / 1e6:.2f} MB (limit {MAX_NOTEBOOK_BYTES / 1e6} MB)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_was_executed_top_to_bottom(path):
    nb = _read(path)
    counts = [(i, cell.execution_count) for i, cell in enumerate(nb.cells) if _must_run(cell)]
    missing = [i for i, count in counts if count is None]
    assert not missing, (f"{path.name}: code cells {missing} have no stored outputs; "
                         "run `make notebook-outputs` after editing a notebook")
    numbers = [count for _, count in counts]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers), \
        f"{path.name}: execution counts {numbers} are not one top-to-bottom run"
    errors = [i for i, output in _outputs(nb) if output.output_type == "error"]
    assert not errors, f"{path.name}: cells {errors} stored an error"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_shows_its_figures_as_png(path):
    pngs = [i for i, output in _outputs(_read(path)) if "image/png" in output.get("data", {})]
    assert pngs, f"{path.name} stores no PNG figure"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_stores_nothing_heavy_or_interactive(path):
    nb = _read(path)
    assert "widgets" not in nb.metadata, f"{path.name} stores widget state"
    for index, output in _outputs(nb):
        data = output.get("data", {})
        where = f"{path.name}, cell {index}"
        assert store.PLOTLY_MIME not in data, f"{where}: a plotly figure stored as JSON, not PNG"
        assert store.WIDGET_MIME not in data, f"{where}: a widget view stored"
        html = data.get("text/html")
        assert html is None or not store.is_plotly_html("".join(html)), f"{where}: plotly.js HTML stored"
        size = len(json.dumps(output))
        assert size <= MAX_OUTPUT_BYTES, f"{where}: one output of {size / 1e3:.0f} kB"


# --- the post-processing, on a synthetic notebook ----------------------------------------------------------

def _tiny_figure() -> go.Figure:
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2], name="measured"))
    fig.update_layout(title="A <b>tiny</b> figure", xaxis_title="x", yaxis_title="y", height=300)
    return fig


def _synthetic_notebook() -> nbformat.NotebookNode:
    fig = _tiny_figure()
    plotly_bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict())
    html_bundle = {"text/html": pio.to_html(fig, include_plotlyjs="cdn", full_html=False), "text/plain": "Figure"}
    widget = {store.WIDGET_MIME: {"model_id": "abc", "version_major": 2, "version_minor": 0},
              "text/plain": "VBox(children=(IntSlider(value=3),))"}
    long_text = "".join(f"line {i}\n" for i in range(200))
    table = {"text/html": "<table><tr><td>1</td></tr></table>", "text/plain": "   a\n0  1"}
    big_html = {"text/html": "<p>" + "x" * (store.MAX_HTML_BYTES + 10) + "</p>", "text/plain": "<HTML object>"}
    new = nbformat.v4
    cells = [
        new.new_markdown_cell("# title"),
        new.new_code_cell("fig.show()", execution_count=1, metadata={"tags": ["keep-me"]},
                          outputs=[new.new_output("display_data", data=plotly_bundle)]),
        new.new_code_cell("fig", execution_count=2,
                          outputs=[new.new_output("execute_result", data=html_bundle, execution_count=2)]),
        new.new_code_cell("explorer()", execution_count=3, outputs=[new.new_output("display_data", data=widget)]),
        new.new_code_cell("print(...)", execution_count=4,
                          outputs=[new.new_output("stream", name="stdout", text=long_text)]),
        new.new_code_cell("df", execution_count=5,
                          outputs=[new.new_output("execute_result", data=table, execution_count=5)]),
        new.new_code_cell("HTML(...)", execution_count=6, outputs=[new.new_output("display_data", data=big_html)]),
    ]
    nb = new.new_notebook(cells=cells)
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"abc": {}}}}
    nbformat.validate(nb)
    return nb


class FakeRender:
    def __init__(self):
        self.figures = []

    def __call__(self, fig: dict) -> bytes:
        self.figures.append(fig)
        return b"\x89PNG fake"


def test_shrink_turns_figures_to_png_and_widgets_to_notes():
    nb, render = _synthetic_notebook(), FakeRender()
    stats = store.shrink_notebook(nb, render)
    nbformat.validate(nb)
    assert stats == {"pngs": 2, "widgets": 1, "html_dropped": 1, "figures_lost": 0}
    assert "widgets" not in nb.metadata
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == [1, 2, 3, 4, 5, 6]
    assert code[0].metadata == {"tags": ["keep-me"]}

    for cell in code[:2]:  # the mimetype figure and the plotly.js HTML one both become PNGs
        (output,) = cell.outputs
        assert set(output.data) == {"image/png", "text/plain"}
        assert base64.b64decode(output.data["image/png"]) == b"\x89PNG fake"
        assert output.data["text/plain"] == "<plotly figure: A tiny figure>"
    assert code[1].outputs[0].output_type == "execute_result" and code[1].outputs[0].execution_count == 2
    for fig in render.figures:  # rendered from the figure's JSON at the stored size
        assert fig["data"][0]["y"] == [3, 1, 2] and fig["data"][0]["name"] == "measured"
        assert fig["layout"]["width"] == store.PNG_WIDTH and fig["layout"]["height"] == 300
        assert "x" in json.dumps(fig["layout"]["xaxis"])

    assert code[2].outputs[0].data == {"text/plain": store.WIDGET_NOTE}
    text = code[3].outputs[0].text
    assert text.startswith("line 0\n") and f"line {store.MAX_TEXT_LINES - 1}\n" in text
    assert f"line {store.MAX_TEXT_LINES}\n" not in text
    assert text.endswith(f"… {200 - store.MAX_TEXT_LINES} lines trimmed\n")
    assert set(code[4].outputs[0].data) == {"text/html", "text/plain"}  # a small table keeps its HTML
    assert code[5].outputs[0].data == {"text/plain": "<HTML object>"}  # an oversized HTML output is dropped


def test_shrink_needs_no_renderer_without_figures():
    nb = _synthetic_notebook()
    nb.cells = [cell for cell in nb.cells if "fig" not in cell.source]
    assert store.shrink_notebook(nb)["widgets"] == 1
    with pytest.raises(ValueError, match="renderer"):
        store.shrink_notebook(_synthetic_notebook())


def test_plotly_html_is_recognised_and_read_back():
    fig = _tiny_figure()
    for html in (pio.to_html(fig, include_plotlyjs="cdn", full_html=False),
                 pio.renderers["notebook"].to_mimebundle(fig.to_dict())["text/html"]):
        assert store.is_plotly_html(html)
        read = store.figure_from_plotly_html(html)
        assert read["data"][0]["y"] == [3, 1, 2] and read["layout"]["height"] == 300
    assert not store.is_plotly_html("<table><tr><td>plotly is a library</td></tr></table>")
    assert store.figure_from_plotly_html("<script>Plotly.newPlot(broken</script>") is None


def test_figure_size_keeps_own_height_and_caps_width():
    assert store._figure_size({"layout": {}}) == (store.PNG_WIDTH, store.PNG_HEIGHT)
    assert store._figure_size({"layout": {"width": 600, "height": 250}}) == (600, 250)
    assert store._figure_size({"layout": {"width": 3000}})[0] == store.PNG_MAX_WIDTH


def test_kaleido_renders_a_real_png():
    pytest.importorskip("kaleido")
    nb = _synthetic_notebook()
    nb.cells = nb.cells[:2]
    with store.kaleido_renderer() as render:
        assert store.shrink_notebook(nb, render)["pngs"] == 1
    png = base64.b64decode(nb.cells[1].outputs[0].data["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert (width, height) == (store.PNG_WIDTH * store.PNG_SCALE, 300 * store.PNG_SCALE)
    assert 2_000 < len(png) < 100_000  # a drawn figure, not an empty canvas


def test_a_widget_is_stored_as_what_it_showed_then_a_note():
    """An explorer (a VBox of sliders over an Output widget holding a figure, and HTML widgets) keeps its
    initial figure as a PNG and its HTML, read from the widget state nbclient saved, with the note after it."""
    fig = _tiny_figure()
    plotly_bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict())
    new = nbformat.v4
    view = {store.WIDGET_MIME: {"model_id": "box", "version_major": 2, "version_minor": 0}, "text/plain": "VBox()"}
    nb = new.new_notebook(cells=[new.new_code_cell("explorer()", execution_count=1,
                                                   outputs=[new.new_output("display_data", data=view)])])
    nb.metadata["widgets"] = {store.WIDGET_STATE_MIME: {"state": {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_slider", "IPY_MODEL_out",
                                                                  "IPY_MODEL_stats", "IPY_MODEL_blank"]}},
        "slider": {"model_name": "IntSliderModel", "state": {"value": 3}},
        "stats": {"model_name": "HTMLModel", "state": {"value": "<b>τ = 2.1</b>"}},
        "blank": {"model_name": "HTMLModel", "state": {"value": ""}},
        "out": {"model_name": "OutputModel", "state": {"outputs": [
            {"output_type": "stream", "name": "stdout", "text": "α = 0.8\n"},
            {"output_type": "display_data", "data": plotly_bundle, "metadata": {}}]}}}}}
    render = FakeRender()
    stats = store.shrink_notebook(nb, render)
    nbformat.validate(nb)
    assert stats["widgets"] == 1 and stats["pngs"] == 1 and "widgets" not in nb.metadata
    text, picture, stats_html, note = nb.cells[0].outputs
    assert text.text == "α = 0.8\n"
    assert base64.b64decode(picture.data["image/png"]) == b"\x89PNG fake"
    assert stats_html.data["text/html"] == "<b>τ = 2.1</b>"  # an HTML widget's text, an empty one left out
    assert note.data == {"text/plain": store.WIDGET_STATE_NOTE}
