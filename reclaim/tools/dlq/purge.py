"""``reclaim dlq purge``: dead letters dropped with the Admin API's delete-records.

Kafka can only drop the oldest records of a partition: delete-records moves the partition's start
(its low watermark) forward. So with filters, each partition loses the longest run of records, from
its start, that all match; the first record that does not match stays, and so does every record
after it, matching or not (the plan says which and how many). ``--up-to P:O`` drops partition P's
records up to and including offset O. The plan is made from the records read; nothing newer is ever
dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from reclaim.exits import Unavailable
from reclaim.producers.config import kafka_config, quiet_logger
from reclaim.producers.kafka_errors import kafka_error_of
from reclaim.tools.dlq.reader import NoPartition, check_offset
from reclaim.tools.dlq.records import DeadLetter
from reclaim.tools.dlq.selection import Filters

PURGE_TIMEOUT_S = 30.0

_QUIET = quiet_logger("dlq-purge")


@dataclass(frozen=True)
class PartitionPlan:
    """What a purge does to one partition: offsets ``low`` to ``drop_to - 1`` go, the rest stay.

    ``kept_because`` says why the first record kept is kept (empty when nothing read is kept);
    ``matching_kept`` counts the records that match but stay behind it.
    """

    partition: int
    low: int
    high: int
    drop_to: int
    dropped: int
    kept: int
    kept_because: str = ""
    matching_kept: int = 0

    def describe(self) -> str:
        """The plan of this partition in one line."""
        gone = (f"drop offsets {self.low}..{self.drop_to - 1} ({self.dropped} record(s))" if self.dropped
                else "drop nothing")
        if not self.kept:
            return f"partition {self.partition}: {gone}; nothing stays"
        stays = f"keep offsets {self.drop_to}..{self.high - 1} ({self.kept} record(s))"
        why = f": {self.kept_because}" if self.kept_because else ""
        behind = (f"; {self.matching_kept} matching record(s) after it stay too, since delete-records can only "
                  "drop a partition's oldest records") if self.matching_kept else ""
        return f"partition {self.partition}: {gone}; {stays}{why}{behind}"


class FilteredPlan:
    """:func:`plan_filtered` fed one record at a time, each partition's in offset order (as the DLQ is read):
    it holds a few counts per partition, never the records."""

    def __init__(self, filters: Filters, now_ms: int) -> None:
        self._filters = filters
        self._now_ms = now_ms
        self._stays: dict[int, tuple[int, str]] = {}  # partition -> the first record kept: its offset, and why
        self._dropped: Counter[int] = Counter()
        self._kept: Counter[int] = Counter()
        self._matching_kept: Counter[int] = Counter()

    def add(self, letter: DeadLetter) -> None:
        """Count ``letter`` in its partition's plan (nothing of it is held)."""
        partition = letter.partition
        if partition in self._stays:
            self._kept[partition] += 1
            self._matching_kept[partition] += self._filters.matches(letter, self._now_ms)
            return
        why = self._filters.mismatch(letter, self._now_ms)
        if why is None:
            self._dropped[partition] += 1
        else:
            self._stays[partition] = (letter.offset, f"offset {letter.offset} does not match ({why})")
            self._kept[partition] += 1

    def plans(self, watermarks: Mapping[int, tuple[int, int]]) -> list[PartitionPlan]:
        """Per partition, the longest run of records from its start that all match."""
        plans = []
        for partition, (low, high) in sorted(watermarks.items()):
            drop_to, because = self._stays.get(partition, (high, ""))
            plans.append(PartitionPlan(partition, low, high, drop_to, self._dropped[partition], self._kept[partition],
                                       because, self._matching_kept[partition]))
        return plans


def plan_filtered(letters: Sequence[DeadLetter], watermarks: Mapping[int, tuple[int, int]], filters: Filters,
                  now_ms: int) -> list[PartitionPlan]:
    """Per partition, drop the longest run of records from its start that all match ``filters``."""
    plan = FilteredPlan(filters, now_ms)
    for letter in sorted(letters, key=lambda d: (d.partition, d.offset)):
        plan.add(letter)
    return plan.plans(watermarks)


class UpToPlan:
    """:func:`plan_up_to` fed one record at a time: how many of ``partition``'s records are up to ``offset``."""

    def __init__(self, partition: int, offset: int) -> None:
        self.partition, self.offset = partition, offset
        self._dropped = self._kept = 0

    def add(self, letter: DeadLetter) -> None:
        """Count ``letter`` when it is in the partition (nothing of it is held)."""
        if letter.partition == self.partition:
            if letter.offset <= self.offset:
                self._dropped += 1
            else:
                self._kept += 1

    def plans(self, watermarks: Mapping[int, tuple[int, int]]) -> list[PartitionPlan]:
        """The one partition's plan; ValueError when it holds no such offset."""
        partition, offset = self.partition, self.offset
        try:
            check_offset(watermarks, partition, offset)
        except NoPartition as exc:
            raise ValueError(f"the DLQ {exc}") from None
        except ValueError as exc:
            raise ValueError(f"--up-to {partition}:{offset}: {exc}") from None
        low, high = watermarks[partition]
        because = f"only offsets up to {offset} were asked for" if offset + 1 < high else ""
        return [PartitionPlan(partition, low, high, offset + 1, self._dropped, self._kept, because)]


def plan_up_to(letters: Sequence[DeadLetter], watermarks: Mapping[int, tuple[int, int]], partition: int,
               offset: int) -> list[PartitionPlan]:
    """Drop ``partition``'s records up to and including ``offset``; ValueError when it holds no such offset."""
    plan = UpToPlan(partition, offset)
    for letter in letters:
        plan.add(letter)
    return plan.plans(watermarks)


def plan_json(topic: str, plans: Sequence[PartitionPlan]) -> dict[str, object]:
    return {"topic": topic, "dropped": sum(p.dropped for p in plans), "kept": sum(p.kept for p in plans),
            "partitions": [asdict(p) for p in plans]}


def purge(address: str, topic: str, plans: Sequence[PartitionPlan],
          timeout_s: float = PURGE_TIMEOUT_S) -> dict[int, int]:
    """Carry out ``plans``; each partition's start offset afterwards, as the broker reports it."""
    requests = [TopicPartition(topic, plan.partition, plan.drop_to) for plan in plans if plan.dropped]
    if not requests:
        return {}
    seen: list[KafkaError] = []
    admin = AdminClient(kafka_config(address, "admin", {"logger": _QUIET, "error_cb": seen.append}))
    starts: dict[int, int] = {}
    futures = admin.delete_records(requests, request_timeout=timeout_s, operation_timeout=timeout_s)
    for tp, future in futures.items():
        try:
            starts[tp.partition] = future.result(timeout=timeout_s).low_watermark
        except KafkaException as exc:
            error = kafka_error_of(exc)
            cause = error.str() if error is not None else str(exc)
            raise Unavailable(f"delete-records on {topic} partition {tp.partition} failed: {cause} "
                              f"({len(starts)} partition(s) purged before it)") from exc
    return starts
