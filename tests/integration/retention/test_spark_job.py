"""The retention job on a real broker and the Spark standalone cluster, checkpointing on MinIO through s3a:
truncations, rejects, restarts and timeouts."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from pyspark.sql import SparkSession

from reclaim.localstack.s3_server import S3Endpoint, s3_client
from reclaim.producers.topics import TopicNames
from reclaim.retention.spark_auth import JobKeys, job_keys
from reclaim.retention.spark_io import RetentionTopics, StreamRecord
from reclaim.retention.spark_job import RetentionJobConfig, run_available, start_retention_job
from reclaim.retention.spark_metrics import BatchSummary
from reclaim.schemas import (
    LimitType,
    RetentionPolicy,
    RetentionType,
    StreamCut,
    TruncationEvent,
    build_codec,
    millis_now,
)
from reclaim.schemas.base import new_incarnation
from reclaim.schemas.rejects import RejectKind, RetentionReject
from reclaim.schemas.topology import StreamTopology, TopologyState
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.security.rules import authorize_truncation, signers_of
from reclaim.security.signing import AuthMode, RecordSigner, RecordVerifier, Signer
from tests.support.kafka_io import Outgoing, consume_from_start, produce_confirmed
from tests.support.spark_job import (
    CONSUMPTION,
    MINUTE_MS,
    STREAM,
    at,
    config,
    consumed,
    produce_records,
    recorded,
    stream_with,
    subscribe,
    topology,
    unsubscribe,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RUN_TIMEOUT_S = 180
REEVALUATE_MS = 1000
"""Truncate at the subscribers' lower bound, with no min and no max (PDP-47's defaults)."""


@dataclass(frozen=True)
class RetentionHarness:
    """Fresh topics and a checkpoint; inputs go in as records, the job runs once, outputs come back."""

    spark: SparkSession
    bootstrap: str
    names: TopicNames
    checkpoint: str
    """An ``s3a://`` location on MinIO (``s3``)."""
    s3: S3Endpoint
    keys: JobKeys | None = None

    def produce(self, *records: StreamRecord) -> None:
        produce_records(self.bootstrap, self.names, records)

    def produce_signed(self, *signed: tuple[StreamRecord, RecordSigner | None]) -> None:
        produce_records(self.bootstrap, self.names, [record for record, _ in signed], [s for _, s in signed])

    def produce_raw(self, topic: str, value: bytes) -> None:
        produce_confirmed(self.bootstrap, [Outgoing(topic, value, b"garbage")])

    def run(self, topics: RetentionTopics | None = None) -> list[BatchSummary]:
        """One run of the job (one micro-batch over what is there) from this harness's checkpoint."""
        config = RetentionJobConfig(self.bootstrap, topics or RetentionTopics.from_names(self.names),
                                    self.checkpoint, reevaluate_ms=REEVALUATE_MS, once=True, keys=self.keys)
        return run_available(self.spark, config, RUN_TIMEOUT_S)

    def read(self, topic: str) -> list[bytes]:
        """Every value now on ``topic``, in partition and offset order."""
        rows = (self.spark.read.format("kafka").option("kafka.bootstrap.servers", self.bootstrap)
                .option("subscribe", topic).option("startingOffsets", "earliest")
                .option("endingOffsets", "latest").load().select("partition", "offset", "value").collect())
        return [bytes(row["value"]) for row in sorted(rows, key=lambda row: (row["partition"], row["offset"]))]

    def truncations(self, stream: str = STREAM) -> list[StreamCut]:
        codec = build_codec()
        events = [codec.decode(value, self.names.truncation, TruncationEvent)
                  for value in self.read(self.names.truncation)]
        return [event.cut for event in events if event.stream == stream]

    def rejects(self) -> list[RetentionReject]:
        codec = build_codec()
        return [codec.decode(value, self.names.retention_rejects, RetentionReject)
                for value in self.read(self.names.retention_rejects)]


    def checkpoint_batches(self, folder: str) -> list[int]:
        """The batch ids the checkpoint's ``offsets`` or ``commits`` log holds."""
        bucket, _, prefix = self.checkpoint.removeprefix("s3a://").partition("/")
        listed = s3_client(self.s3).list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/{folder}/")
        names = [item["Key"].rsplit("/", 1)[-1] for item in listed.get("Contents", [])]
        return [int(name) for name in names if name.isdigit()]


