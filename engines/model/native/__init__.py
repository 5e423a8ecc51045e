"""The engine's native code: a decode step in C (``step.c``), built on the running machine at first use
(``library.py``) and driven from :mod:`engines.model.native.step`."""
