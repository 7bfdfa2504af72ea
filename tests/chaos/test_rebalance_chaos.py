"""Rebalances while retry tiers hold partitions, with eager and with cooperative-sticky assignment. Phase 1 keeps
marking chunks (their deletes flow) and keeps publishing records of live chunks whose marks never commit: those
wait in the first retry tier, which holds its partitions paused until each record is due, until the mark
timeout makes them in-use. Meanwhile, each time with a retry tier held:

1. a plain ``reclaim worker`` drains alone;
2. a supervised ``reclaim worker --processes 2`` joins it;
3. partitions are added to the deletion topic;
4. one of the supervisor's children is SIGKILLed (the supervisor restarts it);
5. the supervisor is SIGKILLed: its children stop by themselves and every partition goes back to the plain
   worker, which had held some of them when they were taken from it (the only way cooperative-sticky
   assignment gives a worker back a partition it lost);
6. the supervisor is started again;
7. the plain worker leaves.

After each one, every partition with records to read is read again within the longest tier delay and a
rebalance; a partition given back paused and forgotten (librdkafka #1849) never is. After the last, the
group's lag is 0 within the mark timeout plus the longest tier delay and a rebalance. Every marked chunk is
gone, every live one is there, nothing is dead-lettered, ``reclaim audit`` is clean, and
``reclaim_ledgers_deleted_total`` summed over every worker process is exactly the number of chunks marked
(see ``Tally``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from reclaim.consumers.deletion_worker import METADATA_REFRESH_MS
from reclaim.deletion.mark import LedgerDeletionService
from reclaim.deletion.records import pending_deletes_for
from reclaim.localstack.procs import free_port
from reclaim.producers.kafka_errors import ErrorKind, classify, kafka_error_of
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher
from reclaim.producers.producer import RecordProducer
from reclaim.producers.topics import TopicNames
from reclaim.schemas import millis_now
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.metadata import ChunkRecord
from tests.support.chaos import Backlog, filesystem_pipeline, spawn_worker, stopped
from tests.support.pipeline import Pipeline, inflight, positions, scrape
from tests.support.supervised import children, counted, counted_in_files, summed, wait_children, wait_gone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RETRY_DELAYS = (2, 5)
MARK_TIMEOUT_S = 8
PARTITIONS, ADDED = 4, 2
WRITTEN_AT_ONCE, PENDING_POOL = 200, 40
TICK_S = 0.5
DOOMED_A_TICK, PENDING_A_TICK = 10, 2
"""Phase 1's pace: at most 20 chunks marked and 4 never-committed records a second, well under what the group
drains, so that a pause of the marking empties the deletion topic within seconds."""

DELETED, HELD = "reclaim_ledgers_deleted_total", "reclaim_deletion_retry_held_partitions"
REBALANCE_ALLOWANCE_S = 25.0
"""A worker process's start on two busy cores (a few seconds), a SIGKILLed member dropped only when its
session (10 s) expires, and the rebalance that follows."""
READ_AGAIN_WITHIN_S = max(RETRY_DELAYS) + REBALANCE_ALLOWANCE_S
"""A partition with records to read moves on within this after a disturbance: a tier's record is due at most
its delay after it was written, and being held is the only reason a live worker leaves it unread."""
LEAVE_ALLOWANCE_S = 15.0
"""The plain worker's last batch and commit, and the rebalance that gives its partitions to the others. The
worker's 30 s metadata refresh is not on this path: the added partitions were read long before."""
DRAINED_WITHIN_S = MARK_TIMEOUT_S + max(RETRY_DELAYS) + LEAVE_ALLOWANCE_S


