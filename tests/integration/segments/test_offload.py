"""Offload from a filesystem tier-1 to S3 tier-2 (moto and MinIO), phase 1 and 2 on the real broker, metadata on
SQLite and PostgreSQL: the protocol's steps, a crash at each of them, and the races Pulsar and Kafka's tiered
storage met (Pulsar #13219, #13238, #9962/#16687, KAFKA-17062)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reclaim.deletion.executor import DeletionExecutor
from reclaim.deletion.mark import LedgerDeletionService
from reclaim.deletion.records import pending_deletes
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher
from reclaim.producers.producer import RecordProducer
from reclaim.producers.topics import TopicNames
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.offload import Offloader, OffloadRefused
from reclaim.segments.offload_policy import StreamLeases
from reclaim.services.offloader import OffloaderService
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import OFFLOAD_PREFIX, Tier, offload_object_name
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import OffloadPolicy, OffloadState
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import open_metadata_store
from reclaim.tools.audit import AuditHooks, OrphanRepair, audit
from tests.support.pipeline import Pipeline, outcomes

pytestmark = pytest.mark.integration

SEGMENT = "scope/stream/0.#epoch.0"
DATA = bytes(range(256)) * 4  # 1024 bytes: ten chunks of 100 and one of 24


class Crash(Exception):
    """Stands in for the offloader's process dying at a step (the next run is a fresh Offloader)."""


@dataclass
class Tiers:
    pipe: Pipeline
    hot: FileSystemChunkStorage
    cold: BaseChunkStorage
    segments: ChunkedSegmentStorage

    def offloader(self, crash_at: str | None = None, **options: float) -> Offloader:
        def crash(step: str) -> None:
            if step == crash_at:
                raise Crash(step)

        return Offloader(self.pipe.store, self.segments.bindings, self.cold, self.pipe.service,
                         crash_hook=crash, **options)  # type: ignore[arg-type]

    def drain(self, until: Callable[[dict[str, int]], bool]) -> dict[str, int]:
        worker = self.pipe.workers[0] if self.pipe.workers else self.pipe.worker(mark_timeout_s=5.0)
        return outcomes(self.pipe.drain(worker, lambda reports: until(outcomes(reports))))

    def hot_names(self) -> set[str]:
        return set(self.hot.iter_names())

    def cold_names(self) -> set[str]:
        return set(self.cold.iter_names())

    def named_by_rows(self) -> tuple[set[str], set[str]]:
        """The object names the chunk rows and the offload rows give, per tier."""
        hot: set[str] = set()
        cold: set[str] = set()
        for row in self.pipe.store.chunks_after("", 100_000):
            for loc in row.locations:
                (hot if loc.tier is Tier.TIER1 else cold).add(
                    row.name if loc.copy is None else f"{OFFLOAD_PREFIX}{loc.copy}/{row.name}")
        for offload in self.pipe.store.offloads_after("", 100_000):
            cold.add(f"{OFFLOAD_PREFIX}{offload.copy}/{offload.chunk}")
        return hot, cold


def open_offload_tiers(kafka_bootstrap: str, topics: TopicNames, metadata_location: str, cold: BaseChunkStorage,
                       tmp_path: Path, group: str) -> Iterator[Tiers]:
    hot = FileSystemChunkStorage(tmp_path / "tier1", name="fs-tier1", tier=Tier.TIER1)
    bindings = StorageBindings([hot, cold])
    pipe = Pipeline(kafka_bootstrap, topics, open_metadata_store(metadata_location), bindings, group)
    segments = ChunkedSegmentStorage(pipe.store, hot, pipe.service, bindings=bindings, max_rolling_length=100)
    segments.create(SEGMENT, stream="scope/stream")
    segments.write(segments.open_write(SEGMENT, epoch=1), 0, DATA)
    yield Tiers(pipe, hot, cold, segments)
    pipe.close()


@pytest.fixture
def tiers(kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], metadata_location: str,
          s3_binding: S3ChunkStorage, tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[Tiers]:
    """Tier-1 on a filesystem, tier-2 on S3 (each S3 server), the metadata on each engine."""
    yield from open_offload_tiers(kafka_bootstrap, kafka_topics(), metadata_location, s3_binding, tmp_path,
                                  unique_name("group"))