@pytest.fixture
def harness(spark: SparkSession, kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames],
            spark_checkpoint: str, minio_s3: S3Endpoint) -> RetentionHarness:
    return RetentionHarness(spark, kafka_bootstrap, kafka_topics(), spark_checkpoint, minio_s3)


def test_two_subscribers_truncate_at_their_common_cut_then_wait_for_the_slow_one(harness: RetentionHarness) -> None:
    harness.produce(*stream_with(CONSUMPTION, "billing", "audit"),
                    consumed("billing", at(100, 200)), consumed("audit", at(200, 100)), recorded(at(300, 300)))
    harness.run()
    assert harness.truncations() == [at(100, 100)]

    # billing reads on; audit has not moved: the cut moves only as far as audit's.
    harness.produce(consumed("billing", at(400, 400)))
    harness.run()
    assert harness.truncations() == [at(100, 100), at(200, 100)]

    # audit leaves (a newer generation): billing alone holds the stream back.
    harness.produce(unsubscribe("audit", 2), recorded(at(400, 400), age_ms=1000))
    harness.run()
    assert harness.truncations() == [at(100, 100), at(200, 100), at(400, 400)]


KEYS = Keyring([new_key("ctl-1", "controller", Algorithm.ED25519), new_key("admin-1", "admin", Algorithm.ED25519),
                new_key("job-1", "retention-job", Algorithm.ED25519),
                new_key("billing-1", "subscriber", Algorithm.ED25519, subject="billing", streams=[STREAM])])
ATTACKER = Keyring([new_key("billing-9", "subscriber", Algorithm.ED25519, subject="billing")])


def test_a_size_max_limit_truncates_past_a_stalled_subscriber_whose_forged_cut_is_refused(
        harness: RetentionHarness, unique_name: Callable[[str], str]) -> None:
    # 600 bytes recorded, the subscriber stalled after 20: keeping at most 300 means the oldest
    # recorded cut that keeps 300 or less, at(200, 200) (200 bytes kept; at(100, 100) would keep 400).
    # Every input is signed by who writes it; a cut for billing at the tail, signed by a key the job does
    # not know, would have moved the bound there (a CONSUMPTION truncation at(300, 300)).
    signed = replace(harness, keys=job_keys(KEYS, AuthMode.ENFORCE))
    controller, admin = RecordSigner(KEYS, "controller"), RecordSigner(KEYS, "admin")
    billing = RecordSigner(KEYS, "subscriber", "billing")
    size_max_300 = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, 300)
    signed.produce_signed((topology(), controller), (config(size_max_300), admin), (subscribe("billing"), billing),
                          (consumed("billing", at(10, 10)), billing),
                          (recorded(at(100, 100), 3 * MINUTE_MS), controller),
                          (recorded(at(200, 200), 2 * MINUTE_MS), controller), (recorded(at(300, 300)), controller),
                          (consumed("billing", at(300, 300)), RecordSigner(ATTACKER, "subscriber", "billing")),
                          (consumed("billing", at(300, 300)), None))
    tail = build_codec().encode(consumed("billing", at(300, 300)), signed.names.subscriber_cuts)
    twice = billing.headers(signed.names.subscriber_cuts, STREAM.encode(), tail) * 2
    produce_confirmed(signed.bootstrap, [Outgoing(signed.names.subscriber_cuts, tail, STREAM.encode(), twice)])
    signed.run()
    assert signed.truncations() == [at(200, 200)]
    rejects = signed.rejects()
    assert {(r.stream, r.kind, r.source_topic) for r in rejects} == {
        (STREAM, RejectKind.UNAUTHENTICATED, signed.names.subscriber_cuts)}
    assert sorted(r.reason.split(":")[0] for r in rejects) == ["malformed-signature", "unknown-key", "unsigned"]

    # What the truncation applier checks: the job's signature, and a reason the stream's policy gives.
    [message] = consume_from_start(signed.bootstrap, [signed.names.truncation], unique_name("g"), 1)
    applier = RecordVerifier(Keyring(key.public_only() for key in KEYS))
    signer = applier.verify(signed.names.truncation, message.key(), message.value(), message.headers(),
                            signers_of(TruncationEvent))
    assert isinstance(signer, Signer) and (signer.role, signer.key_id) == ("retention-job", "job-1")
    event = build_codec().decode(message.value(), signed.names.truncation, TruncationEvent)
    assert authorize_truncation(event, signer, size_max_300) is None


