"""One engine per dtype and one lock per engine, shared by every page of the dashboard.

Streamlit keys a cached resource by the function's module, name and source, so both pages importing
these two functions from this module share one loaded model, and runs from either page never overlap
(they would time each other's work).
"""

from __future__ import annotations

import threading

import streamlit as st

from engines import Engine


@st.cache_resource(show_spinner="Loading the model…")
def load_engine(dtype: str) -> Engine:
    return Engine.load(dtype=dtype)


@st.cache_resource
def engine_lock(dtype: str) -> threading.Lock:
    return threading.Lock()
