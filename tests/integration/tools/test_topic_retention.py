"""Consumption retention of plain Kafka topics on the real broker, with real consumer groups: what the brokers say
(observe), the decision per partition (plan) and DeleteRecords (apply)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from prometheus_client import REGISTRY

from reclaim.exits import Unavailable
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.producers.producer import RecordProducer
from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.retention.topic_decision import PartitionDecision, TopicRule
from reclaim.schemas import build_codec
from reclaim.schemas.base import millis_now
from reclaim.schemas.topic_retention import TopicCut, TopicRetentionPolicy
from reclaim.services.topic_poller import TopicPoller
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.tools.dlq.reader import read_all
from reclaim.tools.group_commits import CommitWatch
from reclaim.tools.log_dirs import LogDirSizes
from reclaim.tools.topic_retention import (
    POLLER_GROUP,
    Checkpoints,
    TopicRetentionError,
    apply,
    cut_of,
    describe_topic,
    observe,
    plan,
    spark_offsets,
)
from reclaim.tools.topics import admin_client
from tests.support.kafka_topics import HOUR_MS, commit, create_topic, produce, start_offset

pytestmark = pytest.mark.integration


@pytest.fixture
def admin(kafka_bootstrap: str) -> Iterator[AdminClient]:
    yield admin_client(kafka_bootstrap)


def _policy(admin: AdminClient, topic: str, groups: tuple[str, ...] = (), min_ms: int = 0,
            **options: Any) -> TopicRetentionPolicy:
    topic_id, _ = describe_topic(admin, topic)
    return TopicRetentionPolicy(topic, topic_id, groups, min_ms, millis_now(), **options)


def _starts(decisions: list[PartitionDecision]) -> dict[int, tuple[int | None, TopicRule, tuple[str, ...]]]:
    return {d.partition: (d.start, d.rule, d.held_by) for d in decisions}


def test_the_slowest_of_three_groups_holds_and_delete_records_moves_each_start_there(
        admin: AdminClient, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("orders")
    create_topic(admin, topic, 2)
    old = millis_now() - 2 * HOUR_MS
    for partition in (0, 1):
        produce(kafka_bootstrap, topic, partition, [old + i for i in range(10)])
    fast, slow, stalled = (unique_name(g) for g in ("fast", "slow", "stalled"))
    commit(kafka_bootstrap, fast, topic, {0: 10, 1: 10})
    commit(kafka_bootstrap, slow, topic, {0: 7, 1: 9})
    commit(kafka_bootstrap, stalled, topic, {0: 3, 1: 10})
    policy = _policy(admin, topic, (fast, slow, stalled), min_ms=HOUR_MS)
    view = observe(admin, policy, millis_now())
    assert [(p.low, p.high) for p in view.partitions] == [(0, 10), (0, 10)]
    assert {g.group: (g.state, g.committed_partitions) for g in view.groups} == {
        fast: ("empty", 2), slow: ("empty", 2), stalled: ("empty", 2)}
    decisions = plan(policy, view)
    assert _starts(decisions) == {0: (3, TopicRule.AT_BOUND, (stalled,)), 1: (9, TopicRule.AT_BOUND, (slow,))}
    done = apply(admin, view, decisions)
    assert [(d.partition, d.before, d.after) for d in done] == [(0, 0, 3), (1, 0, 9)]
    assert (start_offset(admin, topic, 0), start_offset(admin, topic, 1)) == (3, 9)
    # Again: nothing moves (forward only), and no request is made for a start already reached.
    again = observe(admin, policy, millis_now())
    assert [d.rule for d in plan(policy, again)] == [TopicRule.BEHIND_START, TopicRule.BEHIND_START]
    assert apply(admin, again, plan(policy, again)) == []
    # The stalled group moves on: the next pass follows it, and no further than the slow one.
    commit(kafka_bootstrap, stalled, topic, {0: 8})
    moved = observe(admin, policy, millis_now())
    assert _starts(plan(policy, moved))[0] == (7, TopicRule.AT_BOUND, (slow,))


def test_the_minimum_keeps_young_records_and_the_maximum_overrides_a_stalled_group(
        admin: AdminClient, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("clicks")
    create_topic(admin, topic, 1)
    now = millis_now()
    # Offsets 0-3 ten days old, 4-7 two hours old, 8-9 a minute old.
    produce(kafka_bootstrap, topic, 0, [now - 240 * HOUR_MS + i for i in range(4)]
            + [now - 2 * HOUR_MS + i for i in range(4)] + [now - 60_000 + i for i in range(2)])
    reader, stuck = unique_name("reader"), unique_name("stuck")
    commit(kafka_bootstrap, reader, topic, {0: 10})
    young = _policy(admin, topic, (reader,), min_ms=HOUR_MS)
    assert _starts(plan(young, observe(admin, young, millis_now()))) == {0: (8, TopicRule.KEPT_BY_MIN, (reader,))}
    commit(kafka_bootstrap, stuck, topic, {0: 1})
    held = _policy(admin, topic, (reader, stuck), min_ms=HOUR_MS)
    assert _starts(plan(held, observe(admin, held, millis_now()))) == {0: (1, TopicRule.AT_BOUND, (stuck,))}
    forced = _policy(admin, topic, (reader, stuck), min_ms=HOUR_MS, max_ms=168 * HOUR_MS)
    view = observe(admin, forced, millis_now())
    assert _starts(plan(forced, view)) == {0: (4, TopicRule.FORCED_BY_MAX_AGE, ())}
    apply(admin, view, plan(forced, view))
    assert start_offset(admin, topic, 0) == 4


def test_groups_never_committed_deleted_or_added_later_hold_and_a_new_partition_is_held_at_its_start(
        admin: AdminClient, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("events")
    create_topic(admin, topic, 1)
    produce(kafka_bootstrap, topic, 0, [millis_now() - HOUR_MS + i for i in range(6)])
    prefix = unique_name("etl")
    loader, gone = f"{prefix}-loader", f"{prefix}-gone"
    commit(kafka_bootstrap, loader, topic, {0: 6})
    commit(kafka_bootstrap, gone, topic, {0: 5})
    never = unique_name("never")
    policy = _policy(admin, topic, (never,), group_pattern=f"{prefix}-.*")
    view = observe(admin, policy, millis_now())
    assert set(view.required) == {never, loader, gone}
    assert _starts(plan(policy, view)) == {0: (None, TopicRule.HELD_BY_NEW_GROUP, (never,))}
    # Released by hand, the group that never committed holds nothing; the slowest of the rest does.
    released = replace(policy, released=(never,))
    assert _starts(plan(released, observe(admin, released, millis_now()))) == {0: (5, TopicRule.AT_BOUND, (gone,))}
    # A group whose offsets are deleted (as Kafka expires an Empty group's) is no longer listed, so no pattern
    # matches it; remembered as required, it holds the topic where it starts: absent, not released.
    admin.delete_consumer_groups([gone])[gone].result(timeout=30)
    assert gone not in observe(admin, released, millis_now()).required
    view = observe(admin, released, millis_now(), remembered=(gone,))
    assert {g.group: g.state for g in view.groups}[gone] == "absent"
    assert _starts(plan(released, view)) == {0: (None, TopicRule.HELD_BY_NEW_GROUP, (gone,))}
    # A group the pattern matches later holds from its first commit on.
    late = f"{prefix}-late"
    commit(kafka_bootstrap, late, topic, {0: 2})
    both = replace(policy, released=(never, gone))
    assert _starts(plan(both, observe(admin, both, millis_now(), remembered=(gone,)))) == {
        0: (2, TopicRule.AT_BOUND, (late,))}
    # A partition added to the topic: no group has committed there, so it is held at its start.
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=30)
    produce(kafka_bootstrap, topic, 1, [millis_now() - HOUR_MS])
    decided = _starts(plan(both, observe(admin, both, millis_now())))
    assert decided[1] == (None, TopicRule.HELD_BY_NEW_GROUP, tuple(sorted((loader, late))))


def test_a_compacted_topic_is_refused_and_a_policy_for_an_earlier_life_of_the_topic_does_nothing(
        admin: AdminClient, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    compacted = unique_name("table")
    create_topic(admin, compacted, 1, {"cleanup.policy": "compact"})
    with pytest.raises(TopicRetentionError, match="compacted only .*DeleteRecords"):
        describe_topic(admin, compacted)
    both = unique_name("both")
    create_topic(admin, both, 1, {"cleanup.policy": "compact,delete"})
    assert describe_topic(admin, both)[1] == [0]
    with pytest.raises(TopicRetentionError, match="does not exist"):
        describe_topic(admin, unique_name("absent"))
    topic = unique_name("reborn")
    create_topic(admin, topic, 1)
    produce(kafka_bootstrap, topic, 0, [millis_now() - HOUR_MS + i for i in range(4)])
    group = unique_name("g")
    commit(kafka_bootstrap, group, topic, {0: 4})
    policy = _policy(admin, topic, (group,))
    admin.delete_topics([topic])[topic].result(timeout=30)
    _wait_gone(admin, topic)
    create_topic(admin, topic, 1)
    produce(kafka_bootstrap, topic, 0, [millis_now() - HOUR_MS + i for i in range(4)])
    commit(kafka_bootstrap, group, topic, {0: 4})
    view = observe(admin, policy, millis_now())
    assert view.problems and "deleted and created again" in view.problems[0]
    assert plan(policy, view) == []


def test_a_spark_query_is_a_subscriber_through_its_checkpoint(
        admin: AdminClient, kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path) -> None:
    topic = unique_name("stream")
    create_topic(admin, topic, 2)
    for partition in (0, 1):
        produce(kafka_bootstrap, topic, partition, [millis_now() - HOUR_MS + i for i in range(8)])
    checkpoint = tmp_path / "query"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    policy = _policy(admin, topic, spark_checkpoints=(("daily", str(checkpoint)),))
    # No batch committed: the query holds the topic at its start.
    assert spark_offsets(str(checkpoint), topic) is None
    assert {d.rule for d in plan(policy, observe(admin, policy, millis_now()))} == {TopicRule.HELD_BY_NEW_GROUP}
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": millis_now(), "conf": {}})
    for batch, offsets in ((0, {"0": 2, "1": 3}), (1, {"0": 5, "1": 6})):
        (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{json.dumps({topic: offsets})}\n")
    (checkpoint / "commits" / "0").write_text("v1\n{\"nextBatchWatermarkMs\":0}\n")
    # Batch 1 is planned, not committed: the query has read up to batch 0's offsets.
    assert spark_offsets(str(checkpoint), topic) == {0: 2, 1: 3}
    assert _starts(plan(policy, observe(admin, policy, millis_now()))) == {
        0: (2, TopicRule.AT_BOUND, ("spark:daily",)), 1: (3, TopicRule.AT_BOUND, ("spark:daily",))}


def _wait_gone(admin: AdminClient, topic: str) -> None:
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed 30 s after its deletion"
        time.sleep(0.2)


@pytest.mark.s3_servers("moto")
def test_a_spark_query_checkpointed_on_s3_is_read_through_the_s3_endpoint(
        admin: AdminClient, kafka_bootstrap: str, unique_name: Callable[[str], str], s3_endpoint: S3Endpoint,
        s3_bucket: str) -> None:
    topic = unique_name("stream")
    create_topic(admin, topic, 1)
    produce(kafka_bootstrap, topic, 0, [millis_now() - HOUR_MS + i for i in range(8)])
    client = S3ChunkStorage(s3_endpoint.binding_settings(s3_bucket)).client
    location = f"s3a://{s3_bucket}/checkpoints/{unique_name('query')}"
    prefix = location.split("/", 3)[3]
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": millis_now(), "conf": {}})
    for batch, offset in ((0, 3), (1, 6)):
        client.put_object(Bucket=s3_bucket, Key=f"{prefix}/offsets/{batch}",
                          Body=f"v1\n{meta}\n{json.dumps({topic: {'0': offset}})}\n".encode())
    client.put_object(Bucket=s3_bucket, Key=f"{prefix}/commits/0", Body=b"v1\n{}\n")
    checkpoints = Checkpoints(client)
    assert checkpoints.offsets(location, topic) == {0: 3}
    policy = _policy(admin, topic, spark_checkpoints=(("hourly", location),))
    assert _starts(plan(policy, observe(admin, policy, millis_now(), checkpoints=checkpoints))) == {
        0: (3, TopicRule.AT_BOUND, ("spark:hourly",))}
    with pytest.raises(Unavailable, match="no S3 endpoint is configured"):
        Checkpoints().offsets(location, topic)
    with pytest.raises(Unavailable, match="no offsets/ log there"):
        checkpoints.offsets(f"s3a://{s3_bucket}/checkpoints/none", topic)


def test_a_cut_the_broker_refuses_is_reported_for_its_topic_and_the_other_topics_cuts_are_published(
        admin: AdminClient, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    # A real broker refusing one record: the cuts topic's max.message.bytes below one topic's cut (a topic of many
    # partitions and groups), above the other's.
    small, large, cuts = unique_name("small"), unique_name("large"), unique_name("cuts")
    create_topic(admin, small, 1)
    create_topic(admin, large, 40)
    groups = tuple(unique_name(f"group-{i}") for i in range(3))
    for group in groups:
        commit(kafka_bootstrap, group, large, dict.fromkeys(range(40), 0))
    policies = {small: _policy(admin, small, groups[:1]), large: _policy(admin, large, groups)}
    codec = build_codec()
    sizes = {t: len(codec.encode(cut_of(observe(admin, p, millis_now())), cuts)) for t, p in policies.items()}
    assert sizes[small] + 400 < sizes[large], sizes
    create_topic(admin, cuts, 1, {"max.message.bytes": str(sizes[small] + 200)})
    producer = RecordProducer(kafka_bootstrap, "idempotent-producer")
    try:
        poller = TopicPoller(admin, lambda: policies, ConfirmedPublisher(producer, codec, timeout_s=20), cuts)
        report = poller.tick()
        assert [cut.topic for cut in report.published] == [small]
        assert list(report.failed) == [large] and "not confirmed" in report.failed[large], report.failed
        assert set(poller.last) == {small}  # the large one is sent again next pass; the small one is not
        again = poller.tick()
        assert again.unchanged == [small] and list(again.failed) == [large]
    finally:
        producer.close()
    messages, _ = read_all(kafka_bootstrap, cuts)
    assert [m.key() for m in messages] == [small.encode()]


def test_the_commit_watch_tells_each_move_of_a_wanted_topic_once(
        admin: AdminClient, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    topic, other, group = unique_name("watched"), unique_name("not-watched"), unique_name("group")
    create_topic(admin, topic, 2)
    create_topic(admin, other, 1)
    commit(kafka_bootstrap, group, topic, {0: 1})  # before the watch starts: not told
    watch = CommitWatch(kafka_bootstrap, POLLER_GROUP, lambda t: t == topic)
    try:
        assert watch.start() and watch.following and watch.refused is None
        commit(kafka_bootstrap, group, topic, {0: 2, 1: 1})
        assert watch.moves(10) == {topic: {(group, 0): 2, (group, 1): 1}}
        commit(kafka_bootstrap, group, topic, {0: 2, 1: 1})  # the offsets it had (an auto-commit): no move
        commit(kafka_bootstrap, group, other, {0: 5})  # a topic not wanted
        assert watch.moves(2) == {}
        admin.delete_consumer_groups([group])[group].result(timeout=30)  # its offsets' tombstones
        assert watch.moves(10) == {topic: {(group, 0): None, (group, 1): None}}
    finally:
        watch.close()


def test_between_passes_the_poller_observes_a_topic_as_soon_as_one_of_its_groups_commits(
        admin: AdminClient, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    topic, cuts = unique_name("followed"), unique_name("cuts")
    create_topic(admin, topic, 2)
    create_topic(admin, cuts, 1)
    fast, slow = unique_name("fast"), unique_name("slow")
    commit(kafka_bootstrap, fast, topic, {0: 0, 1: 0})
    policies = {topic: _policy(admin, topic, (fast, slow))}
    codec = build_codec()
    producer = RecordProducer(kafka_bootstrap, "idempotent-producer")
    poller = TopicPoller(admin, lambda: policies, ConfirmedPublisher(producer, codec, timeout_s=20), cuts)
    watch = CommitWatch(kafka_bootstrap, POLLER_GROUP, lambda t: t in poller.watched)
    stop = threading.Event()
    thread = threading.Thread(target=poller.run, args=(stop, 3600.0, watch), daemon=True)  # one pass, at once

    def latest(wanted: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
        deadline = time.monotonic() + 20  # the next pass is an hour away
        while True:
            messages, _ = read_all(kafka_bootstrap, cuts)
            cut = codec.decode(messages[-1].value() or b"", cuts, TopicCut) if messages else None
            found = {} if cut is None else {g.group: g.committed.as_dict() for g in cut.groups}
            if found == wanted or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    thread.start()
    try:
        assert latest({fast: {0: 0, 1: 0}, slow: {}}) == {fast: {0: 0, 1: 0}, slow: {}}
        followed = REGISTRY.get_sample_value("reclaim_topic_retention_followed_total") or 0
        commit(kafka_bootstrap, slow, topic, {0: 0})
        assert latest({fast: {0: 0, 1: 0}, slow: {0: 0}}) == {fast: {0: 0, 1: 0}, slow: {0: 0}}
        assert (REGISTRY.get_sample_value("reclaim_topic_retention_followed_total") or 0) > followed
        assert watch.following
    finally:
        stop.set()
        thread.join(30)
        watch.close()
        producer.close()
    assert not thread.is_alive()


def test_the_maximum_size_forces_the_start_once_from_the_bytes_reckoned_not_from_the_size_on_disk(
        admin: AdminClient, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    topic, cuts, stuck = unique_name("sized"), unique_name("cuts"), unique_name("stuck")
    create_topic(admin, topic, 1)
    create_topic(admin, cuts, 1)
    payload = b"x" * 1000
    old = millis_now() - 2 * HOUR_MS

    def write(count: int) -> None:
        producer = RecordProducer(kafka_bootstrap, "producer")
        try:
            for index in range(count):
                producer.producer.produce(topic, payload, partition=0, timestamp=old + index)
            assert producer.producer.flush(30) == 0
        finally:
            producer.close()

    write(100)
    commit(kafka_bootstrap, stuck, topic, {0: 0})  # a stalled group holds the whole partition
    policy = _policy(admin, topic, (stuck,), max_bytes=20_000)
    sizes = LogDirSizes(kafka_bootstrap)
    producer = RecordProducer(kafka_bootstrap, "idempotent-producer")
    poller = TopicPoller(admin, lambda: {topic: policy}, ConfirmedPublisher(producer, build_codec(), timeout_s=20),
                         cuts, sizes=sizes)
    try:
        on_disk = sizes({topic: [0]})[(topic, 0)]
        assert 100 * 1000 < on_disk < 100 * 1200, on_disk  # DescribeLogDirs through kafka-python, real bytes
        first = poller.tick().seen[topic]
        assert first.partitions[0].size_bytes is None  # no growth seen yet: no size forces anything
        assert REGISTRY.get_sample_value("reclaim_topic_retention_held_bytes", {"topic": topic}) is None
        assert _starts(plan(policy, first)) == {0: (None, TopicRule.BEHIND_START, (stuck,))}
        write(100)
        grown = poller.tick().seen[topic]
        reckoned = grown.partitions[0].size_bytes
        assert reckoned is not None and 200 * 1000 < reckoned < 200 * 1200, reckoned
        [decision] = plan(policy, grown)
        assert decision.rule is TopicRule.FORCED_BY_MAX_BYTES and decision.start is not None
        kept = 200 - decision.start
        assert 16 <= kept <= 20, decision  # about 20,000 bytes of 1,000-byte records (with their headers)
        # What the stuck group holds back, in records and in the bytes reckoned for them.
        held = REGISTRY.get_sample_value("reclaim_topic_retention_held_records", {"topic": topic})
        held_bytes = REGISTRY.get_sample_value("reclaim_topic_retention_held_bytes", {"topic": topic})
        assert held == kept and held_bytes == round(kept * reckoned / 200), (held, held_bytes)
        apply(admin, grown, [decision])
        assert start_offset(admin, topic, 0) == decision.start
        # The size on disk is what it was (DeleteRecords moves the start inside the segment); the bytes reckoned
        # are those of the records left, so the start does not move again.
        assert sizes({topic: [0]})[(topic, 0)] >= on_disk
        after = poller.tick().seen[topic]
        assert after.partitions[0].size_bytes is not None and after.partitions[0].size_bytes <= 20_000
        assert _starts(plan(policy, after))[0][0] is None
    finally:
        sizes.close()
        producer.close()