@pytest.mark.parametrize("assignment", ["eager", "cooperative-sticky"])
def test_rebalances_while_retry_tiers_hold_leave_nothing_paused(
        assignment: str, kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], tmp_path: Path,
        unique_name: Callable[[str], str]) -> None:
    pipe = filesystem_pipeline(kafka_bootstrap, kafka_topics(retry_delays=RETRY_DELAYS, partitions=PARTITIONS),
                               tmp_path, unique_name("group"))
    traffic = Traffic.written(pipe)
    # Dynamic membership: every join, leave and death rebalances the group (a static member's restart would not).
    env = {"RECLAIM_ASSIGNMENT": assignment, "RECLAIM_MARK_TIMEOUT_S": str(MARK_TIMEOUT_S), "RECLAIM_BATCH_SIZE": "10"}
    scene = Scene(pipe, traffic)
    try:
        plain = scene.spawn(tmp_path, "plain worker", RECLAIM_PROCESSES="1", **env)
        scene.until("the plain worker deletes and holds a retry tier", lambda: plain.deleted() > 0 and scene.holding(),
                    60)

        first = scene.spawn(tmp_path, "supervisor", RECLAIM_PROCESSES="2", **env)
        wait_children(first.log, 2)
        scene.until("the supervisor's children are given partitions and delete",
                    lambda: len(members(pipe)) == 3 and first.deleted() > 0, REBALANCE_ALLOWANCE_S)
        scene.read_again("the supervisor joined")

        scene.until("a retry tier is held before partitions are added", scene.holding, 30)
        add_partitions(pipe)
        scene.until("records land on the added partitions", lambda: min(added_highs(pipe)) > 0, 30)
        scene.timings["added partitions read"] = scene.until(
            "the group reads the added partitions", lambda: min(added_committed(pipe)) > 0,
            METADATA_REFRESH_MS / 1000 + REBALANCE_ALLOWANCE_S)
        scene.read_again("partitions were added")

        scene.quiet()  # nothing left to delete: the SIGKILL loses no count
        victim = children(first.log)[0]
        os.kill(victim, signal.SIGKILL)
        wait_gone([victim], timeout_s=10)
        traffic.deleting = True
        wait_children(first.log, 3, timeout_s=30)
        before = first.deleted()
        scene.until("the supervisor's restarted child rejoins and its children delete, a retry tier held",
                    lambda: len(members(pipe)) == 3 and first.deleted() > before and scene.holding(),
                    REBALANCE_ALLOWANCE_S)
        scene.read_again("a child was SIGKILLed and restarted")

        orphans = list(children(first.log).values())
        first.process.kill()
        first.process.wait(timeout=30)
        wait_gone(orphans, timeout_s=60)  # each finished its batch in flight and counted it
        scene.ended(first, counted_in_files(first.tmpdir, DELETED))
        scene.until("the plain worker is given every partition", lambda: len(members(pipe)) == 1,
                    REBALANCE_ALLOWANCE_S)
        scene.read_again("the supervisor was SIGKILLed and its partitions went back to the plain worker")

        scene.until("a retry tier is held before the supervisor starts again", scene.holding, 30)
        second = scene.spawn(tmp_path, "supervisor restarted", RECLAIM_PROCESSES="2", **env)
        wait_children(second.log, 2)
        scene.until("the restarted supervisor's children are given partitions and delete",
                    lambda: len(members(pipe)) == 3 and second.deleted() > 0, REBALANCE_ALLOWANCE_S)
        scene.read_again("the supervisor was started again")

        scene.quiet()  # the plain worker leaves with every delete it made counted
        stopped(plain.process, plain.log)
        scene.ended(plain, scene.tally.last[plain.name])
        traffic.deleting = traffic.publishing = False
        scene.timings["drained after the last disturbance"] = scene.until(
            "the lag is 0 after the plain worker left", lambda: inflight(pipe) == 0, DRAINED_WITHIN_S)
        scene.tally.ended[second.name] = summed(scrape(second.port), DELETED)

        assert scene.tally.total() == len(traffic.marked), f"deletions counted by each life: {scene.tally.ended}"
        faults = (f"{assignment}: a supervised worker joined a plain one, {ADDED} partitions added (read in "
                  f"{scene.timings['added partitions read']:.0f} s), 1 child SIGKILLed, the supervisor SIGKILLed and "
                  f"restarted, the plain worker left (lag 0 {scene.timings['drained after the last disturbance']:.0f} "
                  f"s later, bound {DRAINED_WITHIN_S:.0f} s); a retry tier held at each")
        backlog = Backlog(pipe, traffic.binding, traffic.live(), traffic.marked, started=traffic.started)
        backlog.assert_clean(f"rebalances with held retry tiers ({len(traffic.marked):,} marked)", faults,
                             tmp_path / "tier2", second.process, second.log, timeout_s=10)
        stopped(second.process, second.log)
        scene.lives.remove(second)
    finally:
        for life in scene.lives:  # a failure mid-scenario: a supervisor's children follow it
            if life.process.poll() is None:
                life.process.kill()
                life.process.wait(timeout=30)
        traffic.close()
        pipe.close()


