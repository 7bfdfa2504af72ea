"""Phase 2's judgement of offloaded copies and of the copies offloads detach, as values: no server."""

from __future__ import annotations

from dataclasses import replace

from reclaim.deletion.facts import Facts, Pending, Policy, Proceed
from reclaim.deletion.outcomes import Outcome, Verdict
from reclaim.deletion.records import pending_deletes
from reclaim.deletion.verify import judge
from reclaim.schemas.ledger import LedgerType, PendingDeleteLedgerInfo
from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier, offload_object_name, offloaded_copy_of
from reclaim.storage.metadata import ChunkRecord, MarkRecord, MarkState, OffloadRecord, OffloadState

NOW = 1_800_000_000_000
POLICY = Policy(mark_timeout_ms=300_000)
SEGMENT = "scope/stream/0.#epoch.0"
TAGS = ChunkTags(component="segment", stream="scope/stream", segment=SEGMENT, writer_epoch=1)
NAME = f"{SEGMENT}.E-1-O-0.abc"
COPY = "0123456789abcdef0123456789abcdef"
OBJECT = offload_object_name(COPY, NAME)
HOT = ChunkLocation("fs-tier1", Tier.TIER1, None, NAME)
COLD = ChunkLocation("s3-tier2", Tier.TIER2, "b", "prefix/" + OBJECT, COPY)
SWITCHED = ChunkRecord(name=NAME, segment=SEGMENT, start_offset=0, length=16, tags=TAGS, locations=(COLD, HOT),
                       version=3)
RELEASED = replace(SWITCHED, locations=(COLD,), version=4)
OFFLOAD = OffloadRecord(copy=COPY, chunk=NAME, segment=SEGMENT, tags=TAGS, source=HOT, target=COLD, length=16,
                        state=OffloadState.RELEASED, created_at=1.0, deadline=2.0, switched_at=1.5, mark_id="rel",
                        version=4)
PLACES = {("fs-tier1", NAME): HOT, ("s3-tier2", OBJECT): replace(COLD, copy=None)}


def hot_record(mark: str) -> PendingDeleteLedgerInfo:
    return pending_deletes(replace(SWITCHED, locations=(HOT,)), mark, NOW - 1000)[0]


def cold_record(mark: str) -> PendingDeleteLedgerInfo:
    return pending_deletes(replace(SWITCHED, locations=(COLD,)), mark, NOW - 1000)[0]


def judged(info: PendingDeleteLedgerInfo, **facts: object) -> Outcome | Proceed:
    seen = replace(Facts(now_ms=NOW, places=PLACES), **facts)
    decision = judge(Pending(info), seen, POLICY)
    return decision.outcome if isinstance(decision, Verdict) else decision


def test_an_offloaded_copys_record_carries_its_own_uuid_and_names_its_object() -> None:
    info = cold_record("m")
    assert info.ledger_type is LedgerType.OFFLOAD_LEDGER and info.offload_context is not None
    assert info.offload_context.uuid.hex == COPY
    assert Pending(info).copy == ("s3-tier2", OBJECT)
    assert offloaded_copy_of(OBJECT) == (COPY, NAME) and offloaded_copy_of(NAME) is None
    # A copy written in place keeps the uuid derived from its mark and key, and its chunk name as its object.
    assert Pending(hot_record("m")).copy == ("fs-tier1", NAME)


def test_the_released_hot_copy_is_deleted_under_the_release_mark_only() -> None:
    offloads = {("fs-tier1", NAME): OFFLOAD}
    assert judged(hot_record("rel"), rows={NAME: RELEASED}, offloads=offloads) is Proceed.DELETE
    committed = {"other": MarkRecord("other", MarkState.COMMITTED, 1.0)}
    assert judged(hot_record("other"), rows={NAME: RELEASED}, offloads=offloads, marks=committed) is Outcome.IN_USE
    # Before the release commits (the offload still switched, its mark chosen): the record waits.
    waiting = {("fs-tier1", NAME): replace(OFFLOAD, state=OffloadState.SWITCHED)}
    assert judged(hot_record("rel"), rows={NAME: SWITCHED}, offloads=waiting) is Outcome.MARK_PENDING


