"""Phase 2's judgement, pure: every check before a delete, and the verdict after it.

:func:`judge` decides one record from the batch's :class:`~reclaim.deletion.facts.Facts` — valid record,
known binding and chunk name, ownership (by the chunk row, or by the object's own tags when there is
no row), still in use, mark committed — and :func:`conclude` turns a delete's result into a verdict.
Neither does any I/O, so both are tested as plain values.
"""

from __future__ import annotations

from reclaim.deletion.facts import Facts, Pending, Policy, Proceed, lists_copy
from reclaim.deletion.outcomes import Outcome, Verdict, stack_summary
from reclaim.deletion.ownership import LEDGER_TYPE_OF_TIER_NAME, component_of
from reclaim.schemas.ledger import PendingDeleteLedgerInfo
from reclaim.segments.backup import EXPORT_COMPONENT
from reclaim.storage.chunks import ChunkInfo, ChunkLocation, ChunkTags, DeleteResult
from reclaim.storage.errors import ChunkNotFoundError, InvalidChunkNameError, StorageError, StorageMisconfiguredError
from reclaim.storage.metadata import ChunkRecord, MarkRecord, MarkState, OffloadRecord

Decision = Verdict | Proceed

DELETED = Verdict(Outcome.DELETED)


def missing_fields(info: PendingDeleteLedgerInfo) -> list[str]:
    """Essential fields that are empty: a record without them can never be acted on."""
    if (info.topic_name and info.chunk_name and info.segment_name and info.storage_binding and info.location.key
            and info.mark_id):
        return []  # every record of a batch passes through here: the list is built only for one that fails
    essentials = {
        "topic_name": info.topic_name, "chunk_name": info.chunk_name, "segment_name": info.segment_name,
        "storage_binding": info.storage_binding, "location.key": info.location.key, "mark_id": info.mark_id,
    }
    return [name for name, value in essentials.items() if not value]


def error_verdict(exc: StorageError) -> Verdict:
    """A storage error as a verdict: retried when the error says it may pass, dead-lettered otherwise."""
    return Verdict(Outcome.RETRYABLE if exc.retryable else Outcome.FATAL, str(exc), type(exc).__name__,
                   stack_summary(exc))


def judge(pending: Pending, facts: Facts, policy: Policy) -> Decision:
    """Decide what to do with one record before touching storage."""
    info = pending.info
    missing = missing_fields(info)
    if missing:
        return Verdict(Outcome.INVALID, f"missing {', '.join(missing)}")
    ahead_ms = info.created_at - facts.now_ms
    if ahead_ms > policy.max_clock_skew_ms:
        return Verdict(Outcome.FATAL, f"created_at lies {ahead_ms // 1000} s in the future", "FutureRecord")
    place = facts.places.get(pending.copy)
    if not isinstance(place, ChunkLocation):
        return _unplaceable(info, place)
    if (info.location.key, info.location.bucket) != (place.key, place.bucket):
        # A record may only name the object its own chunk name maps to: otherwise a forged record
        # could point an absent chunk's name at a live chunk's object.
        return Verdict(Outcome.OWNERSHIP_MISMATCH, "location is not where the binding keeps this chunk")
    if LEDGER_TYPE_OF_TIER_NAME[place.tier._name_] is not info.ledger_type:
        return Verdict(Outcome.OWNERSHIP_MISMATCH, f"{info.ledger_type.name} names a {place.tier.name} copy")
    row = facts.rows.get(info.chunk_name)
    listed = lists_copy(row, info)
    if not listed:
        # A copy no row lists: one an offload made or released is its offload's to judge; an offloaded copy
        # nothing names is judged by its object, as a chunk with no row is.
        offload = facts.offloads.get(pending.copy) if facts.offloads else None
        if offload is not None:
            return _by_offload(pending, offload, facts, policy)
        if pending.copy[1] != info.chunk_name:
            return _by_object(pending, facts, place)
        if row is not None and isinstance(facts.objects.get(pending.copy), ChunkNotFoundError):
            # A copy its live row no longer lists, gone: a released hot copy's record delivered again after
            # its delete. Nothing to do; one whose object is there stays a mismatch below.
            return Verdict(Outcome.ALREADY_GONE, "its chunk row does not list this copy, and there is no object")
    if row is None:
        return _by_object(pending, facts, place)
    mismatch = row_mismatch(info, row, listed=listed)
    if mismatch:
        return Verdict(Outcome.OWNERSHIP_MISMATCH, mismatch)
    if row.active:
        return still_active(pending, facts.marks.get(info.mark_id), facts.now_ms, policy)
    return Proceed.DELETE


def _unplaceable(info: PendingDeleteLedgerInfo, why: StorageError | None) -> Verdict:
    if isinstance(why, InvalidChunkNameError):
        return Verdict(Outcome.FATAL, f"invalid chunk name: {why}", type(why).__name__, stack_summary(why))
    if why is None or isinstance(why, StorageMisconfiguredError):
        return Verdict(Outcome.FATAL, f"unknown storage binding {info.storage_binding!r}", "UnknownBinding")
    return error_verdict(why)


