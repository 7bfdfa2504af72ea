"""The topic poller: for every Kafka topic under consumption retention, what the brokers say of it — its partitions,
its required groups' committed offsets, its Spark queries' checkpoints — published as a signed
:class:`~reclaim.schemas.topic_retention.TopicCut` for the retention job to decide on.

Why a poller and not the job reading ``__consumer_offsets`` itself: that internal topic holds every group of the
cluster (reading it needs a wide grant), its key and value formats are Kafka's own and change with its versions
(KIP-848's groups write new record types), and it says nothing of what the decision also needs — the partitions'
start and end, ``offsetsForTimes`` and the Spark queries' checkpoints. The poller asks the brokers through the
Admin API for exactly those, as its own principal (Describe on the groups and the topic), and signs what it saw
with the ``topic-retention`` key, so the job obeys no one else's offsets.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from confluent_kafka.admin import AdminClient
from prometheus_client import Counter, Gauge

from reclaim.exits import Unavailable
from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.retention.topic_state import SPARK_PREFIX
from reclaim.schemas.base import millis_now
from reclaim.schemas.topic_retention import TopicCut, TopicRetentionPolicy
from reclaim.tools.topic_retention import Checkpoints, TopicView, cut_of, observe_all, plan

log = logging.getLogger(__name__)

POLLS = Counter("reclaim_topic_retention_polls_total", "Passes of the topic poller over the topics under "
                "consumption retention")
POLL_FAILURES = Counter("reclaim_topic_retention_poll_failures_total", "Topics the topic poller could not observe "
                        "in a pass (the brokers did not answer, or the topic is gone or compacted)", ["topic"])
CUTS = Counter("reclaim_topic_retention_cuts_total", "Topic cuts the topic poller published", ["topic"])
HELD_RECORDS = Gauge("reclaim_topic_retention_held_records", "Records old enough to delete (past the minimum) that "
                     "a required group has not read yet: what the slowest group holds back", ["topic"])
STALEST_GROUP = Gauge("reclaim_topic_retention_stalest_group_seconds", "How long the required group Empty (or not "
                      "listed) longest has been so, as this poller has seen it; 0 when every one has members",
                      ["topic"])
STALE_GROUPS = Gauge("reclaim_topic_retention_stale_groups", "Required groups Empty (or not listed) longer than "
                     "the policy's stale-after: they still hold the topic until released", ["topic"])

_IDLE_STATES = frozenset({"empty", "absent", "dead"})


@dataclass
class PollReport:
    """One pass: the cuts published, the topics observed unchanged, and those that failed with why."""

    published: list[TopicCut] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


class TopicPoller:
    """Observes every topic under an active policy each pass (:func:`~reclaim.tools.topic_retention.observe_all`:
    requests of 500 partitions over all of them, eight in flight at a time) and publishes a topic's cut when it
    changed, or ``heartbeat_s`` after the last one (so the job's view of time limits stays fresh)."""

    def __init__(self, admin: AdminClient, policies: Callable[[], dict[str, TopicRetentionPolicy]],
                 publisher: ConfirmedPublisher, cuts_topic: str, heartbeat_s: float = 60.0,
                 clock: Callable[[], int] = millis_now, checkpoints: Checkpoints | None = None) -> None:
        self.admin, self.policies, self.publisher, self.cuts_topic = admin, policies, publisher, cuts_topic
        self.checkpoints = checkpoints or Checkpoints()
        self.heartbeat_ms = int(heartbeat_s * 1000)
        self.clock = clock
        self.remembered: dict[str, set[str]] = {}
        self.idle_since: dict[tuple[str, str], int] = {}
        self.last: dict[str, TopicCut] = {}

    def tick(self) -> PollReport:
        report = PollReport()
        active = {topic: p for topic, p in self.policies().items() if p.active}
        for topic in set(self.last) - set(active):
            self._forget(topic)
        if not active:
            POLLS.inc()
            return report
        now = self.clock()
        try:
            seen = observe_all(self.admin, active.values(), now, remembered=self.remembered,
                               checkpoints=self.checkpoints)
        except Unavailable as exc:  # the brokers did not answer: every topic waits for the next pass
            for topic in active:
                POLL_FAILURES.labels(topic).inc()
                report.failed[topic] = str(exc)
            raise
        for topic, policy in sorted(active.items()):
            view = seen[topic]
            if isinstance(view, Exception):
                POLL_FAILURES.labels(topic).inc()
                report.failed[topic] = str(view)
                log.warning("topic %s not observed: %s", topic, view)
                continue
            if view.problems:
                report.failed[topic] = view.problems[0]
                log.warning("topic %s: %s", topic, view.problems[0])
                continue
            named = set(policy.groups)
            self.remembered.setdefault(topic, set()).update(
                g for g in view.required if g not in named and not g.startswith(SPARK_PREFIX))
            self._watch(policy, view, now)
            cut = cut_of(view)
            last = self.last.get(topic)
            if last is not None and replace(last, observed_at=now) == cut \
                    and now - last.observed_at < self.heartbeat_ms:
                report.unchanged.append(topic)
                continue
            report.published.append(cut)
        refused = self.publisher.publish_each(self.cuts_topic, [(cut, cut.topic) for cut in report.published])
        for index, cut in enumerate(report.published):
            if index in refused:  # not remembered as sent: the next pass sends it again
                POLL_FAILURES.labels(cut.topic).inc()
                report.failed[cut.topic] = f"its cut not confirmed on {self.cuts_topic}: {refused[index]}"
                log.warning("topic %s: %s", cut.topic, report.failed[cut.topic])
                continue
            CUTS.labels(cut.topic).inc()
            self.last[cut.topic] = cut
        report.published = [cut for index, cut in enumerate(report.published) if index not in refused]
        POLLS.inc()
        return report

    def _watch(self, policy: TopicRetentionPolicy, view: TopicView, now: int) -> None:
        """The topic's gauges: records the groups hold back, and how long its idlest required group has been
        idle (Empty, or no longer listed) as this process has seen it."""
        held = 0
        for decision, partition in zip(plan(policy, view), view.partitions, strict=True):
            young = partition.high if partition.young_from is None else min(partition.young_from, partition.high)
            start = partition.low if decision.start is None else decision.start
            held += max(0, young - start)
        HELD_RECORDS.labels(policy.topic).set(held)
        idle = []
        for group in view.groups:
            key = (policy.topic, group.group)
            if group.state in _IDLE_STATES:
                idle.append(now - self.idle_since.setdefault(key, now))
            else:
                self.idle_since.pop(key, None)
        STALEST_GROUP.labels(policy.topic).set(max(idle, default=0) / 1000)
        STALE_GROUPS.labels(policy.topic).set(sum(1 for ms in idle if ms >= policy.stale_after_ms))

    def _forget(self, topic: str) -> None:
        self.last.pop(topic, None)
        self.remembered.pop(topic, None)
        for key in [k for k in self.idle_since if k[0] == topic]:
            del self.idle_since[key]
        for gauge in (HELD_RECORDS, STALEST_GROUP, STALE_GROUPS):
            try:
                gauge.remove(topic)
            except KeyError:
                pass

    def run(self, stop: threading.Event, every_s: float) -> None:
        """A pass every ``every_s`` (the next at once after a pass that took longer) until ``stop`` is set; a pass
        that fails as a whole is logged and retried."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                report = self.tick()
                if report.published:
                    log.info("topic cuts published: %s", ", ".join(c.topic for c in report.published))
            except Unavailable as exc:
                log.warning("topic poller pass failed: %s", exc)
            stop.wait(max(0.0, every_s - (time.monotonic() - started)))
