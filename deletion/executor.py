"""Phase 2 on one polled batch, in three steps that may run on different threads for different batches.

1. :meth:`DeletionExecutor.prepare`: gather the batch's facts (one I/O step) and judge every record
   (pure) — a :class:`BatchPlan`;
2. :meth:`DeletionExecutor.delete`: the storage deletes the plan allows, batched per binding;
3. :meth:`DeletionExecutor.finish`: remove the deleted copies from their rows (one transaction) and
   conclude one verdict per record.

Rows only ever disappear between the steps, which turns a later record of the same copy into
``already-gone``, never into a wrong delete. Re-running a batch is harmless.

A copy with a row counts ``deleted`` once across every worker of the group: for the record whose row
cleanup removed it from its row. The transaction that removes it says so (the row removed, or the copy
dropped from a row of two), so a second record of the copy, on this worker or another, in this attempt
or after a crash, finds it gone and is ``already-gone``, whatever the binding answers for a missing key
(S3's ``DeleteObjects`` reports one deleted). A copy with no row was judged by a HEAD of its object,
which also says whether it was there.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from tenacity import RetryError

from reclaim.deletion import metrics
from reclaim.deletion.facts import CopyKey, Facts, Pending, Policy, Proceed, lists_copy
from reclaim.deletion.outcomes import Outcome, Verdict
from reclaim.deletion.prefetch import Prefetcher
from reclaim.deletion.retrying import RetryPolicy
from reclaim.deletion.verify import DELETED, Decision, conclude, error_verdict, judge
from reclaim.logs import LogLimiter
from reclaim.schemas.ledger import LedgerType, PendingDeleteLedgerInfo
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkInfo, DeleteOutcome, DeleteResult, object_name
from reclaim.storage.errors import MetadataError, StorageError
from reclaim.storage.metadata import MetadataStore

__all__ = ["BatchPlan", "DeleteResults", "DeletionExecutor", "RetryPolicy"]

log = logging.getLogger(__name__)

DeleteResults = dict[tuple[str, str], DeleteResult]
"""The storage deletes of a plan: the result per (binding name, chunk name)."""

_Copies = dict[str, set[tuple[str, str | None, str]]]

DUPLICATE_DELETE = Verdict(Outcome.ALREADY_GONE, "deleted by another record of the same chunk copy")
CHANGED_SINCE_CHECKED = Verdict(Outcome.ALREADY_GONE, "the object checked is gone (deleted, or written again since): "
                                "the conditional delete kept whatever the name holds now")


class _StillFailing(Exception):
    """Some keys of a batched delete failed with a retryable error; try them again."""

    retryable = True


@dataclass(frozen=True)
class BatchPlan:
    """A batch after its checks: the records, the facts they were judged on, one decision each."""

    batch: tuple[Pending, ...]
    facts: Facts
    decisions: tuple[Decision, ...]

    @property
    def deletable(self) -> list[tuple[int, Pending]]:
        """The records cleared for deletion, with their index in the batch."""
        return [(i, p) for i, (p, d) in enumerate(zip(self.batch, self.decisions, strict=True))
                if d is Proceed.DELETE]


class DeletionExecutor:
    """Turns a batch of pending deletes into one verdict each, deleting what the checks allow."""

    def __init__(self, store: MetadataStore, bindings: StorageBindings, mark_timeout_s: float = 300.0,
                 retry: RetryPolicy | None = None) -> None:
        self._store = store
        self._bindings = bindings
        self._policy = Policy(mark_timeout_ms=int(mark_timeout_s * 1000))
        self._retry = retry or RetryPolicy()
        self._prefetch = Prefetcher(store, bindings, self._retry)

    def execute(self, infos: Sequence[PendingDeleteLedgerInfo]) -> list[Verdict]:
        """One verdict per record, in input order: :meth:`prepare`, :meth:`delete`, :meth:`finish`."""
        plan = self.prepare([Pending(info) for info in infos])
        return self.finish(plan, self.delete(plan))

    def prepare(self, batch: Sequence[Pending]) -> BatchPlan:
        """The checks before any delete: the batch's facts gathered at once, then a decision per record.

        A metadata store that cannot answer (down, restarting, busy) decides nothing: every record of
        the batch gets the store's error as its verdict, retried in a later tier when it may pass."""
        now_ms = int(time.time() * 1000)
        try:
            facts = self._retry.retrying(MetadataError)(self._prefetch.gather, batch, now_ms)
        except MetadataError as exc:
            _log_store_failure(exc, len(batch))
            verdict = error_verdict(exc)
            return BatchPlan(tuple(batch), Facts(now_ms=now_ms), tuple(verdict for _ in batch))
        return BatchPlan(tuple(batch), facts, tuple(judge(p, facts, self._policy) for p in batch))

    def delete(self, plan: BatchPlan) -> DeleteResults:
        """The storage deletes of a plan, batched per binding; touches no metadata (safe off-thread).

        A copy judged by its object (no row lists it) is deleted conditionally where the binding can: only
        the version whose tags were checked, so an object written again under the name since is kept."""
        by_binding: dict[str, list[str]] = defaultdict(list)
        versions: dict[str, dict[str, str]] = defaultdict(dict)
        objects = plan.facts.objects
        for _, pending in plan.deletable:
            binding_name, chunk_name = pending.copy
            by_binding[binding_name].append(chunk_name)
            if objects:
                seen = objects.get(pending.copy)
                if isinstance(seen, ChunkInfo) and seen.version is not None:
                    versions[binding_name][chunk_name] = seen.version
        results: DeleteResults = {}
        for binding_name, names in by_binding.items():
            for result in self._delete_many(binding_name, list(dict.fromkeys(names)), versions.get(binding_name)):
                results[(binding_name, result.name)] = result
        return results

    def finish(self, plan: BatchPlan, results: DeleteResults) -> list[Verdict]:
        """Remove the deleted copies from their rows (one transaction); one verdict per record, in order.

        Batches must finish in the order they were prepared (the pipeline's cleanup thread). A copy with a
        row is ``deleted`` for the record whose cleanup removed it from the row, and ``already-gone`` for
        any other (this batch's, an earlier batch's, another worker's); a copy with no row is ``deleted``
        once when its HEAD found it, ``already-gone`` otherwise.
        """
        deletable = plan.deletable
        removed, cleanup_error = self._drop_copies([p for _, p in deletable if results[p.copy].ok], plan.facts)
        concluded: dict[int, Verdict] = {}
        deleted: dict[str, int] = {}  # by the type's name (hashed in C), named once a batch, not once a record
        failed: Counter[tuple[LedgerType, str]] = Counter()
        headed: set[CopyKey] = set()  # copies with no row counted "deleted" by this batch
        facts = plan.facts
        for i, pending in deletable:
            copy = pending.copy
            result = results[copy]
            if result.outcome is DeleteOutcome.CHANGED:
                concluded[i] = CHANGED_SINCE_CHECKED
                continue
            if result.ok and cleanup_error is None:
                # Nearly every record of a batch ends here: its copy's row removed by this batch's cleanup.
                if copy in removed:
                    removed.discard(copy)  # one "deleted" a copy; another record of it in this batch is not
                    concluded[i] = DELETED
                    name = pending.info.ledger_type._name_
                    deleted[name] = deleted.get(name, 0) + 1
                elif copy in headed or copy not in facts.objects:
                    concluded[i] = DUPLICATE_DELETE  # its row gone already: another record removed it
                else:
                    # No row: judged by its object's HEAD, which found it (a missing one is already gone).
                    headed.add(copy)
                    concluded[i] = DELETED
                    name = pending.info.ledger_type._name_
                    deleted[name] = deleted.get(name, 0) + 1
                continue
            # A failed delete or a failed cleanup: never "deleted".
            verdict = concluded[i] = conclude(result, cleanup_error)
            if not result.ok:
                failed[(pending.info.ledger_type, verdict.error_class)] += 1
        for type_name, count in deleted.items():
            metrics.DELETED.labels(metrics.snake(type_name)).inc(count)
        for (ledger_type, error_class), count in failed.items():
            metrics.DELETE_FAILURES.labels(metrics.snake(ledger_type.name), metrics.snake(error_class)).inc(count)
        return [concluded[i] if d is Proceed.DELETE else d for i, d in enumerate(plan.decisions)]

    def close(self) -> None:
        self._prefetch.close()

    def _delete_many(self, binding_name: str, names: list[str],
                     versions: dict[str, str] | None = None) -> list[DeleteResult]:
        """Batched delete with in-process retries of the keys that failed transiently."""
        binding = self._bindings.get(binding_name)
        delete_many = binding.delete_many if not versions else partial(binding.delete_many, versions=versions)
        final: dict[str, DeleteResult] = {}
        pending = names
        try:
            for attempt in self._retry.retrying(_StillFailing):
                with attempt:
                    started = time.perf_counter()
                    results = _delete_attempt(delete_many, pending)
                    metrics.DELETE_LATENCY.labels(binding_name).observe(time.perf_counter() - started)
                    retry = [r.name for r in results if r.error is not None and r.error.retryable]
                    if not retry and pending is names:
                        return results  # nearly every batch: one request, every key's result final
                    for result in results:
                        final[result.name] = result
                    pending = retry
                    if pending:
                        raise _StillFailing(f"{len(pending)} keys failed transiently")
        except (_StillFailing, RetryError):
            pass
        return [final[name] for name in names]

    def _drop_copies(self, gone: list[Pending], facts: Facts) -> tuple[set[CopyKey], StorageError | None]:
        """Remove each deleted copy from its chunk row, and rows left with no copy, in one transaction; the
        copies this transaction removed (not those already gone), or the error that stopped it.

        A row read with a single copy is removed outright, the removed names read back by the same
        statement; only rows with two copies are re-read and rewritten, so a batch costs one query and
        one delete, not a read per row.
        """
        whole: dict[str, CopyKey] = {}
        partial: _Copies = defaultdict(set)
        detached: dict[str, CopyKey] = {}  # by offload copy id: copies an offload released or abandoned
        for pending in gone:
            info = pending.info
            row = facts.rows.get(info.chunk_name)
            if row is None or not lists_copy(row, info):
                offload = facts.offloads.get(pending.copy)
                if offload is not None:
                    detached[offload.copy] = pending.copy
                continue
            if len(row.locations) == 1:
                whole[info.chunk_name] = pending.copy
            else:
                partial[info.chunk_name].add((info.storage_binding, info.location.bucket, info.location.key))
        if not whole and not partial and not detached:
            return set(), None
        try:
            for attempt in self._retry.retrying(StorageError):
                with attempt:
                    return self._drop_copies_once(whole, partial, detached), None
        except StorageError as exc:
            log.warning("chunk rows not cleaned after delete (will retry the records): %s", exc)
            return set(), exc
        raise AssertionError("unreachable: the retry loop returns or raises")

    def _drop_copies_once(self, whole: dict[str, CopyKey], partial: _Copies,
                          detached: dict[str, CopyKey]) -> set[CopyKey]:
        removed: set[CopyKey] = set()
        with self._store.transaction() as txn:
            if detached:
                # The offload that detached a copy ends with its delete: the transaction that removes it counts it.
                removed.update(detached[copy] for copy in txn.remove_offloads(detached))
            emptied = list(whole)
            for name, row in txn.get_chunks(partial).items():
                dropped = partial[name]
                left = tuple(loc for loc in row.locations if (loc.binding, loc.bucket, loc.key) not in dropped)
                removed.update((loc.binding, object_name(name, loc)) for loc in row.locations
                               if (loc.binding, loc.bucket, loc.key) in dropped)
                if left:
                    txn.put_chunk(replace(row, locations=left))
                else:
                    emptied.append(name)
            for name in txn.remove_chunks(emptied):
                if name in whole:
                    removed.add(whole[name])
        return removed


def _delete_attempt(delete_many: Callable[[Sequence[str]], list[DeleteResult]],
                    names: list[str]) -> list[DeleteResult]:
    try:
        results = delete_many(names)
    except StorageError as exc:
        # The whole request failed (endpoint down, throttled): every key failed with it.
        return [DeleteResult(name, DeleteOutcome.FAILED, exc) for name in names]
    return results


_STORE_FAILURES = LogLimiter()


def _log_store_failure(exc: MetadataError, records: int) -> None:
    """One line per interval while the metadata store cannot answer, however many batches meet it."""
    held = _STORE_FAILURES.admit(type(exc).__name__)
    if held is not None:
        log.warning("metadata store could not check a batch of %d records (%s); they are retried%s",
                    records, exc, _STORE_FAILURES.suffix(held))
