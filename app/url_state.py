"""A page's setup as URL query parameters, so a demo link reproduces it: Streamlit-free encoding and decoding.

The Run page writes ``?method=sps&gamma=3&draft=tiny&prompt_id=7&max_new_tokens=32``: the method, the options
that differ from its defaults, the prompt (``prompt_id``: a question of ``data/prompts.jsonl``; ``prompt``: free
text), and the generation settings and dtype that differ from the page's defaults. The Compare page writes its
configurations as ``c1=pld&c2=sps(gamma=3,draft=tiny)`` with the same prompt and settings keys.

Reading is strict: a value is taken only if the page's widget offers it (a select's choices, a number box's
bounds); anything else is reported and ignored, so a link can never make the server load a path it was not
offering anyway.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from app import method_options as mo
from engines import METHODS
from specviz.prompts import Prompt

FREE_TEXT = -1  # the prompt picker's "free text" entry (prompt_picker.FREE_TEXT)
MAX_PROMPT_CHARS = 2000  # longer free-text prompts stay out of the link
DTYPES = ("auto", "float32", "bfloat16")
MAX_CONFIGS = 4


@dataclass(frozen=True)
class Setting:
    label: str
    kind: type
    low: float
    high: float
    default: float


SETTINGS: dict[str, Setting] = {
    "max_new_tokens": Setting("max new tokens", int, 1, 1024, 64),
    "temperature": Setting("temperature", float, 0.0, 1.5, 0.0),
    "top_p": Setting("top-p", float, 0.05, 1.0, 1.0),
    "seed": Setting("seed", int, 0, 2**31 - 1, 0),
    # off: decode all max new tokens through end-of-text (llama.cpp's --ignore-eos): a run of a known length, for
    # timing or a demo, whatever the model would have ended on
    "stop_at_eos": Setting("stop at end-of-text", bool, 0, 1, True),
}
BOOLEANS = {"1": True, "true": True, "0": False, "false": False}


def parse_setting(name: str, text: str):
    """A generation setting from its URL text, inside the widget's bounds; ``ValueError`` otherwise."""
    setting = SETTINGS[name]
    if setting.kind is bool:
        try:
            return BOOLEANS[str(text).strip().lower()]
        except KeyError:
            raise ValueError(f"{name} must be one of 0, 1, true, false; got {text!r}") from None
    try:
        value = setting.kind(str(text).strip())
    except ValueError:
        raise ValueError(f"{name} must be a{'n integer' if setting.kind is int else ' number'}, got {text!r}") from None
    if not math.isfinite(value) or not setting.low <= value <= setting.high:
        raise ValueError(f"{name} must be in [{setting.low}, {setting.high}], got {text!r}")
    return value


def settings_params(settings: Mapping, dtype_choice: str = "auto") -> dict[str, str]:
    """The settings (and the dtype box) that differ from the page's defaults."""
    params = {name: mo.format_option(settings[name]) for name, setting in SETTINGS.items()
              if name in settings and settings[name] != setting.default}
    if dtype_choice != "auto":
        params["dtype"] = dtype_choice
    return params


def prompt_params(prompts: Sequence[Prompt], example: int, text: str) -> dict[str, str]:
    """``prompt_id`` while an example is chosen (and unedited), else the free text (if short enough)."""
    if example != FREE_TEXT and 0 <= example < len(prompts) and prompts[example].turns[0] == text:
        return {"prompt_id": str(prompts[example].question_id)}
    return {"prompt": text} if text.strip() and len(text) <= MAX_PROMPT_CHARS else {}


def prompt_from_params(prompts: Sequence[Prompt], params: Mapping[str, str]) -> tuple[int, str] | None:
    """(example index or FREE_TEXT, text) named by the URL; ``None`` when it names no prompt;
    ``ValueError`` for a ``prompt_id`` that is not one of the prompts."""
    if "prompt_id" in params:
        wanted = str(params["prompt_id"]).strip()
        for index, prompt in enumerate(prompts):
            if str(prompt.question_id) == wanted:
                return index, prompt.turns[0]
        raise ValueError(f"prompt_id={wanted!r} is not a question of data/prompts.jsonl")
    if params.get("prompt", "").strip():
        return FREE_TEXT, str(params["prompt"])[:MAX_PROMPT_CHARS]
    return None


def run_params(method: str, options: Mapping) -> dict[str, str]:
    """The Run page's method and the options that differ from its defaults."""
    return {"method": method, **{k: mo.format_option(v) for k, v in mo.changed_options(method, options).items()}}


def spec_string(method: str, options: Mapping) -> str:
    """``sps(gamma=3,draft=tiny)``: a Compare configuration in one URL value (defaults left out)."""
    inner = ",".join(f"{k}={mo.format_option(v)}" for k, v in mo.changed_options(method, options).items())
    return f"{method}({inner})" if inner else method


_SPEC = re.compile(r"^\s*([a-z_]+)\s*(?:\((.*)\))?\s*$", re.S)


def parse_spec_string(text: str) -> tuple[str, dict[str, str]]:
    """``sps(gamma=3,draft=tiny)`` → ``("sps", {"gamma": "3", "draft": "tiny"})`` (values still text: the
    option widgets check them); ``ValueError`` for an unknown method or option or a malformed spec."""
    match = _SPEC.match(text or "")
    if not match:
        raise ValueError(f"configuration {text!r} is not of the form method or method(option=value,...)")
    method, body = match.group(1), match.group(2) or ""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known methods: {', '.join(METHODS)}")
    options = {}
    for item in filter(None, (part.strip() for part in body.split(","))):
        name, sep, value = item.partition("=")
        if not sep or name.strip() not in METHODS[method].Config.option_names():
            raise ValueError(f"configuration {text!r}: {item!r} is not option=value for an option of {method}")
        options[name.strip()] = value.strip()
    return method, options


def compare_params(configs: Sequence[tuple[str, Mapping]]) -> dict[str, str]:
    return {f"c{i}": spec_string(method, options) for i, (method, options) in enumerate(configs, 1)}


def compare_configs_from_params(params: Mapping[str, str]) -> tuple[list[tuple[str, dict[str, str]]], list[str]]:
    """The configurations ``c1``…``c4`` name, in order (at least 2 where any are named), and what was ignored."""
    configs, ignored = [], []
    for i in range(1, MAX_CONFIGS + 1):
        if f"c{i}" not in params:
            continue
        try:
            configs.append(parse_spec_string(params[f"c{i}"]))
        except ValueError as error:
            ignored.append(str(error))
    return configs, ignored
