"""The metadata store on both engines (SQLite and PostgreSQL): versioned records, multi-key CAS transactions,
marks, racing processes; and each engine's own behaviour."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from dataclasses import replace
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.errors import MetadataConflictError, MetadataUnavailableError
from reclaim.storage.metadata import (
    ChunkRecord,
    LeaseRecord,
    MarkRecord,
    MarkState,
    OffloadPolicy,
    SegmentRecord,
    SegmentStatus,
    TopicTruncationEntry,
)
from reclaim.storage.sql_store import SQLiteMetadataStore, SQLMetadataStore, open_metadata_store

TAGS = ChunkTags(component="c", stream="s", segment="s/0", writer_epoch=1)


def chunk(name: str, start: int = 0, length: int = 10, **kwargs: object) -> ChunkRecord:
    locations = (ChunkLocation("fs-tier1", Tier.TIER1, None, name),
                 ChunkLocation("s3-tier2", Tier.TIER2, "b", name))
    return ChunkRecord(name=name, segment="s/0", start_offset=start, length=length, tags=TAGS,
                       locations=locations, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def store(metadata_location: str) -> Iterator[SQLMetadataStore]:
    meta = open_metadata_store(metadata_location)
    yield meta
    meta.close()


def test_records_round_trip_with_versions(store: SQLMetadataStore) -> None:
    with store.transaction() as txn:
        seg = txn.put_segment(SegmentRecord("s/0", stream="s", status=SegmentStatus.SEALED, first_chunk="c0",
                                            last_chunk="c0", owner_epoch=3, max_rolling_length=100))
        stored = txn.put_chunk(chunk("c0", mark_id=None))
    assert seg.version == 1 and stored.version == 1
    assert store.get_segment("s/0") == seg
    assert store.get_segment("s/0").sealed  # type: ignore[union-attr]
    assert store.get_chunk("c0") == stored
    assert len(stored.locations) == 2 and stored.locations[1].bucket == "b"
    assert store.get_segment("nope") is None and store.get_chunk("nope") is None


def test_cas_conflicts(store: SQLMetadataStore) -> None:
    with store.transaction() as txn:
        seg = txn.put_segment(SegmentRecord("s/0"))
    with pytest.raises(MetadataConflictError) as info, store.transaction() as txn:
        txn.put_segment(SegmentRecord("s/0"))  # version 0 means "create", but it exists
    assert info.value.expected == 0 and info.value.actual == 1
    with store.transaction() as txn:
        seg2 = txn.put_segment(replace(seg, length=5))
    with pytest.raises(MetadataConflictError), store.transaction() as txn:
        txn.put_segment(replace(seg, length=9))  # stale: read at version 1, now 2
    with pytest.raises(MetadataConflictError), store.transaction() as txn:
        txn.put_segment(replace(seg2, length=9), expected_version=7)
    assert store.get_segment("s/0") == seg2
    assert seg2.version == 2 and seg2.length == 5


def test_multi_key_transaction_is_all_or_nothing(store: SQLMetadataStore) -> None:
    with store.transaction() as txn:
        seg = txn.put_segment(SegmentRecord("s/0", first_chunk="c0", last_chunk="c0", length=10))
        c0 = txn.put_chunk(chunk("c0"))
        txn.put_mark(MarkRecord("m1", MarkState.PENDING, time.time()))
    seen: list[str] = []
    with pytest.raises(MetadataConflictError), store.transaction() as txn:
        txn.on_commit(lambda: seen.append("committed"))
        txn.put_segment(replace(seg, first_chunk=None, last_chunk=None, start_offset=10))
        txn.put_chunk(replace(c0, active=False, mark_id="m1"))
        assert txn.get_chunk("c0").active is False  # type: ignore[union-attr]
        txn.put_mark(MarkRecord("m1", MarkState.COMMITTED, time.time()))  # stale: version 0
    assert seen == []
    assert store.get_segment("s/0") == seg and store.get_chunk("c0") == c0
    assert store.get_mark("m1").state is MarkState.PENDING  # type: ignore[union-attr]


def test_phase_one_shape_is_one_transaction(store: SQLMetadataStore) -> None:
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord("s/0", first_chunk="c0", last_chunk="c1", length=20))
        txn.put_chunk(chunk("c0", next_chunk="c1"))
        txn.put_chunk(chunk("c1", start=10))
    before = store.transactions_committed
    seen: list[int] = []
    with store.transaction() as txn:
        seg = txn.get_segment("s/0")
        assert seg is not None
        txn.put_segment(replace(seg, first_chunk="c1", start_offset=10, first_chunk_start_offset=10),
                        expected_version=seg.version)
        c0 = txn.get_chunks(["c0"])["c0"]
        txn.put_chunk(replace(c0, active=False, mark_id="m7"), expected_version=c0.version)
        txn.put_mark(MarkRecord("m7", MarkState.COMMITTED, time.time()), expected_version=0)
        txn.on_commit(lambda: seen.append(store.transactions_committed))
    assert store.transactions_committed == before + 1
    assert seen == [before + 1]
    assert [c.name for c in store.list_chunks("s/0")] == ["c1"]
    assert [c.name for c in store.list_chunks("s/0", active_only=False)] == ["c0", "c1"]


def test_get_chunks_batch_and_remove_inactive_only(store: SQLMetadataStore) -> None:
    names = [f"c{i:04d}" for i in range(1200)]
    with store.transaction() as txn:
        for i, name in enumerate(names):
            txn.put_chunk(chunk(name, start=i * 10, active=i % 2 == 0))
    found = store.get_chunks([*names[:700], "missing"])
    assert set(found) == set(names[:700])
    before = store.transactions_committed
    removed = store.remove_chunks(names[:4])
    assert removed == ["c0001", "c0003"], "active rows are live layout and are never removed"
    assert store.transactions_committed == before + 1
    assert set(store.get_chunks(names[:4])) == {"c0000", "c0002"}
    with store.transaction() as txn:
        assert sorted(txn.remove_chunks([*names[4:8], names[5], "missing"])) == ["c0005", "c0007"]
        assert txn.remove_chunks([]) == []
    assert set(store.get_chunks(names[4:8])) == {"c0004", "c0006"}


def test_delete_segment_and_names(store: SQLMetadataStore) -> None:
    with store.transaction() as txn:
        a = txn.put_segment(SegmentRecord("scope/a/0"))
        txn.put_segment(SegmentRecord("scope/b/0"))
        txn.put_segment(SegmentRecord("other/0"))
    assert store.segment_names("scope/") == ["scope/a/0", "scope/b/0"]
    with pytest.raises(MetadataConflictError), store.transaction() as txn:
        txn.delete_segment("scope/a/0", expected_version=5)
    with store.transaction() as txn:
        txn.delete_segment("scope/a/0", expected_version=a.version)
    assert store.get_segment("scope/a/0") is None


def test_store_persists_across_reopen(tmp_path: Path) -> None:
    first = SQLiteMetadataStore(tmp_path / "m.db")
    with first.transaction() as txn:
        txn.put_segment(SegmentRecord("s/0", length=42))
    first.close()
    assert SQLiteMetadataStore(tmp_path / "m.db").get_segment("s/0").length == 42  # type: ignore[union-attr]


def test_locked_database_is_unavailable_not_a_hang(tmp_path: Path) -> None:
    holder = SQLiteMetadataStore(tmp_path / "m.db")
    waiter = SQLiteMetadataStore(tmp_path / "m.db", busy_timeout=0.2)
    with holder.transaction():
        with pytest.raises(MetadataUnavailableError) as info, waiter.transaction():
            pass
    assert info.value.retryable


def _race(location: str, rounds: int, barrier: Barrier, results: Queue[tuple[int, str]]) -> None:
    store = open_metadata_store(location)
    for round_no in range(rounds):
        barrier.wait()
        seen = store.get_segment("s/0")
        assert seen is not None
        barrier.wait()  # both processes now hold the same version
        try:
            with store.transaction() as txn:
                txn.put_segment(replace(seen, length=seen.length + 1))
            results.put((round_no, "won"))
        except MetadataConflictError:
            results.put((round_no, "conflict"))
    store.close()


def test_two_processes_racing_on_one_segment(store: SQLMetadataStore, metadata_location: str) -> None:
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord("s/0"))
    # Spawned, not forked: a forked child would share the parent's pooled PostgreSQL connections.
    ctx = multiprocessing.get_context("spawn")
    barrier, rounds = ctx.Barrier(2), 25
    results: Queue[tuple[int, str]] = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(metadata_location, rounds, barrier, results)) for _ in range(2)]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=30) for _ in range(2 * rounds)]
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    for round_no in range(rounds):
        this_round = sorted(outcome for r, outcome in outcomes if r == round_no)
        assert this_round == ["conflict", "won"], f"round {round_no}: {this_round}"
    final = store.get_segment("s/0")
    assert final is not None and final.length == rounds and final.version == rounds + 1


def test_get_marks_reads_many_in_one_query_per_ten_thousand(tmp_path: Path) -> None:
    store = SQLiteMetadataStore(tmp_path / "meta.db")  # SQLite's own statements are traced
    with store.transaction() as txn:
        stored = {mark_id: txn.put_mark(MarkRecord(mark_id, MarkState.COMMITTED, 1.0 + i))
                  for i, mark_id in enumerate(("m0", "m1", "m2"))}
    wanted = [*(f"absent-{i}" for i in range(10_000)), "m0", "m2", "m0"]
    statements: list[str] = []
    store._sqlite.connection.raw.set_trace_callback(statements.append)
    found = store.get_marks(iter(wanted))
    store._sqlite.connection.raw.set_trace_callback(None)
    assert found == {"m0": stored["m0"], "m2": stored["m2"]}, "absent ids are simply missing"
    assert sum(s.startswith("SELECT") and " FROM marks " in s for s in statements) == 2
    assert store.get_marks([]) == {}


def test_get_marks_in_a_transaction_sees_its_own_writes(store: SQLMetadataStore) -> None:
    with store.transaction() as txn:
        txn.put_mark(MarkRecord("m1", MarkState.PENDING, 1.0))
        assert txn.get_marks(["m1", "m9"]) == {"m1": MarkRecord("m1", MarkState.PENDING, 1.0, 1)}
    assert set(store.get_marks(["m1"])) == {"m1"}


def test_a_single_string_is_refused_where_ids_are_expected(store: SQLMetadataStore) -> None:
    with pytest.raises(TypeError, match="expected an iterable of mark_id values, got the single string 'm1'"):
        store.get_marks("m1")
    with pytest.raises(TypeError, match="expected an iterable of name values"), store.transaction() as txn:
        txn.get_chunks("c0")


def test_transaction_outcomes_are_counted_in_the_metric(store: SQLMetadataStore) -> None:
    def count(outcome: str) -> float:
        return REGISTRY.get_sample_value("reclaim_metadata_transactions_total", {"outcome": outcome}) or 0.0

    committed, conflict, rolled_back = count("committed"), count("conflict"), count("rolled_back")
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord("s/0"))
    with pytest.raises(MetadataConflictError), store.transaction() as txn:
        txn.put_segment(SegmentRecord("s/0"))
    with pytest.raises(KeyError), store.transaction():
        raise KeyError("caller's own error")
    assert count("committed") == committed + 1
    assert count("conflict") == conflict + 1
    assert count("rolled_back") == rolled_back + 1


def test_offloads_round_trip_and_a_retirement_settles_them(store: SQLMetadataStore) -> None:
    from reclaim.storage.metadata import OffloadRecord, OffloadState

    hot = ChunkLocation("fs-tier1", Tier.TIER1, None, "c0")
    copies = ["a" * 32, "b" * 32, "c" * 32]
    cold = [ChunkLocation("s3-tier2", Tier.TIER2, "b", f"_offload/{copy}/c0", copy) for copy in copies]
    states = [OffloadState.INTENT, OffloadState.SWITCHED, OffloadState.RELEASED]
    with store.transaction() as txn:
        stored = [txn.put_offload(OffloadRecord(copy, "c0", "s/0", TAGS, hot, target, 10, state,
                                                1_800_000_000.123456789, 1_800_000_600.987654321,
                                                switched_at=None if state is OffloadState.INTENT else 1.25,
                                                mark_id="m" if state is OffloadState.RELEASED else None))
                  for copy, target, state in zip(copies, cold, states, strict=True)]
        txn.put_chunk(chunk("c0"))
    assert store.get_offload(copies[0]) == stored[0]  # every digit of the times kept
    assert sorted(store.offloads_of(["c0", "nope"]), key=lambda o: o.copy) == stored
    assert store.offloads_after(copies[0], 10) == stored[1:]
    with store.transaction() as txn:
        assert txn.cancel_offloads(["c0"]) == [copies[0]]  # the open one cancelled, the switched one's row gone
    left = {o.copy: o.state for o in store.offloads_of(["c0"])}
    assert left == {copies[0]: OffloadState.CANCELLED, copies[2]: OffloadState.RELEASED}
    with store.transaction() as txn:
        assert txn.remove_offloads(copies) == [copies[2]]  # only a detached copy's offload ends by its delete
    with pytest.raises(MetadataConflictError), store.transaction() as txn:
        txn.put_offload(stored[0])  # stale version


def test_offload_policies_and_leases_are_compare_and_set_rows(store: SQLMetadataStore) -> None:
    with store.transaction() as txn:
        policy = txn.put_offload_policy(OffloadPolicy("scope/a", "s3-tier2", after_bytes=2**62, after_s=0.25))
        txn.put_offload_policy(OffloadPolicy("scope/b", "fs-tier2", after_s=3600, release_after_s=0))
        lease = txn.put_lease(LeaseRecord("offloader/stream/scope/a", "h:1:x", 1, 1_700_000_000.125))
        txn.put_lease(LeaseRecord("offloader/member/h:1:x", "h:1:x", 1, 1_700_000_000.5))
    assert store.offload_policies()[0] == policy and policy.version == 1
    assert [p.stream for p in store.offload_policies()] == ["scope/a", "scope/b"]
    assert store.leases("offloader/stream/") == [lease]
    with pytest.raises(MetadataConflictError), store.transaction() as txn:
        txn.put_lease(LeaseRecord(lease.name, "other", 2, 1.0))  # version 0: create, but it exists
    with store.transaction() as txn:
        assert not txn.delete_lease(lease.name, expected_version=lease.version + 1)
        assert txn.delete_lease(lease.name, expected_version=lease.version)
        assert txn.delete_offload_policy("scope/b") and not txn.delete_offload_policy("scope/b")
    assert [lease.name for lease in store.leases("offloader/")] == ["offloader/member/h:1:x"]
    assert [p.stream for p in store.offload_policies()] == ["scope/a"]


def test_the_topic_truncation_journal_keeps_each_move_once_in_the_order_applied(store: SQLMetadataStore) -> None:
    first = TopicTruncationEntry("orders", "id-1", 0, 0, 40, 1_700_000_000_000, 100.5, "AT_BOUND held by billing",
                                 "retention-job/job-1", "t.topic-truncation[0]@3")
    second = replace(first, partition=1, new_start=30, applied_at=101.25, bytes_freed=4096)
    with store.transaction() as txn:
        assert txn.journal_topic_truncation(first)
        assert txn.journal_topic_truncation(second)
    with store.transaction() as txn:
        assert not txn.journal_topic_truncation(replace(first, applied_at=200.0))  # the same move again
    assert store.topic_truncations("orders") == [first, second]
    assert store.topic_truncations("payments") == []
