"""The audit's decisions as plain values: no server, no store."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from reclaim.cli.audit import metrics_target, parse_grace
from reclaim.deletion.mark import MarkError
from reclaim.deletion.records import pending_deletes
from reclaim.deletion.verify import tags_mismatch
from reclaim.durations import human
from reclaim.exits import Unavailable
from reclaim.schemas.ledger import LedgerType
from reclaim.segments.garbage import PreparedMark
from reclaim.storage.base import StoredObject
from reclaim.storage.chunks import ChunkLocation, ChunkStorage, ChunkTags, Tier, WrittenAs
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord, MarkRecord, MarkState
from reclaim.tools.audit import (
    AuditReport,
    BindingAudit,
    GoneCopy,
    ObjectState,
    OrphanRepair,
    Sample,
    gone_copy,
    object_state,
    orphan_chunk,
    unreachable,
)

TAGS = ChunkTags(component="segment", stream="s/a", segment="s/a/0.#epoch.0", writer_epoch=3)
FS = ChunkLocation("fs-tier2", Tier.TIER2, None, "s/a/0.#epoch.0.E-3-O-0.c")
FS_WRITTEN_AS = WrittenAs.of("fs-tier2", None, FS.key)
S3 = ChunkLocation("s3-tier2", Tier.TIER2, "bucket", "s/a/0.#epoch.0.E-3-O-0.c")
NOW = 1_000_000.0


def row(*locations: ChunkLocation, active: bool = True, mark_id: str | None = None) -> ChunkRecord:
    return ChunkRecord(name=FS.key, segment=TAGS.segment, start_offset=0, length=1, tags=TAGS,
                       locations=locations, active=active, mark_id=mark_id)


@pytest.mark.parametrize(("claim", "modified", "state"), [
    (row(FS), NOW - 10, ObjectState.LIVE),
    (row(FS, active=False, mark_id="m"), NOW - 10, ObjectState.PENDING),
    (row(FS, S3), NOW - 10, ObjectState.LIVE),
    (None, NOW - 3600, ObjectState.ORPHAN),  # exactly the grace old
    (None, NOW - 3599, ObjectState.RECENT),
    (None, NOW + 60, ObjectState.RECENT),  # a storage clock ahead of ours
    (row(S3), NOW - 7200, ObjectState.ORPHAN),  # the row claims another binding's copy only
    (row(S3), NOW - 10, ObjectState.RECENT),
])
def test_an_object_is_live_pending_orphan_or_recent(claim: ChunkRecord | None, modified: float,
                                                    state: ObjectState) -> None:
    assert object_state(claim, "fs-tier2", modified, NOW, grace_s=3600) is state


@pytest.mark.parametrize(("claim", "mark", "state"), [
    (row(FS), None, GoneCopy.MISSING),
    (row(FS), MarkRecord("m", MarkState.COMMITTED, NOW), GoneCopy.MISSING),
    (row(FS, active=False, mark_id="m"), MarkRecord("m", MarkState.COMMITTED, NOW - 3600), GoneCopy.DANGLING),
    (row(FS, active=False, mark_id="m"), MarkRecord("m", MarkState.COMMITTED, NOW - 60), GoneCopy.CLEANING),
    (row(FS, active=False, mark_id="m"), None, GoneCopy.DANGLING),  # no mark on record: its age is unknown
])
def test_a_row_whose_copy_is_gone_is_missing_dangling_or_in_cleanup(claim: ChunkRecord, mark: MarkRecord | None,
                                                                    state: GoneCopy) -> None:
    assert gone_copy(claim, mark, NOW, grace_s=3600) is state


def test_a_location_is_unreachable_when_no_configured_binding_holds_it(tmp_path: Path) -> None:
    fs = FileSystemChunkStorage(tmp_path, name="fs-tier2")
    bindings: dict[str, ChunkStorage] = {"fs-tier2": fs}
    assert unreachable(FS, bindings) is None
    assert unreachable(S3, bindings) == "s3-tier2"
    assert unreachable(ChunkLocation("fs-tier2", Tier.TIER2, "bucket", "k"), bindings) == \
        "fs-tier2 (bucket bucket, TIER2)"
    assert unreachable(ChunkLocation("fs-tier2", Tier.TIER1, None, "k"), bindings) == "fs-tier2 (bucket None, TIER1)"


def test_an_orphans_record_carries_its_tags_so_phase_2_accepts_it() -> None:
    chunk = orphan_chunk(FS, 7, TAGS, FS_WRITTEN_AS)
    assert chunk is not None
    (record,) = pending_deletes(chunk, "mark", 1_000)
    assert (record.chunk_name, record.segment_name, record.topic_name, record.owner_epoch) == \
        (FS.key, TAGS.segment, TAGS.stream, 3)
    assert record.storage_binding == "fs-tier2" and record.ledger_type is LedgerType.OFFLOAD_LEDGER
    assert tags_mismatch(record, TAGS) == "", "phase 2 checks an orphan's record against its object's tags"


def test_an_object_without_reclaim_tags_gets_no_record() -> None:
    assert orphan_chunk(FS, 7, None) is None
    foreign = ChunkTags(component="segment", stream="s/a", segment="s/a/0", writer_epoch=1, application="other")
    assert orphan_chunk(FS, 7, foreign, FS_WRITTEN_AS) is None


def test_an_object_whose_tags_do_not_name_it_gets_no_record() -> None:
    # Phase 2 would refuse these records: an object from before bindings stamped their objects, one
    # written under another name (copied tags, an aliasing name), by another binding or to another bucket.
    assert orphan_chunk(FS, 7, TAGS) is None
    assert orphan_chunk(FS, 7, TAGS, WrittenAs.of("fs-tier2", None, FS.key + "x")) is None
    assert orphan_chunk(FS, 7, TAGS, WrittenAs.of("fs-other", None, FS.key)) is None
    assert orphan_chunk(FS, 7, TAGS, WrittenAs.of("fs-tier2", "bucket", FS.key)) is None


def test_samples_count_everything_and_keep_the_first_names() -> None:
    sample = Sample(limit=2)
    for name in "abc":
        sample.add(name)
    assert (len(sample), sample.names, sample.to_dict()) == (3, ["a", "b"], {"count": 3, "names": ["a", "b"]})
    assert Sample(limit=0).names == []


def test_a_report_is_clean_only_without_orphans_missing_or_dangling_rows() -> None:
    fs, s3 = BindingAudit("fs-tier2"), BindingAudit("s3-tier2")
    for state in (ObjectState.LIVE, ObjectState.PENDING, ObjectState.RECENT, GoneCopy.CLEANING):
        fs.count(state, "x")
    report = AuditReport(60.0, [fs, s3])
    assert report.clean
    s3.count(GoneCopy.MISSING, "m")
    report.unconfigured["old-tier2"] = Sample()
    report.unconfigured["old-tier2"].add("d")
    assert not s3.clean and not report.clean
    assert report.totals() == {"live": 1, "pending": 1, "recent": 1, "cleaning": 1, "orphans": 0, "missing": 1,
                               "dangling": 1}
    document = report.to_dict()
    assert document["bindings"]["s3-tier2"]["missing"] == {"count": 1, "names": ["m"]}
    assert document["unconfigured"] == {"old-tier2": {"count": 1, "names": ["d"]}}
    assert (document["clean"], document["grace_s"]) == (False, 60.0)


@pytest.mark.parametrize(("text", "seconds"), [("3600", 3600), ("90s", 90), ("15m", 900), ("1h", 3600),
                                                ("1.5d", 129600), ("0", 0), (" 2H ", 7200), ("1w", 604800)])
def test_grace_durations(text: str, seconds: float) -> None:
    assert parse_grace(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1h30m", "2y"])
def test_a_grace_that_is_no_duration_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="as a duration"):
        parse_grace(text)


@pytest.mark.parametrize("text", ["-1h", "-5", "inf", "nan"])
def test_a_negative_or_endless_grace_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"must be at least 0s, got '{text}'"):
        parse_grace(text)


def test_durations_are_shown_in_their_largest_exact_unit() -> None:
    assert [human(s) for s in (3600, 90, 900, 86400, 0, 5400, 1.5)] == ["1h", "90s", "15m", "1d", "0s", "90m",
                                                                         "1.5s"]


def test_repair_sends_tagged_orphans_and_reports_the_rest(tmp_path: Path) -> None:
    """Phase 1 is a plain function here, which fails one chunk's send the way a broker that confirms only
    part of a batch does (no real broker refuses one record of a batch on demand); the integration test
    sends through the real one."""
    fs = FileSystemChunkStorage(tmp_path, name="fs-tier2")
    names = [f"s/a/0.#epoch.0.E-3-O-{i}.c" for i in range(3)]
    for name in names:
        fs.create_with_content(name, b"xy", TAGS)
    fs.create_with_content("s/a/untagged", b"", None)
    handed: list[ChunkRecord] = []

    def prepare(chunks: Sequence[ChunkRecord]) -> PreparedMark:
        handed.extend(chunks)
        raise MarkError("one not confirmed", [names[1]])

    sent: list[tuple[str, str]] = []
    repair = OrphanRepair(prepare, on_sent=lambda binding, name: sent.append((binding, name)))
    listed = [StoredObject(name, 2, 0.0) for name in [*names, "s/a/untagged", "s/a/gone-since"]]
    repair(fs, listed)
    assert [c.name for c in handed] == names and all(c.tags == TAGS and c.length == 2 for c in handed)
    assert sent == [("fs-tier2", names[0]), ("fs-tier2", names[2])]
    assert repair.report.sent.names == [names[0], names[2]]
    assert repair.report.failed.names == [names[1]]
    assert repair.report.unattributed.names == ["s/a/untagged"]


def test_a_metrics_file_must_be_a_regular_file_in_an_existing_directory(tmp_path: Path) -> None:
    metrics_target(tmp_path / "reclaim_audit.prom")  # not there yet: created at the end
    (tmp_path / "old.prom").write_text("")
    metrics_target(tmp_path / "old.prom")  # replaced at the end
    device = tmp_path / "device"
    os.mkfifo(device)
    for refused, says in ((device, "not a regular file"), (tmp_path, "not a regular file"),
                          (tmp_path / "no" / "m.prom", "there is no directory")):
        with pytest.raises(Unavailable, match=says):
            metrics_target(refused)
