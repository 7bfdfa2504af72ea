"""Prometheus metrics of the storage layer, defined once for every binding and the metadata store.

Label values are lower-case snake (``ok``, ``already_gone``, ``storage_unavailable_error``); a label that
names a thing reclaim does not name itself (a binding, a topic) carries that thing's name. No process of
reclaim exports ``_created`` series: importing this module turns them off.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    write_to_textfile,
)

from reclaim.storage import errors
from reclaim.storage.chunks import DeleteOutcome

disable_created_metrics()  # type: ignore[no-untyped-call]

_WORD_BREAK = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_WORD = re.compile(r"[^a-z0-9]+")


@functools.lru_cache(maxsize=1024)
def snake(text: str) -> str:
    """``text`` as a lower-case snake label value.

    >>> snake("OFFLOAD_LEDGER"), snake("already-gone"), snake("ChunkNotFoundError")
    ('offload_ledger', 'already_gone', 'chunk_not_found_error')
    """
    return _NOT_WORD.sub("_", _WORD_BREAK.sub("_", text).lower()).strip("_")


def _error_classes(root: type[errors.StorageError]) -> list[type[errors.StorageError]]:
    found = [root]
    for sub in root.__subclasses__():
        found += _error_classes(sub)
    return found


#: The ``outcome`` of a failed storage operation: its error class, snake-cased; ``unexpected`` for any
#: exception outside the storage hierarchy.
ERROR_OUTCOMES: tuple[str, ...] = (*dict.fromkeys(snake(c.__name__) for c in _error_classes(errors.StorageError)),
                                   "unexpected")

#: Every verb ``BaseChunkStorage`` observes.
OPERATIONS = ("check", "exists", "create", "delete", "delete_many", "exists_many", "open_read", "open_write",
              "get_info", "read", "write", "list", "concat", "truncate", "set_read_only")

#: The verbs phase 2 uses, whose failures the worker's dashboards and alerts read.
DELETION_OPERATIONS = ("check", "get_info", "delete_many")

METADATA_OUTCOMES = ("committed", "conflict", "rolled_back", "unavailable")

STORAGE_OPERATIONS = Counter(
    "reclaim_storage_operations_total",
    "Chunk storage operations by binding, operation and outcome (ok or the error class).",
    ["binding", "operation", "outcome"],
)

STORAGE_OPERATION_SECONDS = Histogram(
    "reclaim_storage_operation_seconds",
    "Latency of chunk storage operations by binding and operation.",
    ["binding", "operation"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)

STORAGE_BYTES = Counter(
    "reclaim_storage_bytes_total",
    "Bytes moved by chunk storage, by binding and direction (read or written).",
    ["binding", "direction"],
)

STORAGE_DELETED_CHUNKS = Counter(
    "reclaim_storage_deleted_chunks_total",
    "Chunks handled by delete and delete_many, by binding and per-key outcome.",
    ["binding", "outcome"],
)

METADATA_TRANSACTIONS = Counter(
    "reclaim_metadata_transactions_total",
    "Metadata store transactions by outcome (committed, conflict, rolled_back, unavailable).",
    ["outcome"],
)
for _outcome in METADATA_OUTCOMES:
    METADATA_TRANSACTIONS.labels(_outcome)


def initialise(bindings: Iterable[str], operations: Iterable[str] = DELETION_OPERATIONS) -> None:
    """Create the zero series of ``bindings``: every outcome of ``operations``, bytes, deleted chunks.

    A counter that first appears at 1 loses that first increase to ``rate()``; a process calls this at
    start with the bindings it serves.
    """
    operations = tuple(operations)
    for binding in bindings:
        for operation in operations:
            STORAGE_OPERATION_SECONDS.labels(binding, operation)
            for outcome in ("ok", *ERROR_OUTCOMES):
                STORAGE_OPERATIONS.labels(binding, operation, outcome)
        for direction in ("read", "written"):
            STORAGE_BYTES.labels(binding, direction)
        for deleted in DeleteOutcome:
            STORAGE_DELETED_CHUNKS.labels(binding, snake(deleted.value))


# The audit runs as a command, not a server: its gauges live in a registry of their own, written to a file
# that node_exporter's textfile collector (or any static file server) exposes.
AUDIT_REGISTRY = CollectorRegistry()
AUDIT_ORPHANS = Gauge("reclaim_audit_orphans", "Tier-2 chunks the last audit found with no metadata row, by binding",
                      ["binding"], registry=AUDIT_REGISTRY)
AUDIT_LAST_RUN = Gauge("reclaim_audit_last_run_timestamp_seconds", "When the last audit finished (Unix time)",
                       registry=AUDIT_REGISTRY)


# ``reclaim deletions stalled`` likewise, in a file of its own.
STALLED_REGISTRY = CollectorRegistry()
STALLED_CHUNKS = Gauge("reclaim_stalled_chunks", "Chunks retired over a day ago whose objects the last check "
                       "of `reclaim deletions stalled` found still there, by binding", ["binding"],
                       registry=STALLED_REGISTRY)
STALLED_LAST_RUN = Gauge("reclaim_stalled_last_run_timestamp_seconds",
                         "When the last check of `reclaim deletions stalled` finished (Unix time)",
                         registry=STALLED_REGISTRY)


def write_textfile(path: str | Path, orphans_by_binding: Mapping[str, int], finished_at: float | None = None) -> None:
    """Write the audit's gauges to ``path`` (replaced atomically) in the text exposition format.

    ``orphans_by_binding`` names every binding audited, with 0 for a clean one: a binding left out
    disappears from the file.
    """
    _write_counts(path, AUDIT_REGISTRY, AUDIT_ORPHANS, AUDIT_LAST_RUN, orphans_by_binding, finished_at)


def write_stalled_textfile(path: str | Path, stalled_by_binding: Mapping[str, int],
                           finished_at: float | None = None) -> None:
    """:func:`write_textfile` for ``reclaim deletions stalled``: its count of each binding checked."""
    _write_counts(path, STALLED_REGISTRY, STALLED_CHUNKS, STALLED_LAST_RUN, stalled_by_binding, finished_at)


def _write_counts(path: str | Path, registry: CollectorRegistry, counts: Gauge, last_run: Gauge,
                  by_binding: Mapping[str, int], finished_at: float | None) -> None:
    if any(count < 0 for count in by_binding.values()):
        raise ValueError(f"counts must be >= 0, got {dict(by_binding)}")
    counts.clear()
    for binding, count in by_binding.items():
        counts.labels(binding).set(count)
    last_run.set(time.time() if finished_at is None else finished_at)
    write_to_textfile(str(path), registry)
