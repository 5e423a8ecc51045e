"""One notation for the notebooks, the dashboard and the docs.

The five papers each bring their own letters, and before this module the notebooks had inherited all of
them: c was the draft cost, a rank probability, the committed token and a power-law coefficient; S was
both a pipeline's stages and a speedup. A reader who learns a symbol in one notebook must be able to trust
it in the next, so every symbol the teaching material uses is defined here once, and each notebook opens
with a three-line glossary cell made by :func:`glossary_markdown` (tests/test_notation.py checks that every
notebook's glossary, docs/notation.md and the dashboard's Theory page agree with this table).

The first two glossary lines are the same in every notebook (:data:`CORE`); the third names the symbols
that notebook adds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Symbol:
    symbol: str
    meaning: str
    code: str = ""  # where the engine or specviz keeps it, when it does


SYMBOLS: dict[str, Symbol] = {s.symbol: s for s in [
    # --- every notebook ---------------------------------------------------------------------------------
    Symbol("α", "acceptance rate: accepted ÷ drafted tokens, pooled over a run", "Stats.acceptance_rate"),
    Symbol("αᵢ", "acceptance at draft position i: accepted ÷ rounds whose draft the target judged at i",
           "Stats.acceptance_by_position"),
    Symbol("τ", "tokens committed per round, the bonus or correction included (ar: 1)",
           "Stats.mean_accepted_length"),
    Symbol("γ", "draft length: tokens drafted per round", "gamma"),
    Symbol("c", "draft cost: one draft token's time ÷ one ar token's time", "draft_cost"),
    Symbol("S", "speedup: a method's tokens/s ÷ ar's, same model, machine and thread rule", "speedup"),
    # --- added by some notebooks ------------------------------------------------------------------------
    Symbol("R", "a round's cost in ar steps: R = V + D + O (verification, drafting the target waited for, the "
                "rest), so S ≈ τ ÷ R", "Scoreboard.round_cost"),
    Symbol("γ̄", "drafts per round, a mean over rounds (where the draft length varies: auto γ, trees, CATS)",
           "Scoreboard.drafted_per_round"),
    Symbol("c_d", "drafting time per tree level ÷ one ar token's time (one drafter call drafts a whole level)"),
    Symbol("p", "the target's next-token distribution"),
    Symbol("q", "the draft's next-token distribution"),
    Symbol("T", "sampling temperature (T = 0: greedy)", "temperature"),
    Symbol("x", "a token; x* the token the target commits after the accepted drafts"),
    Symbol("a", "per-token acceptance probability in the i.i.d. model of Leviathan et al.; a run estimates it as "
                "accepted ÷ judged positions (the per-position acceptance)", "Stats.per_token_acceptance"),
    Symbol("A", "drafts accepted in one round (0 … γ)"),
    Symbol("Tₓ", "T with a subscript is the time of one part of a round (T_v verification, T_gen drafting), never a "
                 "temperature"),
    Symbol("d", "a draft tree's depth", "depth"),
    Symbol("k", "children kept per tree node (top-k)", "topk"),
    Symbol("n", "nodes a tree sends to verification", "nodes"),
    Symbol("rⱼ", "probability that the draft's rank-j candidate is the target's token"),
    Symbol("L", "the target's layers (30 for SmolLM2-135M)", "n_layers"),
    Symbol("ℓ", "exit layer: the draft reads the target's hidden state after layer ℓ", "exit_layer"),
    Symbol("P", "pipeline stages (PPSD), one lane each", "stages"),
    Symbol("κ", "Mirror-SD's early-exit top list: candidates per drafted position", "kappa"),
    Symbol("f", "SSD's uniform fan-out: guesses prepared per draft position", "f"),
    Symbol("F", "fan-out: branches the speculation cache prepares per round (SSD)", "fan_out"),
    Symbol("F_A", "the cache's row A: guesses prepared for the verdict after A accepted drafts (Σ F_A = F)"),
    Symbol("h", "cache hit rate: rounds whose verdict the cache had prepared ÷ rounds", "hit_rate"),
    Symbol("C", "SAGUARO's fan-out constant: weight of the bonus branch against the rest", "saguaro_c"),
    Symbol("β", "miss coefficient: a row of fan-out F_A misses with probability β·F_A^(−r)"),
    Symbol("r", "the miss curve's exponent in β·F_A^(−r) (SSD); never a round's cost (R)"),
    Symbol("B", "bandwidth a stage reads weights at (bytes/s; flash, memory or a link)"),
    Symbol("M", "memory budget: bytes of weights allowed to stay resident", "memory_budget"),
    Symbol("RTT", "a link's round-trip time (client–server MoA)", "rtt_ms"),
    Symbol("TLI", "target layers the MoA drafter reads (target layers for inference)", "tli"),
]}

CORE: tuple[str, ...] = ("α", "αᵢ", "τ", "γ", "c", "S")
_CORE_LINES = (CORE[:3], CORE[3:])


def entry(symbol: str) -> str:
    """``symbol: meaning`` as every glossary writes it."""
    if symbol not in SYMBOLS:
        raise ValueError(f"symbol must be one of {', '.join(SYMBOLS)}; got {symbol!r}")
    return f"**{symbol}** {SYMBOLS[symbol].meaning}"


def _line(symbols) -> str:
    return " · ".join(entry(s) for s in symbols)


def glossary_markdown(*extra: str) -> str:
    """The three-line glossary cell that opens a notebook: the core symbols, then the ones it adds."""
    unknown = [s for s in extra if s not in SYMBOLS]
    if unknown:
        raise ValueError(f"extra symbols must be among {', '.join(SYMBOLS)}; unknown: {', '.join(unknown)}")
    repeated = [s for s in extra if s in CORE]
    if repeated:
        raise ValueError(f"extra symbols must not repeat the core ({', '.join(CORE)}): {', '.join(repeated)}")
    third = _line(extra) if extra else "(no symbols beyond these)"
    return "\n".join(["**Notation**  ", _line(_CORE_LINES[0]) + "  ", _line(_CORE_LINES[1]) + "  ", third])


def parse_glossary(markdown: str) -> dict[str, str]:
    """Symbol → meaning, read back from a glossary cell (the test compares it with :data:`SYMBOLS`)."""
    found: dict[str, str] = {}
    for line in markdown.splitlines()[1:]:
        for piece in line.rstrip().split(" · "):
            piece = piece.strip()
            if piece.startswith("**") and "** " in piece:
                symbol, meaning = piece[2:].split("** ", 1)
                found[symbol] = meaning.strip()
    return found


def notation_table() -> str:
    """Every symbol as a markdown table (docs/notation.md and the dashboard's Theory page)."""
    rows = ["| symbol | meaning | in the code |", "|---|---|---|"]
    rows += [f"| {s.symbol} | {s.meaning} | {f'`{s.code}`' if s.code else ''} |" for s in SYMBOLS.values()]
    return "\n".join(rows)


if __name__ == "__main__":  # regenerate docs/notation.md's table: python -m specviz.notation
    print(notation_table())
