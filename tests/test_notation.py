"""One notation: every notebook's glossary cell, docs/notation.md and the dashboard read specviz.notation."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from specviz.notation import CORE, SYMBOLS, glossary_markdown, notation_table, parse_glossary

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_glossary_round_trips_and_rejects_unknown_symbols():
    cell = glossary_markdown("P", "ℓ")
    assert len(cell.splitlines()) == 4  # the heading, then three lines
    parsed = parse_glossary(cell)
    assert list(parsed) == [*CORE, "P", "ℓ"]
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
    assert "notation_table" in (ROOT / "app" / "views" / "theory.py").read_text(encoding="utf-8")


# Usages the notation retired (docs/notation.md's renaming table lists them). A line may still name a paper's
# letter where it says so — "the paper's N, E and S are L, ℓ and P here" — so lines that say "paper's" are exempt.
RETIRED = {
    "PPSD's stages written S (P = ⌈L/ℓ⌉)": r"S = ⌈",
    "the paper's N/E (L/ℓ)": r"\bN/E\b",
    "PPSD's ρ* (S_PPSD)": r"ρ\*",
    "EESD's ρ and the gain λ (S_EESD, S_PPSD ÷ S_EESD)": r"ρ\(|ρ =|λ",
    "CATS's L_DM / L_SV (ℓ_DM / ℓ_SV)": r"\bL_(?:DM|SV)\b",
    "Mirror-SD's l_e (ℓ)": r"\bl_e\b",
    "SSD's lookahead K (γ)": r"lookahead K\b|\bK: lookahead|`lookahead` K\b|\bT_d\(K\)",
    "SSD's P(hit) (h)": r"P\(hit\)",
}
SHOWN_TO_PEOPLE = sorted([*ROOT.glob("app/**/*.py"), *ROOT.glob("specviz/views/*.py"),
                          *ROOT.glob("specviz/widgets/*.py"), *ROOT.glob("docs/*.md"), ROOT / "README.md"])


def retired_usages(text: str) -> list[str]:
    """``line: what it retires`` for every line of ``text`` that uses a retired letter without naming a paper."""
    import re

    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if "paper's" in line:
            continue
        found += [f"{number}: {what}" for what, pattern in RETIRED.items() if re.search(pattern, line)]
    return found


def test_retired_usages_are_caught_unless_a_paper_is_named():
    old = "stages S = ⌈N/E⌉ · ρ* = 1.2 · λ = 2 · L_SV = 15 · l_e = 15 · K: lookahead · 1 − P(hit)"
    assert retired_usages(old) == [f"1: {what}" for what in RETIRED]
    assert retired_usages("P = ⌈L/ℓ⌉ · S_PPSD = 1.2 · ℓ_SV = 15 · γ: lookahead · 1 − h") == []
    assert retired_usages("the paper's N, E and ρ* are L, ℓ and S_PPSD here") == []


@pytest.mark.parametrize("path", SHOWN_TO_PEOPLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_dashboard_views_and_docs_use_the_notation(path):
    if path == ROOT / "docs" / "notation.md":
        return  # its renaming table names the retired letters on purpose
    found = retired_usages(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)} uses letters the notation retired (docs/notation.md): {found}"
