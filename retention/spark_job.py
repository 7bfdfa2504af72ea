"""The retention job: a Structured Streaming query from reclaim's retention inputs to truncation events and rejects.

The five input topics (topology, config, subscribers, subscriber cuts, recorded cuts) and the job's
wake-up topic are read from the earliest offsets with ``failOnDataLoss`` false: four of them are
compacted and the recorded-cut topic has a retention time, so offsets a checkpoint names can vanish
while the job is stopped. That loss is safe: a compacted topic still holds every key's latest value, a
lost recorded cut only means one truncation point fewer, and every stream's state keeps what it
applied. Failing the query instead would stop retention for every stream until an operator deleted
the checkpoint and its state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from reclaim.errors import ReclaimError
from reclaim.retention.spark_auth import OUTPUT_HEADERS, JobKeys
from reclaim.retention.spark_io import (
    DECIDED,
    DEFAULT_BUCKETS,
    OUTPUT_ROWS,
    STATE_ROWS,
    RetentionTopics,
    input_columns,
)
from reclaim.retention.spark_metrics import OBSERVATION, BatchSummary, RetentionProgressListener, observed_columns
from reclaim.retention.spark_offsets import Offsets, reached, source_offsets, topic_ends
from reclaim.retention.spark_state import stream_retention_step

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

QUERY_NAME = "reclaim-retention"
LISTENER_WAIT_S = 30.0
MAX_ONCE_RUNS = 5
WAKEUP_BLOCK_MS = 15_000
"""How long the wake-up's producer waits for the topic's metadata before giving up (Kafka's default is 60 s)."""


class RetentionJobError(ReclaimError):
    """The retention query failed or did not finish; the message carries Spark's first line."""


@dataclass(frozen=True)
class RetentionJobConfig:
    """What the retention query needs: where Kafka is, the topics, the checkpoint and the pacing.

    ``checkpoint`` is a path or URI Spark can write (a local directory, or HDFS/S3 on a cluster).
    ``once`` runs one micro-batch over everything on the topics now, then the query stops. It is
    Spark's once trigger, not ``availableNow``: with a processing-time timeout Spark runs another
    (no-data) batch after every batch to look for timeouts, so an ``availableNow`` query never ends.
    """

    bootstrap: str
    topics: RetentionTopics
    checkpoint: str
    trigger_interval_s: float = 5.0
    reevaluate_ms: int = 30_000
    once: bool = False
    registry_url: str | None = None
    registry_config: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """The registry client's settings (basic auth, CA), as pairs: executors key their codec cache on them."""
    state_buckets: int = DEFAULT_BUCKETS
    query_name: str = QUERY_NAME
    kafka_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    """The Java client's settings (security), each given as ``kafka.<name>``; may hold secrets."""
    keys: JobKeys | None = field(default=None, repr=False)
    """What the executors verify inputs by and sign truncation events with (``reclaim.retention.spark_auth``): keys
    travel inside the job, never as a file on the executors; None: nothing is verified or signed."""

    def __post_init__(self) -> None:
        if self.trigger_interval_s <= 0 or self.reevaluate_ms <= 0 or self.state_buckets <= 0:
            raise ValueError("trigger_interval_s, reevaluate_ms and state_buckets must be positive")


def retention_inputs(spark: SparkSession, config: RetentionJobConfig) -> DataFrame:
    """Every message of the input topics as an ``INPUT_COLUMNS`` row (decoded later, in the stateful step)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", config.bootstrap)
        .option("subscribe", ",".join(config.topics.subscribed))
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false")
        .option("includeHeaders", "true")  # the signature headers, verified in the stateful step
    )
    for name, value in config.kafka_options.items():
        reader = reader.option(f"kafka.{name}", value)
    # One task per Kafka partition (five topics of several partitions each) for a few records per batch;
    # as many tasks as the cluster has cores read the same rows with less scheduling.
    return (
        reader.load()
        .coalesce(spark.sparkContext.defaultParallelism)
        .selectExpr(*input_columns(config.topics, config.state_buckets))
    )


def retention_outputs(inputs: DataFrame, config: RetentionJobConfig) -> DataFrame:
    """The records to write (``topic``, ``key``, ``value``, ``headers``: the job's signature on a truncation
    event), with the batch's counts observed on the way."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    step = stream_retention_step(config.topics, config.registry_url, config.reevaluate_ms, config.registry_config,
                                 config.keys)
    return (
        inputs.groupBy("bucket")
        .applyInPandasWithState(step, OUTPUT_ROWS, STATE_ROWS, "update", GroupStateTimeout.ProcessingTimeTimeout)
        .observe(OBSERVATION, *observed_columns())
        .where(F.col("outcome") != DECIDED)
        .selectExpr("topic", "key", "value", OUTPUT_HEADERS)
    )