def test_a_record_for_a_copy_its_live_row_lists_is_judged_by_the_row_not_the_offload() -> None:
    offloads = {("s3-tier2", OBJECT): replace(OFFLOAD, state=OffloadState.SWITCHED)}
    committed = {"m": MarkRecord("m", MarkState.COMMITTED, 1.0)}
    assert judged(cold_record("m"), rows={NAME: SWITCHED}, offloads=offloads, marks=committed) is Outcome.IN_USE
    retired = replace(SWITCHED, active=False, mark_id="m")
    assert judged(cold_record("m"), rows={NAME: retired}, offloads=offloads) is Proceed.DELETE


def test_an_abandoned_copy_is_deleted_under_its_offloads_mark_with_or_without_the_chunk_row() -> None:
    abandoned = replace(OFFLOAD, state=OffloadState.ABANDONED, mark_id="ab")
    offloads = {("s3-tier2", OBJECT): abandoned}
    live = replace(SWITCHED, locations=(HOT,))
    assert judged(cold_record("ab"), rows={NAME: live}, offloads=offloads) is Proceed.DELETE
    assert judged(cold_record("ab"), rows={}, offloads=offloads) is Proceed.DELETE
    # A cancelled offload whose copy is not handed over yet: its record waits for the mark, then is acked.
    cancelled = {("s3-tier2", OBJECT): replace(abandoned, state=OffloadState.CANCELLED)}
    assert judged(cold_record("ab"), rows={}, offloads=cancelled) is Outcome.MARK_PENDING


def test_a_record_whose_key_is_not_its_copys_object_is_refused() -> None:
    moved = replace(cold_record("ab"), location=replace(cold_record("ab").location, key="prefix/" + NAME))
    abandoned = {("s3-tier2", OBJECT): replace(OFFLOAD, state=OffloadState.ABANDONED, mark_id="ab")}
    places = PLACES | {("s3-tier2", NAME): replace(COLD, key="prefix/other", copy=None)}
    assert judged(moved, rows={}, offloads=abandoned, places=places) is Outcome.OWNERSHIP_MISMATCH


def test_an_offloaded_copy_nothing_names_is_judged_by_its_objects_tags_as_an_orphan() -> None:
    from reclaim.storage.chunks import ChunkInfo, WrittenAs
    from reclaim.storage.errors import ChunkNotFoundError

    live = replace(SWITCHED, locations=(HOT,))  # the chunk lives on tier-1; no row or offload names the copy
    written = WrittenAs.of("s3-tier2", "b", OBJECT)
    mine = {("s3-tier2", OBJECT): ChunkInfo(OBJECT, 16, TAGS, written_as=written)}
    assert judged(cold_record("any"), rows={NAME: live}, objects=mine) is Proceed.DELETE
    other = {("s3-tier2", OBJECT): ChunkInfo(OBJECT, 16, TAGS, written_as=WrittenAs.of("s3-tier2", "b", NAME))}
    assert judged(cold_record("any"), rows={NAME: live}, objects=other) is Outcome.OWNERSHIP_MISMATCH
    gone = {("s3-tier2", OBJECT): ChunkNotFoundError("gone")}
    assert judged(cold_record("any"), rows={NAME: live}, objects=gone) is Outcome.ALREADY_GONE
    # The hot copy itself, under a mark that never retired it, is still judged by its live row.
    assert judged(hot_record("any"), rows={NAME: live}) is Outcome.MARK_PENDING


def test_a_released_hot_copys_record_delivered_again_after_its_delete_is_already_gone() -> None:
    from reclaim.storage.chunks import ChunkInfo, WrittenAs
    from reclaim.storage.errors import ChunkNotFoundError

    gone = {("fs-tier1", NAME): ChunkNotFoundError("gone")}
    assert judged(hot_record("rel"), rows={NAME: RELEASED}, objects=gone) is Outcome.ALREADY_GONE
    # Its object still there and nothing detaching it under this mark: refused, never deleted.
    there = {("fs-tier1", NAME): ChunkInfo(NAME, 16, TAGS, written_as=WrittenAs.of("fs-tier1", None, NAME))}
    assert judged(hot_record("rel"), rows={NAME: RELEASED}, objects=there) is Outcome.OWNERSHIP_MISMATCH