@dataclass
class Traffic:
    """Phase 1 at work, paced by the test's waits: every ``TICK_S`` it marks the next chunks of a pool it writes
    as needed (their deletes flow while ``deleting``) and publishes records for live chunks under marks that
    never commit (while ``publishing``): those wait in the first retry tier, holding its partitions, until
    the mark timeout turns them in-use, and their chunks must survive."""

    pipe: Pipeline
    binding: BaseChunkStorage
    pool: list[ChunkRecord]
    pending: list[ChunkRecord]
    service: LedgerDeletionService
    publisher: KafkaPendingDeletePublisher
    producer: RecordProducer
    marked: list[ChunkRecord] = field(default_factory=list)
    deleting: bool = True
    publishing: bool = True
    started: float = field(default_factory=time.monotonic)
    _ticks: int = 0
    _next: float = 0.0

    @classmethod
    def written(cls, pipe: Pipeline) -> Traffic:
        binding = pipe.bindings.get("fs-tier2")
        assert isinstance(binding, BaseChunkStorage)
        pending = pipe.write_chunks(binding, "scope/stream/0.#epoch.0", PENDING_POOL)
        # Its own producer, whose metadata is a second old at most: records land on added partitions at once.
        producer = RecordProducer(pipe.bootstrap, "idempotent-producer", {"topic.metadata.refresh.interval.ms": 1000})
        publisher = KafkaPendingDeletePublisher(producer, pipe.codec, pipe.topics.deletion)
        service = LedgerDeletionService(pipe.store, publisher, commit_within_s=MARK_TIMEOUT_S / 2)
        return cls(pipe, binding, [], pending, service, publisher, producer)

    def tick(self) -> None:
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + TICK_S
        self._ticks += 1
        if self.deleting:
            if not self.pool:
                segment = f"scope/stream/{len(self.marked) // WRITTEN_AT_ONCE + 1}.#epoch.0"
                self.pool = self.pipe.write_chunks(self.binding, segment, WRITTEN_AT_ONCE)
            batch, self.pool = self.pool[:DOOMED_A_TICK], self.pool[DOOMED_A_TICK:]
            result = self.service.mark(batch)
            assert len(result.marked) == len(batch), f"mark {result.mark_id} failed: {result.failed}"
            self.marked += batch
        if self.publishing:
            start = self._ticks * PENDING_A_TICK % len(self.pending)
            chunks = (self.pending * 2)[start:start + PENDING_A_TICK]
            records = pending_deletes_for(chunks, f"never-committed-{self._ticks}", millis_now())
            assert not self.publisher.publish(records), "records of never-committed marks not confirmed"

    def gone(self) -> int:
        """How many marked chunks are gone from tier-2."""
        on_tier2 = set(self.binding.iter_names())
        return sum(c.name not in on_tier2 for c in self.marked)

    def live(self) -> list[ChunkRecord]:
        """The chunks that must survive: those of never-committed marks, and the pool never marked."""
        return self.pending + self.pool

    def close(self) -> None:
        self.producer.close()


