"""The offloader service's passes on a SQLite store and two filesystem bindings (tier-1 and a tier-2 stand-in),
phase 1 recorded rather than published: policies by bytes and by age, the release lag, streams shared by two
processes through leases and moved when one dies or stops, a stream offloaded by hand settled by the service,
and a lost lease stopping a stream's pass. The process with a broker and a worker is
tests/integration/cli/test_offload_cli.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim.segments.offload import Offloader
from reclaim.segments.offload_policy import STREAM_PREFIX, StreamLeases
from reclaim.segments.streams import StreamController
from reclaim.services.offloader import OffloaderService
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkStorage
from reclaim.storage.metadata import LeaseRecord, MetadataStore, OffloadPolicy, OffloadState
from tests.support.offload_tiers import Tiers, open_tiers

STREAMS = [f"scope/s{i}" for i in range(6)]
DATA = bytes(range(250)) * 2  # five chunks of 100: four sealed, the last still growing


class Setup(Tiers):
    def service(self, owner: str, *, ttl_s: float = 90.0, make: object = Offloader) -> OffloaderService:
        leases = StreamLeases(self.store, owner, ttl_s=ttl_s, clock=self.clock)
        return OffloaderService(self.store, self.segments.bindings, self.sink, leases, default_release_after_s=60,
                                clock=self.clock, offloader=make)  # type: ignore[arg-type]

    def segment(self, stream: str) -> str:
        return f"{stream}/0.#epoch.0"

    def where(self, stream: str) -> list[str]:
        """Each chunk's binding, oldest first (the first location: where reads go)."""
        return [c.locations[0].binding for c in self.segments.layout(self.segment(stream))]

    def policy(self, stream: str, **thresholds: float) -> None:
        with self.store.transaction() as txn:
            txn.put_offload_policy(OffloadPolicy(stream, "fs-cold", release_after_s=60, **thresholds))  # type: ignore[arg-type]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    tiers = open_tiers(tmp_path, 2_000_000_000.0)
    for stream in STREAMS:
        tiers.write(f"{stream}/0.#epoch.0", stream, DATA)
    yield Setup(**vars(tiers))
    tiers.store.close()


def test_a_policy_by_bytes_offloads_the_oldest_chunks_and_releases_them_after_its_lag(setup: Setup) -> None:
    stream = STREAMS[0]
    setup.policy(stream, after_bytes=250)
    service = setup.service("a")
    report = service.tick()
    # From the newest: 100 (growing), 200, 300 > 250: the third newest and the two older are due.
    assert setup.where(stream) == ["fs-cold"] * 3 + ["fs-tier1"] * 2
    assert (len(report.switched), report.released, report.due_left) == (3, [], 0)
    assert service.tick().switched == []  # 200 hot bytes left: nothing more due
    setup.now[0] += 60
    assert len(service.tick().released) == 3  # the policy's lag passed: the hot copies to phase 1
    assert setup.sink.prepared == 3
    assert setup.segments.read(setup.segment(stream), 0, len(DATA)) == DATA


def test_a_policy_by_age_counts_from_each_chunks_last_write(setup: Setup) -> None:
    stream = STREAMS[1]
    chunks = setup.segments.layout(setup.segment(stream))
    for age, chunk in zip((500, 400, 300, 200, 100), chunks, strict=True):
        os.utime(setup.hot.data_path(chunk.locations[0].key), (setup.now[0] - age, setup.now[0] - age))
    setup.policy(stream, after_s=250)
    setup.service("a").tick()
    assert setup.where(stream) == ["fs-cold"] * 3 + ["fs-tier1"] * 2


def test_two_processes_share_the_streams_and_a_dead_ones_move_after_its_lease(setup: Setup) -> None:
    for stream in STREAMS:
        setup.policy(stream, after_bytes=0)
    a, b = setup.service("a"), setup.service("b")
    a.tick()  # a alone: it takes every stream
    assert len(a.leases.held) == len(STREAMS)
    b.tick()  # b joins: it gets nothing yet, a still holds its share
    a.tick()  # a sees b and lets go of b's share
    b.tick()
    held_a, held_b = set(a.leases.held), set(b.leases.held)
    assert held_a and held_b and not held_a & held_b and held_a | held_b == set(STREAMS)
    assert all(setup.where(stream)[:4] == ["fs-cold"] * 4 for stream in STREAMS)

    setup.now[0] += 30
    b.tick()  # a died (no more passes): its streams stay with it until its lease runs out
    assert set(b.leases.held) == held_b
    setup.now[0] += 61
    b.tick()
    assert set(b.leases.held) == set(STREAMS)
    leases = {lease.name: lease for lease in setup.store.leases(STREAM_PREFIX)}
    assert all(leases[STREAM_PREFIX + s].owner == "b" and leases[STREAM_PREFIX + s].epoch == 2 for s in held_a)


