"""Consumption retention of plain Kafka topics measured in one run: commit-to-DeleteRecords latency, and the job's
throughput beside a plain single-process AdminClient poll loop deciding the same.

The setup (not timed): ``--topics`` topics of ``--partitions`` partitions, ``--records`` records in each partition
(written 3 h ago), ``--groups`` consumer groups that have each committed ``FIRST`` on every partition of every
topic, and one policy per topic requiring every group, with a minimum of 1 h (so the records' age never holds).

  (a) latency: the topic poller (a pass every ``--poll-every-s``, and between passes the groups' commits
      followed on ``__consumer_offsets``, as ``reclaim topic-poller`` does), the retention job (trigger
      ``--trigger-interval-s``) and the Kafka-topic applier run continuously, the poller and the applier on
      threads of this process, with signed records throughout. First every topic is truncated to the groups'
      first commit (timed: start -> every partition's start there). Then ``--latency-commits`` times, each on
      another topic: every group but one commits one record further, a random pause puts the last one at a random
      moment of the trigger interval, and the clock runs from that commit's acknowledgement to every partition of
      the topic starting at the new bound (its log start offsets asked every 20 ms, ListOffsets earliest).
  (b) throughput: from the cluster state (a) left, interleaved rounds of
      - reclaim: one poller pass that observes every topic and publishes its signed cut to a fresh cuts topic,
        then a once-run of the job from a fresh checkpoint over the policies and those cuts, writing its signed
        decisions (timer: pass start -> the job's run ended);
      - plain: one process that calls the same ``observe_all``, folds each topic's policy and view into the same
        ``TopicRetentionState`` and produces the same signed decisions (timer: start -> every decision confirmed).
      Both decision sets are checked equal, one decision per topic.

The machine is shared, so the load average is printed with each part.

Run from the repository root: ``.venv/bin/python -m benchmarks.topic_retention [--topics 1000] [--quick]``. It
starts its own Kafka broker unless ``--bootstrap`` or RECLAIM_KAFKA_BOOTSTRAP / RECLAIM_BOOTSTRAP name a running one.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from prometheus_client import REGISTRY
from pyspark.sql import SparkSession

from benchmarks.results import Figures, record, verdict
from benchmarks.retention_job import add_batches, check_events, describe_batches, load, on_broker_and_spark
from reclaim.producers.config import kafka_config
from reclaim.producers.producer import DeliveryTracker, RecordProducer
from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.producers.topics import TopicNames
from reclaim.retention.spark_auth import job_keys
from reclaim.retention.spark_io import RetentionTopics
from reclaim.retention.spark_job import RetentionJobConfig, start_retention_job
from reclaim.retention.spark_metrics import BatchSummary
from reclaim.retention.topic_state import TopicRetentionState
from reclaim.schemas import build_codec, millis_now
from reclaim.schemas.codec import RecordCodec
from reclaim.schemas.topic_retention import TopicRetentionPolicy, TopicTruncation
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.security.signing import AuthMode, RecordSigner, RecordVerifier
from reclaim.services.topic_applier import TopicApplier, TopicApplierConfig
from reclaim.services.topic_poller import TopicPoller
from reclaim.settings import Settings
from reclaim.storage.sql_store import SQLiteMetadataStore
from reclaim.tools.dlq.reader import read_all
from reclaim.tools.group_commits import CommitWatch
from reclaim.tools.topic_retention import POLLER_GROUP, PolicyFollower, cut_of, describe_topics, observe_all
from reclaim.tools.topics import admin_client, create_topics, topic_specs

HOUR_MS = 3600 * 1000
FIRST = 5
"""The offset every group has committed on every partition before the run: the first truncation's bound."""
RUN_TIMEOUT_S = 900
WAIT_TIMEOUT_S = 120.0
ASK_EVERY_S = 0.02
KEYS = Keyring([new_key("admin-1", "admin", Algorithm.ED25519), new_key("job-1", "retention-job", Algorithm.ED25519),
                new_key("poll-1", "topic-retention", Algorithm.ED25519)])
Decision = tuple[str, tuple[tuple[int, int], ...]]


