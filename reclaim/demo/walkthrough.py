"""Retention end to end in one process: subscribers, recorder, Spark job, applier and phase 2, as the demo runs it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from reclaim.consumers.truncation_applier import Applied, ApplierConfig, TruncationApplier
from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.producers.subscribers import SubscriberClient, SubscriberReader
from reclaim.retention.spark_io import RetentionTopics
from reclaim.retention.spark_job import RetentionJobConfig, run_available
from reclaim.schemas.base import LONG_MAX
from reclaim.schemas.streams import LimitType, RetentionPolicy, RetentionType, StreamCut
from reclaim.segments.ids import SegmentId
from reclaim.segments.streams import StreamController
from reclaim.services import preflight, runtime
from reclaim.services.recorder import RetentionRecorder
from reclaim.services.retention_job import executor_keys
from reclaim.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Say = Callable[[str], None]
EVENT = 32  #: bytes per event the demo writes


@dataclass
class Retention:
    """One stream under retention and the processes acting on it, all in this process."""

    settings: Settings
    controller: StreamController
    publisher: ConfirmedPublisher
    spark: SparkSession
    work: Path
    say: Say
    stream: str = "demo/events"
    drained: Callable[[], None] = field(default=lambda: None)

    def __post_init__(self) -> None:
        topics = runtime.topic_names(self.settings)
        # With a keyring each part signs as its own role: the policy as the admin, each subscriber with its
        # own key, the recorder as the controller; the job and the applier verify. Without one, nothing is
        # signed or verified.
        admin = runtime.record_signer(self.settings, "admin")
        self.client = SubscriberClient(self.publisher.signed_by(admin), topics, keyring=runtime.keyring(self.settings),
                                       incarnations=self.controller.incarnation)
        self.recorder = RetentionRecorder(self.controller, self.publisher, topics.stream_cuts, 0)
        bootstrap = preflight.bootstrap(self.settings)
        self.job = RetentionJobConfig(bootstrap, RetentionTopics.from_names(topics), str(self.work / "checkpoint"),
                                      reevaluate_ms=1000, keys=executor_keys(self.settings))
        applier = ApplierConfig(bootstrap, topics.truncation, "reclaim-demo-truncation", poll_timeout_s=0.5)
        self.applier = TruncationApplier(applier, self.controller, runtime.codec(self.settings),
                                         verifier=runtime.record_verifier(self.settings))

    @property
    def segments(self) -> list[str]:
        return [self.controller.segment_name(self.stream, s.id) for s in self.controller.active_segments(self.stream)]

    def write(self, events: int) -> None:
        for segment in self.segments:
            first = self.controller.segments.get_info(segment).length // EVENT
            batch = b"".join((b"event-%06d|" % i).ljust(EVENT, b".") for i in range(first, first + events))
            self.controller.append(segment, batch)

    def tail(self) -> StreamCut:
        return self.controller.tail_cut(self.stream)[0]

    def record(self) -> None:
        time.sleep(0.002)  # recording times must differ: an entry not newer than the last is a replay
        for entry in self.recorder.tick(force=True):
            self.say(f"  recorder: cut recorded, stream size {entry.recording_size} bytes")

    def decide_and_apply(self, timeout_s: float = 60.0) -> list[Applied]:
        """One available-now run of the job, then the applier until its events are applied, then phase 2."""
        batches = run_available(self.spark, self.job, timeout_s=int(timeout_s))
        events = sum(b.events for b in batches)
        rejects = sum(b.reject_count for b in batches)
        self.say(f"  retention job: {sum(b.input_rows for b in batches)} input rows, {events} truncation "
                 f"event(s), {rejects} reject(s)")
        applied: list[Applied] = []
        deadline = time.monotonic() + timeout_s
        while len(applied) < events and time.monotonic() < deadline:
            applied += self.applier.run_once()
        self.applier.consumer.commit(asynchronous=False)
        for outcome in applied:
            self.say(f"  applier: {outcome.value}, head now {_offsets(self.controller.head(self.stream))}")
        self.drained()
        return applied

    def readable(self) -> dict[str, int]:
        """Bytes still readable in each active segment."""
        return {s.rsplit("/", 1)[1]: len(self.controller.read_all(s)) for s in self.segments}


def _offsets(cut: StreamCut) -> dict[str, int]:
    return {f"{SegmentId.from_value(k).number}": v for k, v in cut.as_dict().items()}


def consumption(r: Retention) -> tuple[StreamCut, StreamCut]:
    """Two subscribers reading at different speeds: data goes only once both have read it."""
    scope, name = r.stream.split("/")
    r.controller.create_stream(scope, name, 2)
    policy = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, LONG_MAX)
    r.controller.set_policy(r.stream, policy)
    r.client.set_policy(r.stream, policy)
    fast, slow = (SubscriberReader(r.client, r.stream, name, 1) for name in ("fast", "slow"))
    for reader in (fast, slow):
        r.client.add_subscriber(r.stream, reader.subscriber, reader.generation)
    r.write(40)
    tail = r.tail()
    fast.checkpoint(tail)
    quarter = StreamCut.from_mapping({k: v // 4 // EVENT * EVENT for k, v in tail.as_dict().items()})
    slow.checkpoint(quarter)
    r.say(f"  wrote 40 events to each segment; fast read to {_offsets(tail)}, slow to {_offsets(quarter)}")
    r.record()
    r.decide_and_apply()
    r.say(f"  readable now: {r.readable()} bytes (what slow has not read yet)")
    slow.checkpoint(tail)
    r.say(f"  slow catches up to {_offsets(tail)}")
    r.record()
    r.decide_and_apply()
    r.say(f"  readable now: {r.readable()} bytes")
    return quarter, tail


def max_limit(r: Retention, max_bytes: int) -> StreamCut:
    """A stalled subscriber, and a size maximum that truncates past it anyway."""
    policy = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, max_bytes)
    r.controller.set_policy(r.stream, policy)
    r.client.set_policy(r.stream, policy)
    stalled = r.tail()
    r.say(f"  policy: keep at most {max_bytes} bytes; slow stalls at {_offsets(stalled)}")
    for _ in range(8):  # a recorded cut every 4 events: what truncation can land on
        r.write(4)
        r.record()
    fast = SubscriberReader(r.client, r.stream, "fast", 1)
    fast.checkpoint(r.tail())
    r.decide_and_apply()
    r.say(f"  readable now: {r.readable()} bytes: slow's unread data beyond the limit is gone")
    return stalled
