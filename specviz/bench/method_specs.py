"""``specviz bench``'s method specs: ``name`` or ``name(option=value,...)``, e.g. ``sps(draft_layers=4,gamma=5)``,
parsed into a :class:`MethodSpec` (name, options, label).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from engines import get_method

from .hf_baselines import HF_METHODS
from .llamacpp_peer import PEER_METHODS

_SPEC = re.compile(r"^\s*([a-z_]+)\s*(?:\((.*)\))?\s*$")


@dataclass
class MethodSpec:
    label: str
    name: str
    options: dict = field(default_factory=dict)
    instrument: bool = True
    threads: int | None = None  # None: the process's threads; 1: one core, one thread


def _value(text: str):
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()


def split_methods(text: str) -> list[str]:
    """Split on commas outside parentheses: ``ar,sps(gamma=3,draft_layers=4)`` → two specs."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_method(spec: str) -> MethodSpec:
    match = _SPEC.match(spec)
    if not match:
        raise ValueError(f"method spec {spec!r} is not of the form name or name(option=value,...)")
    name, body = match.group(1), match.group(2) or ""
    options = {}
    for item in filter(None, (s.strip() for s in body.split(","))):
        if "=" not in item:
            raise ValueError(f"method spec {spec!r}: option {item!r} must be option=value")
        key, value = item.split("=", 1)
        options[key.strip()] = _value(value)
    instrument = bool(options.pop("instrument", True))
    threads = options.pop("threads", None)
    if threads not in (None, 1):
        raise ValueError(f"method spec {spec!r}: threads must be 1 (one core, one thread) or left out, got {threads!r}")
    if name in HF_METHODS or name in PEER_METHODS:
        if options:
            raise ValueError(f"{name} takes no options, got {sorted(options)}")
    else:
        config = get_method(name).Config(**{k: v for k, v in options.items()
                                            if k in get_method(name).Config.option_names()})
        unknown = set(options) - set(config.option_names())
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} for method {name!r}; "
                             f"allowed: {config.option_names()}")
    return MethodSpec(spec.strip(), name, options, instrument, threads)
