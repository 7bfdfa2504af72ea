"""The retention job measured in one run: cut-to-truncation latency, throughput beside a plain consumer, memory.

  (a) latency: streams preloaded (a topology of two halves, a consumption policy, subscribers with
      cuts, one recorded cut at the tail), the job running with a processing-time trigger; then
      ``--latency-cuts`` times: a stream's subscribers but the slowest move on, the slowest moves last,
      and the clock runs from that last cut's produce confirmation to the stream's TruncationEvent
      read by a consumer tailing the truncation topic. A random pause before each cut puts it at a
      random moment of the trigger interval.
  (b) throughput: ``--streams`` x ``--subscribers`` preloaded at once; an ``availableNow`` run of the
      job from a fresh checkpoint (timer: start -> run ended, every event on the topic), beside a
      plain single-process consumer that reads the five input topics from the beginning in apply
      order, folds them into one ``StreamRetentionState`` per stream, decides, and produces the same
      events to its own topic (timer: start -> every event confirmed). Rounds interleave (job, plain,
      ...); both sets of (stream, cut) are checked equal to each other and to the expected bound.
  (c) memory during (b)'s job runs, sampled every 0.5 s from /proc: the driver JVM's VmRSS and the
      Python workers' (descendants of the JVM running ``pyspark.daemon``/``pyspark/worker``).

The machine is shared, so the load average is printed with each part. Topics get ``--partitions``
partitions (4 by default, as ``reclaim topics create`` makes them).

Run from the repository root: ``.venv/bin/python -m benchmarks.retention_job [--streams 10000] [--quick]``.
It starts its own Kafka broker unless ``--bootstrap`` or RECLAIM_KAFKA_BOOTSTRAP / RECLAIM_BOOTSTRAP
name a running one.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition
from pyspark.sql import SparkSession

from benchmarks.results import Figures, record, verdict
from benchmarks.retention_inputs import (
    CutOf,
    Input,
    common_cut,
    laggard_cut,
    spread_cut,
    stream_name,
    stream_setup,
    subscriber_cut,
)
from reclaim.localstack.kafka_broker import BrokerPorts, start_broker
from reclaim.localstack.procs import free_port, stop_pid
from reclaim.producers.config import kafka_config
from reclaim.producers.producer import DeliveryTracker, RecordProducer
from reclaim.producers.topics import TopicNames
from reclaim.retention.spark_io import RetentionTopics
from reclaim.retention.spark_job import RetentionJobConfig, start_retention_job
from reclaim.retention.spark_metrics import BatchSummary
from reclaim.retention.spark_session import build_spark_session
from reclaim.retention.stream_state import StreamRetentionState
from reclaim.schemas import StreamCut, TruncationEvent, build_codec, millis_now
from reclaim.schemas.codec import RecordCodec
from reclaim.settings import Settings
from reclaim.tools.topics import TopicSpec, admin_client, create_topics, topic_specs

RUN_TIMEOUT_S = 900
EVENT_TIMEOUT_S = 60.0
SAMPLE_EVERY_S = 0.5
ROUNDS = 3
Truncation = tuple[str, StreamCut]


# --- Kafka at the edges -----------------------------------------------------------------------------------


def fresh_topics(bootstrap: str, partitions: int, outputs: Sequence[str] = ()) -> RetentionTopics:
    """reclaim's topics under a new prefix, plus ``outputs`` (suffixes) as extra truncation topics."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    settings = Settings(topic_prefix=prefix, partitions=partitions)
    extra = [TopicSpec(f"{prefix}{suffix}", settings.partitions, {}) for suffix in outputs]
    create_topics(admin_client(bootstrap), [*topic_specs(settings), *extra])
    return RetentionTopics.from_names(TopicNames.for_prefix(prefix))


def produce(bootstrap: str, codec: RecordCodec, inputs: Sequence[Input]) -> float:
    """Produce ``inputs`` and wait for every confirmation; the time the last one was confirmed."""
    producer = RecordProducer(bootstrap, "producer", {"linger.ms": 0 if len(inputs) < 100 else 20})
    tracker = DeliveryTracker()
    confirmed = [0.0]

    def on_delivery(index: int) -> Callable[..., None]:
        report = tracker.callback(index)

        def confirm(err: object, msg: Message) -> None:
            confirmed[0] = time.perf_counter()
            report(err, msg)

        return confirm

    for index, item in enumerate(inputs):
        producer.send(item.topic, codec.encode(item.record, item.topic), item.key.encode(),
                      on_delivery=on_delivery(index))
    unconfirmed = producer.wait(tracker, 120)
    producer.close()
    assert not unconfirmed, f"{len(unconfirmed)} of {len(inputs)} records unconfirmed"
    return confirmed[0]


