"""Everything the retention job keeps for one Kafka topic under consumption retention, and the one call that turns
it into a :class:`~reclaim.schemas.topic_retention.TopicTruncation` (DeleteRecords for the Kafka-topic applier).

The inputs are the topic's policy (an admin's :class:`TopicRetentionPolicy`) and what the topic poller observed of
it (:class:`TopicCut`: the partitions and the required groups' committed offsets). The decision per partition is
:func:`reclaim.retention.topic_decision.decide_partition`; what the state adds is what only time tells:

- **groups remembered**: a group its pattern matched keeps holding after Kafka stops listing it (its offsets
  deleted or expired), at the partition's start, until the admin releases it or sets a policy it does not match;
- **forward only**: a partition's start is emitted only past the last one emitted for it; if the poller still
  sees the partition behind an emitted start ``REEMIT_AFTER_MS`` after it was emitted (the applier's DeleteRecords
  was lost or dead-lettered), it is emitted again (DeleteRecords is idempotent);
- **one life of the topic, one policy**: a cut of another topic id than the policy's is refused, and a cut
  observed before the policy was set is not decided on (its time offsets are for the old limits);
- **order**: an older policy or an older cut than the one held changes nothing (a replay does no harm).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from reclaim.retention.topic_decision import PartitionView, TopicLimits, decide_partition, required_groups
from reclaim.schemas.rejects import RejectKind
from reclaim.schemas.streams import StreamCut
from reclaim.schemas.topic_retention import TopicCut, TopicRetentionPolicy, TopicTruncation

SPARK_PREFIX = "spark:"
"""How a Spark query named through its checkpoint shows among a topic's groups."""

REEMIT_AFTER_MS = 5 * 60 * 1000
"""How long after a start was emitted the poller may still see the partition behind it before it is emitted again."""

VERSION = 1

TopicInput = TopicRetentionPolicy | TopicCut


@dataclass(frozen=True)
class TopicRejection:
    """An input the topic's state refused, and why."""

    topic: str
    kind: RejectKind
    reason: str


class TopicRetentionState:
    """One Kafka topic's consumption retention state: its policy, the latest cut, the groups remembered as
    required and the starts emitted. Apply inputs in order with :meth:`apply`, then :meth:`decide`."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.policy: TopicRetentionPolicy | None = None
        self.cut: TopicCut | None = None
        self.remembered: set[str] = set()
        self.emitted: dict[int, tuple[int, int]] = {}
        """Per partition: the last start emitted and when."""

    def apply(self, record: TopicInput, now_ms: int) -> TopicRejection | None:
        """Fold one input into the state; a refused one changes nothing and says why."""
        if record.topic != self.topic:
            raise ValueError(f"record of topic {record.topic!r} applied to {self.topic!r}")
        if isinstance(record, TopicRetentionPolicy):
            self._apply_policy(record)
            return None
        if self.policy is not None and record.topic_id != self.policy.topic_id:
            return TopicRejection(self.topic, RejectKind.WRONG_INCARNATION,
                                  f"the cut is of topic id {record.topic_id}, the policy of topic id "
                                  f"{self.policy.topic_id} (the topic deleted and created again?)")
        if self.cut is not None and record.observed_at <= self.cut.observed_at:
            return None  # a replay, or older than the cut held
        self.cut = record
        self._remember(record)
        return None

    def _apply_policy(self, policy: TopicRetentionPolicy) -> None:
        held = self.policy
        if held is not None and policy.updated_at < held.updated_at:
            return  # older than the policy in force: a replay changes nothing
        if held is None or policy.topic_id != held.topic_id or not policy.active:
            # Another life of the topic, or the policy ended: nothing of the earlier one holds.
            self.remembered.clear()
            self.emitted.clear()
        if self.cut is not None and self.cut.topic_id != policy.topic_id:
            self.cut = None
        self.policy = policy
        if self.cut is not None:
            self._remember(self.cut)

    def _remember(self, cut: TopicCut) -> None:
        """The groups of ``cut`` the policy's pattern matches stay required from now on."""
        if self.policy is None or self.policy.group_pattern is None:
            return
        listed = [g.group for g in cut.groups if not g.group.startswith(SPARK_PREFIX)]
        self.remembered |= required_groups((), self.policy.group_pattern, listed)

    def required(self) -> set[str]:
        """The groups (and ``spark:`` queries) that hold the topic now."""
        policy = self.policy
        if policy is None:
            return set()
        listed = {g.group for g in self.cut.groups if not g.group.startswith(SPARK_PREFIX)} \
            if self.cut is not None else set()
        queries = {SPARK_PREFIX + name for name, _ in policy.spark_checkpoints if name not in policy.released}
        return required_groups(policy.groups, policy.group_pattern, listed | self.remembered, policy.released) \
            | queries

    def decide(self, now_ms: int) -> TopicTruncation | None:
        """The DeleteRecords due now: each partition whose decided start passes the last one emitted (or that the
        poller still sees behind it ``REEMIT_AFTER_MS`` later); None when no partition moves."""
        policy, cut = self.policy, self.cut
        if policy is None or not policy.active or cut is None or cut.topic_id != policy.topic_id \
                or cut.observed_at < policy.updated_at:
            return None
        required = self.required()
        committed = {g.group: g.committed.as_dict() for g in cut.groups}
        limits = TopicLimits(policy.min_ms, policy.max_ms, policy.max_bytes)
        starts: dict[int, int] = {}
        why: dict[str, str] = {}
        for partition in cut.partitions:
            view = PartitionView(partition.partition, partition.start, partition.end,
                                 {group: committed.get(group, {}).get(partition.partition) for group in required},
                                 partition.young_from, partition.old_before, partition.size_bytes)
            decision = decide_partition(limits, view, required)
            if decision.start is None:
                continue
            last = self.emitted.get(partition.partition)
            lost = last is not None and partition.start < last[0] <= decision.start \
                and cut.observed_at >= last[1] + REEMIT_AFTER_MS
            if last is None or decision.start > last[0] or lost:
                starts[partition.partition] = decision.start
                held = f" held by {', '.join(decision.held_by)}" if decision.held_by else ""
                why[str(partition.partition)] = f"{decision.rule.name}{held}"
        if not starts:
            return None
        for number, start in starts.items():
            self.emitted[number] = (start, now_ms)
        return TopicTruncation(self.topic, policy.topic_id, StreamCut.from_mapping(starts), now_ms,
                               policy.updated_at, tuple(sorted(why.items())))

    # --- the job's state store ---------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        data: dict[str, Any] = {
            "v": VERSION, "topic": self.topic,
            "policy": None if self.policy is None else self.policy.to_avro(),
            "cut": None if self.cut is None else self.cut.to_avro(),
            "remembered": sorted(self.remembered),
            "emitted": [[p, start, at] for p, (start, at) in sorted(self.emitted.items())],
        }
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> TopicRetentionState:
        loaded = json.loads(data)
        if loaded.get("v") != VERSION:
            raise ValueError(f"topic retention state of version {loaded.get('v')}, this job reads {VERSION}")
        state = cls(loaded["topic"])
        state.policy = None if loaded["policy"] is None else TopicRetentionPolicy.from_avro(loaded["policy"])
        state.cut = None if loaded["cut"] is None else TopicCut.from_avro(loaded["cut"])
        state.remembered = set(loaded["remembered"])
        state.emitted = {int(p): (int(start), int(at)) for p, start, at in loaded["emitted"]}
        return state
