"""One engine per dtype and one lock per engine, shared by every page of the dashboard, within a memory bound.

Streamlit keys a cached resource by the function's module, name and source, so both pages importing
these two functions from this module share one loaded model, and runs from either page never overlap
(they would time each other's work).

The bound: the engines the dashboard holds together stay within half the machine's memory and within what is
available now (less a reserve for runs: KV caches, drafters, lane workers). Loading a dtype that would break it
unloads the other engine first (closed, dropped from the cache) and the page says so with the numbers
(:func:`plan_engine_cache`, a pure function); a dtype that cannot fit even alone is refused with them
(``Engine.load`` refuses one the machine cannot hold at all, :mod:`engines.model.footprint`).
"""

from __future__ import annotations

import gc
import threading
from dataclasses import dataclass
from typing import Callable, Mapping

import streamlit as st

from app.run_summary import baseline_key
from engines import Engine
from engines.core.trace import Commit
from engines.model.footprint import engine_bytes, gb, machine_memory, parameter_count

ENGINE_SHARE = 0.5  # of the machine's memory, for the engines together
RUN_RESERVE = 512 * 1024**2  # bytes kept free for runs beside the engines


@dataclass(frozen=True)
class CachePlan:
    """What loading one more engine takes: the engines to unload first, whether it then fits, what to say."""

    unload: tuple[str, ...] = ()
    fits: bool = True
    message: str = ""


def plan_engine_cache(wanted: str, wanted_bytes: int, held: Mapping[str, int], total: int, available: int,
                      share: float = ENGINE_SHARE, reserve: int = RUN_RESERVE) -> CachePlan:
    """Which held engines (name → bytes) to unload, largest first, so that ``wanted`` (``wanted_bytes``) fits:
    all engines together within ``share`` of ``total`` memory, and ``wanted`` within ``available`` memory plus
    what the unloaded ones free, less ``reserve``. When it cannot fit even with every other engine unloaded,
    nothing is unloaded and ``fits`` is false."""
    held = {name: size for name, size in held.items() if name != wanted}
    bound = share * total

    def fits(kept: Mapping[str, int]) -> bool:
        freed = sum(size for name, size in held.items() if name not in kept)
        return wanted_bytes + sum(kept.values()) <= bound and wanted_bytes <= available + freed - reserve

    machine = (f"this machine has {gb(available)} available of {gb(total)}; the dashboard keeps its engines "
               f"within {gb(bound)} ({share:.0%} of its memory) and {gb(reserve)} free for runs")
    if not fits({}):
        return CachePlan((), False, f"The {wanted} engine needs about {gb(wanted_bytes)}, more than fits: {machine}.")
    kept, unload = dict(held), []
    for name in sorted(held, key=lambda n: (-held[n], n)):
        if fits(kept):
            break
        unload.append(name)
        del kept[name]
    if not unload:
        return CachePlan()
    names = " and ".join(f"the {name} engine (about {gb(held[name])})" for name in unload)
    return CachePlan(tuple(unload), True, f"Unloaded {names} to make room for {wanted} (about {gb(wanted_bytes)}): "
                                          f"{machine}. Choosing it again loads it again.")


@st.cache_resource
def _held() -> dict[str, Engine]:
    """The engines loaded so far, by dtype (shared by every session, as the cache is)."""
    return {}


@st.cache_resource(show_spinner="Loading the model…")
def _cached_engine(dtype: str) -> Engine:
    engine = Engine.load(dtype=dtype)
    _held()[dtype] = engine
    return engine


def load_engine(dtype: str) -> Engine:
    """The engine for ``dtype``, loaded once per server within the memory bound (module docstring): another
    engine it has no room beside is unloaded first and the page says so; one that cannot fit stops the page
    with the numbers."""
    held = _held()
    if dtype not in held and held:
        memory = machine_memory()
        if memory is not None:
            parameters = parameter_count(next(iter(held.values())).model)  # one model, several dtypes
            plan = plan_engine_cache(dtype, engine_bytes(parameters, dtype),
                                     {d: engine_bytes(parameters, d) for d in held}, *memory)
            if not plan.fits:
                st.error(plan.message)
                st.stop()
            for name in plan.unload:
                unload_engine(name)
            if plan.message:
                st.info(plan.message)
    return _cached_engine(dtype)


def unload_engine(dtype: str) -> None:
    """Close the ``dtype`` engine (after the run holding its lock, if any) and drop it from the cache."""
    engine = _held().pop(dtype, None)
    if engine is None:
        return
    with engine_lock(dtype):
        engine.close()
    _cached_engine.clear(dtype)
    del engine
    gc.collect()


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