def new_consumer(bootstrap: str) -> Consumer:
    return Consumer(kafka_config(bootstrap, "consumer", {"group.id": f"bench-{uuid.uuid4().hex[:8]}",
                                                         "enable.auto.commit": False}))


def read_from_start(consumer: Consumer, topic: str) -> Iterator[list[Message]]:
    """Every message on ``topic`` now, in batches: each partition from its beginning to its high watermark."""
    ends: dict[int, int] = {}
    for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        if high > low:
            ends[partition] = high
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING) for partition in ends])
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while ends:
        assert time.monotonic() < deadline, f"{topic}: partitions {sorted(ends)} not read to their end"
        batch = consumer.consume(10_000, 0.5)
        for message in batch:
            assert message.error() is None, f"{topic}: {message.error()}"
            if message.offset() + 1 >= ends.get(message.partition(), math.inf):
                del ends[message.partition()]
        yield batch
    consumer.unassign()


def truncations_on(bootstrap: str, topic: str, codec: RecordCodec) -> list[Truncation]:
    """Every (stream, cut) of the TruncationEvents on ``topic``."""
    consumer = new_consumer(bootstrap)
    try:
        events = [codec.decode(m.value(), topic, TruncationEvent) for b in read_from_start(consumer, topic) for m in b]
    finally:
        consumer.close()
    return [(event.stream, event.cut) for event in events]


class Tail:
    """A consumer tailing the truncation topic: the latest cut of each stream, and when it was read."""

    def __init__(self, bootstrap: str, topic: str, codec: RecordCodec) -> None:
        self.topic, self.codec = topic, codec
        self.consumer = new_consumer(bootstrap)
        partitions = self.consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self.cuts: dict[str, StreamCut] = {}

    def wait_until(self, done: Callable[[], bool], timeout_s: float) -> float:
        """Read until ``done()``; the time it became true. Raises after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, f"no expected truncation on {self.topic} in {timeout_s:.0f}s"
            for message in self.consumer.consume(1000, 0.005):
                assert message.error() is None, f"{self.topic}: {message.error()}"
                event = self.codec.decode(message.value(), self.topic, TruncationEvent)
                self.cuts[event.stream] = event.cut
        return time.perf_counter()

    def close(self) -> None:
        self.consumer.close()


# --- memory, from /proc ---------------------------------------------------------------------------------------


def proc_kib(pid: int, file: str, field: str) -> int:
    """A ``kB`` field of /proc/<pid>/<file>; 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def python_workers(jvm_pid: int) -> list[int]:
    """The JVM's descendants running PySpark's daemon or workers (the daemon forks the workers)."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1])
            commands[int(entry.name)] = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue

    def under_jvm(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == jvm_pid:
                return True
        return False

    return [pid for pid, cmd in commands.items()
            if ("pyspark.daemon" in cmd or "pyspark/worker" in cmd) and under_jvm(pid)]


class Watch:
    """Calls each probe every 0.5 s on a thread while in the ``with`` block."""

    def __init__(self, *probes: Callable[[], None]) -> None:
        self.probes = probes
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while True:
            for probe in self.probes:
                probe()
            if self._stop.wait(SAMPLE_EVERY_S):
                return

    def __enter__(self) -> Watch:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()


class Peaks:
    """The peak of each value ``measure()`` returns, over every call."""

    def __init__(self, measure: Callable[[], dict[str, int]]) -> None:
        self.measure = measure
        self.peaks: dict[str, int] = {}

    def __call__(self) -> None:
        for key, value in self.measure().items():
            self.peaks[key] = max(value, self.peaks.get(key, 0))


class StageSpans:
    """When each Spark stage was first and last seen active, and its task count (from the status tracker)."""

    def __init__(self, spark: SparkSession) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.started = time.perf_counter()
        self.spans: dict[int, tuple[float, float, int]] = {}

    def __call__(self) -> None:
        now = time.perf_counter() - self.started
        for stage in self.tracker.getActiveStageIds():
            info = self.tracker.getStageInfo(stage)
            first = self.spans.get(stage, (now, now, 0))[0]
            self.spans[stage] = (first, now, info.numTasks if info else 0)

    def describe(self) -> str:
        return ", ".join(f"{tasks} tasks {last - first:.1f} s" for first, last, tasks in self.spans.values())


# --- (a) latency ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    streams: int
    subscribers: int
    latency_streams: int
    latency_subscribers: int
    latency_cuts: int
    trigger_interval_s: float
    rounds: int
    partitions: int


def preload(bootstrap: str, codec: RecordCodec, topics: RetentionTopics, streams: int, subscribers: int,
            cut_of: CutOf) -> None:
    """Produce every stream's setup records (setup, not timed as part of any method) and say how long it took."""
    started, now_ms = time.perf_counter(), millis_now()
    inputs = [item for i in range(streams)
              for item in stream_setup(topics, stream_name(i), subscribers, cut_of, now_ms)]
    produce(bootstrap, codec, inputs)
    print(f"  preloaded {streams} streams x {subscribers} subscribers ({len(inputs)} records) "
          f"in {time.perf_counter() - started:.1f} s (setup)")


