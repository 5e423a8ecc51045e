"""specviz's engine: real, instrumented speculative decoding on a real language model.

Public API::

    from engines import Engine
    engine = Engine.load()                       # SmolLM2-135M-Instruct, embedded, offline
    for event in engine.generate("Hi!", method="sps", gamma=4):
        ...                                      # RunStart, Prefill, DraftTree, Verification, Commit, RunEnd
    result = engine.run("Hi!", method="pld")     # or everything at once

This package never imports specviz, Streamlit or ipywidgets: the UIs consume its event stream.
"""

from engines.core.stats import Stats, compute_stats
from engines.core.trace import Trace, read_jsonl, write_jsonl
from engines.engine import Engine, RunResult
from engines.methods import METHODS, get_method
from engines.model.loading import DEFAULT_MODEL, load_model

__all__ = ["DEFAULT_MODEL", "METHODS", "Engine", "RunResult", "Stats", "Trace", "compute_stats",
           "get_method", "load_model", "read_jsonl", "write_jsonl"]
