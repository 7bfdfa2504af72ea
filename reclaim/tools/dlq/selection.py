"""Choosing dead letters, pure: ages, coordinates, filters, duplicates, ordering and stats.

A record dead-lettered more than once (by two consumer groups reading the same deletion topic, or
sent again after an unconfirmed delivery) is one record: copies are told apart by the original
record's coordinates (``reclaim.original-topic/-partition/-offset``). :func:`select` keeps the first
copy in DLQ order and counts the others as ``duplicates``; a record without those headers is its own.
Copies also share ``reclaim.original-timestamp-ms``: records at the same coordinates of a deletion
topic that was created again differ there, and are two records.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Generic, TypeVar

from reclaim.durations import EXAMPLES, parse_duration
from reclaim.tools.dlq.records import DeadLetter, Origin, Placed, identity_of

AGE_BUCKETS: tuple[tuple[str, int], ...] = (("<1h", 3_600_000), ("<1d", 86_400_000), ("<7d", 604_800_000))
OLDER = "older"
UNKNOWN_AGE = "unknown"
"""The bucket of a record without a timestamp."""


P = TypeVar("P", bound=Placed)


@dataclass(frozen=True, slots=True)
class Brief:
    """What ``dlq stats`` counts of a matching dead letter, and all it holds of one: where it sits, which
    record it stands for, and its outcome, error class and stream (shared strings: the same few names come
    back record after record). About a tenth of a dead letter kept for a listing, which holds the decoded
    record."""

    partition: int
    offset: int
    timestamp_ms: int | None
    identity: tuple[str, int, int, int | None]
    outcome: str
    error_class: str
    stream: str

    @classmethod
    def of(cls, letter: DeadLetter) -> Brief:
        topic, partition, offset, original_ms = letter.identity
        return cls(letter.partition, letter.offset, letter.timestamp_ms,
                   (sys.intern(topic), partition, offset, original_ms), sys.intern(letter.outcome),
                   sys.intern(letter.error_class), sys.intern(letter.stream))


@dataclass(frozen=True, slots=True)
class Sendable:
    """What ``dlq replay`` holds of a matching dead letter between the read that chooses what to send and
    the read that sends it: where it sits and which record it stands for (about a tenth of the whole
    record, which the second read gets again)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    origin: Origin | None
    original_timestamp_ms: int | None

    @classmethod
    def of(cls, letter: DeadLetter) -> Sendable:
        return cls(sys.intern(letter.topic), letter.partition, letter.offset, letter.timestamp_ms, letter.origin,
                   letter.original_timestamp_ms)

    @property
    def identity(self) -> tuple[str, int, int, int | None]:
        return identity_of(self)


def parse_age(text: str) -> int:
    """Milliseconds of an age: a duration above 0 (:func:`reclaim.durations.parse_duration`), e.g. ``3600``,
    ``90s``, ``10m``, ``2h``, ``3d`` or ``1w``.

    >>> parse_age("2h")
    7200000
    """
    seconds = parse_duration(text)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"must be a duration above 0, e.g. {EXAMPLES}; got {text!r}")
    return round(seconds * 1000)


def parse_coordinates(text: str) -> tuple[int, int]:
    """``(partition, offset)`` of ``PARTITION:OFFSET``, e.g. ``0:42``."""
    partition, sep, offset = text.strip().partition(":")
    if not sep or not partition.isdigit() or not offset.isdigit():
        raise ValueError(f"cannot read {text!r} as PARTITION:OFFSET, e.g. 0:42")
    return int(partition), int(offset)


def age_bucket(age_ms: int | None) -> str:
    """The stats bucket of an age: ``<1h``, ``<1d``, ``<7d``, ``older`` (``unknown`` without one)."""
    if age_ms is None:
        return UNKNOWN_AGE
    for name, bound in AGE_BUCKETS:
        if age_ms < bound:
            return name
    return OLDER


def age_ms(letter: Placed, now_ms: int) -> int | None:
    """How long ago ``letter`` was dead-lettered (never negative), None without a timestamp."""
    return None if letter.timestamp_ms is None else max(0, now_ms - letter.timestamp_ms)


@dataclass(frozen=True)
class Filters:
    """What a record must be to be chosen; every filter that is set must hold (None: not set).

    ``reason`` is a case-insensitive substring of the outcome or the error message; ages are by when
    the record was dead-lettered; ``min_attempt`` is the least attempt; offsets are inclusive.
    """

    stream: str | None = None
    reason: str | None = None
    error_class: str | None = None
    older_than_ms: int | None = None
    newer_than_ms: int | None = None
    min_attempt: int | None = None
    partition: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None

    @property
    def active(self) -> bool:
        """Whether any filter is set."""
        return any(getattr(self, f.name) is not None for f in fields(self))

    def mismatch(self, letter: DeadLetter, now_ms: int) -> str | None:
        """The first filter ``letter`` fails, in words; None when it matches them all."""
        age = age_ms(letter, now_ms)
        if self.stream is not None and letter.stream != self.stream:
            return f"stream {letter.stream!r} is not {self.stream!r}"
        if self.reason is not None and self.reason.lower() not in f"{letter.outcome}\n{letter.error}".lower():
            return f"outcome {letter.outcome!r} and its error do not contain {self.reason!r}"
        if self.error_class is not None and letter.error_class != self.error_class:
            return f"error class {letter.error_class!r} is not {self.error_class!r}"
        if self.older_than_ms is not None and (age is None or age <= self.older_than_ms):
            return "dead-lettered too recently for --older-than"
        if self.newer_than_ms is not None and (age is None or age >= self.newer_than_ms):
            return "dead-lettered too long ago for --newer-than"
        if self.min_attempt is not None and (letter.attempt or 0) < self.min_attempt:
            return f"attempt {letter.attempt} is below {self.min_attempt}"
        if self.partition is not None and letter.partition != self.partition:
            return f"partition {letter.partition} is not {self.partition}"
        if self.from_offset is not None and letter.offset < self.from_offset:
            return f"offset {letter.offset} is before --from-offset {self.from_offset}"
        if self.to_offset is not None and letter.offset > self.to_offset:
            return f"offset {letter.offset} is after --to-offset {self.to_offset}"
        return None

    def matches(self, letter: DeadLetter, now_ms: int) -> bool:
        return self.mismatch(letter, now_ms) is None


