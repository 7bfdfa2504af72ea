"""Phase 2 on one polled batch: one metadata query, checks, batched deletes per binding, row cleanup."""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from deletion import metrics
from deletion.outcomes import Outcome, Verdict
from deletion.verify import Clock, Proceed, judge, tags_mismatch
from schemas.ledger import PendingDeleteLedgerInfo
from storage.bindings import StorageBindings
from storage.chunks import ChunkLocation, DeleteOutcome, DeleteResult
from storage.errors import ChunkNotFoundError, StorageError
from storage.metadata import ChunkRecord, MarkRecord, MetadataStore

log = logging.getLogger(__name__)

DeleteResults = dict[tuple[str, str], DeleteResult]
"""The storage deletes of a plan: the result per (binding name, chunk name)."""


@dataclass(frozen=True)
class RetryPolicy:
    """In-process retries of transient storage or metadata errors inside one attempt (tenacity)."""

    attempts: int = 3
    initial_wait: float = 0.05
    max_wait: float = 1.0

    def retrying(self, retry_on: type[BaseException] | tuple[type[BaseException], ...]) -> Retrying:
        return Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_random_exponential(multiplier=self.initial_wait, max=self.max_wait),
            retry=retry_if_exception(lambda exc: isinstance(exc, retry_on) and _retryable(exc)),
            reraise=True,
        )


def _retryable(exc: BaseException) -> bool:
    return bool(getattr(exc, "retryable", False))


def _transient(result: DeleteResult) -> bool:
    return result.error is not None and result.error.retryable


class _StillFailing(Exception):
    """Some keys of a batched delete failed with a retryable error; try them again."""

    retryable = True


_DELETED = Verdict(Outcome.DELETED)


def _error_verdict(exc: StorageError) -> Verdict:
    outcome = Outcome.RETRYABLE if exc.retryable else Outcome.FATAL
    return Verdict(outcome, str(exc), type(exc).__name__)


@dataclass
class BatchPlan:
    """A batch after its checks: verdicts already known, and the records cleared for deletion."""

    size: int
    rows: dict[str, ChunkRecord]
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    deletable: dict[int, PendingDeleteLedgerInfo] = field(default_factory=dict)


