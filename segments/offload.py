"""Offload (PIP-186's ``Offload-Ledger``): copy a sealed chunk from its hot binding to a tier-2 binding, switch
its reads there in one compare-and-set, and hand the hot copy to phase 1 after a grace period.

The protocol (``docs/concepts/offload.md``), each step idempotent and each a point a crash may stop at:

1. **intent** — one metadata transaction records the offload before the first byte moves: the chunk, a new
   copy id, the target binding and key (``_offload/<copy>/<chunk>``, never shared by two offloads) and the
   deadline by which the switch must commit. The chunk must be active, sealed (it will not grow) and have
   one copy.
2. **upload** — the bytes go to the target as an exclusive create, tagged as the chunk. A copy already there
   from an earlier try is kept when it is whole (its length and what the binding wrote it as match).
   The offload is then ``UPLOADED``.
3. **switch** — one transaction, a compare-and-set on the chunk's row: the row, still active and still
   holding only the source copy, lists the target copy first (reads go there) and the source second. A
   row retired, removed or changed meanwhile is never switched: the offload is ``CANCELLED`` instead.
4. **release** — once ``release_after_s`` has passed since the switch (readers had the grace period to
   move), the source copy is published as a ``Ledger`` pending delete under a mark chosen once (kept on the
   offload before the publish); one transaction then drops it from the row and commits the mark. Phase 2
   deletes it, finds it detached under that mark, and removes the offload.

A retirement (truncation, retention, deletion) of a chunk with an offload on its way cancels it in the
retiring transaction (:meth:`~reclaim.storage.metadata.MetadataTransaction.cancel_offloads`). A cancelled
offload, or one past its deadline unswitched, is **reaped**: its copy, finished or not, is published as an
``Offload-Ledger`` pending delete under a new mark, committed with the offload ``ABANDONED``, and phase 2
deletes it. So a crash anywhere leaves a finished offload or a copy its offload row names, never an object
nothing names.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from prometheus_client import Counter

from reclaim.errors import ReclaimError
from reclaim.segments.garbage import PreparedMark, new_mark_id
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkHandle, ChunkLocation, ChunkStorage, offload_object_name
from reclaim.storage.errors import ChunkAlreadyExistsError, MetadataConflictError, StorageError
from reclaim.storage.metadata import (
    DETACHED_STATES,
    OPEN_STATES,
    ChunkRecord,
    MarkRecord,
    MarkState,
    MetadataStore,
    MetadataTransaction,
    OffloadRecord,
    OffloadState,
    chunk_chain,
)

logger = logging.getLogger(__name__)

OFFLOAD_STEPS = Counter("reclaim_offload_steps_total",
                        "Offload steps this process completed: intent, uploaded, switched, cancelled (before its "
                        "switch: late, or the chunk changed), released (hot copy to phase 1), abandoned (an "
                        "unswitched copy to phase 1)", ["step"])
OFFLOAD_BYTES = Counter("reclaim_offload_bytes_total", "Bytes this process uploaded to offload targets")
_COUNTED_STEPS = frozenset(("intent", "uploaded", "switched", "released"))
for _step in (*sorted(_COUNTED_STEPS), "cancelled", "abandoned"):
    OFFLOAD_STEPS.labels(_step)  # every step from 0, so rate() sees its first increase

CrashHook = Callable[[str], None]

#: How long an offload may take from its intent to its switch before it is cancelled.
UPLOAD_WITHIN_S = 600.0
#: How long after the switch the hot copy is kept, so readers that planned a read on it finish
#: (Pulsar's ``managedLedgerOffloadDeletionLagMs``, 4 h there by default).
RELEASE_AFTER_S = 4 * 3600.0
#: How long past its deadline an unswitched offload is left before it is reaped: an upload started just
#: before the deadline has this long to end, so a copy is not deleted while its bytes still arrive.
REAP_MARGIN_S = 60.0


class MarkPublisher(Protocol):
    """Phase 1's publish of a mark's records (:meth:`~reclaim.deletion.mark.LedgerDeletionService.prepare`)."""

    def prepare(self, chunks: Sequence[ChunkRecord], *, mark_id: str | None = None) -> PreparedMark: ...


class OffloadRefused(Exception):
    """A chunk that cannot be offloaded now; ``reason`` says why in a few words."""

    def __init__(self, chunk: str, reason: str) -> None:
        super().__init__(f"chunk {chunk}: {reason}")
        self.chunk = chunk
        self.reason = reason


@dataclass(frozen=True)
class OffloadReport:
    """What one pass did: chunks switched to the target, offloads cancelled, and chunks left as they were."""

    switched: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    """(chunk, reason) of each chunk the pass left alone."""


class Offloader:
    """Runs the offload protocol over one metadata store.

    ``target`` is the tier-2 binding copies go to; ``bindings`` finds every source copy's binding (the hot
    one). ``deletions`` is phase 1's :class:`~reclaim.deletion.mark.LedgerDeletionService` (its ``prepare``
    publishes a mark's records and confirms them). ``crash_hook`` is called with each step's name as the
    step is reached, for tests that stop a process there.
    """

    def __init__(self, store: MetadataStore, bindings: StorageBindings, target: ChunkStorage,
                 deletions: MarkPublisher, *, upload_within_s: float = UPLOAD_WITHIN_S,
                 release_after_s: float = RELEASE_AFTER_S, reap_margin_s: float = REAP_MARGIN_S,
                 clock: Callable[[], float] = time.time, crash_hook: CrashHook | None = None) -> None:
        self.store = store
        self.bindings = bindings
        self.target = target
        self.deletions = deletions
        self.upload_within_s = upload_within_s
        self.release_after_s = release_after_s
        self.reap_margin_s = reap_margin_s
        self.clock = clock
        self.crash_hook = crash_hook
        if target.name not in bindings:
            bindings.register(target)

    def _step(self, name: str) -> None:
        if name in _COUNTED_STEPS:
            OFFLOAD_STEPS.labels(name).inc()
        if self.crash_hook is not None:
            self.crash_hook(name)

    # --- steps 1 to 3: one chunk ------------------------------------------------------------------

    def offload(self, chunk: str) -> OffloadRecord:
        """Offload ``chunk`` to the target: intent, upload, switch. Returns the offload as it ended (SWITCHED,
        or CANCELLED when the chunk left the layout meanwhile); :class:`OffloadRefused` when it cannot start."""
        return self.finish(self.intend(chunk))

    def intend(self, chunk: str) -> OffloadRecord:
        """Step 1: record the intent, in one transaction, before any byte moves."""
        now = self.clock()
        copy = uuid.uuid4().hex
        with self.store.transaction() as txn:
            row = txn.get_chunk(chunk)
            refusal = self._refusal(txn, row, chunk)
            if refusal:
                raise OffloadRefused(chunk, refusal)
            assert row is not None
            try:
                target = replace(self.target.location(offload_object_name(copy, chunk)), copy=copy)
            except StorageError as exc:
                raise OffloadRefused(chunk, f"no key for its copy on {self.target.name}: {exc}") from exc
            intent = txn.put_offload(OffloadRecord(
                copy=copy, chunk=chunk, segment=row.segment, tags=row.tags, source=row.locations[0], target=target,
                length=row.length, state=OffloadState.INTENT, created_at=now, deadline=now + self.upload_within_s))
        logger.info("offload intent chunk=%s copy=%s target=%s", chunk, copy, self.target.name)
        self._step("intent")
        return intent

    def _refusal(self, txn: MetadataTransaction, row: ChunkRecord | None, chunk: str) -> str:
        if row is None or not row.active:
            return "not in a live layout"
        if len(row.locations) != 1:
            return "has a copy on two bindings already"
        if row.locations[0].binding == self.target.name:
            return f"is on {self.target.name} already"
        if row.locations[0].binding not in self.bindings:
            return f"its binding {row.locations[0].binding!r} is not configured"
        segment = txn.get_segment(row.segment)
        if segment is None or segment.deleted:
            return "its segment is gone"
        if segment.last_chunk == chunk and not segment.sealed:
            return "may still grow (the last chunk of an unsealed segment)"
        if any(o.state in OPEN_STATES or o.state is OffloadState.SWITCHED for o in txn.offloads_of([chunk])):
            return "an offload of it is on its way"
        return ""

    def finish(self, offload: OffloadRecord) -> OffloadRecord:
        """Steps 2 and 3 of an offload recorded before (a new one, or one a crash left): upload, then switch."""
        if offload.state is OffloadState.INTENT:
            offload = self._upload(offload)
        if offload.state is OffloadState.UPLOADED:
            offload = self._switch(offload)
        return offload

    def _upload(self, offload: OffloadRecord) -> OffloadRecord:
        """Step 2: the copy's bytes on the target, then the offload UPLOADED (or CANCELLED past its deadline)."""
        if self.clock() >= offload.deadline:
            return self._cancel(offload, "its deadline passed before the upload")
        source = self.bindings.for_location(offload.source)
        data = source.read(ChunkHandle(offload.source.key, read_only=True), 0, offload.length)
        self._step("read")
        name = offload_object_name(offload.copy, offload.chunk)
        try:
            self.target.create_with_content(name, data, offload.tags)
        except ChunkAlreadyExistsError:
            self._keep_or_replace(offload, name, data)
        OFFLOAD_BYTES.inc(offload.length)
        self._step("uploaded")
        if self.clock() >= offload.deadline:
            return self._cancel(offload, "its deadline passed during the upload")
        with self.store.transaction() as txn:
            return txn.put_offload(replace(offload, state=OffloadState.UPLOADED))

    def _keep_or_replace(self, offload: OffloadRecord, name: str, data: bytes) -> None:
        """An earlier try's copy: kept when whole, else written again (only this offload writes its key)."""
        info = self.target.get_info(name)
        written_as = info.written_as
        if (info.length == offload.length and written_as is not None
                and not written_as.mismatch(self.target.name, self.target.bucket, name)):
            return
        self.target.delete(ChunkHandle(name, read_only=False))
        self.target.create_with_content(name, data, offload.tags)

    def _switch(self, offload: OffloadRecord) -> OffloadRecord:
        """Step 3: one compare-and-set on the chunk's row puts the target copy first; never on a row retired,
        removed or changed meanwhile (the offload is cancelled then)."""
        with self.store.transaction() as txn:
            current = txn.get_offload(offload.copy)
            if current is None:
                raise MetadataConflictError(f"offload {offload.copy} is gone", key=offload.copy,
                                            expected=offload.version, actual=0)
            if current.state is not OffloadState.UPLOADED:
                return current  # cancelled by a retirement, or switched by another offloader
            row = txn.get_chunk(offload.chunk)
            late = self.clock() >= current.deadline  # the reaper may hand its copy to phase 2 from now on
            if (late or row is None or not row.active or row.locations != (offload.source,)
                    or row.length != offload.length):
                cancelled = txn.put_offload(replace(current, state=OffloadState.CANCELLED))
                _cancelled(offload, "past its deadline" if late else "the chunk left its layout or changed")
                return cancelled
            txn.put_chunk(replace(row, locations=(offload.target, offload.source)))
            switched = txn.put_offload(replace(current, state=OffloadState.SWITCHED,
                                               switched_at=self.clock()))
        logger.info("offload switched chunk=%s copy=%s", offload.chunk, offload.copy)
        self._step("switched")
        return switched

    def _cancel(self, offload: OffloadRecord, why: str) -> OffloadRecord:
        with self.store.transaction() as txn:
            current = txn.get_offload(offload.copy)
            if current is None or current.state not in OPEN_STATES:
                return current or offload
            cancelled = txn.put_offload(replace(current, state=OffloadState.CANCELLED))
        _cancelled(offload, why)
        return cancelled

    # --- many chunks -------------------------------------------------------------------------------

    def offload_segment(self, segment: str) -> OffloadReport:
        """Offload every chunk of ``segment`` that can be (sealed, one copy, not on the target)."""
        record = self.store.get_segment(segment)
        if record is None or record.deleted:
            return OffloadReport()
        return self.offload_chunks(c.name for c in chunk_chain(record.first_chunk, self.store.list_chunks(segment)))

    def offload_chunks(self, chunks: Iterable[str]) -> OffloadReport:
        return _pass((chunk, functools.partial(self.offload, chunk)) for chunk in chunks)

    def resume(self, offloads: Sequence[OffloadRecord] | None = None) -> OffloadReport:
        """Finish every offload a crash or a failure left between its intent and its switch, while its
        deadline allows (the reaper takes the rest). ``offloads``: those to look at (default every one)."""
        return _pass((o.chunk, functools.partial(self.finish, o)) for o in self._all(offloads)
                     if o.state in OPEN_STATES)

    def _all(self, offloads: Sequence[OffloadRecord] | None = None) -> Sequence[OffloadRecord]:
        return every_offload(self.store) if offloads is None else offloads

    # --- step 4 and the reaper: copies to phase 1 ------------------------------------------------------

    def release_due(self, offloads: Sequence[OffloadRecord] | None = None, *,
                    release_after_s: float | None = None) -> list[str]:
        """Step 4 for every switched offload past its grace period (``release_after_s``, default the
        offloader's): the source copy through phase 1 as a ``Ledger`` pending delete, dropped from the row with
        its mark committed. The chunks released."""
        now = self.clock()
        lag = self.release_after_s if release_after_s is None else release_after_s
        due = [o for o in self._all(offloads)
               if o.state is OffloadState.SWITCHED and (o.switched_at or 0) + lag <= now]
        return [o.chunk for o in due if self._handing_over(self._release, o)]

    @staticmethod
    def _handing_over(step: Callable[[OffloadRecord], bool], offload: OffloadRecord) -> bool:
        """``step(offload)``, a failure to publish or commit logged and left for the next pass."""
        try:
            return step(offload)
        except (ReclaimError, MetadataConflictError) as exc:
            logger.warning("offload of chunk %s (copy %s): its copy's pending delete not handed over, "
                           "tried again next pass: %s", offload.chunk, offload.copy, exc)
            return False

    def _release(self, offload: OffloadRecord) -> bool:
        row = self.store.get_chunk(offload.chunk)
        if row is None or not row.active or row.locations != (offload.target, offload.source):
            return False  # retired meanwhile: its own mark names both copies (the retire removed the offload)
        offload = self._with_mark(offload)
        prepared = self.deletions.prepare([replace(row, locations=(offload.source,))], mark_id=offload.mark_id)
        self._step("release-published")
        with self.store.transaction() as txn:
            current = txn.get_offload(offload.copy)
            fresh = txn.get_chunk(offload.chunk)
            if (current is None or current.version != offload.version or fresh is None or not fresh.active
                    or fresh.locations != row.locations or prepared.expired()):
                return False  # the next pass publishes the same mark's records again, then commits it
            txn.put_chunk(replace(fresh, locations=(offload.target,)))
            txn.put_offload(replace(current, state=OffloadState.RELEASED))
            txn.put_mark(MarkRecord(prepared.mark_id, MarkState.COMMITTED, self.clock()))
        logger.info("offload released chunk=%s copy=%s mark=%s", offload.chunk, offload.copy, prepared.mark_id)
        self._step("released")
        return True

    def _with_mark(self, offload: OffloadRecord) -> OffloadRecord:
        return with_mark(self.store, offload)

    def reap(self, offloads: Sequence[OffloadRecord] | None = None) -> list[str]:
        """Every cancelled offload, and every unswitched one past its deadline and the reap margin: its copy
        through phase 1 as an ``Offload-Ledger`` pending delete, the offload ABANDONED with its mark. The
        copies handed over."""
        now = self.clock()
        reaped: list[str] = []
        for offload in self._all(offloads):
            late = offload.state in OPEN_STATES and now >= offload.deadline + self.reap_margin_s
            if offload.state is OffloadState.CANCELLED or late:
                if self._handing_over(self._abandon, offload):
                    reaped.append(offload.copy)
        return reaped

    def _abandon(self, offload: OffloadRecord) -> bool:
        return abandon(self.store, self.deletions.prepare, offload, clock=self.clock, step=self._step)

    def offloads(self) -> list[OffloadRecord]:
        """Every offload row, in copy order (``reclaim offload status``)."""
        return every_offload(self.store)