@pytest.fixture
def cloud_tiers(kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], cloud_binding: BaseChunkStorage,
                tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[Tiers]:
    """Tier-1 on a filesystem, tier-2 on GCS and on Azure (their emulators), the metadata on SQLite."""
    yield from open_offload_tiers(kafka_bootstrap, kafka_topics(), str(tmp_path / "meta.db"), cloud_binding,
                                  tmp_path, unique_name("group"))


def test_an_offload_switches_reads_to_tier2_and_phase_2_deletes_the_hot_copy_after_the_grace(tiers: Tiers) -> None:
    offload_switch_release_delete(tiers)


def test_offload_onto_gcs_and_azure_switches_releases_and_deletes_the_hot_copy(cloud_tiers: Tiers) -> None:
    offload_switch_release_delete(cloud_tiers)


def offload_switch_release_delete(tiers: Tiers) -> None:
    cold = tiers.cold.name
    chunks = tiers.segments.layout(SEGMENT)
    report = tiers.offloader().offload_segment(SEGMENT)
    # The last chunk of an unsealed segment may still grow: it stays where it is.
    assert report.switched == tuple(c.name for c in chunks[:-1])
    assert report.skipped == ((chunks[-1].name, "may still grow (the last chunk of an unsealed segment)"),)
    switched = tiers.segments.layout(SEGMENT)
    assert all(c.locations[0].binding == cold and c.locations[1].binding == "fs-tier1" for c in switched[:-1])
    assert tiers.segments.read(SEGMENT, 0, len(DATA)) == DATA
    assert tiers.offloader().release_due() == []  # within the grace period nothing is released

    released = tiers.offloader(release_after_s=0).release_due()
    assert sorted(released) == sorted(c.name for c in chunks[:-1])
    assert all(len(c.locations) == 1 and c.locations[0].binding == cold
               for c in tiers.segments.layout(SEGMENT)[:-1])
    assert tiers.segments.read(SEGMENT, 0, len(DATA)) == DATA

    counted = tiers.drain(lambda seen: seen.get("deleted", 0) >= 10)
    assert counted == {"deleted": 10}
    assert tiers.hot_names() == {chunks[-1].name}
    assert tiers.named_by_rows() == ({chunks[-1].name}, tiers.cold_names())
    assert len(tiers.cold_names()) == 10
    assert tiers.pipe.store.offloads_after("", 100) == []  # each offload ended with its hot copy's delete
    assert tiers.segments.read(SEGMENT, 0, len(DATA)) == DATA
    report = audit(tiers.pipe.store, [tiers.hot, tiers.cold], grace_s=0)
    assert report.clean and [(b.binding, b.live) for b in report.bindings] == [("fs-tier1", 1), (cold, 10)]


@pytest.mark.s3_servers("moto")
def test_the_audit_finds_the_copies_nothing_will_delete_and_its_repair_hands_them_to_phase_2(tiers: Tiers) -> None:
    """An intent past its deadline (its copy up, never switched) and a tier-2 object under the offload prefix
    that no row or intent names are orphans; ``--repair`` abandons the first as the reaper does and sends the
    second through phase 1 by its tags; phase 2 deletes both and the audit is clean on both tiers."""
    chunks = tiers.segments.layout(SEGMENT)
    with pytest.raises(Crash):
        tiers.offloader(crash_at="uploaded").offload(chunks[0].name)
    stray = offload_object_name("f" * 32, chunks[1].name)
    tiers.cold.create_with_content(stray, DATA[100:200], chunks[1].tags)
    store, both = tiers.pipe.store, [tiers.hot, tiers.cold]

    now = audit(store, both, grace_s=0).bindings[1]
    assert (now.orphans.names, now.pending) == ([stray], 1)  # the intent holds its copy until its deadline
    (intent,) = store.offloads_after("", 10)
    late = intent.deadline + 61
    repair = OrphanRepair(tiers.pipe.service.prepare, store=store)
    found = audit(store, both, grace_s=0, clock=lambda: late, hooks=AuditHooks(orphans=repair)).bindings[1]
    assert found.orphans.count == 2
    assert sorted(repair.report.sent.names) == sorted([chunks[0].name, chunks[1].name])

    tiers.drain(lambda seen: not tiers.cold_names() and not store.offloads_after("", 1))
    assert audit(store, both, grace_s=0).clean
    assert tiers.segments.read(SEGMENT, 0, len(DATA)) == DATA


