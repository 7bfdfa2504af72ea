"""CPU time a worker process spends in each stage of a batch, for the benchmarks; off unless asked for.

With ``RECLAIM_STAGE_CPU`` naming a file, each :func:`stage` adds the CPU time its thread spent inside
it (``time.thread_time``: this thread only, so a stage on the delete thread is not charged for the main
thread's work) to a per-stage total and counts the stage's runs, and both are written to that file as
JSON when the process exits (a stage's runs under ``calls.<stage>``). Off, :func:`stage` hands back one
shared do-nothing context manager: every stage is timed once per batch, never per record, so neither
state costs the worker anything measurable.

Read once, at import, from the environment: it is a measuring hook, not a setting of the worker.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

__all__ = ["CALLS", "STAGES", "calls", "enabled", "stage", "totals"]

ENV = "RECLAIM_STAGE_CPU"
#: The prefix of the file's entries that count a stage's runs, beside its seconds.
CALLS = "calls."
STAGES = ("poll", "decode", "prepare", "facts", "delete", "cleanup", "route")
"""The stages, in the order a batch goes through them: poll (verify the polled records, then read their
headers), decode (decode the verified ones), prepare (the checks: facts, then judging), facts (gathering rows, marks and
places: part of prepare), delete (the storage request, on the delete thread), cleanup (row cleanup and
verdicts, on the cleanup thread), route (routing, re-routes and offsets). librdkafka's own threads,
the consume call itself and the interpreter's start are in none of them."""

_OFF: AbstractContextManager[None] = nullcontext()
_totals: dict[str, float] = {}
_calls: dict[str, int] = {}
_lock = threading.Lock()


class _Clock:
    __slots__ = ("_name", "_started")

    def __init__(self, name: str) -> None:
        self._name = name
        self._started = 0.0

    def __enter__(self) -> None:
        self._started = time.thread_time()

    def __exit__(self, *_exc: object) -> None:
        spent = time.thread_time() - self._started
        with _lock:
            _totals[self._name] = _totals.get(self._name, 0.0) + spent
            _calls[self._name] = _calls.get(self._name, 0) + 1


def _path() -> Path | None:
    named = os.environ.get(ENV, "")
    return Path(named) if named else None


_PATH = _path()


def enabled() -> bool:
    return _PATH is not None


def stage(name: str) -> AbstractContextManager[None]:
    """Charge the CPU time this thread spends in the ``with`` block to ``name`` (when enabled)."""
    return _Clock(name) if _PATH is not None else _OFF


def totals() -> dict[str, float]:
    """CPU seconds per stage so far."""
    with _lock:
        return dict(_totals)


def calls() -> dict[str, int]:
    """How many times each stage ran so far (``decode`` runs once a polled batch)."""
    with _lock:
        return dict(_calls)


def _dump() -> None:
    if _PATH is not None:
        _PATH.write_text(json.dumps({**totals(), **{f"{CALLS}{name}": n for name, n in calls().items()}},
                                    sort_keys=True))


if _PATH is not None:
    atexit.register(_dump)
