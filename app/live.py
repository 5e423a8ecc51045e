"""Live runs the Stop button can end: the runs of one press of Generate (Run page) or Compare, as records.

Streamlit-free, so the stopping itself is tested without a browser. How a stop happens: the page redraws the
token stream at every commit; when the user presses Stop (or changes any widget) while a run is streaming,
Streamlit raises its ``StopException`` out of that redraw, in the script thread doing the run. :meth:`Batch.run`
lets it pass, but first closes the engine's generator (its ``finally`` blocks run: the run's clock, its memory
streamer, its lanes are released), keeps what was committed so far as a record marked ``stopped``, and marks
the batch stopped. The lock the page holds around the run is released by its ``with``. Streamlit starts the
next script run at once (``runner.fastReruns``), possibly before the stopped thread has reached its next
commit; that run waits for :attr:`Batch.finished` before drawing the batch.
"""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from app import method_options as mo
from app import run_summary as rs
from engines.core.stats import compute_stats
from engines.core.trace import Commit, Event, RunEnd, RunStart

STOPPED = "stopped"  # a record's stop_reason when the Stop button ended it


def run_record(method: str, options: dict, events: Sequence[Event]) -> dict:
    """One run as the pages keep it: events, stats, text and token ids; a run without its ``RunEnd`` (stopped)
    gets its stats from the events so far (decode time up to its last event)."""
    events = list(events)
    end = events[-1] if events and isinstance(events[-1], RunEnd) else None
    commits = [e for e in events if isinstance(e, Commit)]
    if end is not None:
        stats, text, token_ids, reason = dict(end.stats), end.text, list(end.token_ids), end.stop_reason
    else:
        stats = compute_stats(events, end_time=events[-1].t if events else None).to_dict()
        text = "".join(piece for c in commits for piece in c.pieces)
        token_ids = [t for c in commits for t in c.tokens]
        reason = STOPPED
    start = events[0] if events and isinstance(events[0], RunStart) else None
    return {"method": method, "options": dict(options), "events": events, "stats": stats, "text": text,
            "token_ids": token_ids, "stop_reason": reason, "lossless": start.lossless if start else None,
            "stopped": end is None}


class Batch:
    """The runs of one press of a page's run button, in order; shared with the script run after a Stop."""

    def __init__(self, configs: Sequence[tuple[str, dict]], prompt: str, settings: dict, dtype: str):
        self.id = uuid.uuid4().hex
        self.configs = [(method, dict(options)) for method, options in configs]
        self.prompt, self.settings, self.dtype = prompt, dict(settings), dtype
        self.runs: list[dict] = []  # one per configuration started: a record, or {"error": message}
        self.events: list[Event] = []  # the run in progress
        self.ar: dict | None = None  # the ar baseline (events, stats, text, token_ids)
        self.ar_source: str | None = None
        self.stopped = False
        self.finished = threading.Event()

    @contextmanager
    def running(self) -> Iterator["Batch"]:
        """Around all of a batch's work: anything escaping it (Streamlit's stop) marks the batch stopped, and
        :attr:`finished` is set however it ends."""
        try:
            yield self
        except BaseException:
            self.stopped = True
            raise
        finally:
            self.finished.set()

    def run(self, start: Callable[[], Iterator[Event]], on_commit: Callable[[list[Event]], None] | None = None) -> dict:
        """Run the next configuration: ``start()`` returns the engine's event stream (it validates first);
        ``on_commit(events so far)`` after every commit. A ``ValueError``/``OSError`` (bad input, a drafter that
        cannot load) becomes the record ``{"error": message}``; anything else escaping (the Stop button) closes
        the stream, keeps the partial run as a ``stopped`` record and is raised again."""
        method, options = self.configs[len(self.runs)]
        events: list[Event] = []
        self.events = events
        stream = None
        try:
            stream = start()
            for event in stream:
                events.append(event)
                if on_commit is not None and isinstance(event, Commit):
                    on_commit(events)
        except (ValueError, OSError) as error:
            record = {"method": method, "options": dict(options), "error": str(error)}
        except BaseException:
            self.stopped = True
            if events:
                self.runs.append(run_record(method, options, events))  # no RunEnd: stopped
            raise
        else:
            record = run_record(method, options, events)
        finally:
            if stream is not None:
                stream.close()
        self.runs.append(record)
        return record

    def wait(self, timeout: float = 60.0) -> bool:
        """Wait for the script run doing the work to end (after a Stop, it ends at its next commit)."""
        return self.finished.wait(timeout)

    def use_cached_baseline(self, ar_cache: dict) -> None:
        """A batch stopped before its ``ar`` baseline ran takes one the session measured before, if any."""
        if self.ar is None:
            cached = ar_cache.get(rs.baseline_key(self.prompt, self.settings, self.dtype))
            if cached is not None:
                self.ar, self.ar_source = cached, "cached in this session"

    @property
    def done(self) -> list[dict]:
        """The records of runs that produced something (finished or stopped), not the errors."""
        return [r for r in self.runs if "error" not in r]


def page_run(batch: Batch, ar_cache: dict) -> dict:
    """The Run page's result from its one-configuration batch: the run's record with the prompt, settings and
    its ``ar`` baseline (for a run stopped before its baseline ran: one cached in the session, or none)."""
    batch.use_cached_baseline(ar_cache)
    return {**batch.done[0], "id": batch.id, "settings": dict(batch.settings), "dtype": batch.dtype,
            "prompt": batch.prompt, "ar": batch.ar, "ar_source": batch.ar_source}


SESSION_RUNS = "session_runs"  # the session's finished runs with their ar baselines, for the Theory page
KEPT_RUNS = 12


def remember(session: dict, batch: Batch, labels: Sequence[str] | None = None) -> None:
    """Keep a batch's finished runs (with its ``ar`` baseline) in the session, newest last, so the Theory page
    can set each on the models; at most :data:`KEPT_RUNS`, the oldest dropped. Idempotent per batch.
    ``labels``: the names the page showed, one per configuration (default: method and every option)."""
    if batch.ar is None:
        return
    kept = session.setdefault(SESSION_RUNS, {})
    for i, record in enumerate(batch.runs):
        key = f"{batch.id}:{i}"
        if "error" in record or record["stopped"] or key in kept:
            continue
        label = labels[i] if labels is not None else mo.method_label(record["method"], record["options"])
        kept[key] = {"label": label, "events": record["events"],
                     "ar_events": batch.ar["events"]}
    for key in list(kept)[:-KEPT_RUNS]:
        del kept[key]
