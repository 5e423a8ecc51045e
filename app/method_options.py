"""A method's options as the dashboard offers them, Streamlit-free: each option's widget spec (bounds, choices,
help), parsing and formatting a value, the defaults, and the labels that name a configuration.

Kept apart from the pages so they read top to bottom as a layout, and so these pieces can be checked without
a Streamlit runtime. Everything here reads the engine only through its
public API (``METHODS``, the config dataclasses, ``Stats`` dicts and trace events).
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import typing
from dataclasses import dataclass
from typing import Mapping, Sequence

from engines import METHODS
from engines.drafters.moa_head import moa_name
from engines.drafters.registry import MOA, SPS, TREE, VERDICT, drafter_kind_names, model_free_drafters
from engines.drafters.trained import exit_head_name
from engines.programs.tree import TREE_DEPTH

# Sensible widget bounds per option (the engine's own validation still has the last word).
# ``None`` as the upper bound of a layer option means "the target's layer count − 1".
OPTION_BOUNDS: dict[str, tuple[int, int | None]] = {
    "gamma": (1, 32),
    "max_ngram": (1, 16),
    "min_ngram": (1, 16),
    "draft_layers": (1, None),
    "exit_layer": (1, None),
    "depth": (1, 12),
    "suffix_depth": (1, 16),
    "topk": (1, 16),
    "total_tokens": (1, 60),
    "kappa": (1, 16),
    "lookahead": (1, 16),
    "f": (1, 64),
    "budget": (1, 256),
    "disconnect_after": (1, 4096),
    "link_seed": (0, 2**31 - 1),
    "stages": (2, None),
}
FLOAT_BOUNDS: dict[str, tuple[float, float]] = {"packet_loss": (0.0, 0.99), "c": (0.01, 1.0)}
# Where an option's default is "auto", the number its box shows until "auto" is unticked.
AUTO_NUMBER = {"total_tokens": 16, "gamma": 5, "depth": TREE_DEPTH}
# Where an option's default is None ("unset"), the number its box shows until "unset" is unticked.
UNSET_NUMBER = {"packet_loss": 0.01, "disconnect_after": 16, "stages": 2}
OPTION_HELP = {
    "gamma": "γ: tokens drafted per round; one target call then commits between 1 and γ + 1 tokens.",
    "draft": "'self' drafts with the target's own first `draft_layers` layers (plus its final norm and head); "
             "{model_free}{trained}",
    "merge_suffix": "Add the model-free suffix drafter's chain (the most frequent continuation in the prompt, the "
                    "answer so far and this session's earlier answers) to every tree as extra branches.",
    "suffix_depth": "With merge suffix: how many tokens the suffix chain may add to a tree. It costs no model step, "
                    "so it may reach deeper than the tree's own depth.",
    "head": "Exit head after layer ℓ: 'none' = the model's own final norm + LM head (untrained); 'norm', "
            "'layer' and 'cats' are trained heads shipped in data/drafts (ℓ then offers only the layers that have one).",
    "exit_head": "'model' = the model's own final norm + LM head at the exit; 'norm' = the shipped exit head trained "
                 "there (ℓ then offers only the layers that have one).",
    "full_vocab": "Run tiny through its own 49k-token LM head, as Hugging Face's assisted generation does, instead of "
                  "the 8k-token draft-vocabulary head: the same guesses at a higher cost per draft token.",
    "draft_layers": "Layers of the target that make up the self-draft (only used when draft = 'self').",
    "max_ngram": "Longest n-gram of the latest tokens looked up in the context.",
    "min_ngram": "Shortest n-gram tried before giving up on drafting this round.",
    "exit_layer": "ℓ: the first ℓ layers of the target draft (early exit), all layers verify.",
    "depth": "Levels the draft tree grows: the longest path a round can accept; 'auto' grows another level only "
             "while this machine's verify-cost curve and the drafter's measured time expect it to pay.",
    "topk": "Children each expanded node proposes, and nodes expanded per level (EAGLE-2's k).",
    "total_tokens": "Tree nodes sent to the target after reranking; 'auto' picks the size each round from this "
                    "machine's verify-cost curve.",
    "dm_layer": "ℓ_DM: the draft's layers (a shipped CATS adapter sits on top).",
    "sv_layer": "ℓ_SV: the shallow verifier's layers (a shipped CATS adapter), above ℓ_DM.",
    "drafter": "A shipped MoA drafter by name; empty: moa-tli{tli} (with -nolsa when lsa is off).",
    "tli": "Target layers the MoA drafter finishes through (only the values with a shipped drafter are offered).",
    "packet_loss": "Probability a message is lost on the simulated link; unset = the profile's own.",
    "disconnect_after": "Drop the server after this many new tokens (needs a network; the run becomes lossy); "
                        "unset = never.",
    "stages": "P: pipeline stages; unset = ⌈L/ℓ⌉, the layers over `exit_layer` (the only value the engine accepts).",
    "lookahead": "γ: draft tokens per window (SSD's lookahead, the paper's K).",
    "f": "f: guesses the speculation cache prepares per possible verdict (uniform fan-out).",
    "budget": "F: branches the speculation cache prepares per round, Σ over verdicts (geometric fan-out).",
    "c": "C: SAGUARO's fan-out constant (1 = off); it matters only when sampling.",
    "kappa": "κ: candidates per drafted position in Mirror-SD's early-exit top list.",
}
AUTO_HELP = ("auto: chosen every round from this machine's measured verify cost and the run's acceptance so far; a "
             "model-free draft (suffix, prompt lookup) is cut token by token, by how often each kind of match was "
             "accepted.")
UNSET = "unset"  # the URL's spelling of an option left at None


@dataclass
class OptionSpec:
    """One method option, as the sidebar shows it."""

    name: str
    kind: type
    default: object
    low: int | float | None = None
    high: int | float | None = None
    help: str = ""
    choices: tuple = ()  # non-empty: a select box (the only values offered)
    auto: bool = False  # an integer that may also be "auto" (a number box plus an "auto" tick box)
    optional: bool = False  # a number that may also be None (a number box plus an "unset" tick box)

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")


def shipped_drafters() -> dict[str, str]:
    """Shipped drafter name → its kind (from ``data/drafts/*/card.json``), read once per call."""
    from engines.drafters.trained import available, read_card

    return {name: read_card(name).get("kind", "") for name in available()}


def natural_order(name: str) -> tuple:
    """A sort key that puts numbers in order (``exit@4-norm`` before ``exit@10-norm``, ``eagle3`` before
    ``eagle-matched``)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def drafters_for_use(use: str, shipped: dict[str, str]) -> tuple[str, ...]:
    """Shipped drafters a method can draft with (``use``: the registry's SPS, TREE, VERDICT, EXIT, MOA)."""
    kinds = set(drafter_kind_names(use))
    return tuple(sorted((name for name, kind in shipped.items() if kind in kinds), key=natural_order))


# Options whose choices depend on another option: rendered after it (eesd's exit layer after its head, …).
DEPENDS_ON = {"exit_layer": ("head", "exit_head"), "tli": ("lsa", "drafter"), "sv_layer": ("dm_layer",)}


def render_order(method: str) -> list[str]:
    """The method's option names in Config order, except that an option comes after those it depends on."""
    names = METHODS[method].Config.option_names()
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dependency in DEPENDS_ON.get(name, ()):
            if dependency in names:
                visit(dependency)
        order.append(name)

    for name in names:
        visit(name)
    return order


def option_specs(method: str, n_layers: int, chosen: Mapping | None = None,
                 shipped: dict[str, str] | None = None) -> list[OptionSpec]:
    """The method's ``Config`` fields with their types, defaults, widget bounds, help and, for every string
    option and every layer that needs a trained head, the only values that are valid here. ``chosen``: the
    values picked so far (an option's choices may depend on another's, see :data:`DEPENDS_ON`)."""
    config = METHODS[method].Config
    hints = typing.get_type_hints(config)
    shipped = shipped_drafters() if shipped is None else shipped
    defaults = {f.name: _field_default(f) for f in dataclasses.fields(config)}
    chosen = {**defaults, **(chosen or {})}
    specs = []
    for field in dataclasses.fields(config):
        kind = hints.get(field.name, str)
        args = typing.get_args(kind)
        auto = args == (int, str)
        optional = len(args) == 2 and type(None) in args and not auto
        if auto or optional:
            kind = next(a for a in args if a is not type(None) and a is not str)
        default = defaults[field.name]
        low = high = None
        if kind is int:
            low, high = OPTION_BOUNDS.get(field.name, (0, None))
            if high is None and field.name in OPTION_BOUNDS:
                high = n_layers if field.name == "stages" else n_layers - 1
        elif kind is float:
            low, high = FLOAT_BOUNDS.get(field.name, (None, None))
        if auto and default == "auto":
            default = AUTO_NUMBER.get(field.name, low)
        if optional and default is None:
            default = UNSET_NUMBER.get(field.name, low if low is not None else 0)
        if kind is int and isinstance(default, int) and high is not None:
            high = max(high, default)
        help_text = OPTION_HELP.get(field.name, "").replace("{trained}", _trained_drafts_help(method, shipped))
        help_text = help_text.replace("{model_free}", _model_free_help(method))
        meta = field.metadata  # an engine config may declare choices/help/bounds here; they take precedence
        choices = tuple(meta["choices"]) if "choices" in meta else _choices(method, field.name, kind, chosen,
                                                                             n_layers, shipped)
        if kind is str and not choices:
            choices = (default,)  # a string nobody listed the values of: offer only its default, never free text
        specs.append(OptionSpec(field.name, kind, default, meta.get("min", low), meta.get("max", high),
                                meta.get("help", help_text), choices, auto, optional))
    return specs


def _field_default(field):
    if field.default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


# String options whose allowed values a method module (or a module of one of its base classes) lists in a constant.
CHOICE_CONSTANTS = {"head": "HEADS", "exit_head": "EXIT_HEADS", "rule": "RULES", "fanout": "FANOUTS",
                    "backup": "BACKUPS", "saguaro_top": "SAGUARO_TOPS", "acceptance": "ACCEPTANCE", "mode": "MODES"}
DRAFTER_USES = {"sps": SPS, "eagle": TREE, "mirror": VERDICT, "ssd": VERDICT}  # methods with a `draft` option


def _choices(method: str, name: str, kind: type, chosen: Mapping, n_layers: int, shipped: dict[str, str]) -> tuple:
    if name in CHOICE_CONSTANTS:
        for cls in METHODS[method].__mro__:
            module = sys.modules.get(cls.__module__)
            if module is not None and hasattr(module, CHOICE_CONSTANTS[name]):
                return tuple(getattr(module, CHOICE_CONSTANTS[name]))
    if name == "draft" and method in DRAFTER_USES:
        return ((("self",) if method == "sps" else ()) + model_free_drafters(DRAFTER_USES[method])
                + drafters_for_use(DRAFTER_USES[method], shipped))
    if method == "moa" and name == "drafter":
        return ("", *drafters_for_use(MOA, shipped))
    if kind is int:
        return tuple(layer_choices(method, name, chosen, n_layers, shipped))
    return ()


def layer_choices(method: str, name: str, chosen: Mapping, n_layers: int, shipped: dict[str, str]) -> list[int]:
    """Layers that have a trained head where a head is chosen (empty: any layer in the widget's bounds)."""
    if name == "exit_layer" and method in ("eesd", "ppsd") and chosen.get("head", "none") != "none":
        return [layer for layer in range(1, n_layers) if exit_head_name(layer, chosen["head"]) in shipped]
    if name == "exit_layer" and method == "mirror" and chosen.get("exit_head") == "norm":
        return [layer for layer in range(1, n_layers) if exit_head_name(layer, "norm") in shipped]
    if method == "cats" and name in ("dm_layer", "sv_layer"):
        adapters = [layer for layer in range(1, n_layers) if exit_head_name(layer, "cats") in shipped]
        if name == "dm_layer":
            return adapters[:-1]  # a shallow verifier must sit above it
        return [layer for layer in adapters if layer > chosen.get("dm_layer", 0)]
    if method == "moa" and name == "tli":
        return [tli for tli in range(n_layers) if moa_name(tli, bool(chosen.get("lsa", True))) in shipped]
    return []


def nearest_choice(choices: Sequence, value):
    """``value`` if offered, else the nearest offered number (or the first choice)."""
    if value in choices or not choices:
        return value
    numbers = [c for c in choices if isinstance(c, int) and not isinstance(c, bool)]
    if numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        return min(numbers, key=lambda c: (abs(c - value), c))
    return choices[0]


def parse_option(spec: OptionSpec, text: str):
    """A URL's text for one option → the value its widget takes; ``ValueError`` when it is not one offered."""
    text = str(text).strip()
    if spec.choices:
        for choice in spec.choices:
            if format_option(choice) == text:
                return choice
        raise ValueError(f"{spec.name}={text!r} is not one of {', '.join(format_option(c) for c in spec.choices)}")
    if spec.auto and text == "auto":
        return "auto"
    if spec.optional and text == UNSET:
        return None
    if spec.kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{spec.name} must be true or false, got {text!r}")
        return text.lower() == "true"
    try:
        value = spec.kind(text)
    except (TypeError, ValueError):
        raise ValueError(f"{spec.name} must be a{'n integer' if spec.kind is int else ' number'}, got {text!r}") from None
    if spec.kind is float and not math.isfinite(value):
        raise ValueError(f"{spec.name} must be a finite number, got {text!r}")
    if (spec.low is not None and value < spec.low) or (spec.high is not None and value > spec.high):
        raise ValueError(f"{spec.name} must be in [{spec.low}, {spec.high}], got {text!r}")
    return value


def format_option(value) -> str:
    """How an option's value reads in a URL and a label: ``true``, ``auto``, ``unset``, ``8``, ``0.5``."""
    if value is None:
        return UNSET
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def default_options(method: str) -> dict:
    return {f.name: _field_default(f) for f in dataclasses.fields(METHODS[method].Config)}


def changed_options(method: str, options: Mapping) -> dict:
    """The options that differ from the method's Config defaults (what a label or a link needs to name)."""
    defaults = default_options(method)
    return {k: v for k, v in options.items() if k not in defaults or v != defaults[k]}


def config_label(method: str, options: Mapping) -> str:
    """``sps(gamma=3, draft=tiny)``: the method and the options that differ from its defaults."""
    inner = ", ".join(f"{k}={format_option(v)}" for k, v in changed_options(method, options).items())
    return f"{method}({inner})" if inner else method


def _trained_drafts_help(method: str, shipped: dict[str, str]) -> str:
    """Names of the project's shipped drafters the method can draft with (from the drafter registry)."""
    names = drafters_for_use(DRAFTER_USES[method], shipped) if method in DRAFTER_USES else ()
    return f"or a trained drafter shipped in data/drafts ({', '.join(repr(n) for n in names)})." if names else ""


def _model_free_help(method: str) -> str:
    names = model_free_drafters(DRAFTER_USES[method]) if method in DRAFTER_USES else ()
    return "'suffix' copies the most frequent continuation from the prompt, the answer so far and this session's " \
           "earlier answers (no model); " if "suffix" in names else ""


def choice_label(value) -> str:
    """How a select box shows one of its choices (the empty MoA drafter name means "from tli and lsa")."""
    return "— (from tli and lsa)" if value == "" else str(value)


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
