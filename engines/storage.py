"""Files the project writes: whole or not at all; a damaged one is said once, set aside and made again.

Why one rule: every result and cache (bench results, traces, the verify-cost and dtype records, corpus chunks,
drafters and their cards, the model cache, the native build) is read by other processes — the dashboard, a
notebook, parallel test workers, the next run — perhaps while it is being written, and a run can be killed at
any moment (Ctrl-C, a time budget, the out-of-memory killer). So a file is written beside its place under a
temporary name, flushed to the disk and renamed over the old one (a rename within one folder is atomic on POSIX
and on Windows): a reader sees the old file or the new one, never half of either, and a killed writer leaves
the old one whole. A folder is built under a staging name and renamed into place the same way. What a killed
writer leaves behind (its temporary file, its staging folder) is removed by the next writer of the same path.

A file damaged anyway (a full disk, a copy cut short, an edit by hand, a machine that lost power before the
data reached the disk) is met by its reader: :func:`read_json_record` and :func:`discard_damaged` report it
by name, with what was wrong, and set it aside (``NAME.corrupt``, kept to look at) so that the caller makes
it again; nothing the project can rebuild ends in a traceback.

Reports go through :mod:`logging` (a WARNING of the ``engines.storage`` logger, printed on stderr when nothing
is configured), not :mod:`warnings`: a damaged cache is an event of this machine, not a fault in the caller's
code; :mod:`warnings` deduplicates by the line that warns, not by the file, and ``-W error`` would turn a
cache that can be rebuilt into a crash. Each path is reported once per process, as the engine's other
said-once notes (the native build, the small-M kernel) are, on the same channel.
"""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

_log = logging.getLogger(__name__)
_reported: set[str] = set()
_serial = itertools.count()  # two threads of one process writing one path get two temporary names
CORRUPT_SUFFIX = ".corrupt"