def test_a_truncation_mid_offload_cancels_it_and_every_copy_it_made_is_deleted(tiers: Tiers) -> None:
    """Pulsar #13219: retention trimmed a ledger while it was being offloaded. Here the truncation wins:
    the offload is cancelled in the retiring transaction, never switches, and its copy is deleted too."""
    chunks = tiers.segments.layout(SEGMENT)
    with pytest.raises(Crash):
        tiers.offloader(crash_at="uploaded").offload(chunks[0].name)
    assert len(tiers.cold_names()) == 1  # the copy is up, the switch has not happened

    tiers.segments.truncate(SEGMENT, 100)  # retires chunk 0 and cancels its offload
    (offload,) = tiers.pipe.store.offloads_after("", 10)
    assert offload.state is OffloadState.CANCELLED
    resumed = tiers.offloader().resume()
    assert resumed.switched == () and tiers.pipe.store.get_chunk(chunks[0].name).active is False  # type: ignore[union-attr]

    with pytest.raises(Crash):  # the reaper dies between its publish and its commit
        tiers.offloader(crash_at="abandon-published").reap()
    assert tiers.offloader().reap() == [offload.copy]  # the same mark's records again, then the commit
    counted = tiers.drain(lambda seen: sum(seen.values()) >= 3)
    # The hot copy by the truncation's mark, the cold one by the offload's (its record sent twice: once counted).
    assert counted == {"deleted": 2, "already-gone": 1}
    assert chunks[0].name not in tiers.hot_names() and tiers.cold_names() == set()
    assert tiers.pipe.store.offloads_after("", 10) == [] and tiers.pipe.store.get_chunk(chunks[0].name) is None
    assert tiers.segments.read(SEGMENT, 100, len(DATA) - 100) == DATA[100:]


@pytest.mark.s3_servers("moto")
@pytest.mark.parametrize("step", ["intent", "read", "uploaded", "switched", "release-published", "released"])
def test_a_crash_at_any_step_ends_in_one_copy_per_live_chunk_and_no_orphan(tiers: Tiers, step: str) -> None:
    chunks = tiers.segments.layout(SEGMENT)
    crashing = tiers.offloader(crash_at=step, release_after_s=0)
    with pytest.raises(Crash):
        crashing.offload(chunks[0].name)
        crashing.release_due()

    again = tiers.offloader(release_after_s=0)
    again.resume()
    again.release_due()
    again.reap()
    # Whatever the step, the chunk is readable throughout and ends on tier-2 alone.
    assert tiers.segments.read(SEGMENT, 0, len(DATA)) == DATA
    (row,) = [c for c in tiers.segments.layout(SEGMENT) if c.name == chunks[0].name]
    assert [loc.binding for loc in row.locations] == ["s3-tier2"]
    tiers.drain(lambda seen: chunks[0].name not in tiers.hot_names() and not tiers.pipe.store.offloads_after("", 1))
    hot, cold = tiers.named_by_rows()
    assert tiers.hot_names() == hot and tiers.cold_names() == cold and len(cold) == 1


@pytest.mark.s3_servers("moto")
def test_an_upload_that_never_finished_is_reaped_after_its_deadline_and_the_chunk_offloaded_again(
        tiers: Tiers) -> None:
    """KAFKA-17062: a copy started and never committed must neither be read nor leak. The intent past its
    deadline and margin is abandoned; its (absent or partial) copy goes through phase 1; a new offload of
    the chunk makes another copy under another name."""
    chunks = tiers.segments.layout(SEGMENT)
    with pytest.raises(Crash):
        tiers.offloader(crash_at="read").offload(chunks[1].name)
    now = [0.0]
    late = tiers.offloader(upload_within_s=10, reap_margin_s=5, clock=lambda: now[0])
    with pytest.raises(OffloadRefused, match="on its way"):
        late.offload(chunks[1].name)
    (dangling,) = tiers.pipe.store.offloads_after("", 10)
    now[0] = dangling.deadline + 5  # the deadline and the margin have passed
    assert late.reap() == [dangling.copy]
    assert tiers.segments.read(SEGMENT, 0, len(DATA)) == DATA  # still read from tier-1
    counted = tiers.drain(lambda seen: not tiers.pipe.store.offloads_after("", 1))
    # The upload never began: S3's batch delete calls a missing key deleted, and the transaction that ends the
    # offload counts its copy once, as a chunk row's copy is counted.
    assert counted == {"deleted": 1}

    again = tiers.offloader().offload(chunks[1].name)
    assert again.state is OffloadState.SWITCHED and again.copy != dangling.copy
    assert tiers.segments.read(SEGMENT, 0, len(DATA)) == DATA


