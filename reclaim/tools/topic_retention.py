"""Consumption retention for plain Kafka topics, at the edge: what the brokers say of a topic under a policy (its
partitions' offsets, its required groups' committed offsets and states, its Spark queries' checkpoints), the
decision per partition (:mod:`reclaim.retention.topic_decision`) and ``DeleteRecords`` to apply it.

The policies themselves are signed records on the ``topic-retention`` topic (compacted, keyed by topic):
:func:`publish_policy` writes one as the admin, :func:`read_policies` reads the latest per topic whose signature
holds. A policy names the topic's id, so it does nothing to a topic deleted and created again under its name.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from reclaim.exits import Unavailable, UsageError
from reclaim.producers.config import kafka_config
from reclaim.retention.topic_decision import (
    PartitionDecision,
    PartitionView,
    TopicLimits,
    decide_partition,
    required_groups,
)
from reclaim.retention.topic_state import SPARK_PREFIX
from reclaim.schemas.codec import RecordCodec
from reclaim.schemas.errors import RecordDecodeError
from reclaim.schemas.streams import StreamCut
from reclaim.schemas.topic_retention import GroupCommit, TopicCut, TopicPartitionState, TopicRetentionPolicy
from reclaim.security.rules import signers_of
from reclaim.security.signing import RecordVerifier, Unauthenticated

log = logging.getLogger(__name__)

ADMIN_TIMEOUT_S = 30.0
NO_OFFSET = -1001
"""librdkafka's OFFSET_INVALID: a group with no committed offset on the partition."""

LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


class TopicRetentionError(Exception):
    """A topic that cannot be under consumption retention (absent, compacted only): one line for the operator."""


def check_topic_name(topic: str) -> str:
    """``topic`` when Kafka would accept it as a topic's name, else one usage line."""
    if not LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise UsageError(f"{topic!r} is not a Kafka topic name: ASCII letters, digits, '.', '_' and '-', at most "
                         "249 characters")
    return topic


# --- what the brokers say -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupState:
    """A required group as the brokers list it: its state (``absent``: not listed, its offsets deleted or
    expired) and whether it has committed anything on the topic."""

    group: str
    state: str
    committed_partitions: int


@dataclass(frozen=True)
class TopicView:
    """One topic as observed at ``now_ms``: its id, its partitions' views and its required groups' states."""

    topic: str
    topic_id: str
    now_ms: int
    partitions: tuple[PartitionView, ...]
    required: tuple[str, ...]
    groups: tuple[GroupState, ...] = ()
    problems: tuple[str, ...] = field(default=())


