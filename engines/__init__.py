"""specviz's engine: real, instrumented speculative decoding on a real language model.

Public API::

    from engines import Engine
    engine = Engine.load()                       # SmolLM2-135M-Instruct, embedded, offline
    for event in engine.generate("Hi!", method="sps", gamma=4):
        ...                                      # RunStart, Prefill, DraftTree, Verification, Commit, RunEnd
    result = engine.run("Hi!", method="pld")     # or everything at once

This package never imports specviz, Streamlit or ipywidgets: the UIs consume its event stream.
"""

from .engine import Engine, RunResult
from .methods import METHODS, get_method
from .model import DEFAULT_MODEL, load_model
from .stats import Stats, compute_stats
from .trace import Trace, read_jsonl, write_jsonl

__all__ = ["DEFAULT_MODEL", "METHODS", "Engine", "RunResult", "Stats", "Trace", "compute_stats",
           "get_method", "load_model", "read_jsonl", "write_jsonl"]