@dataclass(frozen=True)
class Latency:
    waits: list[float]
    first_s: float
    batches: list[BatchSummary]


def latency(spark: SparkSession, bootstrap: str, sizes: Sizes, work: Path) -> Latency:
    """Seconds from each completing cut's confirmation to its event read, with the job running continuously."""
    codec, streams, n = build_codec(), sizes.latency_streams, sizes.latency_subscribers
    topics = fresh_topics(bootstrap, sizes.partitions)
    preload(bootstrap, codec, topics, streams, n, laggard_cut)
    config = RetentionJobConfig(bootstrap, topics, str(work / "checkpoint-latency"),
                                trigger_interval_s=sizes.trigger_interval_s)
    tail, rng = Tail(bootstrap, topics.truncation, codec), random.Random(47)
    started = time.perf_counter()
    job = start_retention_job(spark, config)
    try:
        first = tail.wait_until(lambda: len(tail.cuts) == streams, RUN_TIMEOUT_S) - started
        bound = common_cut(laggard_cut(i, n) for i in range(n))
        assert set(tail.cuts.values()) == {bound}, "a first truncation is not at the subscribers' bound"
        waits = []
        for i in range(sizes.latency_cuts):
            stream, round_ = stream_name(i % streams), 1 + i // streams
            time.sleep(rng.uniform(0, sizes.trigger_interval_s))  # a random moment of the trigger interval
            produce(bootstrap, codec, [subscriber_cut(topics, stream, j, laggard_cut(j, n, round_), millis_now())
                                       for j in range(n - 1)])
            last = laggard_cut(n - 1, n, round_)
            confirmed = produce(bootstrap, codec, [subscriber_cut(topics, stream, n - 1, last, millis_now())])
            waits.append(tail.wait_until(lambda s=stream, c=last: tail.cuts.get(s) == c, EVENT_TIMEOUT_S) - confirmed)
    finally:
        batches = job.stop()
        tail.close()
    return Latency(waits, first, batches)


# --- (b) throughput, (c) memory -------------------------------------------------------------------------------


def job_run(spark: SparkSession, bootstrap: str, topics: RetentionTopics, checkpoint: Path,
            watch: Watch) -> tuple[float, list[BatchSummary]]:
    """An availableNow run from a fresh checkpoint, writing to ``topics.truncation``: seconds and its batches."""
    config = RetentionJobConfig(bootstrap, topics, str(checkpoint), once=True)
    with watch:
        started = time.perf_counter()
        job = start_retention_job(spark, config)
        try:
            assert job.await_termination(RUN_TIMEOUT_S), f"the availableNow run did not end in {RUN_TIMEOUT_S}s"
            elapsed = time.perf_counter() - started
        finally:
            batches = job.stop()
    return elapsed, batches


