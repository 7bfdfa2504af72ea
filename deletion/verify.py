"""Phase 2's checks before a delete: valid record, still in use, mark committed, ownership."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from deletion.outcomes import Outcome, Verdict
from deletion.records import LEDGER_TYPES, component_of
from schemas.ledger import PendingDeleteLedgerInfo
from storage.chunks import ChunkLocation, ChunkTags
from storage.metadata import ChunkRecord, MarkRecord, MarkState


class Proceed(enum.Enum):
    """The record may be deleted: on the strength of its chunk row, or once the object's tags match."""

    ROW_CONFIRMS = "row-confirms"
    CHECK_TAGS = "check-tags"


Decision = Verdict | Proceed


@dataclass(frozen=True)
class Clock:
    """The time of a judgement and how long an uncommitted mark may take (both epoch millis)."""

    now_ms: int
    mark_timeout_ms: int


def missing_fields(info: PendingDeleteLedgerInfo) -> list[str]:
    """Essential fields that are empty: a record without them can never be acted on."""
    essentials = {
        "topic_name": info.topic_name, "chunk_name": info.chunk_name, "segment_name": info.segment_name,
        "storage_binding": info.storage_binding, "location.key": info.location.key, "mark_id": info.mark_id,
    }
    return [name for name, value in essentials.items() if not value]


def judge(info: PendingDeleteLedgerInfo, row: ChunkRecord | None, mark: MarkRecord | None,
          expected: ChunkLocation | None, clock: Clock) -> Decision:
    """Decide what to do with ``info`` before touching storage.

    ``row`` is the chunk's metadata row (None when absent), ``mark`` the record of its mark batch,
    ``expected`` where the named binding would keep ``chunk_name`` (None when this worker has no
    such binding).
    """
    missing = missing_fields(info)
    if missing:
        return Verdict(Outcome.INVALID, f"missing {', '.join(missing)}")
    if expected is None:
        return Verdict(Outcome.FATAL, f"unknown storage binding {info.storage_binding!r}", "UnknownBinding")
    if (info.location.key, info.location.bucket) != (expected.key, expected.bucket):
        # A record may only name the object its own chunk name maps to: otherwise a forged record
        # could point an absent chunk's name at a live chunk's object.
        return Verdict(Outcome.OWNERSHIP_MISMATCH, "location is not where the binding keeps this chunk")
    if LEDGER_TYPES[expected.tier] is not info.ledger_type:
        return Verdict(Outcome.OWNERSHIP_MISMATCH, f"{info.ledger_type.name} names a {expected.tier.name} copy")
    if row is None:
        return Proceed.CHECK_TAGS
    mismatch = row_mismatch(info, row)
    if mismatch:
        return Verdict(Outcome.OWNERSHIP_MISMATCH, mismatch)
    if row.active:
        return _still_active(info, mark, clock)
    return Proceed.ROW_CONFIRMS


def _still_active(info: PendingDeleteLedgerInfo, mark: MarkRecord | None, clock: Clock) -> Verdict:
    # PIP-186 publishes before the metadata update; a record read in between must wait, not be dropped.
    committed = mark is not None and mark.state is MarkState.COMMITTED
    if not committed and clock.now_ms - info.created_at < clock.mark_timeout_ms:
        return Verdict(Outcome.MARK_PENDING, "chunk still active; its mark is not committed yet")
    why = "mark committed without this chunk" if committed else "mark never committed"
    return Verdict(Outcome.IN_USE, f"chunk still in the live layout ({why})")


def row_mismatch(info: PendingDeleteLedgerInfo, row: ChunkRecord) -> str:
    """Why ``info``'s owner fields disagree with the chunk row, or ``""`` when they agree."""
    location = (info.storage_binding, info.location.bucket, info.location.key)
    if location not in {(loc.binding, loc.bucket, loc.key) for loc in row.locations}:
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
