"""Streamlit-free helpers for the dashboard: option widgets' specs, cache keys, metric formatting.

Kept apart from ``dashboard.py`` so the page script reads top to bottom as a layout, and so these
pieces can be checked without a Streamlit runtime. Everything here reads the engine only through its
public API (``METHODS``, the config dataclasses, ``Stats`` dicts and trace events).
"""

from __future__ import annotations

import dataclasses
import html
import re
import sys
import typing
from dataclasses import dataclass

from engines import METHODS
from engines.drafters.registry import SPS, TREE, VERDICT, drafters_for
from engines.trace import Commit, Event
from specviz.prompts import Prompt

# Sensible widget bounds per option (the engine's own validation still has the last word).
# ``None`` as the upper bound of a layer option means "the target's layer count − 1".
OPTION_BOUNDS: dict[str, tuple[int, int | None]] = {
    "gamma": (1, 32),
    "max_ngram": (1, 16),
    "min_ngram": (1, 16),
    "draft_layers": (1, None),
    "exit_layer": (1, None),
    "depth": (1, 12),
    "topk": (1, 16),
    "total_tokens": (1, 60),
}
# Where an option's default is "auto", the number its box shows until "auto" is unticked.
AUTO_NUMBER = {"total_tokens": 16, "gamma": 5}
OPTION_HELP = {
    "gamma": "γ: tokens drafted per round; one target call then commits between 1 and γ + 1 tokens.",
    "draft": "'self' drafts with the target's own first `draft_layers` layers (plus its final norm and head); "
             "{trained}or give a Hugging Face causal LM id or local path that is already on disk and shares "
             "the target's tokenizer.",
    "head": "Exit head after layer ℓ: 'none' = the model's own final norm + LM head (untrained); 'norm' and "
            "'layer' are trained exit heads shipped in data/drafts.",
    "full_vocab": "Run tiny through its own 49k-token LM head, as Hugging Face's assisted generation does, instead of "
                  "the 8k-token draft-vocabulary head: the same guesses at a higher cost per draft token.",
    "draft_layers": "Layers of the target that make up the self-draft (only used when draft = 'self').",
    "max_ngram": "Longest n-gram of the latest tokens looked up in the context.",
    "min_ngram": "Shortest n-gram tried before giving up on drafting this round.",
    "exit_layer": "ℓ: the first ℓ layers of the target draft (early exit), all layers verify.",
    "depth": "Levels the draft tree grows: the longest path a round can accept.",
    "topk": "Children each expanded node proposes, and nodes expanded per level (EAGLE-2's k).",
    "total_tokens": "Tree nodes sent to the target after reranking; 'auto' picks the size each round from this "
                    "machine's verify-cost curve.",
}
AUTO_HELP = "auto: chosen every round from this machine's measured verify cost and the run's acceptance so far."


@dataclass
class OptionSpec:
    """One method option, as the sidebar shows it."""

    name: str
    kind: type
    default: object
    low: int | float | None = None
    high: int | float | None = None
    help: str = ""
    choices: tuple = ()  # non-empty: a select box instead of free text
    auto: bool = False  # an integer that may also be "auto" (a number box plus an "auto" tick box)

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")


def option_specs(method: str, n_layers: int) -> list[OptionSpec]:
    """The method's ``Config`` fields with their types, defaults, widget bounds and help."""
    config = METHODS[method].Config
    hints = typing.get_type_hints(config)
    specs = []
    for field in dataclasses.fields(config):
        kind = hints.get(field.name, str)
        auto = typing.get_args(kind) == (int, str)
        kind = int if auto else kind
        default = field.default
        if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        low, high = OPTION_BOUNDS.get(field.name, (0, None)) if kind is int else (None, None)
        if kind is int and field.name in OPTION_BOUNDS and high is None:
            high = n_layers - 1
        if auto and default == "auto":
            default = AUTO_NUMBER.get(field.name, low)
        if kind is int and isinstance(default, int) and high is not None:
            high = max(high, default)
        help_text = OPTION_HELP.get(field.name, "").replace("{trained}", _trained_drafts_help(method))
        meta = field.metadata  # an engine config may declare choices/help/bounds here; they take precedence
        specs.append(OptionSpec(field.name, kind, default, meta.get("min", low), meta.get("max", high),
                                meta.get("help", help_text), tuple(meta.get("choices", _choices(method, field.name))),
                                auto))
    return specs