@dataclass(frozen=True)
class RetentionJob:
    """A started retention query and the listener that logs and counts its batches."""

    spark: SparkSession
    query: StreamingQuery
    listener: RetentionProgressListener

    def await_termination(self, timeout_s: int | None = None) -> bool:
        """Wait for the query to stop (a ``once`` run ends by itself); raise if it failed."""
        from pyspark.errors import StreamingQueryException

        try:
            if timeout_s is None:
                self.query.awaitTermination()
                return True
            return bool(self.query.awaitTermination(timeout_s))
        except StreamingQueryException as exc:
            raise RetentionJobError(f"retention query failed: {str(exc).splitlines()[0]}") from exc

    def read_offsets(self) -> Offsets | None:
        """How far the last batch read the input topics; None when no batch ran."""
        last = self.query.lastProgress
        return None if last is None else source_offsets(last["sources"][0]["endOffset"])

    def stop(self) -> list[BatchSummary]:
        """Stop the query, wait until the listener has counted its last batch, detach it; this run's batches."""
        self.query.stop()
        last = self.query.lastProgress
        if last is not None and not self.listener.wait_for_batch(int(last["batchId"]), LISTENER_WAIT_S):
            log.warning("the progress of batch %s was not counted in %.0fs", last["batchId"], LISTENER_WAIT_S)
        self.spark.streams.removeListener(self.listener)
        return list(self.listener.recent)


def write_wakeup(spark: SparkSession, config: RetentionJobConfig) -> bool:
    """Write one record to the wake-up topic, so that the query's first batch runs at once; whether it was written.

    Spark runs no batch after a restart until some input arrives (the timers of the state it restored wait
    for one), so an idle stream's time limit would fire only at its next recorded cut. The record goes
    through Spark's Kafka writer with the query's own settings (its security included). A topic that is
    missing or refused is a warning, not a failure: the job then behaves as before the wake-up existed.
    """
    topic = config.topics.wakeups
    if topic is None:
        return False
    row = [(config.query_name, str(int(time.time() * 1000)))]
    writer = (spark.createDataFrame(row, "key STRING, value STRING").write.format("kafka")
              .option("kafka.bootstrap.servers", config.bootstrap)
              .option("kafka.max.block.ms", str(WAKEUP_BLOCK_MS))
              .option("topic", topic))
    for name, value in config.kafka_options.items():
        writer = writer.option(f"kafka.{name}", value)
    try:
        writer.save()
    except Exception as exc:  # noqa: BLE001 - Spark wraps every Kafka failure (missing topic, ACL) alike
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        log.warning("could not write a wake-up to %s (run `reclaim topics create`?): time limits wait for the "
                    "next input: %s", topic, first)
        return False
    return True


def start_retention_job(spark: SparkSession, config: RetentionJobConfig, wake: bool = True) -> RetentionJob:
    """Start the query: Kafka in, one state per stream, truncation events and rejects out to Kafka.

    With ``wake`` a wake-up is written first (:func:`write_wakeup`), so the first batch runs without
    waiting for input.
    """
    if wake:
        write_wakeup(spark, config)
    listener = RetentionProgressListener(config.query_name)
    spark.streams.addListener(listener)
    writer = (
        retention_outputs(retention_inputs(spark, config), config).writeStream.format("kafka")
        .queryName(config.query_name)
        .outputMode("update")
        .option("kafka.bootstrap.servers", config.bootstrap)
        # The applier treats duplicates as no-ops, but an unconfirmed event would be lost: wait for all replicas.
        .option("kafka.acks", "all")
        .option("checkpointLocation", config.checkpoint)
    )
    for name, value in config.kafka_options.items():
        writer = writer.option(f"kafka.{name}", value)
    if config.once:
        writer = writer.trigger(once=True)
    else:
        writer = writer.trigger(processingTime=f"{config.trigger_interval_s} seconds")
    try:
        query = writer.start()
    except Exception:
        spark.streams.removeListener(listener)
        raise
    log.info("retention query started: inputs %s, checkpoint %s, %s", ",".join(config.topics.inputs),
             config.checkpoint, "once" if config.once else f"every {config.trigger_interval_s}s")
    return RetentionJob(spark, query, listener)


def run_available(spark: SparkSession, config: RetentionJobConfig, timeout_s: int | None = None,
                  stop: threading.Event | None = None) -> list[BatchSummary]:
    """Process everything on the input topics now, then stop; the batches it took.

    Each run is one micro-batch (the once trigger); one wake-up, written first, makes a batch run even
    when nothing new arrived, so time limits are decided. A checkpoint left by a job stopped mid-batch
    makes the first run redo that batch only, so runs repeat until the job has read to where the
    topics ended when this call began. Each run may take ``timeout_s`` (None: no limit); ``stop``
    (e.g. set by a signal handler) ends it early.
    """
    ends = topic_ends(config.bootstrap, config.topics.inputs)
    write_wakeup(spark, config)  # once: a run that redoes an unfinished batch leaves it to the next
    summaries: list[BatchSummary] = []
    for _ in range(MAX_ONCE_RUNS):
        job = start_retention_job(spark, replace(config, once=True), wake=False)
        try:
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while not job.await_termination(1):
                if deadline is not None and time.monotonic() > deadline:
                    raise RetentionJobError(f"the once run did not finish in {timeout_s}s")
                if stop is not None and stop.is_set():
                    return summaries
        finally:
            summaries += job.stop()
        read = job.read_offsets()
        if read is None or reached(read, ends):
            return summaries
        log.info("retention job redid an unfinished batch; running again to read to the topics' ends")
    raise RetentionJobError(f"not at the topics' ends after {MAX_ONCE_RUNS} runs")
