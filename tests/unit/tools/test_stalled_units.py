"""What ``reclaim deletions stalled`` counts as stalled, and what its report says, without a server."""

from __future__ import annotations

from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.metadata import ChunkRecord, MarkRecord, MarkState
from reclaim.tools.stalled import STALLED_AFTER_S, StalledReport, stalled

NOW = 1_800_000_000.0


def row(active: bool, mark_id: str | None = "m") -> ChunkRecord:
    return ChunkRecord(name="s/0.E-1-O-0.x", segment="s/0", start_offset=0, length=1,
                       tags=ChunkTags(component="segment", stream="s", segment="s/0", writer_epoch=1),
                       locations=(ChunkLocation("fs-tier2", Tier.TIER2, None, "s/0.E-1-O-0.x"),), active=active,
                       mark_id=mark_id)


def mark(age_s: float) -> MarkRecord:
    return MarkRecord("m", MarkState.COMMITTED, NOW - age_s)


def test_a_retired_chunk_is_stalled_once_its_mark_is_older_than_the_threshold() -> None:
    assert not stalled(row(active=False), mark(60), NOW, STALLED_AFTER_S)
    assert not stalled(row(active=False), mark(STALLED_AFTER_S - 1), NOW, STALLED_AFTER_S)
    assert stalled(row(active=False), mark(STALLED_AFTER_S), NOW, STALLED_AFTER_S)
    assert stalled(row(active=False), mark(60), NOW, 30)


def test_a_live_chunk_is_never_stalled_and_a_retired_one_without_its_mark_on_record_always_is() -> None:
    assert not stalled(row(active=True), mark(10 * STALLED_AFTER_S), NOW, STALLED_AFTER_S)
    assert not stalled(row(active=True), None, NOW, STALLED_AFTER_S)
    # Phase 1 records the mark in the transaction that retires the row: without it nothing is coming.
    assert stalled(row(active=False), None, NOW, STALLED_AFTER_S)
    assert stalled(row(active=False, mark_id=None), None, NOW, STALLED_AFTER_S)


def test_the_report_counts_by_binding_and_lists_at_most_the_limit() -> None:
    report = StalledReport(STALLED_AFTER_S, limit=1)
    report.add("fs-tier2", [row(active=False), row(active=False)])
    report.add("s3-tier2", [row(active=False)])
    report.rows = 7
    doc = report.to_dict()
    assert (report.count, doc["stalled"], doc["rows_checked"]) == (3, 3, 7)
    assert doc["bindings"]["fs-tier2"] == {"count": 2, "names": ["s/0.E-1-O-0.x"]}