def dlq_order(letters: Iterable[P]) -> list[P]:
    """Oldest first: by dead-letter time, then partition and offset."""
    return sorted(letters, key=lambda d: (d.timestamp_ms if d.timestamp_ms is not None else -1,
                                          d.partition, d.offset))


def dedupe(letters: Iterable[P]) -> tuple[list[P], int]:
    """The first copy of each record (oldest first) and how many later copies were left out."""
    first: dict[tuple[str, int, int, int | None], P] = {}
    copies = 0
    for letter in dlq_order(letters):
        if letter.identity in first:
            copies += 1
        else:
            first[letter.identity] = letter
    return list(first.values()), copies


@dataclass(frozen=True)
class Selection(Generic[P]):
    """The records chosen and the counts around them.

    ``total``: every record read; ``matching``: those the filters chose, copies included; ``unique``:
    those without the ``duplicates``; ``records``: the unique ones in the order asked, at most ``limit``.
    """

    total: int
    matching: int
    unique: int
    duplicates: int
    records: tuple[P, ...]

    def counts(self) -> dict[str, int]:
        return {"total": self.total, "matching": self.matching, "unique": self.unique,
                "duplicates": self.duplicates, "shown": len(self.records)}


def select(letters: Sequence[DeadLetter], filters: Filters, now_ms: int, *, newest_first: bool = True,
           limit: int | None = None, total: int | None = None) -> Selection[DeadLetter]:
    """The records matching ``filters``, each once, newest (or oldest) first, at most ``limit``; ``total``:
    how many records were read, when ``letters`` are only those kept of them (``len(letters)`` otherwise)."""
    return pick([letter for letter in letters if filters.matches(letter, now_ms)], newest_first=newest_first,
                limit=limit, total=len(letters) if total is None else total)


def pick(matching: Sequence[P], *, newest_first: bool, total: int, limit: int | None = None) -> Selection[P]:
    """:func:`select` of records that matched already (as a command's read kept them), of ``total`` read."""
    unique, duplicates = dedupe(matching)
    ordered = list(reversed(unique)) if newest_first else unique
    chosen = ordered if limit is None else ordered[:limit]
    return Selection(total, len(matching), len(unique), duplicates, tuple(chosen))


@dataclass(frozen=True)
class Stats:
    """Counts of the unique matching records by outcome, error class, stream and age bucket."""

    selection: Selection[Brief]
    by_outcome: dict[str, int] = field(default_factory=dict)
    by_error_class: dict[str, int] = field(default_factory=dict)
    by_stream: dict[str, int] = field(default_factory=dict)
    by_age: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        counts: dict[str, object] = dict(self.selection.counts())
        del counts["shown"]
        return {**counts, "by_outcome": self.by_outcome, "by_error_class": self.by_error_class,
                "by_stream": self.by_stream, "by_age": self.by_age}


def stats(letters: Sequence[DeadLetter], filters: Filters, now_ms: int, *, total: int | None = None) -> Stats:
    """Counts of the records :func:`select` would choose (each record once)."""
    matching = [Brief.of(letter) for letter in letters if filters.matches(letter, now_ms)]
    return count(matching, now_ms, total=len(letters) if total is None else total)


def count(matching: Sequence[Brief], now_ms: int, *, total: int) -> Stats:
    """The stats of the dead letters that matched (copies included), of ``total`` read."""
    records, duplicates = dedupe(matching)
    ages = Counter(age_bucket(age_ms(letter, now_ms)) for letter in records)
    buckets = [name for name, _ in AGE_BUCKETS] + [OLDER] + ([UNKNOWN_AGE] if ages[UNKNOWN_AGE] else [])
    return Stats(
        Selection[Brief](total, len(matching), len(records), duplicates, ()),
        by_outcome=_most_first(Counter(letter.outcome or "(none)" for letter in records)),
        by_error_class=_most_first(Counter(letter.error_class or "(none)" for letter in records)),
        by_stream=_most_first(Counter(letter.stream for letter in records)),
        by_age={name: ages[name] for name in buckets},
    )


def _most_first(counter: Counter[str]) -> dict[str, int]:
    return dict(sorted(counter.items(), key=lambda item: (-item[1], item[0])))
