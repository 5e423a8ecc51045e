"""One engine per dtype and one lock per engine, shared by every page of the dashboard.

Streamlit keys a cached resource by the function's module, name and source, so both pages importing
these two functions from this module share one loaded model, and runs from either page never overlap
(they would time each other's work).
"""

from __future__ import annotations

import threading
from typing import Callable

import streamlit as st

from app.run_summary import baseline_key
from engines import Engine
from engines.core.trace import Commit


@st.cache_resource(show_spinner="Loading the model…")
def load_engine(dtype: str) -> Engine:
    return Engine.load(dtype=dtype)


@st.cache_resource
def engine_lock(dtype: str) -> threading.Lock:
    return threading.Lock()


def ar_baseline(engine: Engine, lock: threading.Lock, prompt: str, settings: dict,
                memory: dict | None = None, progress: Callable[[int, int], None] | None = None) -> tuple[dict, str]:
    """The ``ar`` run a page's speedup is measured against: same prompt, settings and memory budget on the
    same engine, cached in the session (shared by every page) so it is measured once per setting.
    Returns the baseline (events, stats, text, token_ids) and where it came from.

    ``progress(tokens, max_new_tokens)`` is called at every commit: a page that draws it there gives Streamlit
    a point to stop the run at (the Stop button); the stream is then closed and nothing is cached."""
    memory = memory or {}
    cache = st.session_state.setdefault("ar_cache", {})
    key = baseline_key(prompt, {**settings, **memory}, engine.dtype)
    if key in cache:
        return cache[key], "cached in this session"
    with st.spinner("Running autoregressive decoding of the same prompt for the speedup…"), lock:
        if progress is None:
            events = engine.run(prompt, "ar", **settings, **memory).events
        else:
            events, tokens = [], 0
            stream = engine.generate(prompt, "ar", **settings, **memory)
            try:
                for event in stream:
                    events.append(event)
                    if isinstance(event, Commit):
                        tokens += len(event.tokens)
                        progress(tokens, settings.get("max_new_tokens", 0))
            finally:
                stream.close()
    end = events[-1]
    cache[key] = {"events": events, "stats": dict(end.stats), "text": end.text, "token_ids": list(end.token_ids)}
    return cache[key], "measured just now"


def model_picker(prefix: str = "") -> tuple[str, Engine]:
    """The sidebar's model section every page shows: the dtype box (key ``{prefix}dtype``) and the engine
    it loads; a model that cannot load stops the page with the reason."""
    from engines.model.loading import DEFAULT_MODEL
    from engines.model.step_choice import default_dtype

    st.header("Model")
    choice = st.selectbox("dtype", ["auto", "float32", "bfloat16"], key=f"{prefix}dtype",
                          help="auto: the faster of float32 and bfloat16 on this machine, measured once and cached.")
    dtype = default_dtype() if choice == "auto" else choice
    try:
        engine = load_engine(dtype)
    except (ValueError, OSError) as error:
        st.error(f"Could not load the model: {error}")
        st.stop()
    st.caption(f"{DEFAULT_MODEL} · {engine.target.n_layers} layers · {engine.dtype} · {engine.device}",
               help=engine.step_description)
    return dtype, engine