def _cancelled(offload: OffloadRecord, why: str) -> None:
    OFFLOAD_STEPS.labels("cancelled").inc()
    logger.info("offload cancelled chunk=%s copy=%s: %s", offload.chunk, offload.copy, why)


def copies_of(offloads: Sequence[OffloadRecord]) -> dict[tuple[str, str | None, str], OffloadRecord]:
    """Each offload by the (binding, bucket, key) of the copy it detached, for those that detached one."""
    found: dict[tuple[str, str | None, str], OffloadRecord] = {}
    for offload in offloads:
        location: ChunkLocation | None = offload.detached
        if location is not None:
            found[(location.binding, location.bucket, location.key)] = offload
    return found


def _pass(work: Iterable[tuple[str, Callable[[], OffloadRecord]]]) -> OffloadReport:
    """Run each chunk's offload step, sorting how each ended: switched, cancelled, or left (refused, or stopped
    by a failure: the intent stays, and the next pass finishes it or the reaper deletes its copy)."""
    switched: list[str] = []
    cancelled: list[str] = []
    skipped: list[tuple[str, str]] = []
    for chunk, step in work:
        try:
            ended = step()
        except OffloadRefused as exc:
            skipped.append((chunk, exc.reason))
            continue
        except (StorageError, MetadataConflictError) as exc:
            skipped.append((chunk, f"stopped: {exc}"))
            continue
        (switched if ended.state is OffloadState.SWITCHED else cancelled).append(chunk)
    return OffloadReport(tuple(switched), tuple(cancelled), tuple(skipped))