# String options whose allowed values a method module lists in a constant (e.g. eesd's HEADS).
CHOICE_CONSTANTS = {"head": "HEADS"}


def _choices(method: str, name: str) -> tuple:
    module = sys.modules.get(METHODS[method].__module__)
    return tuple(getattr(module, CHOICE_CONSTANTS[name], ())) if name in CHOICE_CONSTANTS else ()


DRAFTER_USES = {"sps": SPS, "eagle": TREE, "mirror": VERDICT, "ssd": VERDICT}  # methods with a `draft` option


def _trained_drafts_help(method: str) -> str:
    """Names of the project's shipped drafters the method can draft with (from the drafter registry)."""
    names = drafters_for(DRAFTER_USES[method]) if method in DRAFTER_USES else ()
    return f"a trained drafter shipped in data/ ({', '.join(repr(n) for n in names)}); " if names else ""


def auto_by_default(method: str, name: str) -> bool:
    field = next(f for f in dataclasses.fields(METHODS[method].Config) if f.name == name)
    return field.default == "auto"


def untrained_self_draft(method: str, options: dict) -> bool:
    """sps with draft='self', eesd with its model's own head: drafts no one trained for the job."""
    return (method == "sps" and options.get("draft") == "self") or (method == "eesd" and options.get("head", "none") == "none")


def has_gamma(method: str) -> bool:
    return any(f.name == "gamma" for f in dataclasses.fields(METHODS[method].Config))


def method_label(method: str, options: dict) -> str:
    """``sps(gamma=5, draft=self, draft_layers=4)``."""
    inner = ", ".join(f"{k}={v}" for k, v in options.items())
    return f"{method}({inner})" if inner else method


def example_label(prompt: Prompt, width: int = 70) -> str:
    text = " ".join(prompt.turns[0].split())
    short = text if len(text) <= width else text[: width - 1] + "…"
    return f"{prompt.category} · {short}"


def default_example(prompts: list[Prompt], category: str = "summarization") -> int:
    """Index of the first prompt of ``category`` (one that shows drafting well), else 0."""
    return next((i for i, p in enumerate(prompts) if p.category == category), 0)


def baseline_key(prompt: str, settings: dict, dtype: str) -> tuple:
    """What an ``ar`` run depends on: the same key means the cached baseline can be reused."""
    return (prompt, dtype, *(settings[k] for k in sorted(settings)))


def live_status(events: list[Event], method: str) -> str:
    commits = [e for e in events if isinstance(e, Commit)]
    tokens = sum(len(c.tokens) for c in commits)
    rounds = sum(1 for c in commits if c.round > 0)
    seconds = events[-1].t if events else 0.0
    return (f'<div style="color:#777;font-size:0.85em;margin-bottom:4px">{html.escape(method)} · '
            f"{tokens} tokens · {rounds} verification rounds · {seconds:.1f} s</div>")


def metric_values(stats: dict, ar_stats: dict | None) -> dict[str, str]:
    """The five headline numbers, formatted; α is '—' where nothing was drafted (ar)."""
    speedup = stats["tokens_per_s"] / ar_stats["tokens_per_s"] if ar_stats and ar_stats["tokens_per_s"] else None
    return {
        "tok/s": f"{stats['tokens_per_s']:.1f}",
        "τ (mean accepted length)": f"{stats['mean_accepted_length']:.2f}",
        "α (acceptance rate)": f"{stats['acceptance_rate']:.2f}" if stats["drafted"] else "—",
        "target calls": str(stats["target_calls"]),
        "speedup vs ar": "—" if speedup is None else f"{speedup:.2f}×",
    }


METRIC_HELP = {
    "tok/s": "Generated tokens per second of decoding (prefill excluded, model load excluded).",
    "τ (mean accepted length)": "Tokens committed per target verification call, the bonus/correction token "
                                "included; autoregressive decoding has τ = 1.",
    "α (acceptance rate)": "Accepted draft tokens ÷ drafted tokens.",
    "target calls": "Forward passes of the full target model: the prefill plus one per round.",
    "speedup vs ar": "tok/s of this run ÷ tok/s of autoregressive decoding of the same prompt with the same "
                     "settings on the same engine (measured in this session).",
}


def strip_html(markup: str) -> str:
    """Visible text of the token-stream HTML (for tests and plain-text export)."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup)).replace("↵", "")