def test_a_size_min_limit_holds_consumed_data_back(harness: RetentionHarness) -> None:
    # Everything is consumed, but 250 bytes must stay: at(200, 200) would keep only 200, so the
    # newest recorded cut that keeps at least 250 is at(100, 100).
    size_min_250 = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 250)
    harness.produce(*stream_with(size_min_250, "billing"), consumed("billing", at(300, 300)),
                    recorded(at(100, 100), 3 * MINUTE_MS), recorded(at(200, 200), 2 * MINUTE_MS),
                    recorded(at(300, 300)))
    harness.run()
    assert harness.truncations() == [at(100, 100)]


def test_a_time_max_limit_fires_after_a_restart_with_no_new_input_at_all(harness: RetentionHarness) -> None:
    # The recorded cut turns older than the one-hour max PAST_MAX_IN_MS after it is produced. Spark runs no
    # batch after a restart until input arrives; the wake-up the job writes when it starts makes one run.
    hour_max = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 0, 60 * MINUTE_MS)
    past_max_in_ms = 15_000
    produced_at = millis_now()
    harness.produce(*stream_with(hour_max, "billing"), consumed("billing", at(10, 10)),
                    recorded(at(100, 100), 60 * MINUTE_MS - past_max_in_ms))
    # The first run is a job from before the wake-ups: its checkpoint's source knows only the five inputs.
    first = harness.run(replace(RetentionTopics.from_names(harness.names), wakeups=None))
    assert first[-1].duration_ms >= 0 and millis_now() - produced_at < past_max_in_ms, "the first run was too slow"
    assert harness.truncations() == [at(10, 10)]

    time.sleep((produced_at + past_max_in_ms - millis_now()) / 1000 + 1)
    second = harness.run()  # nothing new on any input: only the wake-up

    assert harness.truncations() == [at(10, 10), at(100, 100)]
    assert [(s.input_rows, s.streams_decided) for s in second] == [(1, 1)]
    assert len(harness.read(harness.names.retention_wakeups)) == 1
    assert harness.rejects() == []  # the wake-up is no input record


def test_garbage_on_every_input_topic_becomes_counted_rejects_and_the_rest_is_processed(
    harness: RetentionHarness,
) -> None:
    inputs = RetentionTopics.from_names(harness.names).inputs
    for topic in inputs:
        harness.produce_raw(topic, b"\x00not avro")
    harness.produce(*stream_with(CONSUMPTION, "billing"), consumed("billing", at(50, 50)),
                    consumed("ghost", at(60, 60)), recorded(at(100, 100)))
    undecodable_before = _rejects_counted("undecodable")

    summaries = harness.run()

    rejects = harness.rejects()
    undecodable = [r for r in rejects if r.kind is RejectKind.UNDECODABLE]
    assert sorted(r.source_topic for r in undecodable) == sorted(inputs)
    # Keyed "garbage": the rejects name the stream the key names.
    assert all(r.stream == "garbage" and r.subscriber is None and r.source_offset == 0 for r in undecodable)
    assert [(r.stream, r.subscriber, r.kind) for r in rejects if r not in undecodable] == [
        (STREAM, "ghost", RejectKind.UNKNOWN_SUBSCRIBER)]
    assert harness.truncations() == [at(50, 50)]
    assert sum(s.input_rows for s in summaries) == len(inputs) + 6 + 1  # and the run's wake-up
    assert sum(s.rejects.get("UNDECODABLE", 0) for s in summaries) == len(inputs)
    assert _rejects_counted("undecodable") - undecodable_before == len(inputs)

    # The checkpoint is past the garbage: the next run reads only what is new.
    harness.produce(consumed("billing", at(100, 100)))
    harness.run()
    assert len(harness.rejects()) == len(rejects)
    assert harness.truncations() == [at(50, 50), at(100, 100)]