def test_a_process_that_stops_lets_go_at_once(setup: Setup) -> None:
    for stream in STREAMS[:2]:
        setup.policy(stream, after_bytes=0)
    a, b = setup.service("a"), setup.service("b")
    a.tick()
    a.leases.close()
    assert setup.store.leases("offloader/") == []
    assert set(b.tick().streams) == set(STREAMS[:2])


def test_a_stream_offloaded_by_hand_is_settled_by_the_service(setup: Setup) -> None:
    stream = STREAMS[2]
    first = setup.segments.layout(setup.segment(stream))[0].name
    Offloader(setup.store, setup.segments.bindings, setup.cold, setup.sink, clock=setup.clock).offload(first)
    service = setup.service("a")
    assert service.tick().streams == [stream]  # no policy, but an offload to settle
    setup.now[0] += 60
    assert service.tick().released == [first]
    (released,) = setup.store.offloads_of([first])
    assert released.state is OffloadState.RELEASED
    assert setup.where(stream)[1:] == ["fs-tier1"] * 4  # nothing else offloaded: no policy


def test_a_lost_lease_stops_the_streams_pass_before_its_next_chunk(setup: Setup) -> None:
    stream = STREAMS[3]
    setup.policy(stream, after_bytes=0)

    def thief(store: MetadataStore, bindings: StorageBindings, target: ChunkStorage, deletions: object,
              **options: object) -> Offloader:
        def steal(step: str) -> None:
            if step != "switched":
                return
            setup.now[0] += 40  # a third of the lease passed: the service renews before the next chunk
            with store.transaction() as txn:
                lease = txn.get_lease(STREAM_PREFIX + stream)
                assert lease is not None
                txn.put_lease(LeaseRecord(lease.name, "other", lease.epoch + 1, setup.now[0] + 90, lease.version))
        return Offloader(store, bindings, target, deletions, crash_hook=steal, **options)  # type: ignore[arg-type]

    service = setup.service("a", make=thief)
    report = service.tick()
    assert len(report.switched) == 1 and stream not in service.leases.held
    assert setup.where(stream) == ["fs-cold"] + ["fs-tier1"] * 4


def test_a_streams_policy_ends_with_it_and_a_new_incarnation_starts_without_one(setup: Setup) -> None:
    controller = StreamController.beside(setup.segments, setup.store.path)
    try:
        controller.create_stream("scope", "orders", 1)
        setup.policy("scope/orders", after_bytes=0)
        controller.seal_stream("scope/orders")
        controller.delete_stream("scope/orders")
        assert [p.stream for p in setup.store.offload_policies()] == []
        setup.policy("scope/orders", after_bytes=0)  # left by a delete that stopped before forgetting it
        controller.create_stream("scope", "orders", 1)
        assert [p.stream for p in setup.store.offload_policies()] == []
        setup.policy("scope/orders", after_bytes=0)
        controller.create_stream("scope", "orders", 1)  # a retry of the same creation keeps it
        assert [p.stream for p in setup.store.offload_policies()] == ["scope/orders"]
    finally:
        controller.close()


def test_leases_nobody_will_renew_are_swept(setup: Setup) -> None:
    setup.policy(STREAMS[4], after_s=10**9)  # nothing due: no offload to settle once the policy goes
    dead = setup.service("dead", ttl_s=10)
    assert dead.tick().streams == [STREAMS[4]]  # holds the stream, then dies
    with setup.store.transaction() as txn:
        txn.delete_offload_policy(STREAMS[4])  # the stream leaves every work list
    setup.now[0] += 15  # the dead member's leases expired, not yet for a whole term
    alive = setup.service("alive", ttl_s=10)
    alive.tick()
    assert {lease.owner for lease in setup.store.leases("offloader/member/")} == {"dead", "alive"}
    assert setup.store.leases(STREAM_PREFIX) == []  # its stream's lease: expired, and no one's work
    setup.now[0] += 5
    alive.tick()
    assert [lease.owner for lease in setup.store.leases("offloader/")] == ["alive"]
