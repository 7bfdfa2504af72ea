"""The frozen values the worker's parts pass between them: records as polled, decoded or not,
batches checked and completed, and the report of what batches did."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reclaim.consumers.retry import Delivery
from reclaim.deletion.executor import BatchPlan
from reclaim.deletion.outcomes import Outcome, Verdict
from reclaim.quick_init import quick_init

Partition = tuple[str, int]


@quick_init
@dataclass(frozen=True)
class Polled:
    """One record as read: where from, its key and value, and its retry history."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    delivery: Delivery
    signature: tuple[tuple[str, bytes], ...] = ()
    """The record's signature headers, carried along when it is re-routed."""


@dataclass(frozen=True)
class Undecodable:
    """A record refused before any check (not signed by a key allowed to write it, or not a reclaim
    record); its verdict is known without reading the metadata or the storage."""

    polled: Polled
    verdict: Verdict


@dataclass(frozen=True)
class Checked:
    """A polled batch after its checks: the plan of its decoded records (None when there are none).

    ``decoded``: the records that decoded into a pending delete, in poll order, the plan's batch in
    the same order (the two are zipped, not paired in an object a record)."""

    decoded: tuple[Polled, ...]
    undecodable: tuple[Undecodable, ...]
    plan: BatchPlan | None


@dataclass(frozen=True)
class Completed:
    """A batch whose deletes and row cleanup are done: its records and their final verdicts for this
    attempt, side by side, each partition's records in offset order."""

    polled: tuple[Polled, ...]
    verdicts: tuple[Verdict, ...]
    dropped: frozenset[Partition] = frozenset()
    """Partitions sought back, after this batch was polled, to an earlier record that is not final."""


@dataclass(frozen=True)
class BatchReport:
    """What batches did: records seen, outcomes, records re-routed, offsets stored."""

    received: int = 0
    held: int = 0
    outcomes: Mapping[Outcome, int] = field(default_factory=dict)
    retried: int = 0
    dead_lettered: int = 0
    stored: int = 0
    unconfirmed: int = 0

    def __add__(self, other: BatchReport) -> BatchReport:
        outcomes = dict(self.outcomes)
        for outcome, count in other.outcomes.items():
            outcomes[outcome] = outcomes.get(outcome, 0) + count
        return BatchReport(
            received=self.received + other.received, held=self.held + other.held, outcomes=outcomes,
            retried=self.retried + other.retried, dead_lettered=self.dead_lettered + other.dead_lettered,
            stored=self.stored + other.stored, unconfirmed=self.unconfirmed + other.unconfirmed)