# --- writing ----------------------------------------------------------------------------------------------
@contextmanager
def staged_file(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` for the caller to write by any means (safetensors, gzip, a compiler);
    once the block ends it is flushed to the disk and renamed over ``path``. If the block raises, or the
    process dies, ``path`` is as it was: the old file whole, or no file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _clear_leftovers(path)
    staging = _sibling(path, "", ".tmp")
    try:
        yield staging
        _sync_file(staging)
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    with staged_file(path) as staging:
        staging.write_bytes(data)
    return Path(path)


def write_text_atomic(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    with staged_file(path) as staging:
        staging.write_text(text, encoding=encoding)
    return Path(path)


def write_json_atomic(path: str | Path, record: object, indent: int | None = None) -> Path:
    """``record`` as JSON, ending in a newline (so a file cut short is told from a whole one by eye too)."""
    return write_text_atomic(path, json.dumps(record, indent=indent) + "\n")


def write_lines_atomic(path: str | Path, lines: Iterable[str]) -> Path:
    """One line per item, streamed (a trace, a corpus chunk: no need to hold the text in memory), gzip-compressed
    where the name ends in ``.gz``."""
    path = Path(path)
    with staged_file(path) as staging:
        opened = gzip.open(staging, "wt", encoding="utf-8") if path.suffix == ".gz" else \
            open(staging, "w", encoding="utf-8")
        with opened as sink:
            for line in lines:
                sink.write(line.rstrip("\n") + "\n")
    return path


@contextmanager
def staged_directory(target: str | Path, replace: bool = True) -> Iterator[Path]:
    """A staging folder beside ``target`` for the caller to fill; once the block ends it is renamed into place,
    so ``target`` holds a whole set of files (weights and the card that describes them) or the previous one.

    ``replace=False`` is for caches that any process may build: if another process put its ``target`` in
    place first, that one stays and this staging folder is dropped. A staging folder left by a killed earlier
    run is removed first; an old copy it had moved aside but not yet replaced is put back."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _clear_leftovers(target)
    staging = _sibling(target, "staging-")
    staging.mkdir()
    try:
        yield staging
        for file in staging.rglob("*"):
            if file.is_file():
                _sync_file(file)
        _move_into_place(staging, target, replace)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _sync_folder(target.parent)


def _move_into_place(staging: Path, target: Path, replace: bool) -> None:
    """Rename ``staging`` to ``target``; an existing ``target`` is moved aside first and removed after, so the
    only moment without it is between two renames (and a run killed there has it put back next time)."""
    try:
        staging.rename(target)
        return
    except OSError:
        if not target.exists():
            raise
    if not replace:
        shutil.rmtree(staging, ignore_errors=True)
        return
    old = _sibling(target, "old-")
    target.rename(old)
    try:
        staging.rename(target)
    except OSError:  # another process moved its own copy in meanwhile: keep that one
        if not target.exists():
            old.rename(target)
            raise
        shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


# --- reading ----------------------------------------------------------------------------------------------
def read_json_record(path: str | Path, what: str, then: str = "it will be made again") -> dict | None:
    """The JSON object in ``path``; ``None`` where there is none, or where the file is damaged (not whole JSON,
    not an object, unreadable): then it is reported once by name and set aside, and the caller makes it again.
    ``what`` names it for a person ("the verify-cost curve"), ``then`` says what happens next."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        discard_damaged(path, what, f"unreadable: {error}", then)
        return None
    try:
        record = json.loads(text)
    except ValueError as error:
        discard_damaged(path, what, f"not whole JSON: {error}", then)
        return None
    if not isinstance(record, dict):
        discard_damaged(path, what, f"a JSON {type(record).__name__}, not a record", then)
        return None
    return record


def discard_damaged(path: str | Path, what: str, why: str, then: str = "it will be made again") -> None:
    """Report ``path`` once (by name, with ``why``), then set it aside: a file as ``NAME.corrupt`` (replacing an
    older one, so they do not pile up), a folder removed (a model cache is too large to keep twice)."""
    path = Path(path)
    aside = path.with_name(path.name + CORRUPT_SUFFIX)
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
        kept = "removed"
    else:
        try:
            os.replace(path, aside)
            kept = f"set aside as {aside.name}"
        except FileNotFoundError:  # another process set it aside first
            kept = "already set aside"
        except OSError:
            path.unlink(missing_ok=True)
            kept = "removed"
    report_once(path, f"specviz: {what} {path} is damaged ({why}); {kept}, {then}")


def report_once(path: str | Path, message: str) -> None:
    """Log ``message`` the first time ``path`` is reported in this process; later reports of it are silent."""
    key = os.path.abspath(path)
    if key not in _reported:
        _reported.add(key)
        _log.warning(message)


# --- the temporary names ----------------------------------------------------------------------------------
def _sibling(path: Path, kind: str, suffix: str = "") -> Path:
    """``.NAME.<kind><pid>-<n><suffix>``: hidden, and never matching the patterns readers look for
    (``*.safetensors``, ``*.json``, ``chunk-NNN.jsonl.gz``), so no reader takes it for the real thing."""
    return path.with_name(f".{path.name}.{kind}{os.getpid()}-{next(_serial)}{suffix}")


def _leftover_pattern(path: Path) -> re.Pattern:
    return re.compile(rf"\.{re.escape(path.name)}\.(staging-|old-|)(\d+)-\d+(\.tmp)?")


def _clear_leftovers(path: Path) -> None:
    """Remove what writers of ``path`` that have died left beside it; put back an old copy that one of them
    had moved aside without moving its new one in."""
    pattern = _leftover_pattern(path)
    try:
        entries = [e for e in path.parent.iterdir() if e.name.startswith(f".{path.name}.")]
    except OSError:
        return
    for entry in entries:
        found = pattern.fullmatch(entry.name)
        if found is None or _alive(int(found.group(2))):
            continue
        if found.group(1) == "old-" and not path.exists():
            try:
                entry.rename(path)
            except OSError:  # another writer put it back, or moved its own copy in
                pass
        elif entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` may still be writing (writers sharing a cache are assumed to share one process
    namespace: one machine, not two containers). On Windows ``os.kill`` would end the process rather than ask,
    so every writer counts as alive there (a leftover costs disk space, not correctness)."""
    if pid == os.getpid() or os.name == "nt":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def _sync_file(path: Path) -> None:
    """Flush ``path`` to the disk before it is renamed into place: otherwise a machine that loses power could
    keep the rename and lose the data, an empty file under the real name."""
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX: the folder's entry list); not possible, nor needed, on Windows."""
    if os.name == "nt":
        return
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
