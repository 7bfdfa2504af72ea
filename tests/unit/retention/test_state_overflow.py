"""No value on the bus stops the retention job saving a bucket: the state keeps every long, huge limits are rejects.

A TIME policy with a max limit near 2^63 once passed every check; the job's next change (a recorded
cut's time plus the limit) then overflowed the bucket's 64-bit field on an ordinary batch, and every
stream of the bucket stopped.
"""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.state import GroupState

from reclaim.retention.buckets import BucketEntry, bucket_of, decode_bucket, encode_bucket
from reclaim.retention.policy import MAX_SIZE_LIMIT_BYTES, MAX_TIME_LIMIT_MS
from reclaim.retention.registry import Subscriber, SubscriberRegistry
from reclaim.retention.retention_set import RetentionSet
from reclaim.retention.spark_io import DEFAULT_BUCKETS
from reclaim.retention.spark_state import stream_retention_step
from reclaim.retention.stream_state import StreamRetentionState
from reclaim.retention.topology import Topology
from reclaim.schemas import LimitType, RetentionPolicy, RetentionType, StreamConfig, StreamCut, StreamCutRecord
from reclaim.schemas.base import LONG_MAX, LONG_MIN, MAX_TIMESTAMP_MILLIS
from reclaim.schemas.rejects import RejectKind
from tests.support.spark_io import REEVALUATE_MS, TOPICS, decoded, group_state, rejects
from tests.support.spark_job import STREAM, at, config, topology

NOW_MS = 1_800_000_000_000
longs = st.integers(LONG_MIN, LONG_MAX)
millis = st.integers(0, MAX_TIMESTAMP_MILLIS)
cuts = st.dictionaries(longs, longs, max_size=4).map(StreamCut.from_mapping)
#: Limits of every size, the ones near the edges drawn often: 0, the bounds and the top of a long.
limits = longs | st.integers(0, 2**40) | st.integers(LONG_MAX - 2**40, LONG_MAX) | st.sampled_from(
    [0, 1, MAX_TIME_LIMIT_MS, MAX_TIME_LIMIT_MS + 1, MAX_SIZE_LIMIT_BYTES, MAX_SIZE_LIMIT_BYTES + 1, LONG_MAX - 1])
policies = st.builds(RetentionPolicy, st.sampled_from(RetentionType), st.none() | st.sampled_from(LimitType),
                     limits, limits | st.just(LONG_MAX))


def _step(frames: list[pd.DataFrame], state: GroupState) -> pd.DataFrame:
    out = stream_retention_step(TOPICS, None, REEVALUATE_MS)((bucket_of(STREAM, DEFAULT_BUCKETS),), frames, state)
    return pd.concat(list(out), ignore_index=True)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies, updated_at=millis, generation=longs, subscriber_cut=st.none() | cuts,
       records=st.lists(st.tuples(cuts, millis, longs), max_size=4), last=st.none() | cuts)
def test_the_state_codec_round_trips_every_long_the_schema_allows(
        policy: RetentionPolicy, updated_at: int, generation: int, subscriber_cut: StreamCut | None,
        records: list[tuple[StreamCut, int, int]], last: StreamCut | None) -> None:
    state = StreamRetentionState(STREAM)
    state.topology = Topology.of([[(LONG_MAX, 0.0, 0.5), (LONG_MIN, 0.5, 1.0)]], {LONG_MIN: LONG_MAX})
    state.topology_published_at = updated_at
    # Set as it is, unchecked: the codec must keep whatever a record's schema lets through.
    state.config = StreamConfig(STREAM, policy, updated_at)
    state.registry = SubscriberRegistry({"billing": Subscriber("billing", generation, True, subscriber_cut)})
    state.retention = RetentionSet(tuple(StreamCutRecord(STREAM, cut, time, size) for cut, time, size in records))
    state.last_recorded = state.retention.latest
    state.last_emitted = last

    restored = StreamRetentionState.from_bytes(state.to_bytes())

    assert restored.to_bytes() == state.to_bytes()
    assert (restored.config, restored.registry.get("billing"), restored.retention, restored.last_emitted) == (
        state.config, state.registry.get("billing"), state.retention, state.last_emitted)


@pytest.mark.parametrize("huge", [RetentionPolicy(RetentionType.CONSUMPTION, None, 0, LONG_MAX - 1),
                                  RetentionPolicy(RetentionType.TIME, None, LONG_MAX - 2, LONG_MAX - 1)])
def test_a_policy_with_limits_near_2_to_the_63_is_a_reject_and_the_bucket_is_saved(huge: RetentionPolicy) -> None:
    rows = decoded([topology(), config(huge), _recorded(at(10, 10), NOW_MS - 1000)], kafka_ts=NOW_MS)
    state = group_state(NOW_MS)

    out = _step([rows], state)

    [reject] = rejects(out)
    assert reject.kind is RejectKind.INVALID_POLICY and "is above the largest TIME limit" in reject.reason
    kept = decode_bucket(state.get[0])  # saved: the rest of the bucket goes on
    assert StreamRetentionState.from_bytes(kept[STREAM].state).config is None


def test_a_kept_policy_an_earlier_version_accepted_is_dropped_and_the_bucket_still_saves() -> None:
    kept = StreamRetentionState(STREAM)
    assert kept.apply(topology(), NOW_MS) is None
    assert kept.apply(_recorded(at(10, 10), NOW_MS - 1000), NOW_MS) is None
    huge = RetentionPolicy(RetentionType.CONSUMPTION, None, 0, LONG_MAX - 1)
    kept.config = StreamConfig(STREAM, huge, NOW_MS - 5000)
    previous = group_state(NOW_MS - 1)
    previous.update((encode_bucket({STREAM: BucketEntry(None, kept.to_bytes())}),))

    later = group_state(NOW_MS, previous=previous)
    out = _step([decoded([_recorded(at(20, 20), NOW_MS)], kafka_ts=NOW_MS)], later)

    assert rejects(out) == [] and list(out.outcome) == ["decided"]
    saved = decode_bucket(later.get[0])[STREAM]
    assert saved.next_change_ms is None
    assert StreamRetentionState.from_bytes(saved.state).config is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(policy=RetentionPolicy(RetentionType.CONSUMPTION, None, 0, LONG_MAX - 1), times=[NOW_MS - 1000])
@given(policy=policies, times=st.lists(st.integers(0, MAX_TIMESTAMP_MILLIS), min_size=1, max_size=3))
def test_whatever_policy_and_recording_times_arrive_the_bucket_is_saved(policy: RetentionPolicy,
                                                                        times: list[int]) -> None:
    records = [topology(), config(policy), *(_recorded(at(i + 1, i + 1), time) for i, time in enumerate(sorted(times)))]
    state = group_state(NOW_MS)

    out = _step([decoded(records, kafka_ts=NOW_MS)], state)

    assert set(out.outcome) <= {"reject", "truncation", "decided"}
    [(stream, entry)] = decode_bucket(state.get[0]).items()
    assert stream == STREAM
    assert entry.next_change_ms is None or NOW_MS < entry.next_change_ms <= LONG_MAX


def _recorded(cut: StreamCut, time: int) -> StreamCutRecord:
    return StreamCutRecord(STREAM, cut, time, sum(cut.as_dict().values()))