def plain_run(bootstrap: str, topics: RetentionTopics) -> float:
    """One process: read the inputs in apply order, fold, decide, produce to ``topics.truncation``; seconds."""
    codec, types = build_codec(), topics.input_types()
    started = time.perf_counter()
    states: dict[str, StreamRetentionState] = {}
    consumer = new_consumer(bootstrap)
    try:
        for topic in topics.inputs:  # topology, config, subscribers, subscriber cuts, recorded cuts
            for batch in read_from_start(consumer, topic):
                now_ms = millis_now()
                for message in batch:
                    record = codec.decode(message.value(), topic, types[topic])
                    state = states.get(record.stream)
                    if state is None:
                        state = states[record.stream] = StreamRetentionState(record.stream)
                    rejection = state.apply(record, now_ms)
                    assert rejection is None, rejection
    finally:
        consumer.close()
    producer, tracker, now_ms = RecordProducer(bootstrap, "producer"), DeliveryTracker(), millis_now()
    for stream, state in states.items():
        event = state.decide(now_ms)
        if event is not None:
            producer.send(topics.truncation, codec.encode(event, topics.truncation), stream.encode(),
                          on_delivery=tracker.callback(tracker.sent))
    unconfirmed = producer.wait(tracker, RUN_TIMEOUT_S)
    elapsed = time.perf_counter() - started
    producer.close()
    assert not unconfirmed, f"{len(unconfirmed)} truncation events unconfirmed"
    return elapsed


def check_events(label: str, found: Sequence[object], expected: set[object], what: str = "events",
                 per: str = "streams") -> None:
    """One output (``what``) per stream or topic (``per``), and the set of them the one expected."""
    assert len(found) == len(expected), f"{label}: {len(found)} {what} for {len(expected)} {per}"
    assert set(found) == expected, f"{label}: {len(set(found) ^ expected)} {what} differ from the expected"


@dataclass(frozen=True)
class Throughput:
    job_s: list[float]
    plain_s: list[float]
    batches: list[BatchSummary]
    stages: list[str]
    job_memory: dict[str, int]
    plain_memory: dict[str, int]
    bound: StreamCut


def throughput(spark: SparkSession, bootstrap: str, sizes: Sizes, work: Path) -> Throughput:
    """Interleaved rounds of the job and the plain consumer over the same preloaded inputs, each to its own topic."""
    codec, streams, n = build_codec(), sizes.streams, sizes.subscribers
    outputs = [f"truncation-{method}-{r}" for r in range(sizes.rounds) for method in ("job", "plain")]
    topics = fresh_topics(bootstrap, sizes.partitions, outputs)
    prefix = topics.truncation.removesuffix("truncation")
    preload(bootstrap, codec, topics, streams, n, spread_cut)
    bound = common_cut(spread_cut(i, n) for i in range(n))
    expected = {(stream_name(i), bound) for i in range(streams)}
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    job_memory, plain_memory = Peaks(lambda: job_memory_now(jvm_pid)), Peaks(own_memory_now)
    job_s, plain_s, batches, stages = [], [], [], []
    for r in range(sizes.rounds):
        into, spans = replace(topics, truncation=f"{prefix}truncation-job-{r}"), StageSpans(spark)
        elapsed, summaries = job_run(spark, bootstrap, into, work / f"checkpoint-{r}", Watch(job_memory, spans))
        check_events("job", truncations_on(bootstrap, into.truncation, codec), expected)
        job_s.append(elapsed)
        batches.extend(summaries)
        stages.append(spans.describe())
        into = replace(topics, truncation=f"{prefix}truncation-plain-{r}")
        with Watch(plain_memory):
            plain_s.append(plain_run(bootstrap, into))
        check_events("plain", truncations_on(bootstrap, into.truncation, codec), expected)
    return Throughput(job_s, plain_s, batches, stages, job_memory.peaks, plain_memory.peaks, bound)


def job_memory_now(jvm_pid: int) -> dict[str, int]:
    workers = python_workers(jvm_pid)
    return {"driver JVM RSS": proc_kib(jvm_pid, "status", "VmRSS"),
            "Python workers RSS, summed": sum(proc_kib(pid, "status", "VmRSS") for pid in workers),
            "Python workers PSS, summed": sum(proc_kib(pid, "smaps_rollup", "Pss") for pid in workers),
            "Python worker processes": len(workers)}


def own_memory_now() -> dict[str, int]:
    return {"this process RSS (plain consumer + Spark's Python driver)": proc_kib(os.getpid(), "status", "VmRSS")}


# --- the report -----------------------------------------------------------------------------------------------


def describe_batches(batches: Sequence[BatchSummary]) -> str:
    if not batches:
        return "no batches counted"
    durations = [b.duration_ms for b in batches]
    return (f"{len(batches)} batches, {sum(b.input_rows for b in batches)} input rows, "
            f"{sum(b.events for b in batches)} events, {sum(b.reject_count for b in batches)} rejects; "
            f"batch ms median {statistics.median(durations):.0f}, max {max(durations)}")