def _rejects_counted(kind: str) -> float:
    return REGISTRY.get_sample_value("reclaim_retention_rejects_total", {"kind": kind}) or 0.0


def test_a_restarted_job_never_emits_a_cut_behind_one_it_emitted(harness: RetentionHarness) -> None:
    harness.produce(*stream_with(CONSUMPTION, "billing", "audit"), consumed("billing", at(300, 300)),
                    consumed("audit", at(300, 300)), recorded(at(300, 300)))
    harness.run()
    assert harness.truncations() == [at(300, 300)]

    # A late subscriber far behind: the lower bound falls back, but the restarted job remembers
    # what it emitted and stays quiet.
    harness.produce(subscribe("late"), consumed("late", at(100, 100)), recorded(at(350, 350), 1000))
    harness.run()
    assert harness.truncations() == [at(300, 300)]

    harness.produce(*(consumed(name, at(500, 500)) for name in ("billing", "audit", "late")),
                    recorded(at(500, 500), 500))
    harness.run()
    assert harness.truncations() == [at(300, 300), at(500, 500)]


def unfinished_batch(harness: RetentionHarness) -> bool:
    """Whether the checkpoint logs a batch's offsets without its commit: a restart must redo that batch."""
    def last(folder: str) -> int:
        return max(harness.checkpoint_batches(folder), default=-1)

    return last("offsets") > last("commits")


def stop_mid_batch(harness: RetentionHarness, cuts: Sequence[StreamCut]) -> None:
    """Run the job continuously and stop it while it processes one of ``cuts`` (tried in turn)."""
    config = RetentionJobConfig(harness.bootstrap, RetentionTopics.from_names(harness.names),
                                harness.checkpoint, trigger_interval_s=0.2, reevaluate_ms=REEVALUATE_MS)
    job = start_retention_job(harness.spark, config)
    try:
        for cut in cuts:
            harness.produce(consumed("billing", cut))
            deadline = time.monotonic() + 60
            while not (job.query.status["isTriggerActive"] and job.query.status["isDataAvailable"]):
                assert time.monotonic() < deadline, job.query.status
                time.sleep(0.01)
            job.query.stop()
            if unfinished_batch(harness):
                return
            job.stop()
            job = start_retention_job(harness.spark, config)
    finally:
        job.stop()
    raise AssertionError("no stop landed inside a batch")


def test_a_run_after_a_stop_mid_batch_redoes_that_batch_and_still_reads_to_the_end(harness: RetentionHarness) -> None:
    harness.produce(*stream_with(CONSUMPTION, "billing"), consumed("billing", at(10, 10)), recorded(at(900, 900)))
    harness.run()
    stop_mid_batch(harness, [at(20, 20), at(30, 30), at(40, 40)])
    harness.produce(consumed("billing", at(60, 60)))

    summaries = harness.run()

    assert len(summaries) >= 2, "the unfinished batch, then the rest"
    emitted = harness.truncations()
    assert emitted[-1] == at(60, 60)
    # The sink is at-least-once (a batch cut short may have written its event before it is redone),
    # but no cut ever goes back.
    assert all(before[0] <= after[0] for before, after in zip(emitted, emitted[1:], strict=False))


def executors_of(spark: SparkSession) -> list[int]:
    """The pids of this application's executor JVMs (on this host, where the test cluster runs)."""
    app = spark.sparkContext.applicationId
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv and app.encode() in argv:
            found.append(int(proc.name))
    return found