@pytest.mark.s3_servers("moto")
def test_a_truncation_after_the_switch_or_the_release_deletes_both_copies(tiers: Tiers) -> None:
    chunks = tiers.segments.layout(SEGMENT)
    offloader = tiers.offloader(release_after_s=0)
    offloader.offload(chunks[0].name)
    assert offloader.release_due() == [chunks[0].name]  # chunk 0: its hot copy detached under its own mark
    offloader.offload(chunks[1].name)  # chunk 1: switched, both copies in its row
    tiers.segments.truncate(SEGMENT, 200)
    counted = tiers.drain(lambda seen: seen.get("deleted", 0) >= 4)
    assert counted == {"deleted": 4}
    assert not {c.name for c in chunks[:2]} & tiers.hot_names()
    assert tiers.cold_names() == set() and tiers.pipe.store.offloads_after("", 10) == []
    assert tiers.segments.read(SEGMENT, 200, len(DATA) - 200) == DATA[200:]


@pytest.mark.s3_servers("moto")
def test_deleting_a_segment_deletes_every_copy_its_offloads_made(tiers: Tiers) -> None:
    """Pulsar #9962 and #16687: deleting a topic left its offloaded objects behind, hard to find by name. A
    segment deleted with chunks released, switched and mid-upload leaves no copy on either tier."""
    chunks = tiers.segments.layout(SEGMENT)
    offloader = tiers.offloader(release_after_s=0)
    offloader.offload(chunks[0].name)
    offloader.release_due()  # chunk 0 on tier-2 alone, its hot copy detached
    offloader.offload(chunks[1].name)  # chunk 1 switched
    with pytest.raises(Crash):
        tiers.offloader(crash_at="uploaded").offload(chunks[2].name)  # chunk 2 uploaded, never switched
    tiers.segments.delete(SEGMENT)
    assert offloader.reap() != []
    tiers.drain(lambda seen: not tiers.hot_names() and not tiers.cold_names()
                and not tiers.pipe.store.offloads_after("", 1))
    assert tiers.pipe.store.chunks_after("", 10) == []


@pytest.mark.s3_servers("moto")
def test_a_record_naming_a_live_offloaded_copy_deletes_nothing(tiers: Tiers) -> None:
    """A pending delete replayed or forged for the live tier-2 copy (any mark but the one that retired it)
    is refused; so is one for the released hot copy under a mark other than the release's."""
    chunks = tiers.segments.layout(SEGMENT)
    offloader = tiers.offloader(release_after_s=0)
    offloader.offload(chunks[0].name)
    offloader.release_due()
    row = tiers.pipe.store.get_chunk(chunks[0].name)
    assert row is not None
    executor = DeletionExecutor(tiers.pipe.store, tiers.segments.bindings, mark_timeout_s=0.0)
    forged = pending_deletes(row, "f" * 32, 1)
    hot_copy = pending_deletes(chunks[0], "e" * 32, 1)  # the hot copy as it was, under a mark never committed
    verdicts = executor.execute([*forged, *hot_copy])
    assert [v.outcome.value for v in verdicts] == ["in-use", "in-use"]
    assert tiers.segments.read(SEGMENT, 0, 100) == DATA[:100]
    assert chunks[0].name in tiers.hot_names()  # its own release record deletes it, no other


@pytest.mark.s3_servers("moto")
def test_a_release_record_delivered_again_after_the_hot_copy_went_is_already_gone(tiers: Tiers) -> None:
    """A worker killed between a delete and its offset commit reads the record again: the hot copy its row no
    longer lists is gone, so the record is acked, not dead-lettered as another's copy."""
    chunks = tiers.segments.layout(SEGMENT)
    offloader = tiers.offloader(release_after_s=0)
    offloader.offload(chunks[0].name)
    offloader.release_due()
    (released,) = tiers.pipe.store.offloads_of([chunks[0].name])
    assert tiers.drain(lambda seen: seen.get("deleted", 0) >= 1) == {"deleted": 1}
    again = pending_deletes(chunks[0], released.mark_id or "", 1)  # the chunk as it was: its hot copy
    executor = DeletionExecutor(tiers.pipe.store, tiers.segments.bindings, mark_timeout_s=0.0)
    assert [v.outcome.value for v in executor.execute(again)] == ["already-gone"]