def add_batches(figures: Figures, name: str, batches: Sequence[BatchSummary]) -> None:
    """What :func:`describe_batches` prints, as figures named ``<name>_...``."""
    figures.add(f"{name}_batches", len(batches))
    if batches:
        durations = [b.duration_ms for b in batches]
        figures.add(f"{name}_input_rows", sum(b.input_rows for b in batches))
        figures.add(f"{name}_events", sum(b.events for b in batches))
        figures.add(f"{name}_rejects", sum(b.reject_count for b in batches))
        figures.add(f"{name}_batch_median_ms", statistics.median(durations))
        figures.add(f"{name}_batch_max_ms", max(durations))


def report_latency(sizes: Sizes, result: Latency, figures: Figures) -> None:
    waits, target = result.waits, sizes.trigger_interval_s + 2
    p95 = sorted(waits)[max(0, math.ceil(0.95 * len(waits)) - 1)]  # nearest rank
    print(f"  start -> first truncation of all {sizes.latency_streams} streams read: {result.first_s:.2f} s")
    print(f"  last cut confirmed -> TruncationEvent read, {len(waits)} cuts: median {statistics.median(waits):.3f} s, "
          f"p95 {p95:.3f} s, max {max(waits):.3f} s")
    print(f"    target p95 <= trigger + 2 s = {target:g} s: {verdict(p95 <= target)}")
    print(f"    each: {', '.join(f'{w:.2f}' for w in waits)}")
    print(f"  the job meanwhile: {describe_batches(result.batches)}")
    key = f"latency_{sizes.latency_streams}"
    figures.add(f"{key}_first_truncation_s", result.first_s)
    figures.add(f"{key}_cut_to_event_median_s", statistics.median(waits))
    figures.add(f"{key}_cut_to_event_p95_s", p95)
    figures.add(f"{key}_cut_to_event_max_s", max(waits))
    figures.add(f"{key}_cut_to_event_p95_target_s", target)
    figures.add(f"{key}_cut_to_event_each_s", ", ".join(f"{w:.2f}" for w in waits))
    add_batches(figures, f"{key}_job", result.batches)


def report_throughput(sizes: Sizes, result: Throughput, figures: Figures) -> None:
    key = f"throughput_{sizes.streams}"
    figures.rate(f"{key}_job", "job: availableNow, fresh checkpoint", sizes.streams, result.job_s,
                 unit="streams", width=38)
    figures.rate(f"{key}_plain", "plain single-process consumer", sizes.streams, result.plain_s,
                 unit="streams", width=38)
    figures.ratio(f"{key}_job_over_plain", "job / plain (streams/s):", result.job_s, result.plain_s, 0.5)
    print(f"  both: one event per stream, the same (stream, cut) set, at the bound {result.bound.as_dict()}")
    print(f"  the job's runs: {describe_batches(result.batches)}")
    add_batches(figures, f"{key}_job", result.batches)
    for r, stages in enumerate(result.stages):
        print(f"    round {r} Spark stages (seen active): {stages}")


def report_memory(result: Throughput, figures: Figures) -> None:
    for method, peaks in (("job", result.job_memory), ("plain", result.plain_memory)):
        for name, value in peaks.items():
            counted = "processes" in name
            shown = f"{value:8d}" if counted else f"{value / 1024:8.0f} MiB"
            print(f"  peak {name:58} {shown}")
            slug = "_".join("".join(c if c.isalnum() else " " for c in name.split(" (")[0].lower()).split())
            figures.add(f"memory_{method}_peak_{slug}" + ("" if counted else "_mib"),
                        value if counted else value / 1024)


NOTE = """note: the job runs on local[2] with 2 shuffle partitions: the streams' folds run in two Python workers
while the JVM reads Kafka, shuffles and keeps state on the same two cores, which the broker shares too.
Spark spreads streams over shuffle partitions and executors, so with more cores (more partitions, more
executors) the job's streams/s grows with them; the plain consumer is one process on one core and does not.
On this machine the ratio compares per-stream cost, not scaling. A small batch's time (and so the latency
floor) is Spark's fixed cost per micro-batch: planning, reading the input partitions, one shuffle, the
stateful step in Python and the state store's commit, about 2 s here whatever the rows."""


