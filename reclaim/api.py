"""The library's entry points: settings, phase 1, the audit, streams and a worker, each wired from one Settings."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from types import TracebackType
from typing import Any

from reclaim import config_file
from reclaim.consumers.batches import BatchReport
from reclaim.consumers.deletion_worker import DeletionWorker
from reclaim.deletion.mark import LedgerDeletionService, MarkResult
from reclaim.deletion.outcomes import Outcome
from reclaim.exits import UsageError
from reclaim.producers.producer import RecordProducer
from reclaim.segments.streams import StreamController
from reclaim.services import client_security, controller, preflight, runtime
from reclaim.settings import Settings
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.sql_store import SQLMetadataStore
from reclaim.tools import audit as audit_tool
from reclaim.tools.topics import admin_client, topic_specs
from reclaim.tools.topics import create_topics as create_topic_specs

#: The outcomes that mean a chunk copy is gone from its binding.
GONE = (Outcome.DELETED, Outcome.ALREADY_GONE)


def load_settings(path: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] | None = None,
                  **overrides: Any) -> Settings:
    """The settings of a program, read as the command line reads them: ``overrides`` first, then ``env``
    (default ``os.environ``; its ``RECLAIM_*`` variables), then the TOML file at ``path``, then the defaults.

    Neither ``env`` nor ``os.environ`` is changed. The file's ``[kafka]`` table and the ``RECLAIM_KAFKA_*``
    variables are installed for every Kafka client this process builds from then on, as the command line
    does. A bad file or value raises :class:`~reclaim.errors.ReclaimError` (a missing file) or ``ValueError``.

    Examples
    --------
    >>> settings = load_settings("reclaim.toml", state_dir="/var/lib/reclaim")  # doctest: +SKIP
    """
    merged = dict(os.environ if env is None else env)
    if path is not None:
        config_file.apply(path, merged)
    settings = Settings.from_env(merged, **overrides)
    client_security.install_kafka_properties(settings, merged)
    return settings


def create_topics(settings: Settings) -> dict[str, str]:
    """Create reclaim's topics that do not exist yet (``reclaim topics create``): ``{topic: "created" | "exists"}``."""
    admin = admin_client(preflight.broker(settings))
    return create_topic_specs(admin, topic_specs(settings), replication_factor=settings.replication_factor)


class Deletions:
    """Phase 1 wired to the deletion topic: the metadata store, an idempotent producer and the
    :class:`LedgerDeletionService` over them (signing with the controller's key when there is a keyring).

    Open it with :func:`open_deletions`; close it (or leave its ``with`` block) to flush and close both.
    """

    def __init__(self, settings: Settings) -> None:
        self.store: SQLMetadataStore = runtime.metadata_store(settings)
        try:
            self._producer = RecordProducer(preflight.broker(settings), "idempotent-producer")
        except BaseException:
            self.store.close()
            raise
        self.service: LedgerDeletionService = runtime.deletion_service(settings, self.store, self._producer)

    def publish(self, chunk_names: Iterable[str]) -> MarkResult:
        """Publish one pending delete for each copy of the chunks ``chunk_names``, then mark them deleted in
        the metadata store (phase 1); phase 2 deletes them from tier-2.

        Only chunks that no segment holds are taken: a chunk of a live segment leaves its layout by the
        segment's truncation or deletion (:class:`StreamController`), never here. An unknown name, a chunk
        already marked or a chunk of a live segment is refused (:class:`~reclaim.errors.ReclaimError`)
        before anything is published. Chunks whose records the broker did not confirm stay live and are
        listed in the result's ``failed``.
        """
        names = list(dict.fromkeys(chunk_names))
        rows = self.store.get_chunks(names)
        for name in names:
            row = rows.get(name)
            if row is None:
                raise UsageError(f"chunk {name!r}: the metadata store has no such chunk; nothing was published")
            if not row.active:
                raise UsageError(f"chunk {name!r} is marked deleted already (mark {row.mark_id}); "
                                 "nothing was published")
            if self.store.get_segment(row.segment) is not None:
                raise UsageError(f"chunk {name!r} belongs to the live segment {row.segment!r}: truncate or delete "
                                 "the segment instead; nothing was published")
        return self.service.mark([rows[name] for name in names])

    def close(self) -> None:
        try:
            self._producer.close()
        finally:
            self.store.close()

    def __enter__(self) -> Deletions:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def open_deletions(settings: Settings) -> Deletions:
    """Phase 1 of ``settings``'s deployment, ready to publish pending deletes (see :class:`Deletions`)."""
    return Deletions(settings)