def test_an_executor_killed_mid_batch_is_replaced_and_its_tasks_redone(harness: RetentionHarness) -> None:
    # A cluster loses executors: the worker starts another for the application and Spark runs the lost
    # tasks again; the state comes back from the s3a checkpoint, and no cut goes back.
    harness.produce(*stream_with(CONSUMPTION, "billing"), consumed("billing", at(10, 10)), recorded(at(900, 900)))
    harness.run()
    before = executors_of(harness.spark)
    assert len(before) == 2, "the test cluster runs one executor on each of its two workers"
    config = RetentionJobConfig(harness.bootstrap, RetentionTopics.from_names(harness.names),
                                harness.checkpoint, trigger_interval_s=0.2, reevaluate_ms=REEVALUATE_MS)
    job = start_retention_job(harness.spark, config)
    try:
        harness.produce(consumed("billing", at(20, 20)))
        deadline = time.monotonic() + 60
        while not (job.query.status["isTriggerActive"] and job.query.status["isDataAvailable"]):
            assert time.monotonic() < deadline, job.query.status
            time.sleep(0.01)
        os.kill(before[0], signal.SIGKILL)
        harness.produce(consumed("billing", at(30, 30)))
        deadline = time.monotonic() + 180
        while at(30, 30) not in harness.truncations():
            assert job.query.isActive, job.query.exception()
            assert time.monotonic() < deadline, "the job did not recover from the lost executor"
            time.sleep(1)
    finally:
        job.stop()
    emitted = harness.truncations()
    assert emitted[0] == at(10, 10) and emitted[-1] == at(30, 30)
    assert all(before[0] <= after[0] for before, after in zip(emitted, emitted[1:], strict=False))
    # The cluster settles on two executors again, the killed one not among them. For a moment it may show
    # three: the master can launch a replacement while another of the application's executors is still
    # on its way out (seen on a loaded 2-core machine), so the count is awaited, not read once.
    deadline = time.monotonic() + 60
    while not replaced(before, after := executors_of(harness.spark)):
        assert time.monotonic() < deadline, (before, after)
        time.sleep(0.5)


def replaced(before: list[int], after: list[int]) -> bool:
    """Whether the first of ``before`` has gone and the application is back to as many executors."""
    return before[0] not in after and len(after) == len(before)


def test_a_subscribers_records_replayed_into_the_stream_created_again_truncate_nothing(
        harness: RetentionHarness) -> None:
    """Finding 1 of issue #39 on the real broker and Spark: a subscriber's genuine ADD and cut at the tail,
    captured from a deleted stream and replayed into the stream created again under its name, made the job
    truncate the new stream whole. Each record now names its stream's incarnation: the replay is refused."""
    signed = replace(harness, keys=job_keys(KEYS, AuthMode.ENFORCE))
    controller, admin = RecordSigner(KEYS, "controller"), RecordSigner(KEYS, "admin")
    billing = RecordSigner(KEYS, "subscriber", "billing")
    old, new = new_incarnation(), new_incarnation()
    captured = [(replace(subscribe("billing"), incarnation=old), billing),
                (replace(consumed("billing", at(300, 300)), incarnation=old), billing)]
    signed.produce_signed((replace(topology(), incarnation=old), controller),
                          (replace(config(CONSUMPTION), incarnation=old), admin), *captured)
    deleted = StreamTopology(STREAM, (), (), TopologyState.DELETED, millis_now() + 1, old)
    signed.produce_signed((deleted, controller), (replace(topology(), published_at=millis_now() + 2,
                                                          incarnation=new), controller),
                          (replace(config(CONSUMPTION), incarnation=new), admin),
                          (replace(recorded(at(300, 300)), incarnation=new), controller),
                          *captured)  # the replay: the same records, the same genuine signatures
    signed.run()
    assert signed.truncations() == []
    wrong = [r for r in signed.rejects() if r.kind is RejectKind.WRONG_INCARNATION]
    assert [(r.subscriber, r.source_topic) for r in wrong] == [("billing", signed.names.subscribers),
                                                               ("billing", signed.names.subscriber_cuts)]

    # The new stream's own subscriber truncates it, at its own cut, and the event names the new incarnation.
    signed.produce_signed((replace(subscribe("billing", 2), incarnation=new), billing),
                          (replace(consumed("billing", at(100, 100), 2), incarnation=new), billing))
    signed.run()
    [event] = [build_codec().decode(v, signed.names.truncation, TruncationEvent)
               for v in signed.read(signed.names.truncation)]
    assert (event.cut, event.incarnation) == (at(100, 100), new)
    assert event.bound_by == ("billing (subscriber:billing/billing-1)",)
