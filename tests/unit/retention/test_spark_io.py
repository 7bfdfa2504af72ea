"""The retention job's executor-side steps as plain functions: decoding, the per-stream step, progress, the fix."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming.listener import StreamingQueryProgress
from pyspark.sql.streaming.state import GroupState

from reclaim.retention import spark_compat
from reclaim.retention.buckets import bucket_of, decode_bucket
from reclaim.retention.spark_io import (
    DEFAULT_BUCKETS,
    INPUT_COLUMNS,
    OUTPUT_COLUMNS,
    UNDECODABLE_BUCKET,
    WAKE_BUCKET,
    input_columns,
)
from reclaim.retention.spark_metrics import BatchSummary
from reclaim.retention.spark_offsets import reached, source_offsets
from reclaim.retention.spark_state import stream_retention_step
from reclaim.schemas import LimitType, RetentionPolicy, RetentionType, build_codec, millis_now
from reclaim.schemas.rejects import RejectKind
from tests.support.spark_io import REEVALUATE_MS, TOPICS, decoded, events, group_state, rejects
from tests.support.spark_job import (
    CONSUMPTION,
    MINUTE_MS,
    STREAM,
    at,
    consumed,
    recorded,
    stream_with,
)

NOW_MS = millis_now()


BUCKET = bucket_of(STREAM, DEFAULT_BUCKETS)


def step(key: int | None, frames: list[pd.DataFrame], state: GroupState) -> pd.DataFrame:
    run = stream_retention_step(TOPICS, None, REEVALUATE_MS)
    out: Iterator[pd.DataFrame] = run((key,), frames, state)
    return pd.concat(list(out), ignore_index=True)


def test_values_that_are_no_record_of_their_keyed_stream_are_rejected_and_the_rest_applied() -> None:
    wrong_type = (TOPICS.subscriber_cuts, build_codec().encode(stream_with(CONSUMPTION)[1], "x"), STREAM)
    other = (TOPICS.stream_config, build_codec().encode(stream_with(CONSUMPTION, stream="scope/else")[1], "x"),
             STREAM)
    rows = decoded([*stream_with(CONSUMPTION, "billing"), (TOPICS.stream_cuts, b"junk", STREAM), wrong_type, other])
    assert list(rows.columns) == list(INPUT_COLUMNS) and set(rows.bucket) == {BUCKET}
    out = step(BUCKET, [rows], group_state(NOW_MS))

    found = {(r.source_topic, r.kind): r for r in rejects(out)}
    assert set(found) == {(topic, RejectKind.UNDECODABLE)
                          for topic in (TOPICS.stream_cuts, TOPICS.subscriber_cuts, TOPICS.stream_config)}
    assert found[TOPICS.stream_cuts, RejectKind.UNDECODABLE].reason.startswith("wrong marker bytes")
    assert found[TOPICS.subscriber_cuts, RejectKind.UNDECODABLE].reason.startswith("unexpected record type")
    assert "names stream 'scope/else'" in found[TOPICS.stream_config, RejectKind.UNDECODABLE].reason
    assert all(r.stream == STREAM for r in found.values())


def test_a_stream_s_rows_are_applied_in_time_then_topic_rank_order_whatever_order_they_arrive_in() -> None:
    rows = decoded([consumed("billing", at(50, 50)), recorded(at(100, 100), now_ms=NOW_MS),
                    *stream_with(CONSUMPTION, "billing")])
    # Two chunks, the cut first: applied as they come, the cut would find no topology nor subscriber.
    out = step(BUCKET, [rows.iloc[:2], rows.iloc[2:]], group_state(NOW_MS))

    assert [e.cut for e in events(out)] == [at(50, 50)]
    assert rejects(out) == []
    assert list(out.columns) == list(OUTPUT_COLUMNS) and list(out.outcome) == ["truncation", "decided"]


def test_a_refused_record_becomes_a_reject_naming_where_it_came_from() -> None:
    rows = decoded([*stream_with(CONSUMPTION, "billing"), consumed("ghost", at(5, 5))])
    out = step(BUCKET, [rows], group_state(NOW_MS))

    (reject,) = rejects(out)
    assert (reject.stream, reject.subscriber, reject.kind) == (STREAM, "ghost", RejectKind.UNKNOWN_SUBSCRIBER)
    assert (reject.source_topic, reject.source_partition, reject.source_offset) == (TOPICS.subscriber_cuts, 0, 3)
    assert reject.rejected_at == NOW_MS
    assert out[out.outcome == "reject"].key.tolist() == [STREAM.encode()]


def test_rows_without_a_key_are_rejected_and_leave_no_state() -> None:
    keyless_record = (TOPICS.stream_config, build_codec().encode(stream_with(CONSUMPTION)[1], "x"), None)
    rows = decoded([(TOPICS.stream_topology, b"\xc3\x01short", None), (TOPICS.subscribers, b"", None), keyless_record])
    state = group_state(NOW_MS)
    assert set(rows.bucket) == {UNDECODABLE_BUCKET}  # never null: pandas would turn the int column to floats
    out = step(UNDECODABLE_BUCKET, [rows], state)

    found = rejects(out)
    assert [(r.stream, r.subscriber, r.kind, r.source_topic) for r in found] == [
        ("", None, RejectKind.UNDECODABLE, TOPICS.stream_topology),
        ("", None, RejectKind.UNDECODABLE, TOPICS.stream_config),
        ("", None, RejectKind.UNDECODABLE, TOPICS.subscribers),
    ]
    assert "without a key" in found[1].reason
    assert all(r.reason for r in found) and out.key.isna().all()
    assert not state.exists


def test_wake_ups_are_read_and_dropped_leaving_no_state_and_no_output() -> None:
    wake = pd.DataFrame([{"bucket": WAKE_BUCKET, "stream": "reclaim-retention", "rank": len(TOPICS.inputs),
                          "kafka_ts": NOW_MS, "topic": "p.retention-wakeups", "partition": 0, "offset": 0,
                          "key": b"reclaim-retention", "value": b"1", "key_id": None, "signature": None}],
                        columns=list(INPUT_COLUMNS))
    state = group_state(NOW_MS)
    assert list(stream_retention_step(TOPICS, None, REEVALUATE_MS)((WAKE_BUCKET,), [wake], state)) == []
    assert not state.exists


def test_the_wake_up_topic_is_its_own_bucket_and_rank_after_the_inputs() -> None:
    columns = input_columns(replace(TOPICS, wakeups="p.retention-wakeups"), DEFAULT_BUCKETS)
    assert columns[0].startswith(f"CAST(CASE topic WHEN 'p.retention-wakeups' THEN {WAKE_BUCKET} ELSE ")
    assert f"WHEN 'p.retention-wakeups' THEN {len(TOPICS.inputs)} END" in columns[2]
    assert input_columns(replace(TOPICS, wakeups=None), DEFAULT_BUCKETS)[0].startswith("CAST(coalesce(")


def test_a_timeout_decides_again_on_the_kept_state_so_a_time_limit_fires_without_input() -> None:
    hour_max = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 0, 60 * MINUTE_MS)
    # The recorded cut is one second short of the one-hour max now, and past it two seconds later.
    stalled = [*stream_with(hour_max, "billing"), consumed("billing", at(10, 10)),
               recorded(at(100, 100), 60 * MINUTE_MS - 1000, now_ms=NOW_MS)]
    first = group_state(NOW_MS)
    first_out = step(BUCKET, [decoded(stalled)], first)
    assert [e.cut for e in events(first_out)] == [at(10, 10)]
    # Time alone changes the decision when the entry turns an hour old: one second from now.
    assert first.exists and first._timeout_timestamp == NOW_MS + 1000

    later = group_state(NOW_MS + 2000, previous=first, timed_out=True)
    out = step(BUCKET, [], later)

    assert [e.cut for e in events(out)] == [at(100, 100)]
    assert later._timeout_timestamp == -1  # the entry is gone with the truncation: nothing left for time to change


def test_a_batch_summary_reads_the_observed_counts_and_makes_one_log_line() -> None:
    progress = StreamingQueryProgress.fromJson({
        "id": str(uuid.uuid4()), "runId": str(uuid.uuid4()), "name": "reclaim-retention", "timestamp": "t",
        "batchId": 7, "batchDuration": 812, "durationMs": {"triggerExecution": 812}, "stateOperators": [],
        "sources": [], "sink": {"description": "kafka", "numOutputRows": 3}, "numInputRows": 12,
        "observedMetrics": {"retention": {"streams_decided": 4, "events": 2, "rejects_UNDECODABLE": 1,
                                          "rejects_CUT_BEHIND": 0}},
    })
    summary = BatchSummary.of(progress)

    assert summary == BatchSummary(7, 12, 4, 2, {"UNDECODABLE": 1}, 812)
    assert summary.log_line() == ("retention batch 7: input_rows=12 streams_decided=4 events=2 rejects=1 "
                                  "(UNDECODABLE=1) duration_ms=812")


def test_the_fix_gives_int_chunk_offsets_from_null_padded_state_info() -> None:
    fields = [pa.field("properties", pa.string()), pa.field("keyRowAsUnsafe", pa.binary()),
              pa.field("object", pa.binary()), pa.field("startOffset", pa.int32()),
              pa.field("numRows", pa.int32()), pa.field("isLastChunk", pa.bool_())]
    # As the JVM sends it: a padding row whose struct and children are all null.
    children = [pa.array(["{}", None]), pa.array([b"k", None]), pa.array([None, None], pa.binary()),
                pa.array([0, None], pa.int32()), pa.array([3, None], pa.int32()), pa.array([True, None])]
    column = pa.chunked_array([pa.StructArray.from_arrays(children, fields=fields, mask=pa.array([False, True]))])
    rows = column.to_pandas()
    assert type(rows[0]["startOffset"]) is float  # the cause: pyarrow widens nullable ints
    assert {f.name for f in fields} == spark_compat.STATE_INFO_FIELDS

    info = rows.map(spark_compat._int_offsets)

    assert type(info[0]["startOffset"]) is int and type(info[0]["numRows"]) is int
    assert info[1] is None


def test_the_fix_is_installed_on_pyspark_4_0_only() -> None:
    import pyspark
    from pyspark.sql.pandas.serializers import ApplyInPandasWithStateSerializer

    assert spark_compat.needed() == pyspark.__version__.startswith("4.0.")
    spark_compat.install()
    convert = getattr(ApplyInPandasWithStateSerializer, "arrow_to_pandas", None)
    assert bool(getattr(convert, spark_compat._MARK, False)) == spark_compat.needed()


def test_a_run_has_read_to_the_end_only_when_every_partition_with_records_is_reached() -> None:
    ends = {"t.subscribers": {0: 5, 1: 0}, "t.stream-cuts": {0: 2}}
    read = source_offsets('{"t.subscribers": {"0": 5}, "t.stream-cuts": {"0": 1}}')

    assert read == {"t.subscribers": {0: 5}, "t.stream-cuts": {0: 1}}
    assert not reached(read, ends)
    assert reached(source_offsets({"t.subscribers": {"0": 7, "1": 0}, "t.stream-cuts": {"0": 2}}), ends)
    assert reached(source_offsets(None), {"t.subscribers": {0: 0}})


def test_streams_sharing_a_bucket_are_kept_applied_and_decided_each_on_its_own() -> None:
    other = "scope/other"
    hour_max = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 0, 60 * MINUTE_MS)
    rows = decoded([*stream_with(CONSUMPTION, "billing"), consumed("billing", at(40, 40)),
                    recorded(at(100, 100), now_ms=NOW_MS),
                    *stream_with(hour_max, "audit", stream=other), consumed("audit", at(7, 7), stream=other),
                    recorded(at(90, 90), 60 * MINUTE_MS - 1000, stream=other, now_ms=NOW_MS)])
    state = group_state(NOW_MS)
    out = step(BUCKET, [rows], state)  # both in one group, as if they hashed to one bucket
    assert sorted((e.stream, e.cut.as_dict()) for e in events(out)) == [(STREAM, {0: 40, 1: 40}), (other, {0: 7, 1: 7})]
    assert list(out.outcome).count("decided") == 2
    kept = decode_bucket(state.get[0])
    assert set(kept) == {STREAM, other}
    assert kept[STREAM].next_change_ms is None and kept[other].next_change_ms == NOW_MS + 1000
    # On the bucket's timeout only the stream whose time limit came due is decided again.
    later = group_state(NOW_MS + 2000, previous=state, timed_out=True)
    again = step(BUCKET, [], later)
    assert [(e.stream, e.cut) for e in events(again)] == [(other, at(90, 90))]
    assert list(again.outcome).count("decided") == 1