@contextmanager
def open_streams(settings: Settings, *, max_rolling_length: int | None = None) -> Iterator[StreamController]:
    """The :class:`StreamController` of ``settings``'s deployment, for a ``with`` block: streams over segments
    on the configured binding (``stream_binding``), truncations handing their chunks to phase 1, topologies
    published. ``max_rolling_length`` is the most bytes a chunk takes before a new one starts."""
    with controller.stream_controller(settings, max_rolling_length) as (streams, _publisher):
        yield streams


def audit(settings: Settings, *, grace_s: float = audit_tool.GRACE_S, limit: int = 20) -> audit_tool.AuditReport:
    """Every configured tier-2 binding listed against the metadata store (``reclaim audit``), as data:
    ``report.clean``, ``report.totals()``, ``report.to_dict()`` (what ``reclaim audit --json`` prints).

    Objects newer than ``grace_s`` seconds are not judged (writes in flight); each finding keeps at most
    ``limit`` names. Reads only: the store is never created and a missing filesystem root is an error.
    """
    settings = replace(settings, fs_create_root=False)
    store = runtime.metadata_store(settings, create=False)
    try:
        bindings = runtime.storage_bindings(settings)
        try:
            report = audit_tool.audit(store, audit_tool.auditable(bindings), bindings, grace_s=grace_s, limit=limit)
            report.not_configured = runtime.bindings_not_configured(settings)  # named, as the command names them
            return report
        finally:
            bindings.close()
    finally:
        store.close()


class Worker:
    """Phase 2 on a thread of this process: one consumer of the configured group over the deletion topic and
    its retry tiers, deleting from the configured bindings. Start it with :func:`start_worker`.

    :meth:`stop` (or leaving its ``with`` block) lets the batch in flight finish, commits the offsets and
    leaves the group; an error that stopped the consumer is raised there.
    """

    def __init__(self, settings: Settings) -> None:
        self._store = runtime.metadata_store(settings, create=False)
        self._bindings: StorageBindings | None = None
        try:
            self._bindings = runtime.storage_bindings(settings)
            self._bindings.check()
            topics = runtime.topic_names(settings)
            preflight.require_topics(preflight.broker(settings), [*topics.deletion_inputs, topics.dlq])
            self._consumer: DeletionWorker = runtime.deletion_worker(settings, self._store, self._bindings)
        except BaseException:
            self._close_stores()
            raise
        self._stop = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self._report = BatchReport()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._consume, name="reclaim-worker", daemon=True)
        self._thread.start()

    @property
    def report(self) -> BatchReport:
        """What the worker has done so far: records received and each outcome's count (``report.outcomes``)."""
        with self._lock:
            return self._report

    @property
    def gone(self) -> int:
        """Chunk copies this worker found deleted: deleted by it, or already gone."""
        outcomes = self.report.outcomes
        return sum(outcomes.get(outcome, 0) for outcome in GONE)

    def wait_gone(self, count: int, timeout_s: float = 60.0) -> bool:
        """Wait until :attr:`gone` reaches ``count``; False when ``timeout_s`` passes first or the worker stopped."""
        deadline = time.monotonic() + timeout_s
        while self.gone < count:
            if not self._thread.is_alive() or time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop consuming, finish the batch in flight, commit, leave the group; raise what stopped it, if anything."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"the worker did not stop within {timeout_s:g} s")
        self._close_stores()
        if self._failure is not None:
            raise self._failure

    def _consume(self) -> None:
        try:
            while not self._stop.is_set():
                done = self._consumer.run_once()
                with self._lock:
                    self._report = self._report + done
        except BaseException as exc:  # raised on the caller's thread, by stop()
            self._failure = exc
        finally:
            try:
                self._consumer.close()
            except BaseException as exc:
                self._failure = self._failure or exc

    def _close_stores(self) -> None:
        if getattr(self, "_closed", False):
            return
        self._closed = True
        try:
            if self._bindings is not None:
                self._bindings.close()
        finally:
            self._store.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def start_worker(settings: Settings) -> Worker:
    """A phase-2 :class:`Worker` consuming on its own thread; the store, the bindings and the topics it needs
    are checked first (an error names the first missing)."""
    return Worker(settings)
