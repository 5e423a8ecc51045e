"""The sidebar widgets the Run and Compare pages share: a method's options generated from its ``Config``, the
generation settings, and the URL they are read from (once, on a session's first run) and written to.

Every widget keeps its value in ``st.session_state`` under its key and is created without a default of its
own (the default is put there first), so a value read from the URL is simply written to the key before the
widget is drawn. String options are always select boxes of the values that are valid here
(:func:`app.method_options.option_specs`): nothing typed in the browser names a file to load.
"""

from __future__ import annotations

from typing import Mapping

import streamlit as st

from app import method_options as mo
from app import url_state as us
from app.prompt_picker import FREE_TEXT
from engines import METHODS


def url_once(flag: str) -> dict[str, str]:
    """The page's query parameters on the session's first run of the page (``flag``: its session key), else {}."""
    if st.session_state.get(flag):
        return {}
    st.session_state[flag] = True
    return {k: st.query_params[k] for k in st.query_params}


def write_url(params: Mapping[str, str]) -> None:
    """Put the page's setup in the address bar (only when it changed)."""
    params = {k: str(v) for k, v in params.items()}
    if {k: st.query_params[k] for k in st.query_params} != params:
        st.query_params.from_dict(params)


def method_select(key: str, default: str, pending: str | None = None, ignored: list | None = None,
                  label: str = "method") -> str:
    names = list(METHODS)
    if pending is not None:
        if pending in names:
            st.session_state[key] = pending
        elif ignored is not None:
            ignored.append(f"unknown method {pending!r}")
    st.session_state.setdefault(key, default if default in names else names[0])
    return st.selectbox(label, names, key=key, format_func=lambda m: f"{m} — {METHODS[m].description}")


def option_widgets(prefix: str, method: str, n_layers: int, pending: Mapping[str, str] | None = None,
                   ignored: list | None = None) -> dict:
    """One widget per field of the method's ``Config`` (keys ``{prefix}opt:{method}:{name}``); returns the
    options in Config order. ``pending``: option values from the URL to apply first (checked like any input)."""
    shipped = mo.shipped_drafters()
    defaults = mo.default_options(method)
    chosen: dict = {}
    for name in mo.render_order(method):
        spec = next(s for s in mo.option_specs(method, n_layers, chosen, shipped) if s.name == name)
        key = f"{prefix}opt:{method}:{name}"
        if pending and name in pending:
            try:
                _apply(key, spec, mo.parse_option(spec, pending[name]))
            except ValueError as error:
                if ignored is not None:
                    ignored.append(str(error))
        chosen[name] = _widget(spec, key, defaults[name])
    return {name: chosen[name] for name in defaults}


def _apply(key: str, spec: mo.OptionSpec, value) -> None:
    if spec.auto:
        st.session_state[f"{key}:auto"] = value == "auto"
    if spec.optional:
        st.session_state[f"{key}:unset"] = value is None
    if value not in ("auto", None) or not (spec.auto or spec.optional):
        st.session_state[key] = value


def _widget(spec: mo.OptionSpec, key: str, default):
    state = st.session_state
    if spec.choices:
        # written back every run: a select whose choices changed (or that was a number box a moment ago, as
        # eesd's exit layer is for head 'none') is a new widget to Streamlit and would start at its first choice
        # (no default index of its own: the value is always the one written here, and Streamlit's warning
        # about a widget given both a default and a Session State value stays quiet)
        state[key] = mo.nearest_choice(spec.choices, state.get(key, spec.default))
        return st.selectbox(spec.label, spec.choices, key=key, help=spec.help, format_func=mo.choice_label)
    if spec.kind is bool:
        state.setdefault(key, bool(spec.default))
        return st.checkbox(spec.label, key=key, help=spec.help)
    special = None
    if spec.auto:
        state.setdefault(f"{key}:auto", default == "auto")
        special = "auto" if st.checkbox(f"{spec.label}: auto", key=f"{key}:auto", help=mo.AUTO_HELP) else None
    elif spec.optional:
        state.setdefault(f"{key}:unset", default is None)
        unset = st.checkbox(f"{spec.label}: unset", key=f"{key}:unset", help=spec.help)
        special = mo.UNSET if unset else None
    number = spec.kind(state.get(key, spec.default))
    if spec.low is not None:
        number = max(number, spec.kind(spec.low))
    if spec.high is not None:
        number = min(number, spec.kind(spec.high))
    state[key] = number  # written back every run, as for a select
    value = st.number_input(spec.label, min_value=spec.low, max_value=spec.high, key=key, help=spec.help,
                            step=1 if spec.kind is int else 0.01, disabled=special is not None)
    if special == "auto":
        return "auto"
    if special == mo.UNSET:
        return None
    return spec.kind(value)