def result_of(future: Any, what: str) -> Any:
    """An Admin API future's result; the brokers' error or silence is :class:`~reclaim.exits.Unavailable`."""
    try:
        return future.result(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        raise Unavailable(f"{what}: {exc.args[0].str() if exc.args else exc}") from None
    except TimeoutError:
        raise Unavailable(f"{what}: no answer from the brokers within {ADMIN_TIMEOUT_S:g} s") from None


Described = tuple[str, list[int]]
"""A topic's id and partitions."""


def describe_topics(admin: AdminClient, topics: Iterable[str]) -> dict[str, Described | TopicRetentionError]:
    """Each topic's id and partitions, in two requests for all of them; a topic that does not exist or is
    compacted only is a :class:`TopicRetentionError` in its place. The brokers not answering is
    :class:`~reclaim.exits.Unavailable`."""
    wanted = sorted(set(topics))
    if not wanted:
        return {}
    found: dict[str, Described | TopicRetentionError] = {}
    for topic, future in admin.describe_topics(TopicCollection(wanted)).items():
        try:
            described = future.result(timeout=ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if error is not None and error.name() == "UNKNOWN_TOPIC_OR_PART":
                found[topic] = TopicRetentionError(f"topic {topic!r} does not exist")
                continue
            raise Unavailable(f"describing topic {topic!r}: {error.str() if error else exc}") from None
        except TimeoutError:
            raise Unavailable(f"describing topic {topic!r}: no answer within {ADMIN_TIMEOUT_S:g} s") from None
        found[topic] = (str(described.topic_id), sorted(p.id for p in described.partitions))
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in wanted if not isinstance(found[t], Exception)]
    for resource, future in (admin.describe_configs(resources) if resources else {}).items():
        configs = result_of(future, f"reading topic {resource.name!r}'s configuration")
        cleanup = configs["cleanup.policy"].value if "cleanup.policy" in configs else "delete"
        if "delete" not in {part.strip() for part in str(cleanup).split(",")}:
            found[resource.name] = TopicRetentionError(
                f"topic {resource.name!r} is compacted only (cleanup.policy={cleanup}): Kafka refuses DeleteRecords "
                "on it, so it cannot be under consumption retention")
    return found


def describe_topic(admin: AdminClient, topic: str) -> Described:
    """The topic's id and partitions; refused in one line when it does not exist or is compacted only."""
    described = describe_topics(admin, [topic])[topic]
    if isinstance(described, TopicRetentionError):
        raise described
    return described


CHUNK = 500
"""Partitions asked per ListOffsets or OffsetFetch request. librdkafka's handling of one answer grows with the square
of its partitions: a group's offsets on 10,000 partitions take 0.2 s in one request, 0.02 s in requests of 500
(``benchmarks/topic_retention.py``)."""

WAVE = 8
"""Requests sent before their answers are awaited. Hundreds in flight at once timed out on a loaded broker, and
librdkafka 2.x then failed an assertion (``rd_kafka_enq_once_del_source_return``) and stopped the process."""


def _chunks(items: Sequence[TopicPartition]) -> list[Sequence[TopicPartition]]:
    return [items[at:at + CHUNK] for at in range(0, len(items), CHUNK)]


def _in_waves(calls: Sequence[Callable[[], Any]]) -> Iterator[Any]:
    """Each call's answer (a future, or a dict of them), in order; at most :data:`WAVE` sent before the earlier are
    awaited by the caller (the generator resumes only once the caller has used the answers it was given)."""
    for at in range(0, len(calls), WAVE):
        yield from [call() for call in calls[at:at + WAVE]]


def _offsets(admin: AdminClient, specs: Mapping[TopicPartition, OffsetSpec]) -> dict[tuple[str, int], int | None]:
    """Each partition's offset for its spec (None: no such offset, e.g. no record that young)."""
    calls = [lambda chunk=chunk: admin.list_offsets({tp: specs[tp] for tp in chunk}) for chunk in _chunks(list(specs))]
    found: dict[tuple[str, int], int | None] = {}
    for answer in _in_waves(calls):
        for tp, future in answer.items():
            offset = result_of(future, f"listing offsets of {tp.topic}[{tp.partition}]").offset
            found[(tp.topic, tp.partition)] = None if offset < 0 else offset
    return found


def group_states(admin: AdminClient) -> dict[str, str]:
    """Every consumer group the brokers list, with its state (``empty``, ``stable``, ...)."""
    listed = result_of(admin.list_consumer_groups(), "listing consumer groups")
    return {g.group_id: (g.state.name.lower() if isinstance(g.state, ConsumerGroupState) else "unknown")
            for g in listed.valid}


def group_offsets(admin: AdminClient, wanted: Mapping[str, Sequence[TopicPartition]]
                  ) -> dict[str, dict[tuple[str, int], int] | Unavailable]:
    """Each group's committed offsets on the partitions wanted of it (a partition it has not committed on is left
    out), or why they could not be read (the group not authorized to this principal, say): a group that cannot be
    read fails the topics that require it, not the others."""
    asked = [(group, chunk) for group, partitions in wanted.items() for chunk in _chunks(partitions)]
    calls = [lambda group=group, chunk=chunk: admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, list(chunk))])[group] for group, chunk in asked]
    found: dict[str, dict[tuple[str, int], int] | Unavailable] = {group: {} for group in wanted}
    for (group, _), future in zip(asked, _in_waves(calls), strict=True):
        try:
            answer = result_of(future, f"reading group {group!r}'s offsets")
        except Unavailable as exc:
            found[group] = exc
            continue
        held = found[group]
        if not isinstance(held, Unavailable):
            held.update({(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions or []
                         if tp.error is None and tp.offset >= 0})
    return found


class Checkpoints:
    """Reads Spark Structured Streaming checkpoints: a local (or mounted) path, or ``s3a://bucket/prefix`` (also
    ``s3://``) through ``s3`` (a boto3 S3 client; None: S3 locations are refused with one line)."""

    def __init__(self, s3: Any | None = None) -> None:
        self.s3 = s3

    def offsets(self, checkpoint: str, topic: str) -> dict[int, int] | None:
        """How far the query at ``checkpoint`` has read ``topic``: the source offsets of the last batch it
        committed (``offsets/N`` for the highest ``N`` with a ``commits/N``). Spark's Kafka source commits nothing
        to Kafka (SPARK-27549 was declined), so this is the only record of its progress. None when the query has
        committed no batch yet (it holds the topic at its start)."""
        listing, read = self._s3(checkpoint) if checkpoint.startswith(("s3a://", "s3://")) else self._local(checkpoint)
        offsets, commits = listing("offsets"), listing("commits")
        if offsets is None:
            raise Unavailable(f"Spark checkpoint {checkpoint}: no offsets/ log there (is it a query's checkpoint "
                              "location, readable by this process?)")
        done = sorted(offsets & (commits or set()), reverse=True)
        if not done:
            return None
        return _source_offsets(read(f"offsets/{done[0]}"), topic)

    @staticmethod
    def _local(checkpoint: str) -> tuple[Callable[[str], set[int] | None], Callable[[str], str]]:
        root = Path(checkpoint.removeprefix("file://").removeprefix("file:"))

        def listing(folder: str) -> set[int] | None:
            where = root / folder
            return {int(p.name) for p in where.iterdir() if p.name.isdigit()} if where.is_dir() else None

        return listing, lambda name: (root / name).read_text()

    def _s3(self, checkpoint: str) -> tuple[Callable[[str], set[int] | None], Callable[[str], str]]:
        if self.s3 is None:
            raise Unavailable(f"Spark checkpoint {checkpoint} is on S3 and no S3 endpoint is configured "
                              "(RECLAIM_S3_ENDPOINT and its credentials)")
        s3 = self.s3
        bucket, _, prefix = checkpoint.split("://", 1)[1].partition("/")
        prefix = prefix.rstrip("/")

        def listing(folder: str) -> set[int] | None:
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/{folder}/")
            names = [item["Key"].rsplit("/", 1)[-1] for page in pages for item in page.get("Contents", [])]
            return {int(name) for name in names if name.isdigit()} if names else None

        def read(name: str) -> str:
            return str(s3.get_object(Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read().decode())

        return listing, read


def _source_offsets(text: str, topic: str) -> dict[int, int] | None:
    """``topic``'s offsets in one ``offsets/N`` file: "v1", the batch's metadata, then one line per source."""
    for line in text.splitlines()[2:]:
        try:
            source = json.loads(line)
        except json.JSONDecodeError:
            continue  # another source's offsets need not be JSON ("-" for a source with none)
        if isinstance(source, dict) and isinstance(source.get(topic), dict):
            return {int(p): int(o) for p, o in source[topic].items()}
    return None


def spark_offsets(checkpoint: str, topic: str) -> dict[int, int] | None:
    """:meth:`Checkpoints.offsets` of a local (or mounted) checkpoint."""
    return Checkpoints().offsets(checkpoint, topic)


Sizes = Callable[[Mapping[str, Iterable[int]]], Mapping[tuple[str, int], int]]
"""Partition sizes on the brokers' disks, in bytes, of ``{topic: partitions}``
(:class:`reclaim.tools.log_dirs.LogDirSizes`)."""


def observe(admin: AdminClient, policy: TopicRetentionPolicy, now_ms: int,
            groups: Mapping[str, str] | None = None, remembered: Iterable[str] = (),
            checkpoints: Checkpoints | None = None) -> TopicView:
    """:func:`observe_all` of one policy; a topic that cannot be observed raises its error."""
    seen = observe_all(admin, [policy], now_ms, groups, {policy.topic: remembered}, checkpoints)[policy.topic]
    if isinstance(seen, Exception):
        raise seen
    return seen


def observe_all(admin: AdminClient, policies: Iterable[TopicRetentionPolicy], now_ms: int,
                groups: Mapping[str, str] | None = None, remembered: Mapping[str, Iterable[str]] | None = None,
                checkpoints: Checkpoints | None = None) -> dict[str, TopicView | Exception]:
    """What the brokers say of each policy's topic now, in a few requests for all of them: each partition's start,
    high watermark, the offsets ``now − min`` and ``now − max`` fall at (``ListOffsets`` over every topic), and
    every required group's committed offsets (``OffsetFetch`` per group over its topics; both in requests of
    :data:`CHUNK` partitions), and each Spark query's. A topic that cannot be observed (absent, compacted only,
    its query's checkpoint unreadable) has its error in its place.

    ``groups``: the listed groups and their states (:func:`group_states`; read here when None). A group the
    pattern matches is required once it has committed on the topic (a group of the same naming that reads other
    topics holds nothing there); a group named is required whether or not it has. ``remembered``: per topic, the
    groups its pattern matched before. A group Kafka no longer lists (deleted, or its offsets expired) is
    matched by no pattern, yet must keep holding until released by hand: whoever observes a topic over time
    passes the groups it has seen required (:attr:`TopicView.required`)."""
    chosen = {p.topic: p for p in policies}
    described = describe_topics(admin, chosen)
    listed = group_states(admin) if groups is None else groups
    remembered = remembered or {}
    views: dict[str, TopicView | Exception] = {t: d for t, d in described.items() if isinstance(d, Exception)}
    live = {t: d for t, d in described.items() if not isinstance(d, Exception)}
    every = [TopicPartition(t, p) for t, (_, partitions) in live.items() for p in partitions]
    low = _offsets(admin, {tp: OffsetSpec.earliest() for tp in every})  # type: ignore[no-untyped-call]
    high = _offsets(admin, {tp: OffsetSpec.latest() for tp in every})  # type: ignore[no-untyped-call]
    young = _offsets(admin, {tp: OffsetSpec.for_timestamp(now_ms - chosen[tp.topic].min_ms) for tp in every
                             if chosen[tp.topic].min_ms > 0})
    old = _offsets(admin, {tp: OffsetSpec.for_timestamp(now_ms - (chosen[tp.topic].max_ms or 0)) for tp in every
                           if chosen[tp.topic].max_ms is not None})
    candidates: dict[str, set[str]] = {}
    for topic in live:
        policy = chosen[topic]
        matched = required_groups((), policy.group_pattern, listed) if policy.group_pattern is not None else set()
        candidates[topic] = ({*policy.groups, *remembered.get(topic, ())} | matched) - set(policy.released)
    offsets = group_offsets(admin, {group: [TopicPartition(t, p) for t, (_, partitions) in live.items()
                                            if group in candidates[t] for p in partitions]
                                    for group in sorted(set().union(*candidates.values()))})
    for topic, (topic_id, partitions) in live.items():
        policy = chosen[topic]
        named = {*policy.groups, *remembered.get(topic, ())}
        committed: dict[str, dict[int, int | None]] = {}
        states = []
        unreadable = [held for group in sorted(candidates[topic]) if isinstance(held := offsets[group], Unavailable)]
        if unreadable:
            views[topic] = unreadable[0]
            continue
        for group in sorted(candidates[topic]):
            held = offsets[group]
            assert not isinstance(held, Unavailable)
            mine = {p: held.get((topic, p)) for p in partitions}
            read = sum(1 for o in mine.values() if o is not None)
            if group not in named and not read:
                continue  # the pattern matches a group of another topic: a subscriber only once it commits here
            committed[group] = mine
            states.append(GroupState(group, listed.get(group, "absent"), read))
        try:
            for name, checkpoint in policy.spark_checkpoints:
                if name not in policy.released:
                    by_query = (checkpoints or Checkpoints()).offsets(checkpoint, topic) or {}
                    committed[SPARK_PREFIX + name] = {p: by_query.get(p) for p in partitions}
                    states.append(GroupState(SPARK_PREFIX + name, "spark", len(by_query)))
        except Unavailable as exc:
            views[topic] = exc
            continue
        partition_views = tuple(PartitionView(
            p, low[(topic, p)] or 0, high[(topic, p)] or 0, {g: o.get(p) for g, o in committed.items()},
            young_from=young.get((topic, p)), old_before=old.get((topic, p))) for p in partitions)
        problems = []
        if topic_id != policy.topic_id:
            problems.append(f"the policy is for topic id {policy.topic_id}, the topic now has id {topic_id} (deleted "
                            "and created again?): set its policy again")
        views[topic] = TopicView(topic, topic_id, now_ms, partition_views, tuple(sorted(committed)), tuple(states),
                                 tuple(problems))
    return views


def cut_of(view: TopicView) -> TopicCut:
    """``view`` as the record the poller publishes for the retention job: each partition's state, and each
    required group's committed offsets as a cut (a partition where it has none is left out of it)."""
    states = {g.group: g.state for g in view.groups}
    partitions = tuple(TopicPartitionState(p.partition, p.low, p.high, p.young_from, p.old_before, p.size_bytes)
                       for p in view.partitions)
    groups = tuple(GroupCommit(group, states.get(group, "absent"), StreamCut.from_mapping(
        {p.partition: offset for p in view.partitions if (offset := p.committed.get(group)) is not None}))
        for group in view.required)
    return TopicCut(view.topic, view.topic_id, view.now_ms, partitions, groups)


def plan(policy: TopicRetentionPolicy, view: TopicView) -> list[PartitionDecision]:
    """Each partition's decision; none moves when the policy is not for the topic's present life."""
    if view.problems or not policy.active:
        return []
    limits = TopicLimits(policy.min_ms, policy.max_ms, policy.max_bytes)
    return [decide_partition(limits, partition, view.required) for partition in view.partitions]


@dataclass(frozen=True)
class Deleted:
    """What one ``DeleteRecords`` did: the partition's start before and after (the low watermark returned)."""

    partition: int
    before: int
    after: int
    decision: PartitionDecision


class DeleteFailed(Exception):
    """DeleteRecords failed on a partition; ``retriable`` when trying again may succeed."""

    def __init__(self, message: str, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


def delete_records(admin: AdminClient, topic: str, starts: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """``DeleteRecords`` up to each start ahead of its partition's, in one request; the low watermarks returned are
    checked to have reached it. ``{partition: (before, after)}`` for the partitions moved (none: every one was
    there already). Idempotent: a start at or behind the partition's is no request at all, and the broker answers
    a repeated one with the start it has. Raises :class:`DeleteFailed`."""
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.earliest()  # type: ignore[no-untyped-call]
                                  for p in starts})
    before = {tp.partition: _answer(future, topic, tp.partition).offset for tp, future in futures.items()}
    behind = {p: start for p, start in starts.items() if before[p] < start}
    if not behind:
        return {}
    futures = admin.delete_records([TopicPartition(topic, p, start) for p, start in behind.items()])
    moved = {}
    for tp, future in futures.items():
        low = _answer(future, topic, tp.partition).low_watermark
        if low < behind[tp.partition]:
            raise DeleteFailed(f"DeleteRecords on {topic}[{tp.partition}] left its start at {low}, not "
                               f"{behind[tp.partition]}", retriable=True)
        moved[tp.partition] = (before[tp.partition], low)
    return moved


def _answer(future: Any, topic: str, partition: int) -> Any:
    try:
        return future.result(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        retriable = error is None or bool(error.retriable())
        raise DeleteFailed(f"{topic}[{partition}]: {error.str() if error else exc}", retriable) from None
    except TimeoutError:
        raise DeleteFailed(f"{topic}[{partition}]: no answer within {ADMIN_TIMEOUT_S:g} s", True) from None


def apply(admin: AdminClient, view: TopicView, decisions: Iterable[PartitionDecision]) -> list[Deleted]:
    """The decisions (:func:`plan`) applied with :func:`delete_records`; a failure is
    :class:`~reclaim.exits.Unavailable`."""
    moving = {d.partition: d for d in decisions if d.start is not None}
    try:
        moved = delete_records(admin, view.topic, {p: d.start for p, d in moving.items() if d.start is not None})
    except DeleteFailed as exc:
        raise Unavailable(str(exc)) from None
    return [Deleted(p, before, after, moving[p]) for p, (before, after) in sorted(moved.items())]


# --- the policies on the bus -----------------------------------------------------------------------------------


def latest_policies(messages: Iterable[Message], codec: RecordCodec, verifier: RecordVerifier | None,
                    on_refused: Callable[[str], None] = log.warning) -> dict[str, TopicRetentionPolicy]:
    """The policy in force per topic among ``messages`` (the topic-retention topic, in offset order): the
    latest ``updated_at`` of those whose signature holds (an admin's), decoded and keyed by their own topic.
    A record refused (the verifier logs and counts it), undecodable or keyed by another topic than it names is
    left out; ``on_refused`` hears of the last two."""
    latest: dict[str, TopicRetentionPolicy] = {}
    roles = signers_of(TopicRetentionPolicy)
    for msg in messages:
        where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
        if msg.value() is None:
            continue
        if verifier is not None:
            signer = verifier.verify(msg.topic() or "", msg.key(), msg.value(), msg.headers() or [], roles)
            if isinstance(signer, Unauthenticated):
                continue  # counted and logged by the verifier
        try:
            policy = codec.decode(msg.value() or b"", msg.topic() or "", TopicRetentionPolicy)
        except RecordDecodeError as exc:
            on_refused(f"topic retention policy at {where} refused: {exc}")
            continue
        if (msg.key() or b"").decode(errors="replace") != policy.topic:
            on_refused(f"topic retention policy at {where} refused: keyed {msg.key()!r}, for topic {policy.topic!r}")
            continue
        held = latest.get(policy.topic)
        if held is None or policy.updated_at >= held.updated_at:
            latest[policy.topic] = policy
    return latest


POLLER_GROUP = "reclaim-topic-poller"
"""The group id of the consumer following the policies (assigned, never joined, nothing committed)."""


class PolicyFollower:
    """Follows the topic-retention topic from its start with one consumer (assigned, never joined): each
    :meth:`refresh` reads what arrived since and returns the policy in force per topic, signatures checked."""

    def __init__(self, address: str, topic: str, codec: RecordCodec, verifier: RecordVerifier | None) -> None:
        self.topic, self.codec, self.verifier = topic, codec, verifier
        self.errors: list[KafkaError] = []
        self.consumer = Consumer(kafka_config(address, "consumer", {
            "group.id": POLLER_GROUP, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "error_cb": self.errors.append}))
        self.consumer.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
        # The topic's end is asked on a connection of its own: on the consumer's, the request would wait behind
        # its fetch, which the broker holds up to fetch.wait.max.ms (500 ms) when no record is new.
        self.admin = AdminClient(kafka_config(address, "admin"))
        self.policies: dict[str, TopicRetentionPolicy] = {}

    def refresh(self, timeout_s: float = 10.0) -> dict[str, TopicRetentionPolicy]:
        """The policies, once every record up to the topic's end now has been read."""
        wanted = {TopicPartition(self.topic, 0): OffsetSpec.latest()}  # type: ignore[no-untyped-call]
        [end] = self.admin.list_offsets(wanted, isolation_level=IsolationLevel.READ_COMMITTED,
                                        request_timeout=timeout_s).values()  # what the consumer can reach
        high = int(result_of(end, f"reading the end of {self.topic}").offset)
        deadline = time.monotonic() + timeout_s
        while self._position() < high:
            messages = self.consumer.consume(500, 0.2)
            real = [m for m in messages if m.error() is None]
            for newer in latest_policies(real, self.codec, self.verifier).values():
                held = self.policies.get(newer.topic)
                if held is None or newer.updated_at >= held.updated_at:
                    self.policies[newer.topic] = newer
            if time.monotonic() > deadline:
                cause = f" ({self.errors[-1].str()})" if self.errors else ""
                raise Unavailable(f"reading the policies on {self.topic} stalled for {timeout_s:g} s{cause}")
        return dict(self.policies)

    def _position(self) -> int:
        [position] = self.consumer.position([TopicPartition(self.topic, 0)])
        return max(position.offset, 0)

    def close(self) -> None:
        self.consumer.close()
