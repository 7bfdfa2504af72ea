"""Phase 2's judgement as values: every outcome of the README's table, no server."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reclaim.deletion.facts import Facts, Pending, Policy, Proceed
from reclaim.deletion.outcomes import Outcome, Route, Verdict
from reclaim.deletion.records import pending_deletes
from reclaim.deletion.verify import conclude, judge
from reclaim.schemas.ledger import ChunkLocation as RecordLocation
from reclaim.schemas.ledger import PendingDeleteLedgerInfo
from reclaim.segments.backup import EXPORT_COMPONENT
from reclaim.storage.chunks import ChunkInfo, ChunkLocation, ChunkTags, DeleteOutcome, DeleteResult, Tier, WrittenAs
from reclaim.storage.errors import (
    AccessDeniedError,
    ChunkNotFoundError,
    InvalidChunkNameError,
    MetadataConflictError,
    StorageMisconfiguredError,
    StorageUnavailableError,
)
from reclaim.storage.metadata import ChunkRecord, MarkRecord, MarkState

NOW = 1_800_000_000_000
POLICY = Policy(mark_timeout_ms=300_000)
SEGMENT = "scope/stream/0.#epoch.0"
TAGS = ChunkTags(component="segment", stream="scope/stream", segment=SEGMENT, writer_epoch=1)
NAME = f"{SEGMENT}.E-1-O-0.abc"
PLACE = ChunkLocation("fs-tier2", Tier.TIER2, None, NAME)
WRITTEN_AS = WrittenAs.of("fs-tier2", None, NAME)
ROW = ChunkRecord(name=NAME, segment=SEGMENT, start_offset=0, length=16, tags=TAGS, locations=(PLACE,),
                  active=False, mark_id="m1", version=2)


def record(created_at: int = NOW - 1000, **changes: object) -> PendingDeleteLedgerInfo:
    info = pending_deletes(ROW, "m1", created_at)[0]
    return replace(info, **changes) if changes else info


def facts(**changes: object) -> Facts:
    base = Facts(now_ms=NOW, rows={NAME: ROW}, places={("fs-tier2", NAME): PLACE})
    return replace(base, **changes)


def outcome(info: PendingDeleteLedgerInfo, seen: Facts, first_failure_ms: int | None = None) -> Outcome | Proceed:
    decision = judge(Pending(info, first_failure_ms), seen, POLICY)
    return decision.outcome if isinstance(decision, Verdict) else decision


def test_an_inactive_row_that_names_the_copy_clears_the_delete() -> None:
    assert outcome(record(), facts()) is Proceed.DELETE


def test_no_row_and_no_object_is_already_gone() -> None:
    seen = facts(rows={}, objects={("fs-tier2", NAME): ChunkNotFoundError("gone")})
    assert outcome(record(), seen) is Outcome.ALREADY_GONE


def test_a_missing_bucket_is_fatal_never_already_gone() -> None:
    seen = facts(rows={}, objects={("fs-tier2", NAME): StorageMisconfiguredError("NoSuchBucket")})
    verdict = judge(Pending(record()), seen, POLICY)
    assert isinstance(verdict, Verdict)
    assert (verdict.outcome, verdict.route) == (Outcome.FATAL, Route.DLQ)


def test_no_row_judges_by_the_objects_own_tags() -> None:
    mine = facts(rows={}, objects={("fs-tier2", NAME): ChunkInfo(NAME, 16, TAGS, written_as=WRITTEN_AS)})
    assert outcome(record(), mine) is Proceed.DELETE
    other = replace(TAGS, stream="scope/other")
    theirs = facts(rows={}, objects={("fs-tier2", NAME): ChunkInfo(NAME, 16, other, written_as=WRITTEN_AS)})
    assert outcome(record(), theirs) is Outcome.OWNERSHIP_MISMATCH
    untagged = facts(rows={}, objects={("fs-tier2", NAME): ChunkInfo(NAME, 16, None)})
    assert outcome(record(), untagged) is Outcome.OWNERSHIP_MISMATCH


@pytest.mark.parametrize(("written_as", "says"), [
    # Tags copied from another object, or the same bytes reached under an aliasing name.
    (WrittenAs.of("fs-tier2", None, NAME.upper()), "another chunk name"),
    (WrittenAs.of("fs-tier2", None, "scope/stream/0.#epoch.0.E-1-O-0.abd"), "another chunk name"),
    (WrittenAs.of("fs-other", None, NAME), "storage binding 'fs-other'"),
    (WrittenAs.of("fs-tier2", "bucket", NAME), "bucket 'bucket'"),
    # Written before bindings stamped their objects: refused, left for the audit.
    (None, "written before chunk names were tagged"),
])
def test_no_row_needs_the_object_written_as_the_very_chunk_named(written_as: WrittenAs | None, says: str) -> None:
    seen = facts(rows={}, objects={("fs-tier2", NAME): ChunkInfo(NAME, 16, TAGS, written_as=written_as)})
    verdict = judge(Pending(record()), seen, POLICY)
    assert isinstance(verdict, Verdict)
    assert verdict.outcome is Outcome.OWNERSHIP_MISMATCH and says in verdict.reason


def test_a_forged_record_never_deletes_a_layout_export() -> None:
    # A layout export has no chunk row and carries its segment's tags, as an orphan chunk does: a
    # record naming it with those owner fields once deleted it (the backup `import_layout` restores from).
    export = f"_reclaim_layouts/{SEGMENT}/1800000000000-0a1b2c3d.json"
    forged = record(chunk_name=export, location=RecordLocation(key=export, bucket=None))
    tags = replace(TAGS, component=EXPORT_COMPONENT)
    seen = facts(rows={}, places={("fs-tier2", export): replace(PLACE, key=export)},
                 objects={("fs-tier2", export): ChunkInfo(export, 512, tags)})
    verdict = judge(Pending(forged), seen, POLICY)
    assert isinstance(verdict, Verdict)
    assert verdict.outcome is Outcome.OWNERSHIP_MISMATCH and "layout export" in verdict.reason


@pytest.mark.parametrize("change", [
    {"segment_name": "scope/stream/1.#epoch.0"},
    {"location": RecordLocation(key=NAME + "x", bucket=None)},
    {"owner_epoch": 7},
    {"topic_name": "scope/other"},
])
def test_owner_fields_that_disagree_with_the_row_are_a_mismatch(change: dict[str, object]) -> None:
    assert outcome(record(**change), facts()) is Outcome.OWNERSHIP_MISMATCH


def test_a_record_naming_another_tier_is_a_mismatch() -> None:
    from reclaim.schemas.ledger import LedgerType
    assert outcome(record(ledger_type=LedgerType.LEDGER), facts()) is Outcome.OWNERSHIP_MISMATCH


def test_the_row_decides_ownership_after_a_merge() -> None:
    merged = replace(ROW, segment="scope/stream/0")
    assert outcome(record(), facts(rows={NAME: merged})) is Outcome.OWNERSHIP_MISMATCH


def test_missing_essentials_are_invalid() -> None:
    assert outcome(record(mark_id=""), facts()) is Outcome.INVALID
    assert outcome(record(chunk_name=""), facts()) is Outcome.INVALID


def test_an_active_chunk_waits_for_its_mark_then_is_in_use() -> None:
    live = facts(rows={NAME: replace(ROW, active=True)})
    assert outcome(record(created_at=NOW - 1000), live) is Outcome.MARK_PENDING
    assert outcome(record(created_at=NOW - 1000), live, first_failure_ms=NOW - 300_001) is Outcome.IN_USE
    committed = replace(live, marks={"m1": MarkRecord("m1", MarkState.COMMITTED, NOW / 1000)})
    assert outcome(record(), committed) is Outcome.IN_USE
    pending = replace(live, marks={"m1": MarkRecord("m1", MarkState.PENDING, NOW / 1000)})
    assert outcome(record(), pending) is Outcome.MARK_PENDING


def test_a_record_from_the_future_is_dead_lettered_not_retried_forever() -> None:
    live = facts(rows={NAME: replace(ROW, active=True)})
    ten_years = 10 * 365 * 24 * 3600 * 1000
    verdict = judge(Pending(record(created_at=NOW + ten_years)), live, POLICY)
    assert isinstance(verdict, Verdict)
    assert (verdict.outcome, verdict.route, verdict.error_class) == (Outcome.FATAL, Route.DLQ, "FutureRecord")


def test_a_publisher_clock_running_late_does_not_time_a_mark_out_at_first_sight() -> None:
    # Phase 1's host six minutes behind: its record, read before its mark commits (the race PIP-186
    # leaves open), once counted as past the mark timeout, was judged in use and acked; the mark then
    # committed and the retired chunk was left with no record to delete it.
    live = facts(rows={NAME: replace(ROW, active=True)})
    late = record(created_at=NOW - 360_000)
    assert outcome(late, live) is Outcome.MARK_PENDING
    assert outcome(late, live, first_failure_ms=NOW - 10_000) is Outcome.MARK_PENDING
    assert outcome(late, live, first_failure_ms=NOW - 300_000) is Outcome.IN_USE


def test_a_slightly_early_clock_waits_from_the_first_failure_not_from_created_at() -> None:
    live = facts(rows={NAME: replace(ROW, active=True)})
    ahead = record(created_at=NOW + 60_000)  # within the clock skew phase 2 tolerates
    assert outcome(ahead, live) is Outcome.MARK_PENDING
    assert outcome(ahead, live, first_failure_ms=NOW - 299_000) is Outcome.MARK_PENDING
    assert outcome(ahead, live, first_failure_ms=NOW - 300_000) is Outcome.IN_USE


def test_an_unknown_binding_is_fatal() -> None:
    seen = facts(places={})
    verdict = judge(Pending(record(storage_binding="nowhere")), seen, POLICY)
    assert isinstance(verdict, Verdict)
    assert verdict.outcome is Outcome.FATAL and "unknown storage binding" in verdict.reason


def test_a_corrupt_chunk_name_is_not_reported_as_an_unknown_binding() -> None:
    bad = facts(places={("fs-tier2", NAME): InvalidChunkNameError("chunk name has a '..' component")})
    verdict = judge(Pending(record()), bad, POLICY)
    assert isinstance(verdict, Verdict)
    assert verdict.outcome is Outcome.FATAL
    assert "invalid chunk name" in verdict.reason and "binding" not in verdict.reason
    assert verdict.error_class == "InvalidChunkNameError"


@pytest.mark.parametrize(("error", "expected"), [
    (StorageUnavailableError("throttled"), Outcome.RETRYABLE),
    (AccessDeniedError("denied"), Outcome.FATAL),
])
def test_storage_errors_are_retried_or_dead_lettered_by_kind(error: Exception, expected: Outcome) -> None:
    seen = facts(rows={}, objects={("fs-tier2", NAME): error})
    assert outcome(record(), seen) is expected
    failed = DeleteResult(NAME, DeleteOutcome.FAILED, error)  # type: ignore[arg-type]
    assert conclude(failed, None).outcome is expected


def test_a_failed_row_cleanup_retries_the_deleted_record() -> None:
    verdict = conclude(DeleteResult(NAME, DeleteOutcome.DELETED),
                       MetadataConflictError("moved", key=NAME, expected=2, actual=3))
    assert verdict.outcome is Outcome.RETRYABLE and verdict.route is Route.RETRY
    assert verdict.error_class == "MetadataConflictError"
