"""The groups' commits as they happen: which group committed which offset where, read from Kafka's
``__consumer_offsets``, so that the topic poller observes a topic as soon as one of its groups moves instead of at
its next pass.

A prompt, never the truth: the poller still observes the topic through the Admin API (what it signs and publishes
is what the brokers answer there), so nothing read here can move a cut. It reads only the start of each record:
the key of an offset commit (versions 0 and 1: group, topic, partition) and the offset that leads its value in
every version; every other record (group metadata, KIP-848's records) is skipped. Following needs Read on
``__consumer_offsets``, which shows every group of the cluster; without it the poller observes on its passes only.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from reclaim.producers.config import kafka_config

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

_REFUSED = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                      KafkaError.CLUSTER_AUTHORIZATION_FAILED})


@dataclass(frozen=True)
class Commit:
    """One offset commit: ``offset`` None when the commit was deleted (the group's offsets deleted or expired)."""

    group: str
    topic: str
    partition: int
    offset: int | None


def decode_commit(key: bytes | None, value: bytes | None) -> Commit | None:
    """The commit a ``__consumer_offsets`` record holds; None for any other record, or one too short to be one."""
    if key is None or len(key) < 2:
        return None
    (version,) = struct.unpack_from(">h", key)
    if version not in (0, 1):
        return None  # 2: a group's metadata; higher: KIP-848's records
    try:
        group, at = _string(key, 2)
        topic, at = _string(key, at)
        (partition,) = struct.unpack_from(">i", key, at)
    except (struct.error, UnicodeDecodeError, ValueError):
        return None
    if value is None:
        return Commit(group, topic, partition, None)
    if len(value) < 10:
        return None
    (offset,) = struct.unpack_from(">q", value, 2)  # every version: int16 version, then int64 offset
    return Commit(group, topic, partition, offset)


def _string(data: bytes, at: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, at)
    if length < 0 or at + 2 + length > len(data):
        raise ValueError("string past the record's end")
    return data[at + 2:at + 2 + length].decode(), at + 2 + length


Moves = dict[str, dict[tuple[str, int], int | None]]
"""Per topic, the commits that moved: ``(group, partition) -> offset`` (None: deleted)."""


class CommitWatch:
    """Follows ``__consumer_offsets`` from its end with one consumer (assigned, never joined, read committed so a
    transaction's offsets count once it commits): :meth:`moves` says which topics' commits changed since.

    ``wanted(topic)``: whether a topic's commits are worth telling (those under a policy). A commit that repeats
    the offset last seen (a consumer's auto-commit every few seconds) is no move."""

    def __init__(self, address: str, group_id: str, wanted: Callable[[str], bool]) -> None:
        self.wanted = wanted
        self.errors: list[KafkaError] = []
        self.consumer = Consumer(kafka_config(address, "consumer", {
            "group.id": group_id, "enable.auto.commit": False, "isolation.level": "read_committed",
            "error_cb": self.errors.append}))
        self.following = False
        self.refused: str | None = None
        self.seen: dict[tuple[str, str, int], int | None] = {}

    def start(self, timeout_s: float = 10.0) -> bool:
        """Assign every partition of ``__consumer_offsets`` at its end now (so a pass made after this misses no
        commit); False (and :attr:`refused` says why) when the topic is not there yet (no group has committed) or
        this principal may not read it."""
        if self.following:
            return True
        try:
            metadata = self.consumer.list_topics(OFFSETS_TOPIC, timeout=timeout_s).topics.get(OFFSETS_TOPIC)
        except KafkaException as exc:  # the brokers did not answer: tried again before the next pass
            self.refused = f"{OFFSETS_TOPIC} not readable: {exc.args[0].str() if exc.args else exc}"
            return False
        error = None if metadata is None else metadata.error
        if metadata is None or error is not None or not metadata.partitions:
            self.refused = f"{OFFSETS_TOPIC} not readable: {error.str() if error is not None else 'no partitions yet'}"
            return False
        ends = []
        for partition in sorted(metadata.partitions):  # resolved now: every commit from here on is read
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, partition),
                                                              timeout=timeout_s)
            except KafkaException as exc:
                self.refused = f"{OFFSETS_TOPIC} not readable: {exc.args[0].str() if exc.args else exc}"
                return False
            ends.append(TopicPartition(OFFSETS_TOPIC, partition, high))
        self.consumer.assign(ends)
        self.following, self.refused = True, None
        return True

    def moves(self, timeout_s: float, settle_s: float = 0.05) -> Moves:
        """The commits that moved, waiting up to ``timeout_s`` for the first and then ``settle_s`` for those that
        come with it (one group commits many partitions, many groups commit at once); ``timeout_s`` 0: only those
        already read."""
        moved: Moves = {}
        deadline = time.monotonic() + timeout_s
        while self.following:
            left = max(0.0, deadline - time.monotonic())
            if moved:  # what arrives while settling joins them, then they are told
                self._take(self.consumer.consume(1000, min(left, settle_s)), moved)
                break
            first = self.consumer.poll(left)  # returns with the first record; consume() would wait out its batch
            if first is None:
                break
            self._take([first, *self.consumer.consume(1000, 0)], moved)
        return moved

    def _take(self, messages: list[Message], moved: Moves) -> None:
        for message in messages:
            error = message.error()
            if error is not None:
                self._failed(error)
                continue
            commit = decode_commit(message.key(), message.value())
            if commit is None or not self.wanted(commit.topic):
                continue
            where = (commit.group, commit.topic, commit.partition)
            if where in self.seen and self.seen[where] == commit.offset:
                continue
            self.seen[where] = commit.offset
            moved.setdefault(commit.topic, {})[(commit.group, commit.partition)] = commit.offset

    def _failed(self, error: KafkaError) -> None:
        if error.code() in _REFUSED:
            self.refused = f"{OFFSETS_TOPIC} not readable: {error.str()}"
            self.following = False
            self.consumer.unassign()
            log.warning("no longer following the groups' commits (%s): topics are observed on passes only",
                        self.refused)
        elif error.code() != KafkaError._PARTITION_EOF:
            log.debug("following the groups' commits: %s", error.str())

    def close(self) -> None:
        self.consumer.close()
