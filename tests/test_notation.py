"""One notation: every notebook's glossary cell, docs/notation.md and the dashboard read specviz.notation."""

from __future__ import annotations

import re
from dataclasses import dataclass
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


# Usages the notation retired (docs/notation.md's renaming table lists them). Each entry: what is retired and why,
# the pattern that finds it on one line, what to write instead, and one line it must catch and its mended form,
# which it must not (the test below runs both). A line may still name a paper's letter where it says so — "the
# paper's N, E and S are L, ℓ and P here" — so lines that say "paper's" are exempt. The checks run on every
# notebook cell's source (code and markdown: titles and axes a cell writes included) and on the dashboard, the
# views and widgets that draw the notebooks' figures, the docs and the README.
@dataclass(frozen=True)
class Retired:
    what: str  # the retired use, and why it is retired
    pattern: str  # a regular expression matched against each line
    instead: str  # what to write
    caught: str  # a line the pattern must find
    mended: str  # the same line in the notation, which it must not find


RETIRED = [
    Retired("PPSD's stages written S: S is always a speedup", r"S = ⌈", "P = ⌈L/ℓ⌉",
            "stages S = ⌈30/8⌉", "stages P = ⌈30/8⌉"),
    Retired("the PPSD paper's N/E: N is L and E is ℓ here", r"\bN/E\b", "L/ℓ", "⌈N/E⌉ stages", "⌈L/ℓ⌉ stages"),
    Retired("PPSD's ρ*: a speedup is S", r"ρ\*", "S_PPSD", "ρ* = 1.2", "S_PPSD = 1.2"),
    Retired("EESD's ρ and the gain λ: a speedup is S", r"ρ\(|ρ =|λ", "S_EESD, and the gain S_PPSD ÷ S_EESD",
            "ρ = 1.1 and λ = 2", "S_EESD = 1.1 and S_PPSD ÷ S_EESD = 2"),
    Retired("CATS's L_DM / L_SV: L is the target's layer count, an exit layer is ℓ", r"\bL_(?:DM|SV)\b",
            "ℓ_DM / ℓ_SV", "L_SV = 15", "ℓ_SV = 15"),
    Retired("Mirror-SD's l_e: an exit layer is ℓ", r"\bl_e\b", "ℓ", "l_e = 15", "ℓ = 15"),
    Retired("SSD's lookahead K: the draft length is γ (code too: K = ssd_options['lookahead'])",
            r"lookahead K\b|\bK: lookahead|`lookahead` K\b|\bT_d\(K\)|\bK\b,? *(?:B *)?= *ssd_options\[",
            "γ (`gamma = ssd_options['lookahead']`)", "K: lookahead · K, B = ssd_options['lookahead'], 1",
            "γ: lookahead · gamma, F = ssd_options['lookahead'], 1"),
    Retired("SSD's P(hit): the hit rate is h", r"P\(hit\)", "h", "1 − P(hit)", "1 − h"),
    Retired("r for a round's cost in ar steps: r is SSD's miss-curve exponent, rⱼ a rank probability",
            r"τ\s*(?:÷|/)\s*r\b|\\tau\s*/\s*r\b|\br = V \+ D|\bcosts? r\b|round cost r\b|\bcost r =|"
            r"\br = \{board\.round_cost",
            "R (R = V + D + O, S ≈ τ ÷ R)", "a round here cost r = {board.round_cost:.2f}, so S ≈ τ ÷ r",
            "a round here cost R = {board.round_cost:.2f}, so S ≈ τ ÷ R"),
    Retired("\"c per level\": c is one drafted token's cost, and a tree level drafts several tokens in one call",
            r"\bc per level\b|\bc \(draft level\)|\bc is the drafter's cost per level", "c_d",
            "c per level 0.22 · c (draft level)", "c_d 0.22 · c_d (per tree level)"),
    Retired("γ for a mean over rounds of the drafts per round or cycle: γ is the configured draft length",
            r"[\"']γ[\"']\s*:\s*\w+\.gamma\b|[\"']γ[\"']\s*:\s*\w+\.drafted_per_round\b", "γ̄",
            "{\"τ\": c.tau, \"γ\": c.gamma}", "{\"τ\": c.tau, \"γ̄\": c.gamma}"),
    Retired("F for one row's fan-out: F is the round's whole budget, Σ F_A",
            r"β\s*·\s*F\s*\^|\bF per row\b|a fan-out of F (?:misses|per row)", "F_A (row A's fan-out)",
            "a fan-out of F per row misses with probability β·F^{−r}",
            "a fan-out of F_A in row A misses with probability β·F_A^{−r}"),
    Retired("B for a link in bits/s: B is in bytes/s", r"\bB\b[^.;$]{0,40}\bbits?/s|bandwidth in bits?/s|"
            r"\\frac\{8\\?,?\s*\(|\b8\s*\(bytes", "B in bytes/s (a 50 Mbit/s link is B = 6.25 MB/s), transfer = bytes ÷ B",
            r"with B the link's bandwidth in bit/s: \frac{8\,(\text{bytes})}{B}",
            r"with B the link's bandwidth in bytes/s: \frac{\text{bytes}}{B}"),
    Retired("B for SSD's token budget: B is a bandwidth, the budget is F", r"\bB\s*=\s*ssd_options\[|\bB // \(",
            "F", "B = ssd_options['budget']; f = B // (gamma + 1)", "F = ssd_options['budget']; f = F // (gamma + 1)"),
    Retired("τ for the accepted drafts, or A for the ids a verdict carries: A counts accepted drafts (0 … γ), "
            "τ = A + 1 the tokens committed, the bonus included",
            r"τ \(accepted\)|τ = \{\w+\} accepted|A = \{accepted\} accepted|A: tokens accepted per", "τ (tokens per cycle) = A + 1",
            "description=\"τ (accepted)\" · f\"τ = {accepted} accepted per cycle\"",
            "description=\"τ (tokens per cycle)\" · f\"τ = {tau} tokens per cycle\""),
    Retired("lanes named T and D: T is a temperature, D a round's drafting time", r"\blane \**[TD]\**(?![\w^_])",
            "the target lane, the draft lane", "lane **T** (the target) and lane D", "the target lane and the draft lane"),
    Retired("c for a committed token or a fitted coefficient: c is the draft cost",
            r"\bc = \{text\(|\bc_fit\b|\bfor c in SAGUARO", "x* for the token, β for the coefficient, C for SAGUARO's",
            "A = {a}, c = {text(c)!r} · β = {c_fit:.2f} · for c in SAGUARO_CS:",
            "A = {a}, x* = {text(x)!r} · β = {beta_fit:.2f} · for C in SAGUARO_CS:"),
]
SHOWN_TO_PEOPLE = sorted([*ROOT.glob("app/**/*.py"), *ROOT.glob("specviz/views/*.py"),
                          *ROOT.glob("specviz/widgets/*.py"), *ROOT.glob("docs/*.md"), ROOT / "README.md"])


