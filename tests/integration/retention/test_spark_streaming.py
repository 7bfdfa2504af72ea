"""A Spark Structured Streaming query reads subscriber cuts from the broker and decodes them with reclaim's codec."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import DataFrame, SparkSession

from reclaim.producers.topics import TopicNames
from reclaim.schemas import (
    RecordDecodeError,
    StreamCut,
    SubscriberChange,
    SubscriberChangeType,
    SubscriberCut,
    build_codec,
)
from reclaim.settings import Settings
from reclaim.tools.topics import admin_client, create_topics, topic_specs
from tests.support.kafka_io import Outgoing, produce_confirmed

pytestmark = [pytest.mark.integration, pytest.mark.spark]

QUERY_TIMEOUT_S = 120
CUT_ROWS = ("key STRING, stream STRING, subscriber STRING, generation LONG, cut MAP<LONG, LONG>, "
            "published_at LONG, error STRING")
"""What the decoding step emits per Kafka message: a decoded cut, or ``error`` naming why it is not one."""

FIRST_CUTS = (
    SubscriberCut("scope/orders", "billing", 1, StreamCut.from_mapping({0: 128, 1: 64}), 1_700_000_000_000),
    SubscriberCut("scope/orders", "audit", 4, StreamCut.from_mapping({0: 0, (1 << 32) | 2: 17}), 1_700_000_000_500),
    SubscriberCut("scope/clicks", "billing", 2, StreamCut(), 1_700_000_001_000),
)
LATER_CUTS = (
    SubscriberCut("scope/orders", "billing", 2, StreamCut.from_mapping({0: 4096, 1: 512}), 1_700_000_002_000),
)


def subscriber_cut_decoder() -> Callable[[Iterable[pd.DataFrame]], Iterable[pd.DataFrame]]:
    """The ``mapInPandas`` step: Kafka rows in, one ``CUT_ROWS`` row per message out, never an exception.

    Built in a factory so Spark pickles the function by value: workers then import ``schemas`` and pandas,
    which the function refers to, but never this test module.
    """

    def decode(batches: Iterable[pd.DataFrame]) -> Iterable[pd.DataFrame]:
        codec = build_codec()
        columns = ["key", "stream", "subscriber", "generation", "cut", "published_at", "error"]
        for batch in batches:
            rows: list[dict[str, Any]] = []
            for key, topic, value in zip(batch["key"], batch["topic"], batch["value"], strict=True):
                row: dict[str, Any] = dict.fromkeys(columns)
                row["key"] = None if key is None else bytes(key).decode(errors="replace")
                try:
                    cut = codec.decode(value, topic, SubscriberCut)
                except RecordDecodeError as exc:
                    row["error"] = exc.reason.name
                else:
                    row.update(stream=cut.stream, subscriber=cut.subscriber, generation=cut.generation,
                               cut=cut.cut.as_dict(), published_at=cut.published_at)
                rows.append(row)
            yield pd.DataFrame(rows, columns=columns).astype({"generation": "Int64", "published_at": "Int64"})

    return decode


@dataclass
class BatchSink:
    """A ``foreachBatch`` sink that keeps each micro-batch's rows by batch id, so a replayed batch replaces itself."""

    batches: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        self.batches[batch_id] = [row.asDict() for row in frame.collect()]

    def rows(self) -> list[dict[str, Any]]:
        return [row for _, rows in sorted(self.batches.items()) for row in rows]


@dataclass
class CutsQuery:
    """The streaming query over one subscriber-cuts topic, with a checkpoint that outlives each run."""

    spark: SparkSession
    bootstrap: str
    topic: str
    checkpoint: Path

    def run(self) -> list[dict[str, Any]]:
        """Run once over everything not yet processed (``availableNow``); the rows its sink received."""
        sink = BatchSink()
        frame = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", self.topic)
            .option("startingOffsets", "earliest")
            .load()
            .select("key", "topic", "value")
            .mapInPandas(subscriber_cut_decoder(), CUT_ROWS)
        )
        query = (
            frame.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            finished = query.awaitTermination(QUERY_TIMEOUT_S)
        finally:
            query.stop()
        assert finished, f"the availableNow query did not finish in {QUERY_TIMEOUT_S}s"
        assert query.exception() is None
        return sink.rows()


def cut_message(topic: str, cut: SubscriberCut) -> Outgoing:
    return Outgoing(topic, build_codec().encode(cut, topic), f"{cut.stream}/{cut.subscriber}".encode())


def in_order(cuts: Iterable[SubscriberCut]) -> list[SubscriberCut]:
    return sorted(cuts, key=lambda cut: (cut.stream, cut.subscriber, cut.generation))


def decoded_cuts(rows: list[dict[str, Any]]) -> list[SubscriberCut]:
    """The records the decoded rows describe, rebuilt as ``SubscriberCut``s, in a stable order."""
    return in_order(SubscriberCut(row["stream"], row["subscriber"], row["generation"],
                                  StreamCut.from_mapping(row["cut"]), row["published_at"])
                    for row in rows if row["error"] is None)


@dataclass(frozen=True)
class FirstRun:
    query: CutsQuery
    rows: list[dict[str, Any]]


@pytest.fixture(scope="module")
def first_run(spark: SparkSession, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> FirstRun:
    """Cuts and two poison values on a fresh subscriber-cuts topic, read by one run of the query."""
    prefix = f"spark-{uuid.uuid4().hex[:12]}."
    create_topics(admin_client(kafka_bootstrap), topic_specs(Settings(topic_prefix=prefix, partitions=2)))
    topic = TopicNames.for_prefix(prefix).subscriber_cuts
    codec = build_codec()
    wrong_type = SubscriberChange("scope/orders", "billing", 1, SubscriberChangeType.ADD, 1_700_000_000_000)
    produce_confirmed(kafka_bootstrap, [
        *(cut_message(topic, cut) for cut in FIRST_CUTS),
        Outgoing(topic, b"{\"not\": \"avro\"}", b"poison/json"),
        Outgoing(topic, codec.encode(wrong_type, topic), b"poison/subscriber-change"),
    ])
    query = CutsQuery(spark, kafka_bootstrap, topic, tmp_path_factory.mktemp("cuts-query") / "checkpoint")
    return FirstRun(query, query.run())


def test_every_produced_cut_comes_out_of_the_query_decoded(first_run: FirstRun) -> None:
    assert decoded_cuts(first_run.rows) == in_order(FIRST_CUTS)
    # The cut column is a map of segment id to offset, ids of later epochs included.
    audit = next(row for row in first_run.rows if row["key"] == "scope/orders/audit")
    assert audit["cut"] == {0: 0, (1 << 32) | 2: 17}


def test_poison_values_become_error_rows_and_the_query_still_finishes(first_run: FirstRun) -> None:
    errors = {row["key"]: row for row in first_run.rows if row["error"] is not None}
    assert {key: row["error"] for key, row in errors.items()} == {
        "poison/json": "BAD_MARKER",
        "poison/subscriber-change": "UNEXPECTED_TYPE",
    }
    assert all(row["stream"] is None and row["cut"] is None for row in errors.values())


def test_a_restarted_query_reads_only_what_arrived_after_its_checkpoint(
    first_run: FirstRun, kafka_bootstrap: str
) -> None:
    produce_confirmed(kafka_bootstrap, [cut_message(first_run.query.topic, cut) for cut in LATER_CUTS])

    rows = first_run.query.run()

    assert decoded_cuts(rows) == in_order(LATER_CUTS)
    assert all(row["error"] is None for row in rows)
