"""Streamlit-free helpers for the draft-trees page (``views/draft_trees.py``): parsing, metrics, captions.

Kept apart from the page script for the same reason as ``method_options``: the page reads top to
bottom as a layout, and these pieces can be checked without a Streamlit runtime.
"""

from __future__ import annotations

from engines.core.trace import Commit, Event
from specviz.views.draft_trees import mean_levels, mean_tree_size, round_events

MAX_TOTAL_TOKENS = 60  # the engine's MAX_TREE_NODES (validation has the last word)


def tree_options(draft: str, depth: int, topk: int, auto: bool, total_tokens: int, auto_depth: bool = False) -> dict:
    """The ``eagle`` method's options as the sidebar sets them."""
    return {"depth": "auto" if auto_depth else int(depth), "topk": int(topk),
            "total_tokens": "auto" if auto else int(total_tokens), "draft": draft}


def parse_sizes(text: str, largest: int = MAX_TOTAL_TOKENS) -> list[int]:
    """``"2, 4, 8"`` → ``[2, 4, 8]`` (sorted, without repeats); a message naming the problem otherwise."""
    shown = repr(text) if len(text) <= 60 else repr(text[:57]) + "…"
    parts = [p for p in text.replace(";", ",").replace(" ", ",").split(",") if p]
    if not parts or not all(p.isdecimal() for p in parts):
        raise ValueError(f"tree sizes must be whole numbers separated by commas, got {shown}")
    if any(len(p) > 6 for p in parts):  # past any bound (and int() refuses thousands of digits)
        raise ValueError(f"tree sizes must be between 1 and {largest}, got {shown}")
    sizes = sorted({int(p) for p in parts})
    if sizes[0] < 1 or sizes[-1] > largest:
        raise ValueError(f"tree sizes must be between 1 and {largest}, got {shown}")
    return sizes


def metric_values(stats: dict, events: list[Event], ar_stats: dict | None) -> dict[str, str]:
    """The five headline numbers of a tree run, formatted."""
    speedup = stats["tokens_per_s"] / ar_stats["tokens_per_s"] if ar_stats and ar_stats["tokens_per_s"] else None
    return {
        "tok/s": f"{stats['tokens_per_s']:.1f}",
        "τ (mean accepted length)": f"{stats['mean_accepted_length']:.2f}",
        "mean tree size": f"{mean_tree_size(events):.1f}",
        "levels a round": f"{mean_levels(events):.2f}",
        "speedup vs ar": "—" if speedup is None else f"{speedup:.2f}×",
    }


METRIC_HELP = {
    "tok/s": "Generated tokens per second of decoding (prefill excluded, model load excluded).",
    "τ (mean accepted length)": "Tokens committed per target call: the accepted path plus the target's own "
                                "bonus or correction token.",
    "mean tree size": "Draft-tree nodes sent to the target per round (after EAGLE-2's rerank): what each "
                      "verification forward pays for, besides the root.",
    "levels a round": "Levels the drafter grew per round, one drafter call each: the depth you set, or with "
                      "depth auto what this machine's verify cost and the run's acceptance made worth growing.",
    "speedup vs ar": "tok/s of this run ÷ tok/s of autoregressive decoding of the same prompt with the same "
                     "settings on the same engine (measured in this session).",
}


def round_caption(events: list[Event], round_: int) -> str:
    """What one round drafted, sent, accepted and committed, in a line."""
    tree, verification = round_events(events, round_)
    commit = next(e for e in events if isinstance(e, Commit) and e.round == round_)
    sent = sum(1 for n in tree.nodes if n.get("sent", True))
    text = "".join(commit.pieces).replace("\n", "↵")
    fate = verification.next_fate if verification else commit.fates[-1]
    return (f"Round {round_}: {len(tree.nodes)} nodes drafted, {sent} sent to the target, "
            f"{commit.accepted} accepted + 1 {fate} → committed “{text}”")
