"""Exercises whose answer is a change to the engine, checked by the engine's own tests.

The reader writes a replacement for one engine function in the notebook (the tree's expected τ, PPSD's
tick scheduler, the SSD cache lookup, …). The check runs the tests that guard that function in a fresh
Python process, with the function swapped for the reader's source everywhere the engine holds it: a
passing answer is one the engine's own test suite accepts, not one this module compares by eye.

Each notebook registers its exercise in :data:`ENGINE_EXERCISES`; tests/test_exercises.py checks that every
target resolves and every named test exists, and that a broken replacement fails one of them.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .checks import UNANSWERED

ROOT = Path(__file__).resolve().parents[2]
PATCH_ENV = "SPECVIZ_EXERCISE_PATCH"


@dataclass(frozen=True)
class EngineExercise:
    target: str  # "engines.module:function"
    tests: tuple[str, ...]  # pytest node ids relative to the project root
    explanation: str = ""
    hint: str = ""


ENGINE_EXERCISES: dict[str, EngineExercise] = {}


def register(name: str, exercise: EngineExercise) -> EngineExercise:
    ENGINE_EXERCISES[name] = exercise
    return exercise


def load_all() -> dict[str, EngineExercise]:
    """Import every notebook's exercise module (``specviz.exercises.nb…``), which registers its exercises."""
    package = Path(__file__).parent
    for info in pkgutil.iter_modules([str(package)]):
        if info.name.startswith("nb"):
            importlib.import_module(f"{__package__}.{info.name}")
    return ENGINE_EXERCISES


def resolve(target: str):
    """The function ``target`` names (``module:attribute``)."""
    module_name, _, attribute = target.partition(":")
    if not attribute:
        raise ValueError(f"target must look like 'engines.module:function', got {target!r}")
    module = __import__(module_name, fromlist=[attribute])
    return getattr(module, attribute)


def apply_patch(target: str, source: str, name: str) -> int:
    """Replace ``target`` by function ``name`` defined in ``source``, in every loaded ``engines`` module that
    holds it (a ``from … import`` copy too); returns how many places were patched."""
    original = resolve(target)
    module_name = target.partition(":")[0]
    namespace = dict(vars(sys.modules[module_name]))
    exec(compile(source, f"<exercise {name}>", "exec"), namespace)
    replacement = namespace[name]
    patched = 0
    for loaded_name, module in list(sys.modules.items()):
        if module is None or not loaded_name.startswith(("engines", "specviz")):
            continue
        for attribute, value in list(vars(module).items()):
            if value is original:
                setattr(module, attribute, replacement)
                patched += 1
    return patched


def _run_tests(exercise: EngineExercise, source: str, name: str, timeout: float) -> tuple[bool, str]:
    env = {**os.environ, PATCH_ENV: json.dumps({"target": exercise.target, "source": source, "name": name}),
           "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    # no nbmake: its import (nbformat, then jsonschema's format checkers) cost 2.5 of a check's ~14 s, for no notebook
    command = [sys.executable, "-m", "pytest", "-q", "-x", "--tb=line", "--no-header", "-p", "no:cacheprovider",
               "-p", "no:nbmake", "-p", "specviz.exercises.patch_plugin", *exercise.tests]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return done.returncode == 0, (done.stdout + done.stderr).strip()


def check_engine_change(name: str, replacement: Callable | None, *, timeout: float = 300.0) -> bool | None:
    """Run exercise ``name``'s engine tests with ``replacement`` in place of its target function."""
    if name not in ENGINE_EXERCISES:
        load_all()
    if name not in ENGINE_EXERCISES:
        raise ValueError(f"name must be one of {', '.join(sorted(ENGINE_EXERCISES))}; got {name!r}")
    exercise = ENGINE_EXERCISES[name]
    if replacement is None:
        print(f"{UNANSWERED} (set it to your function; the check runs {len(exercise.tests)} of the engine's tests)")
        return None
    source = textwrap.dedent(inspect.getsource(replacement))
    print(f"Running {', '.join(exercise.tests)} with your {replacement.__name__} in place of {exercise.target} …")
    passed, output = _run_tests(exercise, source, replacement.__name__, timeout)
    if passed:
        print(f"✓ The engine's tests pass with your change. {exercise.explanation}".rstrip())
        return True
    failures = [line for line in output.splitlines() if "Error" in line or "assert" in line][:3]
    print(f"✗ Not yet: the engine's tests fail: {' | '.join(failures) or output[-400:]}. {exercise.hint}".rstrip())
    return False