class DeletionExecutor:
    """Turns a batch of pending deletes into one verdict each, deleting what the checks allow.

    Re-running it on the same records is harmless: a copy already gone is ``ALREADY_GONE``.
    """

    def __init__(self, store: MetadataStore, bindings: StorageBindings, mark_timeout_s: float = 300.0,
                 retry: RetryPolicy | None = None) -> None:
        self._store = store
        self._bindings = bindings
        self._mark_timeout_ms = int(mark_timeout_s * 1000)
        self._retry = retry or RetryPolicy()

    def execute(self, infos: Sequence[PendingDeleteLedgerInfo]) -> list[Verdict]:
        """One verdict per record, in input order: :meth:`prepare`, :meth:`delete`, :meth:`finish`.

        The three steps may run on different threads for different batches (the metadata store
        serialises its connection): rows only ever disappear between them, which turns a later
        record of the same copy into ``ALREADY_GONE``, never into a wrong delete.
        """
        plan = self.prepare(infos)
        return self.finish(plan, self.delete(plan))

    def prepare(self, infos: Sequence[PendingDeleteLedgerInfo]) -> BatchPlan:
        """The checks before any delete: one metadata query for the batch, then a decision per record."""
        rows = self._store.get_chunks({info.chunk_name for info in infos})
        marks = self._marks(infos, rows)
        clock = Clock(now_ms=int(time.time() * 1000), mark_timeout_ms=self._mark_timeout_ms)
        plan = BatchPlan(len(infos), rows)
        for i, info in enumerate(infos):
            decision = judge(info, rows.get(info.chunk_name), marks.get(info.mark_id),
                             self._expected(info), clock)
            if decision is Proceed.CHECK_TAGS:
                decision = self._check_tags(info)
            if isinstance(decision, Verdict):
                plan.verdicts[i] = decision
            else:
                plan.deletable[i] = info
        return plan

    def delete(self, plan: BatchPlan) -> DeleteResults:
        """The storage deletes of a plan, batched per binding; touches no metadata (safe off-thread)."""
        by_binding: dict[str, list[str]] = defaultdict(list)
        for info in plan.deletable.values():
            by_binding[info.storage_binding].append(info.chunk_name)
        results: DeleteResults = {}
        for binding_name, names in by_binding.items():
            for result in self._delete_many(binding_name, list(dict.fromkeys(names))):
                results[(binding_name, result.name)] = result
        return results

    def finish(self, plan: BatchPlan, results: DeleteResults) -> list[Verdict]:
        """Remove the deleted copies from their rows (one transaction); one verdict per record, in order."""
        deletable = plan.deletable
        gone = [info for info in deletable.values() if results[(info.storage_binding, info.chunk_name)].ok]
        cleanup_error = self._drop_copies(gone, plan.rows)
        verdicts = dict(plan.verdicts)
        deleted: Counter[str] = Counter()
        failed: Counter[tuple[str, str]] = Counter()
        for i, info in deletable.items():
            result = results[(info.storage_binding, info.chunk_name)]
            verdicts[i] = self._verdict(result, cleanup_error)
            if verdicts[i].outcome is Outcome.DELETED:
                deleted[info.ledger_type.name] += 1
            elif not result.ok:
                failed[(info.ledger_type.name, verdicts[i].error_class)] += 1
        for ledger_type, count in deleted.items():
            metrics.DELETED.labels(ledger_type).inc(count)
        for (ledger_type, error_class), count in failed.items():
            metrics.DELETE_FAILURES.labels(ledger_type, error_class).inc(count)
        return [verdicts[i] for i in range(plan.size)]

    def _marks(self, infos: Sequence[PendingDeleteLedgerInfo],
               rows: dict[str, ChunkRecord]) -> dict[str, MarkRecord]:
        """The marks of records whose chunk is still active: only they need to know if it committed."""
        ids = {info.mark_id for info in infos if info.chunk_name in rows and rows[info.chunk_name].active}
        found = {}
        for mark_id in ids:
            mark = self._store.get_mark(mark_id)
            if mark is not None:
                found[mark_id] = mark
        return found

    def _expected(self, info: PendingDeleteLedgerInfo) -> ChunkLocation | None:
        if info.storage_binding not in self._bindings:
            return None
        try:
            return self._bindings.get(info.storage_binding).location(info.chunk_name)
        except StorageError:
            return None

    def _check_tags(self, info: PendingDeleteLedgerInfo) -> Verdict | Proceed:
        """No chunk row: the object's own tags must name the record's owner (PIP-186's metadata check)."""
        binding = self._bindings.get(info.storage_binding)
        try:
            chunk_info = self._retry.retrying(StorageError)(binding.get_info, info.chunk_name)
        except ChunkNotFoundError:
            return Verdict(Outcome.ALREADY_GONE, "no chunk row and no object")
        except StorageError as exc:
            return _error_verdict(exc)
        mismatch = tags_mismatch(info, chunk_info.tags)
        if mismatch:
            return Verdict(Outcome.OWNERSHIP_MISMATCH, mismatch)
        return Proceed.CHECK_TAGS

    def _delete_many(self, binding_name: str, names: list[str]) -> list[DeleteResult]:
        """Batched delete with in-process retries of the keys that failed transiently."""
        binding = self._bindings.get(binding_name)
        final: dict[str, DeleteResult] = {}
        pending = names
        try:
            for attempt in self._retry.retrying(_StillFailing):
                with attempt:
                    started = time.perf_counter()
                    for result in self._delete_attempt(binding.delete_many, pending):
                        final[result.name] = result
                    metrics.DELETE_LATENCY.labels(binding_name).observe(time.perf_counter() - started)
                    pending = [n for n in pending if _transient(final[n])]
                    if pending:
                        raise _StillFailing(f"{len(pending)} keys failed transiently")
        except (_StillFailing, RetryError):
            pass
        return [final[name] for name in names]

    @staticmethod
    def _delete_attempt(delete_many: Callable[[Sequence[str]], list[DeleteResult]],
                        names: list[str]) -> list[DeleteResult]:
        try:
            results = delete_many(names)
        except StorageError as exc:
            # The whole request failed (endpoint down, throttled): every key failed with it.
            return [DeleteResult(name, DeleteOutcome.FAILED, exc) for name in names]
        return results

    def _drop_copies(self, gone: list[PendingDeleteLedgerInfo],
                     rows: dict[str, ChunkRecord]) -> StorageError | None:
        """Remove each deleted copy from its chunk row, and rows left with no copy, in one transaction.

        A row read with a single copy is removed outright; only rows with two copies are re-read
        and rewritten, so a batch costs one query and one delete, not a read per row.
        """
        whole: list[str] = []
        partial: dict[str, set[tuple[str, str | None, str]]] = defaultdict(set)
        for info in gone:
            row = rows.get(info.chunk_name)
            if row is None:
                continue
            if len(row.locations) == 1:
                whole.append(info.chunk_name)
            else:
                partial[info.chunk_name].add((info.storage_binding, info.location.bucket, info.location.key))
        if not whole and not partial:
            return None
        try:
            for attempt in self._retry.retrying(StorageError):
                with attempt:
                    self._drop_copies_once(whole, partial)
        except StorageError as exc:
            log.warning("chunk rows not cleaned after delete (will retry the records): %s", exc)
            return exc
        return None

    def _drop_copies_once(self, whole: list[str], partial: dict[str, set[tuple[str, str | None, str]]]) -> None:
        with self._store.transaction() as txn:
            emptied = list(whole)
            for name, row in txn.get_chunks(partial).items():
                dropped = partial[name]
                left = tuple(loc for loc in row.locations if (loc.binding, loc.bucket, loc.key) not in dropped)
                if left:
                    txn.put_chunk(replace(row, locations=left))
                else:
                    emptied.append(name)
            txn.remove_chunks(emptied)

    @staticmethod
    def _verdict(result: DeleteResult, cleanup_error: StorageError | None) -> Verdict:
        if not result.ok:
            return _error_verdict(result.error or StorageError("delete failed"))
        if cleanup_error is not None:
            return Verdict(Outcome.RETRYABLE, f"deleted, but chunk row cleanup failed: {cleanup_error}",
                           type(cleanup_error).__name__)
        if result.outcome is DeleteOutcome.ALREADY_GONE:
            return Verdict(Outcome.ALREADY_GONE, "object already absent")
        return _DELETED