def _by_object(pending: Pending, facts: Facts, place: ChunkLocation) -> Decision:
    """No chunk row: the object's own tags must name the record's owner (PIP-186's metadata check), and
    the object must have been written as this very chunk of this binding and bucket.

    An object written before bindings stamped what they wrote (:class:`~reclaim.storage.chunks.WrittenAs`) is
    refused like an untagged one: its tags cannot tell it from another object reached under this name,
    so it is left for the audit to report rather than risk a live chunk's bytes.
    """
    seen = facts.objects.get(pending.copy)
    if isinstance(seen, ChunkNotFoundError):
        return Verdict(Outcome.ALREADY_GONE, "no chunk row and no object")
    if isinstance(seen, StorageError):
        return error_verdict(seen)
    if seen is None:
        return Verdict(Outcome.RETRYABLE, "the object was not looked up", "NotLookedUp")
    if seen.tags is not None and seen.tags.component == EXPORT_COMPONENT:
        # A segment's layout export is no chunk and never garbage; its tags name a segment like a
        # chunk's do, and its component maps to SEGMENT like any unknown one.
        return Verdict(Outcome.OWNERSHIP_MISMATCH, "the object is a layout export, not a chunk")
    mismatch = tags_mismatch(pending.info, seen.tags) or written_as_mismatch(pending.copy[1], seen, place)
    return Verdict(Outcome.OWNERSHIP_MISMATCH, mismatch) if mismatch else Proceed.DELETE


def _by_offload(pending: Pending, offload: OffloadRecord, facts: Facts, policy: Policy) -> Verdict | Proceed:
    """A copy its chunk's row does not list, made or released by an offload: deleted only when the offload
    detached it under this very record's mark (released after its switch, or abandoned after a cancel)."""
    info = pending.info
    detached = offload.detached
    if (detached is not None and offload.mark_id == info.mark_id and detached.binding == info.storage_binding
            and (detached.key, detached.bucket) == (info.location.key, info.location.bucket)):
        return Proceed.DELETE
    mark = facts.marks.get(info.mark_id)
    committed = mark is not None and mark.state is MarkState.COMMITTED
    started = facts.now_ms if pending.first_failure_ms is None else pending.first_failure_ms
    if not committed and facts.now_ms - started < policy.mark_timeout_ms:
        return Verdict(Outcome.MARK_PENDING, f"an offload holds this copy ({offload.state.value}); "
                                             "its mark is not committed yet")
    return Verdict(Outcome.IN_USE, f"an offload holds this copy ({offload.state.value}) under another mark")


def still_active(pending: Pending, mark: MarkRecord | None, now_ms: int, policy: Policy) -> Verdict:
    """The chunk is in the live layout: wait for an uncommitted mark, at most the mark timeout.

    PIP-186 publishes before the metadata update; a record read in between must wait, not be
    dropped. The wait runs from phase 2's first failure on the record (now, when this is the first),
    on phase 2's own clock: ``created_at`` is the publisher's clock, and one running behind by more
    than the timeout would have a record read before its mark commits judged in use at first sight.
    """
    committed = mark is not None and mark.state is MarkState.COMMITTED
    started = now_ms if pending.first_failure_ms is None else pending.first_failure_ms
    if not committed and now_ms - started < policy.mark_timeout_ms:
        return Verdict(Outcome.MARK_PENDING, "chunk still active; its mark is not committed yet")
    why = "mark committed without this chunk" if committed else "mark never committed"
    return Verdict(Outcome.IN_USE, f"chunk still in the live layout ({why})")


def row_mismatch(info: PendingDeleteLedgerInfo, row: ChunkRecord, *, listed: bool | None = None) -> str:
    """Why ``info``'s owner fields disagree with the chunk row, or ``""`` when they agree."""
    if not (lists_copy(row, info) if listed is None else listed):
        return "the chunk row has no copy at this location"
    if row.segment != info.segment_name:
        # The row, not the write-time tag, says who owns a chunk: a merged transaction chunk
        # belongs to its parent segment from the merge on.
        return f"chunk belongs to segment {row.segment!r}, not {info.segment_name!r}"
    return tags_mismatch(info, row.tags, check_segment=False)


def tags_mismatch(info: PendingDeleteLedgerInfo, tags: ChunkTags | None, check_segment: bool = True) -> str:
    """Why ``info`` disagrees with a chunk's ownership tags, or ``""`` when they agree."""
    if tags is None:
        return "the object carries no ownership tags"
    # Messages are formatted only for a failed check: every record of a batch passes through here.
    if tags.application != "reclaim":
        return f"application tag {tags.application!r}"
    if tags.stream != info.topic_name:
        return f"stream tag {tags.stream!r} != {info.topic_name!r}"
    if check_segment and tags.segment != info.segment_name:
        return f"segment tag {tags.segment!r} != {info.segment_name!r}"
    if component_of(tags.component) is not info.ledger_component:
        return f"component tag {tags.component!r}"
    if info.owner_epoch is not None and tags.writer_epoch != info.owner_epoch:
        return f"writer epoch tag {tags.writer_epoch} != {info.owner_epoch}"
    return ""


def written_as_mismatch(name: str, seen: ChunkInfo, place: ChunkLocation) -> str:
    """Why the object found for a record is not the copy it names (``name``: the chunk's name, or an offloaded
    copy's object name), or ``""`` when it is."""
    if seen.written_as is None:
        return ("the object's tags do not name it (written before chunk names were tagged); "
                "left for the audit")
    return seen.written_as.mismatch(place.binding, place.bucket, name)


def conclude(result: DeleteResult, cleanup_error: StorageError | None) -> Verdict:
    """The verdict of a copy cleared for deletion whose delete failed, or whose row cleanup did.

    A delete and cleanup that both succeeded are concluded by
    :meth:`~reclaim.deletion.executor.DeletionExecutor.finish`: ``deleted`` for the record whose cleanup
    removed the copy from its row, ``already-gone`` for any other.
    """
    if not result.ok:
        return error_verdict(result.error or StorageError("delete failed"))
    if cleanup_error is not None:
        return Verdict(Outcome.RETRYABLE, f"deleted, but chunk row cleanup failed: {cleanup_error}",
                       type(cleanup_error).__name__)
    return DELETED