def retired_usages(text: str) -> list[str]:
    """``line: what it retires`` for every line of ``text`` that uses a retired letter without naming a paper."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if "paper's" in line:
            continue
        found += [f"{number}: {r.what} (write {r.instead})" for r in RETIRED if re.search(r.pattern, line)]
    return found


@pytest.mark.parametrize("retired", RETIRED, ids=lambda r: r.what.split(":")[0])
def test_each_retired_use_is_caught_and_its_mended_form_is_not(retired):
    assert re.search(retired.pattern, retired.caught), f"the pattern misses its own example: {retired.caught}"
    assert retired_usages(retired.mended) == [], f"the mended line still reads as retired: {retired.mended}"
    assert retired_usages(f"the paper's {retired.caught}") == []


@pytest.mark.parametrize("path", SHOWN_TO_PEOPLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_dashboard_views_and_docs_use_the_notation(path):
    if path == ROOT / "docs" / "notation.md":
        return  # its renaming table names the retired letters on purpose
    found = retired_usages(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)} uses letters the notation retired (docs/notation.md): {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_use_the_notation(path):
    """Every cell's source, code and markdown: what a cell prints, titles and labels is in its source."""
    nb = nbformat.read(path, as_version=4)
    found = [f"cell {i}, line {usage}" for i, cell in enumerate(nb.cells) for usage in retired_usages(cell.source)]
    assert not found, f"{path.name} uses letters the notation retired (tests/test_notation.py RETIRED): {found}"
