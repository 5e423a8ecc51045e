"""One notation: every notebook's glossary cell, docs/notation.md and the dashboard read specviz.notation."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from specviz.notation import CORE, SYMBOLS, glossary_markdown, notation_table, parse_glossary

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_glossary_round_trips_and_rejects_unknown_symbols():
    cell = glossary_markdown("P", "ρ")
    assert len(cell.splitlines()) == 4  # the heading, then three lines
    parsed = parse_glossary(cell)
    assert list(parsed) == [*CORE, "P", "ρ"]
    assert all(parsed[s] == SYMBOLS[s].meaning for s in parsed)
    with pytest.raises(ValueError, match="extra symbols"):
        glossary_markdown("Z")
    with pytest.raises(ValueError, match="core"):
        glossary_markdown("α")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_opens_with_the_shared_glossary(path):
    nb = nbformat.read(path, as_version=4)
    cells = [c.source for c in nb.cells[:4] if c.cell_type == "markdown" and c.source.startswith("**Notation**")]
    assert cells, f"{path.name}: no glossary cell (specviz.notation.glossary_markdown) among its first cells"
    parsed = parse_glossary(cells[0])
    assert list(parsed)[: len(CORE)] == list(CORE), f"{path.name}: the glossary must open with {CORE}"
    wrong = {s: m for s, m in parsed.items() if s not in SYMBOLS or SYMBOLS[s].meaning != m}
    assert not wrong, f"{path.name}: glossary entries differ from specviz.notation: {wrong}"
    assert cells[0] == glossary_markdown(*list(parsed)[len(CORE):]), f"{path.name}: regenerate the glossary cell"


def test_docs_and_dashboard_use_the_same_table():
    assert notation_table() in (ROOT / "docs" / "notation.md").read_text(encoding="utf-8"), \
        "docs/notation.md is out of date: python -m specviz.notation"
    assert "notation_table" in (ROOT / "app" / "pages" / "theory.py").read_text(encoding="utf-8")
