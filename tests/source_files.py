"""A project file that is not a package module (a script, the notebooks' conftest) loaded as a module of its own."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_source(name: str, path: Path) -> ModuleType:
    """``path`` executed afresh as module ``name`` (each call a new module object)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