@pytest.mark.s3_servers("moto")
def test_a_reader_gets_every_byte_while_offloads_releases_deletes_and_truncations_run(tiers: Tiers) -> None:
    chunks = tiers.segments.layout(SEGMENT)
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def read() -> None:
        while not stop.is_set():
            try:
                start = tiers.segments.get_info(SEGMENT).start_offset
                assert tiers.segments.read(SEGMENT, start, len(DATA) - start) == DATA[start:]
                reads[0] += 1
            except BaseException as exc:  # noqa: BLE001 - collected for the test's own assertion
                if "outside" not in str(exc):  # a truncation moved the start between the two reads
                    errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        offloader = tiers.offloader(release_after_s=0)
        for i, chunk in enumerate(chunks[:-1]):
            offloader.offload(chunk.name)
            offloader.release_due()
            tiers.drain(lambda seen, i=i: seen.get("deleted", 0) >= 1)  # the hot copy goes while reads run
            if i % 3 == 2:
                tiers.segments.truncate(SEGMENT, chunk.start_offset - 100)
    finally:
        stop.set()
        reader.join()
    assert errors == [] and reads[0] > 0


@pytest.mark.s3_servers("moto")
def test_two_offloader_services_on_one_store_share_its_streams_and_offload_each_chunk_once(
        tiers: Tiers, metadata_location: str) -> None:
    streams = [f"scope/p{i}" for i in range(6)]
    for stream in streams:
        tiers.segments.create(f"{stream}/0.#epoch.0", stream=stream)
        tiers.segments.write(tiers.segments.open_write(f"{stream}/0.#epoch.0", epoch=1), 0, DATA)
        with tiers.pipe.store.transaction() as txn:
            txn.put_offload_policy(OffloadPolicy(stream, "s3-tier2", after_bytes=0, release_after_s=0))
    # Another process: its own connection to the same store, and its own producer for phase 1.
    second = open_metadata_store(metadata_location)
    producer = RecordProducer(tiers.pipe.bootstrap, "idempotent-producer")
    deletions = LedgerDeletionService(second, KafkaPendingDeletePublisher(producer, tiers.pipe.codec,
                                                                          tiers.pipe.topics.deletion))
    services = [OffloaderService(store, tiers.segments.bindings, phase_1, StreamLeases(store, name, ttl_s=5.0),
                                 default_release_after_s=0)
                for store, phase_1, name in ((tiers.pipe.store, tiers.pipe.service, "one"),
                                             (second, deletions, "two"))]
    stop, held = threading.Event(), {"one": set(), "two": set()}

    def run(service: OffloaderService) -> None:
        while not stop.is_set():
            held[service.leases.owner] |= set(service.tick().streams)
            stop.wait(0.2)

    def released() -> bool:
        offloads = tiers.pipe.store.offloads_after("", 1000)
        return len(offloads) == 10 * len(streams) and all(o.state is OffloadState.RELEASED for o in offloads)

    threads = [threading.Thread(target=run, args=(service,)) for service in services]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 90
        while not released():
            assert time.monotonic() < deadline, "the streams were not offloaded and released in 90 s"
            time.sleep(0.2)
        # Each now holds the streams rendezvous hashing gives it; neither held one the other holds.
        time.sleep(0.5)
        now = [set(service.leases.held) for service in services]
        assert now[0] and now[1] and not now[0] & now[1] and now[0] | now[1] == set(streams)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        for service in services:
            service.leases.close()
        producer.close()
        second.close()
    offloads = tiers.pipe.store.offloads_after("", 1000)
    assert len({o.chunk for o in offloads}) == len(offloads)  # one offload a chunk: no upload twice
    assert tiers.pipe.store.leases("offloader/") == []
    tiers.drain(lambda seen: not tiers.pipe.store.offloads_after("", 1))
    report = audit(tiers.pipe.store, [tiers.hot, tiers.cold], grace_s=0)
    assert report.clean, report.to_dict()
    for stream in streams:
        assert tiers.segments.read(f"{stream}/0.#epoch.0", 0, len(DATA)) == DATA
