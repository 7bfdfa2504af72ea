"""The applier's own check of a policy truncation against the stored policy's minimum, without a broker: a
truncation signed by the retention job's genuine key is refused when it would remove data the policy keeps,
so a stolen job key can do no more than the policy already allows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim.consumers.truncation_applier import Applied, apply_event
from reclaim.retention.minimums import inside_minimum
from reclaim.retention.topology import Topology
from reclaim.schemas import build_codec
from reclaim.schemas.base import LONG_MAX
from reclaim.schemas.streams import (
    LimitType,
    RetentionPolicy,
    RetentionType,
    StreamCut,
    StreamCutRecord,
    TruncationEvent,
    TruncationReason,
)
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.security.signing import REJECTED, RecordSigner, RecordVerifier
from reclaim.segments.streams import StreamController
from tests.support.orders import STREAM, orders_stream

TOPIC = "reclaim.truncation"
KEYS = Keyring([new_key("job-1", "retention-job", Algorithm.ED25519)])
NOW = 10**13
TAIL = StreamCut.from_mapping({0: 40, 1: 40})
HALF = StreamCut.from_mapping({0: 20, 1: 20})


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[StreamController]:
    with orders_stream(tmp_path) as controller:
        yield controller


def _apply(controller: StreamController, reason: TruncationReason, cut: StreamCut, offset: int = 0) -> Applied:
    """A truncation decided now, signed with the retention job's genuine key, as the applier reads it."""
    event = TruncationEvent(STREAM, cut, reason, NOW, RetentionPolicy(RetentionType.NONE))
    value = build_codec().encode(event, TOPIC)
    headers = RecordSigner(KEYS, "retention-job").headers(TOPIC, STREAM.encode(), value)
    return apply_event(controller, build_codec(), value, TOPIC, f"{TOPIC}[0]@{offset}", key=STREAM.encode(),
                       headers=headers, verifier=RecordVerifier(KEYS), now_ms=NOW)


def _record(controller: StreamController, cut: StreamCut, at_ms: int, size: int, keep_from_ms: int = 0) -> None:
    with controller.store.transaction() as txn:
        txn.put_recorded(StreamCutRecord(STREAM, cut, at_ms, size), keep_from_ms=keep_from_ms)


def test_a_time_truncation_at_the_tail_inside_the_time_minimum_is_refused(controller: StreamController) -> None:
    """Finding 5: the job's key truncated a stream at its tail although the policy keeps 10^11 ms."""
    controller.set_policy(STREAM, RetentionPolicy(RetentionType.TIME, LimitType.TIME, 10**11, LONG_MAX))
    _record(controller, TAIL, NOW - 1000, 80)  # the only cut recorded is a second old
    before = REJECTED.labels(TOPIC, "against_policy")._value.get()
    assert _apply(controller, TruncationReason.TIME, TAIL) is Applied.UNAUTHENTICATED
    assert REJECTED.labels(TOPIC, "against_policy")._value.get() == before + 1
    assert controller.head(STREAM) == StreamCut() and controller.journal(STREAM) == []


def test_a_time_truncation_at_or_before_a_cut_recorded_before_the_minimum_is_applied(
        controller: StreamController) -> None:
    controller.set_policy(STREAM, RetentionPolicy(RetentionType.TIME, LimitType.TIME, 60_000, LONG_MAX))
    _record(controller, HALF, NOW - 120_000, 40)  # old enough
    _record(controller, TAIL, NOW - 1000, 80)  # too young
    assert _apply(controller, TruncationReason.TIME, TAIL) is Applied.UNAUTHENTICATED
    assert _apply(controller, TruncationReason.TIME, StreamCut.from_mapping({0: 30, 1: 10}), 1) \
        is Applied.UNAUTHENTICATED  # past the old cut in one segment
    assert _apply(controller, TruncationReason.TIME, HALF, 2) is Applied.TRUNCATED
    assert controller.head(STREAM) == HALF


def test_a_consumption_truncation_keeps_the_fallback_time_minimum(controller: StreamController) -> None:
    controller.set_policy(STREAM, RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 60_000, LONG_MAX))
    assert _apply(controller, TruncationReason.CONSUMPTION, TAIL) is Applied.UNAUTHENTICATED  # nothing recorded
    _record(controller, TAIL, NOW - 60_000, 80)
    assert _apply(controller, TruncationReason.CONSUMPTION, TAIL, 1) is Applied.TRUNCATED


def test_a_size_truncation_below_the_size_minimum_is_refused(controller: StreamController) -> None:
    controller.set_policy(STREAM, RetentionPolicy(RetentionType.SIZE, LimitType.SIZE, 50, LONG_MAX))
    assert _apply(controller, TruncationReason.SIZE, HALF) is Applied.UNAUTHENTICATED  # would keep 40 of 80
    assert _apply(controller, TruncationReason.SIZE, StreamCut.from_mapping({0: 30, 1: 0}), 1) is Applied.TRUNCATED


def test_without_a_minimum_the_policy_truncation_is_not_limited(controller: StreamController) -> None:
    controller.set_policy(STREAM, RetentionPolicy(RetentionType.CONSUMPTION))
    assert _apply(controller, TruncationReason.CONSUMPTION, TAIL) is Applied.TRUNCATED


def test_the_recorder_keeps_only_the_cuts_the_check_can_still_need(controller: StreamController) -> None:
    for at in (1000, 2000, 3000, 4000):
        _record(controller, HALF, at, 40, keep_from_ms=2500)
    assert controller.recorded_cut(STREAM, 2500) is not None and controller.recorded_cut(STREAM, 2500).recording_time \
        == 2000
    assert controller.recorded_cut(STREAM, 1999) is None  # 1000 was dropped: 2000 is newer and old enough


def test_inside_minimum_is_none_for_a_policy_without_one() -> None:
    topology = Topology.of([[(0, 0.0, 1.0)]])
    policy = RetentionPolicy(RetentionType.TIME, LimitType.TIME, 0, 1000)
    assert inside_minimum(policy, StreamCut.from_mapping({0: 5}), topology, 10, None, NOW) is None
