"""The topic poller: for every Kafka topic under consumption retention, what the brokers say of it — its partitions,
its required groups' committed offsets, its Spark queries' checkpoints — published as a signed
:class:`~reclaim.schemas.topic_retention.TopicCut` for the retention job to decide on.

Why a poller and not the job reading ``__consumer_offsets`` itself: that internal topic holds every group of the
cluster (reading it needs a wide grant), its key and value formats are Kafka's own and change with its versions
(KIP-848's groups write new record types), and it says nothing of what the decision also needs — the partitions'
start and end, ``offsetsForTimes`` and the Spark queries' checkpoints. The poller asks the brokers through the
Admin API for exactly those, as its own principal (Describe on the groups and the topic), and signs what it saw
with the ``topic-retention`` key, so the job obeys no one else's offsets.

What it does read of ``__consumer_offsets``, when allowed to, is a prompt: which group just committed on which
topic (:mod:`reclaim.tools.group_commits`), so that it observes that topic at once rather than at its next pass.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from confluent_kafka.admin import AdminClient
from prometheus_client import Counter, Gauge

from reclaim.exits import Unavailable, UsageError
from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.retention.topic_state import SPARK_PREFIX
from reclaim.schemas.base import millis_now
from reclaim.schemas.topic_retention import TopicCut, TopicRetentionPolicy
from reclaim.tools.group_commits import CommitWatch, Moves
from reclaim.tools.log_dirs import SizeReckoner
from reclaim.tools.topic_retention import Checkpoints, Sizes, TopicView, cut_of, observe_all, plan

log = logging.getLogger(__name__)

POLLS = Counter("reclaim_topic_retention_polls_total", "Passes of the topic poller over the topics under "
                "consumption retention")
POLL_FAILURES = Counter("reclaim_topic_retention_poll_failures_total", "Topics the topic poller could not observe "
                        "in a pass (the brokers did not answer, or the topic is gone or compacted)", ["topic"])
FOLLOWED = Counter("reclaim_topic_retention_followed_total", "Observations of the topics whose groups just committed "
                   "(read from __consumer_offsets), between the topic poller's passes")
CUTS = Counter("reclaim_topic_retention_cuts_total", "Topic cuts the topic poller published", ["topic"])
HELD_RECORDS = Gauge("reclaim_topic_retention_held_records", "Records old enough to delete (past the minimum) that "
                     "a required group has not read yet: what the slowest group holds back", ["topic"])
HELD_BYTES = Gauge("reclaim_topic_retention_held_bytes", "The bytes of the records held_records counts, reckoned from "
                   "each partition's growth per record (DescribeLogDirs: Describe on the cluster); absent while a "
                   "partition holding records has not grown under this poller", ["topic"])
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
    seen: dict[str, TopicView] = field(default_factory=dict)


class TopicPoller:
    """Observes every topic under an active policy each pass (:func:`~reclaim.tools.topic_retention.observe_all`:
    requests of 500 partitions over all of them, eight in flight at a time), and between passes the topics whose
    groups just committed (:meth:`run` with a :class:`~reclaim.tools.group_commits.CommitWatch`); publishes a topic's
    cut when it changed, or ``heartbeat_s`` after the last one (so the job's view of time limits stays fresh)."""

    def __init__(self, admin: AdminClient, policies: Callable[[], dict[str, TopicRetentionPolicy]],
                 publisher: ConfirmedPublisher, cuts_topic: str, heartbeat_s: float = 60.0,
                 clock: Callable[[], int] = millis_now, checkpoints: Checkpoints | None = None,
                 sizes: Sizes | None = None) -> None:
        self.admin, self.policies, self.publisher, self.cuts_topic = admin, policies, publisher, cuts_topic
        self.checkpoints = checkpoints or Checkpoints()
        self.sizes, self.reckoner = sizes, SizeReckoner()
        self.unsized: set[str] = set()
        self.sizes_quiet_until = 0.0
        self.heartbeat_ms = int(heartbeat_s * 1000)
        self.clock = clock
        self.remembered: dict[str, set[str]] = {}
        self.idle_since: dict[tuple[str, str], int] = {}
        self.last: dict[str, TopicCut] = {}
        self.watched: frozenset[str] = frozenset()
        """The topics under an active policy at the last pass: those whose groups' commits are followed."""
        self.pending: Moves = {}
        self.tries: dict[str, int] = {}

    def tick(self, only: Iterable[str] | None = None) -> PollReport:
        """One pass over every topic under an active policy, or an observation of the topics of ``only`` (those
        whose groups just committed)."""
        active = self._active(whole=only is None)
        if only is not None:
            active = {topic: active[topic] for topic in set(only) & set(active)}
        report = self._observe(active)
        if only is None:
            POLLS.inc()
        elif active:
            FOLLOWED.inc()
        return report

    def _active(self, whole: bool) -> dict[str, TopicRetentionPolicy]:
        """The policies in force now; the topics no longer under one are forgotten, and on a whole pass the rest
        are those whose groups' commits are followed."""
        active = {topic: p for topic, p in self.policies().items() if p.active}
        for topic in set(self.last) - set(active):
            self._forget(topic)
        if whole:
            self.watched = frozenset(active)
        return active

    def _observe(self, active: dict[str, TopicRetentionPolicy]) -> PollReport:
        report = PollReport()
        if not active:
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
        seen = self._sized(active, seen)
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
            report.seen[topic] = view
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
        return report

    def _sized(self, active: dict[str, TopicRetentionPolicy], seen: dict[str, TopicView | Exception]
               ) -> dict[str, TopicView | Exception]:
        """``seen`` with the bytes of each partition of a topic under a size limit, reckoned from the partitions'
        sizes on the brokers (:class:`~reclaim.tools.log_dirs.SizeReckoner`, which learns every observed topic's
        bytes per record, for :data:`HELD_BYTES`). Sizes that cannot be read leave them unknown (no size forces
        anything); said once for each topic under a size limit."""
        views = {t: v for t, v in seen.items() if isinstance(v, TopicView) and not v.problems}
        limited = {t for t in views if active[t].max_bytes is not None}
        if time.monotonic() < self.sizes_quiet_until:  # sizes failed of late: asked only where a limit needs them
            views = {t: v for t, v in views.items() if t in limited}
        if not views or (self.sizes is None and not limited):
            return seen
        wanted = {t: [p.partition for p in v.partitions] for t, v in views.items()}
        try:
            found = {} if self.sizes is None else self.sizes(wanted)
        except (Unavailable, UsageError) as exc:
            found, why = {}, str(exc)
        else:
            why = "no partition sizes asked" if self.sizes is None else \
                "the brokers described none of their partitions (DescribeLogDirs needs Describe on the cluster)"
        if not found:
            self.sizes_quiet_until = time.monotonic() + SIZES_QUIET_S
        unsized = {t for t in limited if any((t, p) not in found for p in wanted[t])}
        if unsized - self.unsized:
            log.warning("--max-bytes forces nothing on %s for now: %s", ", ".join(sorted(unsized - self.unsized)),
                        why)
        self.unsized = (self.unsized - set(views)) | unsized
        sized = dict(seen)
        for topic, view in views.items():
            partitions = []
            for p in view.partitions:
                size = found.get((topic, p.partition))
                reckoned = None if size is None else self.reckoner.reckon(topic, p.partition, p.low, p.high, size)
                partitions.append(replace(p, size_bytes=reckoned))
            if topic in limited:
                sized[topic] = replace(view, partitions=tuple(partitions))
        return sized

    def _watch(self, policy: TopicRetentionPolicy, view: TopicView, now: int) -> None:
        """The topic's gauges: records the groups hold back (and their bytes, once known), and how long its
        idlest required group has been idle (Empty, or no longer listed) as this process has seen it."""
        held, held_bytes = 0, 0.0
        unknown = False  # a partition holds records of a size not reckoned yet
        for decision, partition in zip(plan(policy, view), view.partitions, strict=True):
            young = partition.high if partition.young_from is None else min(partition.young_from, partition.high)
            start = partition.low if decision.start is None else decision.start
            records = max(0, young - start)
            held += records
            per_record = self.reckoner.per_record.get((policy.topic, partition.partition))
            if records and per_record is None:
                unknown = True
            elif records and per_record is not None:
                held_bytes += records * per_record
        HELD_RECORDS.labels(policy.topic).set(held)
        if unknown:
            _remove(HELD_BYTES, policy.topic)
        else:
            HELD_BYTES.labels(policy.topic).set(round(held_bytes))
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
        self.reckoner.forget(topic)
        self.last.pop(topic, None)
        self.remembered.pop(topic, None)
        for key in [k for k in self.idle_since if k[0] == topic]:
            del self.idle_since[key]
        for gauge in (HELD_RECORDS, HELD_BYTES, STALEST_GROUP, STALE_GROUPS):
            _remove(gauge, topic)

    def run(self, stop: threading.Event, every_s: float, watch: CommitWatch | None = None) -> None:
        """A pass every ``every_s`` (the next at once after a pass that took longer) until ``stop`` is set; a pass
        that fails as a whole is logged and retried. With ``watch``, between passes a topic is observed as soon as
        one of its groups' commits moves: the Admin API asked again (briefly) until it answers what was committed.
        """
        next_pass = time.monotonic()
        self.pending, self.tries = {}, {}
        told = None
        while not stop.is_set():
            started = time.monotonic()
            if started >= next_pass:
                next_pass = started + every_s
                # Following starts before the pass, so that what the pass does not see, following does.
                if watch is not None and not watch.following and not watch.start() and watch.refused != told:
                    told = watch.refused
                    log.warning("not following the groups' commits (%s): topics are observed every %g s", told,
                                every_s)
                self._pass(stop, watch)
            elif watch is None or not watch.following:
                stop.wait(next_pass - started)
            else:
                self._follow(watch, min(next_pass - started, 1.0))

    def _pass(self, stop: threading.Event, watch: CommitWatch | None) -> None:
        """Every topic, :data:`PASS_TOPICS` at a time; between them, the topics whose groups just committed (a
        commit waits for one part of a pass, not the whole)."""
        try:
            active = self._active(whole=True)
        except Unavailable as exc:
            log.warning("topic poller pass failed: %s", exc)
            return
        topics = sorted(active)
        for at in range(0, len(topics), PASS_TOPICS):
            part = {topic: active[topic] for topic in topics[at:at + PASS_TOPICS]}
            self._logged(functools.partial(self._observe, part), "pass")
            if stop.is_set():
                return
            if watch is not None and watch.following:
                self._follow(watch, 0.0)
        POLLS.inc()

    def _follow(self, watch: CommitWatch, timeout_s: float) -> None:
        """Observe the topics whose groups' commits moved (waiting up to ``timeout_s`` for one), and again those
        whose observation does not show the commit yet."""
        for topic, commits in watch.moves(FOLLOW_RETRY_S if self.pending else timeout_s).items():
            self.pending.setdefault(topic, {}).update(commits)
        if not self.pending:
            return
        pending = self.pending
        report = self._logged(lambda: self.tick(pending), "observation")
        behind = {} if report is None else _behind(pending, report)
        for topic in pending.keys() - behind.keys():
            self.tries.pop(topic, None)
        for topic in list(behind):
            self.tries[topic] = self.tries.get(topic, 0) + 1
            if self.tries[topic] > FOLLOW_TRIES:  # the next pass observes it
                del behind[topic], self.tries[topic]
        self.pending = behind

    def _logged(self, step: Callable[[], PollReport], what: str) -> PollReport | None:
        try:
            report = step()
        except Unavailable as exc:
            log.warning("topic poller %s failed: %s", what, exc)
            return None
        if report.published:
            log.info("topic cuts published: %s", ", ".join(c.topic for c in report.published))
        return report


SIZES_QUIET_S = 600.0
"""After partition sizes could not be read (or none was described), the topics without a size limit are not asked
for theirs for this long: a poller whose principal may not describe the cluster, or whose client properties
kafka-python cannot take, does not pay for a request per part of every pass."""

PASS_TOPICS = 100
"""Topics observed together in a pass (one ``observe_all``); between two such parts the poller observes the topics
whose groups just committed."""
def _remove(gauge: Gauge, topic: str) -> None:
    try:
        gauge.remove(topic)
    except KeyError:
        pass


FOLLOW_RETRY_S = 0.02
FOLLOW_TRIES = 5
"""A topic whose groups just committed is asked again after :data:`FOLLOW_RETRY_S` while the Admin API's answer
lags the commit read from ``__consumer_offsets`` (the coordinator's cache is updated as the record is written), at
most this many times: then its next pass observes it."""


def _behind(moves: Moves, report: PollReport) -> Moves:
    """The moves the observation in ``report`` does not show yet: a required group's committed offset on a partition
    other than the one just read from ``__consumer_offsets``."""
    behind: Moves = {}
    for topic, commits in moves.items():
        view = report.seen.get(topic)
        if view is None:
            continue  # not observed (failed, or no longer under a policy): its next pass will
        partitions = {p.partition: p for p in view.partitions}
        for (group, partition), offset in commits.items():
            if group in view.required and partition in partitions \
                    and partitions[partition].committed.get(group) != offset:
                behind.setdefault(topic, {})[(group, partition)] = offset
    return behind