@dataclass(frozen=True)
class Sizes:
    topics: int
    partitions: int
    groups: int
    records: int
    latency_commits: int
    poll_every_s: float
    trigger_interval_s: float
    rounds: int


# --- the user's topics and groups -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """The users' topics and groups on the broker, and the policies that hold them."""

    bootstrap: str
    topics: list[str]
    groups: list[str]
    partitions: int
    policies: list[TopicRetentionPolicy]
    admin: AdminClient

    def commit(self, group: str, topic: str, offset: int) -> None:
        """``group`` commits ``offset`` on every partition of ``topic``, acknowledged when this returns."""
        commit_all(self.bootstrap, group, [TopicPartition(topic, p, offset) for p in range(self.partitions)])

    def commit_everywhere(self, offset: int) -> None:
        """Every group commits ``offset`` on every partition of every topic."""
        for group in self.groups:
            commit_all(self.bootstrap, group, [TopicPartition(t, p, offset) for t in self.topics
                                               for p in range(self.partitions)])

    def starts(self, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        """Every partition's log start offset now, in one ListOffsets."""
        futures = self.admin.list_offsets({TopicPartition(t, p): OffsetSpec.earliest()  # type: ignore[no-untyped-call]
                                      for t in topics for p in range(self.partitions)})
        return {(tp.topic, tp.partition): int(f.result(timeout=30).offset) for tp, f in futures.items()}

    def wait_starts(self, topics: Sequence[str], offset: int, timeout_s: float = WAIT_TIMEOUT_S) -> float:
        """Ask until every partition of ``topics`` starts at ``offset``; the time it was seen so."""
        deadline = time.monotonic() + timeout_s
        while True:
            starts = self.starts(topics)
            seen = time.perf_counter()
            if all(start == offset for start in starts.values()):
                return seen
            behind = sum(1 for start in starts.values() if start != offset)
            assert time.monotonic() < deadline, f"{behind} partitions not at {offset} in {timeout_s:.0f} s"
            time.sleep(ASK_EVERY_S)


def commit_all(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer(kafka_config(bootstrap, "consumer", {"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def build_cluster(bootstrap: str, sizes: Sizes, run: str) -> Cluster:
    """Create the topics, fill them, commit every group at ``FIRST``; say how long it took (setup)."""
    started = time.perf_counter()
    admin = AdminClient(kafka_config(bootstrap, "admin"))
    topics = [f"{run}-orders-{i:04d}" for i in range(sizes.topics)]
    groups = [f"{run}-etl-{j:02d}" for j in range(sizes.groups)]
    for at in range(0, len(topics), 100):
        futures = admin.create_topics([NewTopic(t, sizes.partitions, 1) for t in topics[at:at + 100]])
        for future in futures.values():
            future.result(timeout=120)
    producer = Producer(kafka_config(bootstrap, "producer", {"linger.ms": 20, "enable.idempotence": True}))
    written = millis_now() - 3 * HOUR_MS
    failed: list[str] = []
    for topic in topics:
        for partition in range(sizes.partitions):
            for i in range(sizes.records):
                while True:
                    try:
                        producer.produce(topic, b"r%d" % i, partition=partition, timestamp=written + i,
                                         on_delivery=lambda err, _m: failed.append(str(err)) if err else None)
                        break
                    except BufferError:  # the local queue is full: serve delivery reports until it has room
                        producer.poll(0.1)
                producer.poll(0)
    assert producer.flush(120) == 0 and not failed, failed[:3]
    ids = describe_topics(admin, topics)
    policies = []
    for topic in topics:
        described = ids[topic]
        assert not isinstance(described, Exception), described
        policies.append(TopicRetentionPolicy(topic, described[0], tuple(groups), HOUR_MS, millis_now()))
    cluster = Cluster(bootstrap, topics, groups, sizes.partitions, policies, admin)
    cluster.commit_everywhere(FIRST)
    print(f"  set up {sizes.topics} topics x {sizes.partitions} partitions x {sizes.records} records, "
          f"{sizes.groups} groups committed on every partition, in {time.perf_counter() - started:.1f} s (setup)")
    return cluster


# --- reclaim's parts ------------------------------------------------------------------------------------------


@dataclass
class Parts:
    """reclaim's records publisher, policy follower, poller and applier over one prefix's topics."""

    names: TopicNames
    producer: RecordProducer
    follower: PolicyFollower
    poller: TopicPoller
    watch: CommitWatch
    applier: TopicApplier
    store: SQLiteMetadataStore

    def close(self) -> None:
        self.applier.close()
        self.watch.close()
        self.follower.close()
        self.producer.close()
        self.store.close()


@contextmanager
def reclaim_parts(cluster: Cluster, work: Path) -> Iterator[Parts]:
    """Fresh reclaim topics, the policies published on them (signed by the admin), a poller and an applier."""
    bootstrap, codec = cluster.bootstrap, build_codec()
    work.mkdir()
    prefix = f"bench-{random.randrange(16**8):08x}."
    create_topics(admin_client(bootstrap), topic_specs(Settings(topic_prefix=prefix)))
    names = TopicNames.for_prefix(prefix)
    verifier = RecordVerifier(Keyring(key.public_only() for key in KEYS))
    producer = RecordProducer(bootstrap, "idempotent-producer")
    admin_publisher = ConfirmedPublisher(producer, codec, signer=RecordSigner(KEYS, "admin"))
    for policy in cluster.policies:
        admin_publisher.publish(names.topic_retention, policy, policy.topic)
    follower = PolicyFollower(bootstrap, names.topic_retention, codec, verifier)
    poller = TopicPoller(AdminClient(kafka_config(bootstrap, "admin")), follower.refresh,
                         admin_publisher.signed_by(RecordSigner(KEYS, "topic-retention")), names.topic_cuts)
    watch = CommitWatch(bootstrap, POLLER_GROUP, lambda topic: topic in poller.watched)
    store = SQLiteMetadataStore(work / "metadata.db")
    applier = TopicApplier(TopicApplierConfig(bootstrap, names.topic_truncation, names.topic_truncation_dlq,
                                              group_id=f"{names.topic_truncation}-applier", poll_timeout_s=0.2),
                           AdminClient(kafka_config(bootstrap, "admin")), store, codec, follower.refresh, verifier)
    parts = Parts(names, producer, follower, poller, watch, applier, store)
    try:
        yield parts
    finally:
        parts.close()


def job_config(cluster: Cluster, names: RetentionTopics, checkpoint: Path, sizes: Sizes,
               once: bool = False) -> RetentionJobConfig:
    return RetentionJobConfig(cluster.bootstrap, names, str(checkpoint), trigger_interval_s=sizes.trigger_interval_s,
                              once=once, keys=job_keys(KEYS, AuthMode.ENFORCE))


class Running:
    """Runs ``loop(stop)`` on a daemon thread while in the ``with`` block."""

    def __init__(self, name: str, loop: Callable[[threading.Event], None]) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=loop, args=(self.stop,), name=name, daemon=True)

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


# --- (a) latency ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    waits: list[float]
    first_s: float
    batches: list[BatchSummary]
    passes: int
    followed: int


def latency(spark: SparkSession, cluster: Cluster, sizes: Sizes, work: Path) -> Latency:
    """Seconds from each last commit's acknowledgement to its topic's partitions starting at the new bound."""
    rng = random.Random(43)
    passes = REGISTRY.get_sample_value("reclaim_topic_retention_polls_total") or 0
    followed = REGISTRY.get_sample_value("reclaim_topic_retention_followed_total") or 0
    with reclaim_parts(cluster, work / "latency") as parts:
        started = time.perf_counter()
        names = RetentionTopics.from_names(parts.names)
        job = start_retention_job(spark, job_config(cluster, names, work / "checkpoint-latency", sizes))
        try:
            with Running("poller", lambda stop: parts.poller.run(stop, sizes.poll_every_s, parts.watch)), \
                    Running("applier", parts.applier.run):
                first = cluster.wait_starts(cluster.topics, FIRST, RUN_TIMEOUT_S) - started
                waits = []
                for i in range(sizes.latency_commits):
                    topic = cluster.topics[i % len(cluster.topics)]
                    bound = FIRST + 1 + i // len(cluster.topics)
                    for group in cluster.groups[:-1]:
                        cluster.commit(group, topic, bound)
                    time.sleep(rng.uniform(0, sizes.trigger_interval_s))  # a random moment of the trigger interval
                    cluster.commit(cluster.groups[-1], topic, bound)
                    acknowledged = time.perf_counter()
                    waits.append(cluster.wait_starts([topic], bound) - acknowledged)
        finally:
            batches = job.stop()
    passes = (REGISTRY.get_sample_value("reclaim_topic_retention_polls_total") or 0) - passes
    followed = (REGISTRY.get_sample_value("reclaim_topic_retention_followed_total") or 0) - followed
    return Latency(waits, first, batches, int(passes), int(followed))


# --- (b) throughput -------------------------------------------------------------------------------------------


def decisions_on(bootstrap: str, topic: str, codec: RecordCodec) -> list[Decision]:
    messages, _ = read_all(bootstrap, topic)
    decided = [codec.decode(m.value() or b"", topic, TopicTruncation) for m in messages]
    return [(d.topic, tuple(sorted(d.starts.as_dict().items()))) for d in decided]


def reclaim_run(spark: SparkSession, cluster: Cluster, parts: Parts, into: RetentionTopics, checkpoint: Path,
                sizes: Sizes) -> tuple[float, float, list[BatchSummary]]:
    """One poller pass onto ``into``'s cuts topic, then a once-run of the job: the pass's and the whole's seconds."""
    parts.poller.cuts_topic = into.topic_cuts
    parts.poller.last.clear()
    started = time.perf_counter()
    report = parts.poller.tick()
    passed = time.perf_counter() - started
    assert len(report.published) == len(cluster.topics), report.failed
    job = start_retention_job(spark, job_config(cluster, into, checkpoint, sizes, once=True))
    try:
        assert job.await_termination(RUN_TIMEOUT_S), f"the job's run did not end in {RUN_TIMEOUT_S} s"
        elapsed = time.perf_counter() - started
    finally:
        batches = job.stop()
    return passed, elapsed, batches


def plain_run(cluster: Cluster, into: str, codec: RecordCodec) -> tuple[float, float]:
    """One process: observe every topic, fold and decide each, produce the signed decisions: the observation's and
    the whole's seconds."""
    admin = AdminClient(kafka_config(cluster.bootstrap, "admin"))
    producer = RecordProducer(cluster.bootstrap, "idempotent-producer")
    signer, tracker = RecordSigner(KEYS, "retention-job"), DeliveryTracker()
    producer.producer.list_topics(into, timeout=30)  # connected before the clock starts, as the poller's producer is
    started = time.perf_counter()
    now = millis_now()
    views = observe_all(admin, cluster.policies, now)
    observed = time.perf_counter() - started
    for policy in cluster.policies:
        view = views[policy.topic]
        assert not isinstance(view, Exception), view
        state = TopicRetentionState(policy.topic)
        state.apply(policy, now)
        assert state.apply(cut_of(view), now) is None
        decision = state.decide(millis_now())
        if decision is not None:
            value, key = codec.encode(decision, into), policy.topic.encode()
            producer.send(into, value, key, headers=signer.headers(into, key, value),
                          on_delivery=tracker.callback(tracker.sent))
    unconfirmed = producer.wait(tracker, RUN_TIMEOUT_S)
    elapsed = time.perf_counter() - started
    producer.close()
    assert not unconfirmed, f"{len(unconfirmed)} decisions unconfirmed"
    return observed, elapsed


def check_decisions(label: str, found: list[Decision], expected: set[Decision]) -> None:
    check_events(label, found, set(expected), "decisions", "topics")


@dataclass(frozen=True)
class Throughput:
    poll_s: list[float]
    reclaim_s: list[float]
    observe_s: list[float]
    plain_s: list[float]
    batches: list[BatchSummary]


def throughput(spark: SparkSession, cluster: Cluster, sizes: Sizes, work: Path, bound: int) -> Throughput:
    """Interleaved rounds of poller + job and of the plain loop over the same cluster, each to its own topics."""
    codec = build_codec()
    expected = {(topic, tuple((p, bound) for p in range(cluster.partitions))) for topic in cluster.topics}
    result = Throughput([], [], [], [], [])
    with reclaim_parts(cluster, work / "throughput") as parts:
        admin = AdminClient(kafka_config(cluster.bootstrap, "admin"))
        for r in range(sizes.rounds):
            extra = [f"{parts.names.topic_cuts}-{r}", f"{parts.names.topic_truncation}-job-{r}",
                     f"{parts.names.topic_truncation}-plain-{r}"]
            futures = admin.create_topics([NewTopic(t, Settings.partitions, 1) for t in extra])
            for future in futures.values():
                future.result(timeout=60)
            into = replace(RetentionTopics.from_names(parts.names), topic_cuts=extra[0], topic_truncation=extra[1])
            passed, elapsed, batches = reclaim_run(spark, cluster, parts, into, work / f"checkpoint-{r}", sizes)
            check_decisions("job", decisions_on(cluster.bootstrap, extra[1], codec), expected)
            result.poll_s.append(passed)
            result.reclaim_s.append(elapsed)
            result.batches.extend(batches)
            observed, elapsed = plain_run(cluster, extra[2], codec)
            check_decisions("plain", decisions_on(cluster.bootstrap, extra[2], codec), expected)
            result.observe_s.append(observed)
            result.plain_s.append(elapsed)
    return result


# --- the report -----------------------------------------------------------------------------------------------


def report_latency(sizes: Sizes, result: Latency, figures: Figures) -> None:
    waits, target = result.waits, sizes.trigger_interval_s + 2
    p95 = sorted(waits)[max(0, math.ceil(0.95 * len(waits)) - 1)]  # nearest rank
    key = f"latency_{sizes.topics}"
    print(f"  start -> every partition of all {sizes.topics} topics at the groups' first bound: {result.first_s:.2f} s")
    print(f"  last group's commit acknowledged -> the topic's partitions start at the new bound, {len(waits)} commits: "
          f"median {statistics.median(waits):.3f} s, p95 {p95:.3f} s, max {max(waits):.3f} s")
    print(f"    target p95 <= trigger + 2 s = {target:g} s: {verdict(p95 <= target)}")
    print(f"    each: {', '.join(f'{w:.2f}' for w in waits)}")
    print(f"  the poller meanwhile: {result.passes} passes, {result.followed} observations of topics whose groups "
          f"committed; the job: {describe_batches(result.batches)}")
    figures.add(f"{key}_first_truncation_s", result.first_s)
    figures.add(f"{key}_commit_to_deleted_median_s", statistics.median(waits))
    figures.add(f"{key}_commit_to_deleted_p95_s", p95)
    figures.add(f"{key}_commit_to_deleted_max_s", max(waits))
    figures.add(f"{key}_commit_to_deleted_p95_target_s", target)
    figures.add(f"{key}_commit_to_deleted_each_s", ", ".join(f"{w:.2f}" for w in waits))
    figures.add(f"{key}_poller_passes", result.passes)
    figures.add(f"{key}_poller_followed", result.followed)
    add_batches(figures, f"{key}_job", result.batches)


def report_throughput(sizes: Sizes, result: Throughput, figures: Figures) -> None:
    key = f"throughput_{sizes.topics}"
    figures.rate(f"{key}_poll", "  of which the poller's pass", sizes.topics, result.poll_s, unit="topics", width=40)
    figures.rate(f"{key}_reclaim", "reclaim: poller pass + job run", sizes.topics, result.reclaim_s,
                 unit="topics", width=40)
    figures.rate(f"{key}_observe", "  of which observe_all", sizes.topics, result.observe_s, unit="topics", width=40)
    figures.rate(f"{key}_plain", "plain single-process poll loop", sizes.topics, result.plain_s,
                 unit="topics", width=40)
    figures.ratio(f"{key}_reclaim_over_plain", "reclaim / plain (topics/s):", result.reclaim_s, result.plain_s)
    print(f"  both: one decision per topic, every partition at {throughput_bound(sizes)}, the same set")
    print(f"  the job's runs: {describe_batches(result.batches)}")
    add_batches(figures, f"{key}_job", result.batches)


NOTE = """note: the job runs on local[2] beside the broker, the poller and the applier on the same two cores. A
commit reaches DeleteRecords through three hops: the poller (the commit read from __consumer_offsets, then that
topic observed through the Admin API, at most a part of a pass (100 topics) after), the job's next micro-batch (0 to
one trigger interval, plus the batch, about 2 s of Spark's fixed cost here), the applier's poll and DeleteRecords.
The plain loop does in one process what the poller and the job do together, with no bus between them and no state
kept across restarts; the job keeps each topic's state in its checkpoint (forward only, groups remembered after
Kafka forgets them), reads only signed cuts and spreads topics over executors."""


# --- main -----------------------------------------------------------------------------------------------------


def throughput_bound(sizes: Sizes) -> int:
    """Where every group commits before (b): past every bound (a) left."""
    return FIRST + 2 + (sizes.latency_commits - 1) // sizes.topics


def parse_sizes(argv: Sequence[str] | None = None) -> tuple[Sizes, str | None]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1000, help="topics under consumption retention (1000)")
    parser.add_argument("--partitions", type=int, default=10, help="partitions of each topic (10)")
    parser.add_argument("--groups", type=int, default=20, help="consumer groups, each required on every topic (20)")
    parser.add_argument("--records", type=int, default=20, help="records in each partition (20)")
    parser.add_argument("--latency-commits", type=int, default=20, help="last commits timed (20)")
    parser.add_argument("--poll-every-s", type=float, default=10.0,
                        help="the poller's passes (10.0, as reclaim topic-poller's)")
    parser.add_argument("--trigger-interval-s", type=float, default=1.0, help="the job's trigger interval (1.0)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved throughput rounds (3)")
    parser.add_argument("--bootstrap", help="a running broker (else RECLAIM_KAFKA_BOOTSTRAP, else one is started)")
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        sizes = Sizes(50, 4, 5, 20, 5, args.poll_every_s, args.trigger_interval_s, 1)
    else:
        sizes = Sizes(args.topics, args.partitions, args.groups, args.records, args.latency_commits,
                      args.poll_every_s, args.trigger_interval_s, args.rounds)
    if sizes.records < throughput_bound(sizes):
        parser.error("--records too few for the commits timed")
    bootstrap = args.bootstrap or os.environ.get("RECLAIM_KAFKA_BOOTSTRAP") or os.environ.get("RECLAIM_BOOTSTRAP")
    return sizes, bootstrap


def main() -> None:
    sizes, bootstrap = parse_sizes()
    begun, figures = time.time(), Figures()
    on_broker_and_spark("reclaim-bench-topic-retention", bootstrap,
                        lambda spark, address, work: run(spark, address, sizes, work, figures))
    record("topic_retention", asdict(sizes), figures, begun)


def run(spark: SparkSession, bootstrap: str, sizes: Sizes, work: Path, figures: Figures) -> None:
    print(f"Kafka topic retention, {load()}, Spark {spark.version} {spark.sparkContext.master}, "
          f"{spark.conf.get('spark.sql.shuffle.partitions')} shuffle partitions")
    cluster = build_cluster(bootstrap, sizes, f"bench{random.randrange(16**6):06x}")
    print(f"(a) latency: poller every {sizes.poll_every_s:g} s, job trigger {sizes.trigger_interval_s:g} s, "
          f"applier polling; at the start {load()}")
    figures.add("load_average_1min_at_start", os.getloadavg()[0])
    result = latency(spark, cluster, sizes, work)
    report_latency(sizes, result, figures)
    print(f"(b) throughput: {sizes.topics} topics x {sizes.partitions} partitions x {sizes.groups} groups, "
          f"{sizes.rounds} round(s) of reclaim then the plain loop; at the start {load()}")
    top = throughput_bound(sizes)
    cluster.commit_everywhere(top)  # every partition has records to delete again (setup)
    report_throughput(sizes, throughput(spark, cluster, sizes, work, top), figures)
    print(f"at the end {load()}")
    figures.add("load_average_1min_at_end", os.getloadavg()[0])
    print(NOTE)


if __name__ == "__main__":
    main()