@dataclass
class Life:
    """One ``reclaim worker`` process (a supervisor, or a plain worker), its metrics port, log and ``TMPDIR``
    (a supervisor keeps its children's metrics files there)."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    tmpdir: Path

    @classmethod
    def spawn(cls, pipe: Pipeline, work: Path, name: str, **env: str) -> Life:
        slug = name.replace(" ", "-")
        tmpdir, port, log = work / f"{slug}-tmp", free_port(), work / f"{slug}.log"
        tmpdir.mkdir()
        process = spawn_worker(pipe, work / "tier2", log, RECLAIM_METRICS_PORT=str(port), TMPDIR=str(tmpdir), **env)
        return cls(name, process, port, log, tmpdir)

    def deleted(self) -> float:
        return counted(self.port, DELETED)

    def held(self) -> float:
        return counted(self.port, HELD)

    def assert_alive(self) -> None:
        assert self.process.poll() is None, f"{self.name} died by itself: {self.log.read_text()[-3000:]}"


@dataclass
class Tally:
    """``reclaim_ledgers_deleted_total`` of every worker life: those ended (a plain worker's last scrape, taken
    when nothing was left to delete; a SIGKILLed supervisor's children's files, read once they stopped;
    the last supervisor's scrape once the lag is 0), and the last sample of those running.

    A child SIGKILLed between its delete and its count would lose that count, so children are killed only
    when every marked chunk is gone and counted; anything else counted over the chunks deleted is a chunk
    counted twice."""

    ended: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)

    def sample(self, lives: Sequence[Life]) -> float:
        self.last = {life.name: life.deleted() for life in lives}
        return self.total() + sum(self.last.values())

    def total(self) -> float:
        return sum(self.ended.values())


@dataclass
class Scene:
    """The worker processes running, what each ended one counted, and the scenario's waits: each one drives
    ``traffic`` and fails, with where every partition stands, when a worker dies or the wait outlasts its bound."""

    pipe: Pipeline
    traffic: Traffic
    lives: list[Life] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)
    timings: dict[str, float] = field(default_factory=dict)

    def spawn(self, work: Path, name: str, **env: str) -> Life:
        life = Life.spawn(self.pipe, work, name, **env)
        self.lives.append(life)
        return life

    def ended(self, life: Life, deleted: float) -> None:
        self.lives.remove(life)
        self.tally.ended[life.name] = deleted

    def until(self, what: str, done: Callable[[], bool], timeout_s: float,
              detail: Callable[[], str] = lambda: "") -> float:
        """Seconds until ``done()``; fails after ``timeout_s``."""
        started = time.monotonic()
        while True:
            self.traffic.tick()
            for life in self.lives:
                life.assert_alive()
            if done():
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                raise AssertionError(f"{what}: not within {timeout_s:.0f} s{detail()}\n{self.situation()}")
            time.sleep(0.1)

    def holding(self) -> bool:
        """Whether some worker holds a retry-tier partition paused now."""
        return sum(life.held() for life in self.lives) > 0

    def read_again(self, after: str) -> None:
        """Every partition with records to read moves on within ``READ_AGAIN_WITHIN_S``."""
        waiting = {tp: position for tp, (position, left) in self._positions().items() if left > 0}

        def moved() -> bool:
            now = self._positions()
            for tp in [tp for tp, position in waiting.items() if tp in now]:
                if now[tp][1] == 0 or now[tp][0] > waiting[tp]:
                    del waiting[tp]
            return not waiting

        self.until(f"every partition with records to read read again after {after}", moved, READ_AGAIN_WITHIN_S,
                   lambda: f"; still at the offset they were at then: {waiting}")

    def _positions(self) -> dict[str, tuple[int, int]]:
        try:
            return positions(self.pipe)
        except KafkaException as exc:
            if not passing(exc):
                raise
            return {}

    def quiet(self) -> None:
        """Stop marking, and wait until every marked chunk is gone and counted, with a retry tier held."""
        self.traffic.deleting = False

        def settled() -> bool:
            counted_now = self.tally.sample(self.lives)  # before the listing: a delete between them counts later
            gone = self.traffic.gone()
            assert counted_now <= gone, f"{counted_now} deletions counted, {gone} chunks gone: {self.tally.last}"
            return gone == counted_now == len(self.traffic.marked) and self.holding()

        self.until("every marked chunk deleted and counted, a retry tier held", settled, REBALANCE_ALLOWANCE_S)

    def situation(self) -> str:
        """Where the drain stands: the lag of each partition that has any, what each worker holds, the
        group's members and their partitions, and the end of each log."""
        held = {life.name: life.held() for life in self.lives}
        lags = {tp: left for tp, (_, left) in self._positions().items() if left > 0}
        tails = "\n".join(f"--- {life.name}:\n{life.log.read_text(errors='replace')[-2500:]}" for life in self.lives)
        return f"lag by partition: {lags}\nheld: {held}\nmembers: {members(self.pipe)}\n{tails}"


def add_partitions(pipe: Pipeline) -> None:
    admin = AdminClient({"bootstrap.servers": pipe.bootstrap})
    topic = pipe.topics.deletion
    admin.create_partitions([NewPartitions(topic, PARTITIONS + ADDED)])[topic].result(timeout=30)


def added_highs(pipe: Pipeline) -> list[int]:
    """The high watermark of each added partition; 0 while the broker has no leader for it yet."""
    consumer = Consumer({"bootstrap.servers": pipe.bootstrap, "group.id": pipe.group_id})
    try:
        highs = []
        for p in range(PARTITIONS, PARTITIONS + ADDED):
            try:
                highs.append(consumer.get_watermark_offsets(TopicPartition(pipe.topics.deletion, p), timeout=10,
                                                            cached=False)[1])
            except KafkaException as exc:
                if not passing(exc):
                    raise
                highs.append(0)
        return highs
    finally:
        consumer.close()


def added_committed(pipe: Pipeline) -> list[int]:
    """The group's committed offset on each added partition (-1001 for none, or while the broker cannot say)."""
    consumer = Consumer({"bootstrap.servers": pipe.bootstrap, "group.id": pipe.group_id})
    try:
        partitions = [TopicPartition(pipe.topics.deletion, p) for p in range(PARTITIONS, PARTITIONS + ADDED)]
        return [tp.offset for tp in consumer.committed(partitions, timeout=10)]
    except KafkaException as exc:
        if not passing(exc):
            raise
        return [-1001] * ADDED
    finally:
        consumer.close()


def passing(exc: KafkaException) -> bool:
    """Whether the broker says ``exc`` will pass (a new partition without a leader yet, say)."""
    error = kafka_error_of(exc)
    return error is not None and classify(error) is ErrorKind.RETRIABLE


def members(pipe: Pipeline) -> dict[str, list[str]]:
    """Each member of the group, when it is stable, and the partitions it holds as ``topic[partition]``."""
    admin = AdminClient({"bootstrap.servers": pipe.bootstrap})
    try:
        description = admin.describe_consumer_groups([pipe.group_id])[pipe.group_id].result(timeout=10)
    except (KafkaException, TimeoutError):
        return {}
    if not str(description.state).endswith("STABLE"):
        return {}
    return {member.member_id: [f"{tp.topic.rsplit('.', 1)[-1]}[{tp.partition}]"
                               for tp in (member.assignment.topic_partitions if member.assignment else [])]
            for member in description.members}
