"""The Streamlit pieces the Mirror-SD and SSD pages share: a run plan streamed with live redraws, the
metrics row, and the latency law beside the measurement (page-specific views stay on the pages)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable

import pandas as pd
import streamlit as st
import verdict_helpers as vh
from engine_cache import engine_lock

from engines.lanes import pinned


def stream_plan(engine, dtype: str, prompt, plan: dict[str, tuple[str, dict]], *, max_new_tokens: int,
                temperature: float, one_core: bool, status_area, draw_live: Callable[[list, int], None]) -> dict:
    """Every run of the plan under the engine's lock; the first (the method's) redrawn as its events arrive."""
    runs: dict[str, dict] = {}
    throttle, drawn = vh.LiveThrottle(), 0
    with engine_lock(dtype):
        for index, (name, (method, run_options)) in enumerate(plan.items()):
            events: list = []
            runs[name] = {"method": method, "options": run_options, "events": events}
            if vh.needs_warmup(method, run_options):
                status_area.caption("starting the draft lane (a worker process that loads the draft once)…")
                engine.run(prompt, method, max_new_tokens=1, temperature=temperature, **run_options)
            status_area.caption(f"running {name}…")
            with pinned("cpu0") if vh.pin_to_one_core(method, run_options, one_core) else nullcontext():
                for event in engine.generate(prompt, method, max_new_tokens=max_new_tokens, temperature=temperature,
                                             **run_options):
                    events.append(event)
                    if index == 0 and throttle.due():
                        draw_live(events, drawn)
                        drawn += 1
    status_area.empty()
    return runs


def show_metrics(record: dict, metrics: dict) -> None:
    values = vh.metric_values(metrics)
    for column, (label, value) in zip(st.columns(len(values)), values.items()):
        column.metric(label, value, help=vh.METRIC_HELP[label])
    st.caption(vh.run_caption(record["runs"][record["main"]]["events"]))


def show_law(record: dict, metrics: dict, key_prefix: str, baseline: str) -> None:
    """``baseline``: how the page names sps with the same draft ("vanilla SD", "synchronous SD")."""
    st.subheader("The latency law beside the measurement")
    sd = record["runs"].get(vh.SD_BASELINE)
    left, right = st.columns(2)
    left.dataframe(pd.DataFrame(vh.law_rows(metrics, sd["events"] if sd else None)).set_index("quantity"),
                   key=f"{key_prefix}law_table")
    right.dataframe(pd.DataFrame(vh.cost_rows(metrics)).set_index("cost"), key=f"{key_prefix}cost_table")
    st.caption("The law's inputs are this run's own means, so 'measured ÷ law' is what the law leaves out: in lanes "
               "mode mostly the two processes slowing each other down and messages that wait for a busy receiver. "
               "A serial run should come near the no-overlap line." + ("" if sd else " Tick 'also run sps' for the "
                                                                       f"speedup over {baseline}."))
