"""The retention job's Prometheus metrics from its listener's events, without Spark running: state size,
input left unread, and when the query last showed progress."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from prometheus_client import REGISTRY
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    SourceProgress,
    StreamingQueryProgress,
)

from reclaim.retention.spark_metrics import BatchSummary, RetentionProgressListener, offsets_behind_latest
from reclaim.schemas.rejects import RejectKind

QUERY = "reclaim-retention"
RUN = str(uuid.uuid4())


def state_operator(rows: int, memory: int) -> dict[str, Any]:
    return {"operatorName": "applyInPandasWithState", "numRowsTotal": rows, "numRowsUpdated": 1,
            "numRowsRemoved": 0, "allUpdatesTimeMs": 3, "allRemovalsTimeMs": 0, "commitTimeMs": 20,
            "memoryUsedBytes": memory, "numRowsDroppedByWatermark": 0, "numShufflePartitions": 2,
            "numStateStoreInstances": 2, "customMetrics": {"loadedMapCacheHitCount": 4}}


def kafka_source(metrics: dict[str, str] | None) -> dict[str, Any]:
    source: dict[str, Any] = {
        "description": "KafkaV2[Subscribe[t.stream-topology, t.stream-config]]", "startOffset": {"t": {"0": 1}},
        "endOffset": {"t": {"0": 4}}, "latestOffset": {"t": {"0": 9}}, "numInputRows": 3,
        "inputRowsPerSecond": 1.0, "processedRowsPerSecond": 2.0}
    if metrics is not None:
        source["metrics"] = metrics
    return source


def progress(batch_id: int = 3, *, operators: list[dict[str, Any]] | None = None,
             sources: list[dict[str, Any]] | None = None, name: str = QUERY, rejects: int = 0,
             run: str = RUN) -> StreamingQueryProgress:
    return StreamingQueryProgress.fromJson({
        "id": str(uuid.uuid4()), "runId": run, "name": name, "timestamp": "2026-11-26T10:00:00.000Z",
        "batchId": batch_id, "batchDuration": 1500, "durationMs": {"triggerExecution": 1500},
        "stateOperators": operators or [], "sources": sources or [],
        "sink": {"description": "kafka", "numOutputRows": 1}, "numInputRows": 3,
        "observedMetrics": {"retention": {"streams_decided": 1, "events": 1,
                                          f"rejects_{RejectKind.UNAUTHENTICATED.name}": rejects}},
    })


def started(name: str = QUERY, run: str = RUN) -> QueryStartedEvent:
    return QueryStartedEvent.fromJson({"id": str(uuid.uuid4()), "runId": run, "name": name,
                                       "timestamp": "2026-11-26T10:00:00.000Z"})


def idle(run: str = RUN) -> QueryIdleEvent:
    return QueryIdleEvent.fromJson({"id": str(uuid.uuid4()), "runId": run, "timestamp": "2026-11-26T10:00:10.000Z"})


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    assert value is not None, f"{name} {labels} is not exported"
    return value


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_batch_summary_reads_the_state_store_and_the_input_left_unread() -> None:
    summary = BatchSummary.of(progress(operators=[state_operator(12, 40_960), state_operator(3, 1024)],
                                       sources=[kafka_source({"minOffsetsBehindLatest": "0",
                                                              "maxOffsetsBehindLatest": "7",
                                                              "avgOffsetsBehindLatest": "2.5"})]))
    assert (summary.state_rows, summary.state_memory_bytes, summary.offsets_behind_latest) == (15, 41_984, 7)
    # The log line is the batch's work; the gauges carry what it left.
    assert summary.log_line().endswith("duration_ms=1500")


def test_a_batch_without_state_or_source_metrics_reads_zero_state_and_no_lag() -> None:
    summary = BatchSummary.of(progress(sources=[kafka_source(None)]))
    assert (summary.state_rows, summary.state_memory_bytes, summary.offsets_behind_latest) == (0, 0, None)


@pytest.mark.parametrize(("metrics", "expected"), [
    ([{"maxOffsetsBehindLatest": "4"}, {"maxOffsetsBehindLatest": "11"}], 11),  # the busiest source
    ([{}, {"maxOffsetsBehindLatest": "0"}], 0),
    ([{"maxOffsetsBehindLatest": "not a number"}], None),
    ([{}], None),
    ([], None),
])
def test_offsets_behind_latest_is_the_most_any_source_left_unread(metrics: list[dict[str, str]],
                                                                   expected: int | None) -> None:
    sources = [SourceProgress.fromJson(kafka_source(m)) for m in metrics]
    assert offsets_behind_latest(sources) == expected


def test_each_batch_sets_the_gauges_and_counts_its_rejects_by_kind() -> None:
    clock = Clock(1_800_000_000.0)
    listener = RetentionProgressListener(QUERY, clock=clock)
    assert sample("reclaim_retention_last_progress_timestamp_seconds") == clock.now
    before = sample("reclaim_retention_rejects_total", kind="unauthenticated")
    batches = sample("reclaim_retention_batch_duration_seconds_count")

    clock.now += 30
    listener.onQueryProgress(QueryProgressEvent(progress(
        operators=[state_operator(5, 2048)], sources=[kafka_source({"maxOffsetsBehindLatest": "9"})], rejects=2)))
    assert sample("reclaim_retention_state_rows") == 5
    assert sample("reclaim_retention_state_memory_bytes") == 2048
    assert sample("reclaim_retention_input_offsets_behind_latest") == 9
    assert sample("reclaim_retention_last_progress_timestamp_seconds") == clock.now
    assert sample("reclaim_retention_rejects_total", kind="unauthenticated") == before + 2
    assert sample("reclaim_retention_batch_duration_seconds_count") == batches + 1

    # A source that does not say leaves the last known figure; the state is what the batch left.
    listener.onQueryProgress(QueryProgressEvent(progress(4, operators=[state_operator(0, 512)])))
    assert sample("reclaim_retention_input_offsets_behind_latest") == 9
    assert (sample("reclaim_retention_state_rows"), sample("reclaim_retention_state_memory_bytes")) == (0, 512)


def test_every_kind_of_reject_is_exported_from_zero() -> None:
    exported = {s.labels["kind"] for family in REGISTRY.collect() for s in family.samples
                if s.name == "reclaim_retention_rejects_total"}
    assert exported == {kind.name.lower() for kind in RejectKind}


def test_progress_idle_reports_and_the_start_of_this_query_only_move_the_last_progress() -> None:
    clock = Clock(1_800_000_000.0)
    listener = RetentionProgressListener(QUERY, clock=clock)
    other = str(uuid.uuid4())

    clock.now += 10
    listener.onQueryStarted(started(name="another-query", run=other))
    listener.onQueryIdle(idle(run=other))
    listener.onQueryProgress(QueryProgressEvent(progress(name="another-query", run=other)))
    assert sample("reclaim_retention_last_progress_timestamp_seconds") == clock.now - 10

    listener.onQueryStarted(started())
    assert sample("reclaim_retention_last_progress_timestamp_seconds") == clock.now
    clock.now += 10
    listener.onQueryIdle(idle())  # idle: nothing new, no timeout due; alive all the same
    assert sample("reclaim_retention_last_progress_timestamp_seconds") == clock.now
    clock.now += 10
    listener.onQueryProgress(QueryProgressEvent(progress()))
    assert sample("reclaim_retention_last_progress_timestamp_seconds") == clock.now