def every_offload(store: MetadataStore, page: int = 1000) -> list[OffloadRecord]:
    """Every offload row of ``store``, in copy order, read a page at a time."""
    found: list[OffloadRecord] = []
    after = ""
    while True:
        batch = store.offloads_after(after, page)
        found.extend(batch)
        if len(batch) < page:
            return found
        after = batch[-1].copy


def with_mark(store: MetadataStore, offload: OffloadRecord) -> OffloadRecord:
    """The offload with the mark its detached copy's pending delete goes under, chosen once and kept before
    the records are published: a pass stopped between the publish and the commit is finished by the next
    under the same mark, so no record is left of a mark that never commits."""
    if offload.mark_id is not None:
        return offload
    with store.transaction() as txn:
        return txn.put_offload(replace(offload, mark_id=new_mark_id()))


def abandon(store: MetadataStore, prepare: Callable[..., PreparedMark], offload: OffloadRecord, *,
            clock: Callable[[], float] = time.time, step: CrashHook | None = None) -> bool:
    """Hand an offload's copy to phase 1 (the reaper's work, and the audit's ``--repair``).

    The offload is cancelled if it was not; its copy is published (``prepare``: phase 1's, taking ``mark_id``)
    as an ``Offload-Ledger`` pending delete under its mark; then the offload is ABANDONED and the mark
    committed in one transaction. False when the offload moved on meanwhile (switched, or handed over by
    another process) or the publish came too late to commit."""
    if offload.state is OffloadState.SWITCHED or offload.state in DETACHED_STATES:
        return False
    if offload.state is not OffloadState.CANCELLED:
        with store.transaction() as txn:  # past its deadline: cancelled first, so it never switches
            offload = txn.put_offload(replace(offload, state=OffloadState.CANCELLED))
    offload = with_mark(store, offload)
    copy = ChunkRecord(name=offload.chunk, segment=offload.segment, start_offset=0, length=offload.length,
                       tags=offload.tags, locations=(offload.target,), active=False)
    prepared = prepare([copy], mark_id=offload.mark_id)
    if step is not None:
        step("abandon-published")
    with store.transaction() as txn:
        current = txn.get_offload(offload.copy)
        if current is None or current.version != offload.version or prepared.expired():
            return False
        txn.put_offload(replace(current, state=OffloadState.ABANDONED))
        txn.put_mark(MarkRecord(prepared.mark_id, MarkState.COMMITTED, clock()))
    OFFLOAD_STEPS.labels("abandoned").inc()
    logger.info("offload abandoned chunk=%s copy=%s mark=%s", offload.chunk, offload.copy, prepared.mark_id)
    if step is not None:
        step("abandoned")
    return True