def settings_widgets(prefix: str, pending: Mapping[str, str] | None = None, ignored: list | None = None) -> dict:
    """max new tokens, temperature, seed, top-p, stop at end-of-text (keys ``{prefix}max_new_tokens`` …), as the
    engine takes them."""
    state = st.session_state
    for name, setting in us.SETTINGS.items():
        key = f"{prefix}{name}"
        if pending and name in pending:
            try:
                state[key] = us.parse_setting(name, pending[name])
            except ValueError as error:
                if ignored is not None:
                    ignored.append(str(error))
        state.setdefault(key, setting.kind(setting.default))
    settings = {
        "max_new_tokens": int(st.number_input("max new tokens", 1, 1024, step=8, key=f"{prefix}max_new_tokens")),
        "temperature": float(st.slider("temperature", 0.0, 1.5, step=0.05, key=f"{prefix}temperature",
                                       help="0 = greedy decoding.")),
        "seed": int(st.number_input("seed", 0, 2**31 - 1, key=f"{prefix}seed", help="Used when temperature > 0.")),
    }
    settings["top_p"] = float(st.slider("top-p", 0.05, 1.0, step=0.05, key=f"{prefix}top_p",
                                        disabled=settings["temperature"] == 0, help="Used when temperature > 0."))
    settings["stop_at_eos"] = bool(st.checkbox(
        "stop at end-of-text", key=f"{prefix}stop_at_eos",
        help="Off: decode all max new tokens through end-of-text (as llama.cpp's --ignore-eos), for a run of a "
             "known length whatever the model would have ended on."))
    return settings


def apply_url_prompt(prompts, prefix: str, params: Mapping[str, str], ignored: list) -> None:
    """Preset the prompt picker (keys ``{prefix}example``/``{prefix}prompt_text``) from ``prompt_id``/``prompt``."""
    try:
        found = us.prompt_from_params(prompts, params)
    except ValueError as error:
        ignored.append(str(error))
        return
    if found is not None:
        st.session_state[f"{prefix}example"], st.session_state[f"{prefix}prompt_text"] = found


def apply_url_dtype(prefix: str, params: Mapping[str, str], ignored: list) -> None:
    if "dtype" in params:
        if params["dtype"] in us.DTYPES:
            st.session_state[f"{prefix}dtype"] = params["dtype"]
        else:
            ignored.append(f"dtype must be one of {', '.join(us.DTYPES)}, got {params['dtype']!r}")


MAX_NOTE_CHARS = 240  # a link's value is quoted in its note: a hostile one may be megabytes long


def show_ignored(ignored: list) -> None:
    """What the link asked for that the page does not offer, each note cut to :data:`MAX_NOTE_CHARS`."""
    if ignored:
        notes = [note if len(note) <= MAX_NOTE_CHARS else note[: MAX_NOTE_CHARS - 1] + "…" for note in ignored]
        st.warning("Ignored from the link (not something this page offers): " + "; ".join(notes))


def prompt_state(prefix: str) -> tuple[int, str]:
    """The prompt picker's current (example, text), for the URL."""
    return st.session_state.get(f"{prefix}example", FREE_TEXT), st.session_state.get(f"{prefix}prompt_text", "")