# --- main -----------------------------------------------------------------------------------------------------


def parse_sizes(argv: Sequence[str] | None = None) -> tuple[Sizes, str | None]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=10_000, help="streams of the throughput runs (10000)")
    parser.add_argument("--subscribers", type=int, default=10, help="subscribers per stream there (10)")
    parser.add_argument("--latency-streams", type=int, default=1000, help="streams preloaded for latency (1000)")
    parser.add_argument("--latency-subscribers", type=int, default=5, help="subscribers per stream there (5)")
    parser.add_argument("--latency-cuts", type=int, default=20, help="completing cuts timed (20)")
    parser.add_argument("--trigger-interval-s", type=float, default=1.0, help="the job's trigger interval (1.0)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved throughput rounds ({ROUNDS})")
    parser.add_argument("--partitions", type=int, default=Settings.partitions,
                        help=f"partitions of every topic ({Settings.partitions}, as `reclaim topics create`)")
    parser.add_argument("--bootstrap", help="a running broker (else RECLAIM_KAFKA_BOOTSTRAP, else one is started)")
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        sizes = Sizes(500, 4, 100, 3, 5, args.trigger_interval_s, 1, args.partitions)
    else:
        sizes = Sizes(args.streams, args.subscribers, args.latency_streams, args.latency_subscribers,
                      args.latency_cuts, args.trigger_interval_s, args.rounds, args.partitions)
    bootstrap = args.bootstrap or os.environ.get("RECLAIM_KAFKA_BOOTSTRAP") or os.environ.get("RECLAIM_BOOTSTRAP")
    return sizes, bootstrap


def main() -> None:
    sizes, bootstrap = parse_sizes()
    begun, figures = time.time(), Figures()
    on_broker_and_spark("reclaim-bench-retention", bootstrap,
                        lambda spark, address, work: run(spark, address, sizes, work, figures))
    record("retention_job", asdict(sizes), figures, begun)


def on_broker_and_spark(app: str, bootstrap: str | None, body: Callable[[SparkSession, str, Path], None]) -> None:
    """``body(spark, bootstrap, work)`` in a temporary directory ``work``, on the broker ``bootstrap`` names (one of
    its own when None) and a local Spark session; the session and the broker started here stopped afterwards."""
    with tempfile.TemporaryDirectory(prefix="reclaim-bench-") as tmp:
        work = Path(tmp)
        started: list[int] = []
        if not bootstrap:
            ports = BrokerPorts(free_port(), free_port())
            started.append(start_broker(work / "kafka", Settings.from_env().cache_dir, ports).pid)
            bootstrap = ports.bootstrap
        spark = build_spark_session(app, Settings.from_env().cache_dir)
        spark.sparkContext.setLogLevel("ERROR")  # stopping the continuous query interrupts a batch: not news
        try:
            body(spark, bootstrap, work)
        finally:
            spark.stop()
            for pid in started:
                stop_pid(pid)


def load() -> str:
    """The 1-minute load average: others' work on this shared machine shows in every figure."""
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def run(spark: SparkSession, bootstrap: str, sizes: Sizes, work: Path, figures: Figures) -> None:
    print(f"retention job, {load()}, Spark {spark.version} {spark.sparkContext.master}, "
          f"{spark.conf.get('spark.sql.shuffle.partitions')} shuffle partitions, {sizes.partitions} partitions a topic")
    print(f"(a) latency: {sizes.latency_streams} streams x {sizes.latency_subscribers} subscribers, job running "
          f"with trigger interval {sizes.trigger_interval_s:g} s, re-evaluation every "
          f"{RetentionJobConfig.reevaluate_ms / 1000:g} s; at the start {load()}")
    figures.add("load_average_1min_at_start", os.getloadavg()[0])
    report_latency(sizes, latency(spark, bootstrap, sizes, work), figures)
    print(f"(b) throughput: {sizes.streams} streams x {sizes.subscribers} subscribers at once, "
          f"{sizes.rounds} round(s) of job then plain consumer; at the start {load()}")
    result = throughput(spark, bootstrap, sizes, work)
    report_throughput(sizes, result, figures)
    print("(c) memory, sampled every 0.5 s during (b): the job's runs, then the plain consumer's")
    report_memory(result, figures)
    print(f"at the end {load()}")
    figures.add("load_average_1min_at_end", os.getloadavg()[0])
    print(NOTE)


if __name__ == "__main__":
    main()
