"""Retention end to end: subscribers, recorder, the Spark job, the applier and phase 2 on the real broker and Spark.

Bytes below the truncation cut are gone from tier-2, the rest intact, and ``reclaim audit``'s check is clean.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reclaim.demo.output import drain
from reclaim.demo.walkthrough import EVENT, Retention, consumption, max_limit
from reclaim.producers.topics import TopicNames
from reclaim.schemas.streams import RetentionPolicy, RetentionType, StreamCut
from reclaim.services import runtime
from reclaim.services.controller import stream_controller
from reclaim.settings import Settings
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.sql_store import SQLiteMetadataStore
from reclaim.tools.audit import audit_binding

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


@dataclass
class Stack:
    retention: Retention
    store: SQLiteMetadataStore
    bindings: StorageBindings

    def audit_clean(self) -> bool:
        result = audit_binding(self.store, self.bindings, "fs-tier2")
        return result.clean and result.pending == 0

    def tier2_bytes(self) -> int:
        binding = self.bindings.get("fs-tier2")
        return sum(binding.get_info(n).length for n in binding.iter_names() if not n.startswith("_"))


@pytest.fixture
def stack(kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], spark: Any, tmp_path: Path,
          unique_name: Callable[[str], str]) -> Iterator[Stack]:
    topics = kafka_topics(partitions=1)
    prefix = topics.deletion.removesuffix("ledger-deletion")
    settings = Settings.from_env(state_dir=tmp_path, bootstrap=kafka_bootstrap, topic_prefix=prefix,
                                 retry_delays=(1, 2, 4), group_id=unique_name("g"), batch_size=200,
                                 poll_timeout_s=0.5)
    store, bindings = runtime.metadata_store(settings), runtime.storage_bindings(settings, writer=True)
    lines: list[str] = []
    with stream_controller(settings, max_rolling_length=256) as (controller, publisher):
        retention = Retention(settings, controller, publisher, spark, tmp_path, lines.append,
                              drained=lambda: drain(settings, store, bindings))
        yield Stack(retention, store, bindings)
        retention.applier.close()
    bindings.close()
    store.close()


def test_data_goes_only_after_both_subscribers_read_it_and_a_max_limit_overrides_a_stalled_one(stack: Stack) -> None:
    r = stack.retention
    quarter, tail = consumption(r)
    # Both truncations applied: first at the slow subscriber's cut, then at the tail both reached.
    assert r.controller.head(r.stream) == tail
    assert all(n == 0 for n in r.readable().values())
    assert stack.audit_clean()
    stalled = max_limit(r, max_bytes=512)
    head = r.controller.head(r.stream).as_dict()
    assert all(head[segment] > offset for segment, offset in stalled.as_dict().items())  # past the stalled one
    kept = sum(r.readable().values())
    assert 0 < kept <= 512
    assert stack.audit_clean() and stack.tier2_bytes() >= kept


def test_the_slow_subscribers_unread_bytes_stay_until_it_reads_them(stack: Stack) -> None:
    r = stack.retention
    scope, name = r.stream.split("/")
    r.controller.create_stream(scope, name, 2)
    policy = RetentionPolicy(RetentionType.CONSUMPTION)
    r.controller.set_policy(r.stream, policy)
    r.client.set_policy(r.stream, policy)
    for subscriber in ("fast", "slow"):
        r.client.add_subscriber(r.stream, subscriber, 1)
    r.write(40)
    tail = r.tail()
    half = StreamCut.from_mapping({k: v // 2 // EVENT * EVENT for k, v in tail.as_dict().items()})
    r.client.update_truncation_cut(r.stream, "fast", 1, tail)
    r.client.update_truncation_cut(r.stream, "slow", 1, half)
    r.record()
    r.decide_and_apply()
    assert r.controller.head(r.stream) == half
    for segment, offset in tail.as_dict().items():
        assert r.readable()[f"{segment}.#epoch.0"] == offset - half.as_dict()[segment]
    assert stack.audit_clean()
    data = r.controller.read_all(r.segments[0])
    assert data.startswith(b"event-000020|")  # the first unread event of the slow subscriber, intact


def test_time_retention_end_to_end(stack: Stack) -> None:
    r = stack.retention
    scope, name = r.stream.split("/")
    r.controller.create_stream(scope, name, 1)
    # The job decides at its own clock: the second entry must still be younger than the limit then, so
    # the limit leaves room for a slow Spark batch on a busy machine (1.5 s did not).
    policy = RetentionPolicy(RetentionType.TIME, None, 10_000)
    r.controller.set_policy(r.stream, policy)
    r.client.set_policy(r.stream, policy)
    r.write(10)
    r.record()
    old = r.tail()
    time.sleep(10.5)
    r.write(10)
    r.record()
    r.decide_and_apply()
    assert r.controller.head(r.stream) == old  # the newest entry at least 10 s old
    assert sum(r.readable().values()) == 10 * EVENT
    assert stack.audit_clean()


def test_size_retention_end_to_end(stack: Stack) -> None:
    r = stack.retention
    scope, name = r.stream.split("/")
    r.controller.create_stream(scope, name, 1)
    policy = RetentionPolicy(RetentionType.SIZE, None, 20 * EVENT)
    r.controller.set_policy(r.stream, policy)
    r.client.set_policy(r.stream, policy)
    cuts = []
    for _ in range(4):
        r.write(10)
        r.record()
        cuts.append(r.tail())
    r.decide_and_apply()
    # 40 events recorded; keeping at least 20 means the entry after 20 events.
    assert r.controller.head(r.stream) == cuts[1]
    assert sum(r.readable().values()) == 20 * EVENT
    assert stack.audit_clean()
