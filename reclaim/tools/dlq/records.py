"""One dead-letter record as an operator reads it: where it sits, why, where it came from, what it names.

Built from a record's plain parts (no Kafka client), so it is tested without a broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from reclaim.consumers import retry
from reclaim.schemas.codec import RecordCodec
from reclaim.schemas.errors import RecordDecodeError
from reclaim.schemas.ledger import PendingDeleteLedgerInfo

UNDECODABLE_STREAM = "(undecodable)"
"""The stream column of a record whose bytes are not a ``PendingDeleteLedgerInfo``."""
UNDECODABLE_CHUNK = "<undecodable>"


@dataclass(frozen=True, slots=True)
class Origin:
    """The coordinates of the deletion record a dead letter stands for."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One DLQ record, its reason headers parsed and its value decoded (or the reason it is not).

    ``timestamp_ms`` is the DLQ record's own timestamp: when it was dead-lettered. Header fields a
    record lacks are empty (``""``) or None. ``stream`` and ``chunk`` are the decoded record's, so a listing
    that holds many records can drop ``info`` (and the value and headers) and still show them.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    info: PendingDeleteLedgerInfo | None
    decode_error: str
    outcome: str
    error_class: str
    error: str
    attempt: int | None
    origin: Origin | None
    original_timestamp_ms: int | None
    group: str
    stack: str
    stream: str
    """The stream the decoded record names (``(undecodable)`` without one): kept when ``info`` is not."""
    chunk: str

    @property
    def coordinates(self) -> str:
        """``PARTITION:OFFSET`` in the DLQ, as ``reclaim dlq show`` takes it."""
        return f"{self.partition}:{self.offset}"

    @property
    def identity(self) -> tuple[str, int, int, int | None]:
        """What makes two dead letters the same record: see :func:`identity_of`."""
        return identity_of(self)

    def summary(self) -> dict[str, Any]:
        """The record as ``list --json`` prints it."""
        return {
            "partition": self.partition, "offset": self.offset, "dead_lettered_at": iso(self.timestamp_ms),
            "timestamp_ms": self.timestamp_ms, "outcome": self.outcome, "error_class": self.error_class,
            "error": self.error, "attempt": self.attempt, "origin": str(self.origin) if self.origin else None,
            "original_timestamp_ms": self.original_timestamp_ms, "group": self.group or None,
            "stream": self.stream, "chunk": self.chunk, "key": text(self.key),
        }

    def detail(self) -> dict[str, Any]:
        """Everything ``show --json`` prints: the summary, the decoded record (or why not) and every header."""
        return {
            **self.summary(), "topic": self.topic, "stack": self.stack or None,
            "record": record_fields(self.info) if self.info is not None else None,
            "decode_error": self.decode_error or None,
            "headers": [{"key": key, "value": text(value)} for key, value in self.headers],
        }


class Placed(Protocol):
    """What ordering and telling copies apart read of a dead letter (a :class:`DeadLetter`, or what a
    command holds of one)."""

    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp_ms(self) -> int | None: ...
    @property
    def identity(self) -> tuple[str, int, int, int | None]: ...


class Located(Placed, Protocol):
    """Where a dead letter sits and which record it stands for, in full: a :class:`DeadLetter`, or what
    ``dlq replay`` holds of one between its two reads of the DLQ."""

    @property
    def topic(self) -> str: ...
    @property
    def origin(self) -> Origin | None: ...
    @property
    def original_timestamp_ms(self) -> int | None: ...


def identity_of(letter: Located) -> tuple[str, int, int, int | None]:
    """What makes two dead letters the same record: the original's coordinates and timestamp (its own
    coordinates without them). Copies of one record share its timestamp; a record at the same coordinates
    of a deletion topic created again does not, and is another record."""
    origin = letter.origin
    if origin is not None:
        return (origin.topic, origin.partition, origin.offset, letter.original_timestamp_ms)
    return (letter.topic, letter.partition, letter.offset, None)


def dead_letter(topic: str, partition: int, offset: int, timestamp_ms: int | None, key: bytes | None,
                value: bytes | None, headers: retry.RawHeaders, codec: RecordCodec) -> DeadLetter:
    """The :class:`DeadLetter` of a DLQ record given by its parts (a timestamp < 0 is unknown)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    raw = tuple((name, data if isinstance(data, bytes) else (data or "").encode()) for name, data in pairs)
    values = {name: data.decode("utf-8", "replace") for name, data in raw}
    info: PendingDeleteLedgerInfo | None = None
    decode_error = ""
    try:
        info = codec.decode(value or b"", topic, PendingDeleteLedgerInfo)
    except RecordDecodeError as exc:
        decode_error = str(exc)
    return DeadLetter(
        topic=topic, partition=partition, offset=offset,
        timestamp_ms=timestamp_ms if timestamp_ms is not None and timestamp_ms >= 0 else None,
        key=key, value=value, headers=raw, info=info, decode_error=decode_error,
        outcome=values.get(retry.H_OUTCOME, ""), error_class=values.get(retry.H_ERROR_CLASS, ""),
        error=values.get(retry.H_ERROR, ""), attempt=_int(values.get(retry.H_ATTEMPT)), origin=_origin(values),
        original_timestamp_ms=_int(values.get(retry.H_TIMESTAMP)), group=values.get(retry.H_GROUP, ""),
        stack=values.get(retry.H_STACK, ""),
        stream=info.topic_name if info is not None else UNDECODABLE_STREAM,
        chunk=info.chunk_name if info is not None else UNDECODABLE_CHUNK,
    )


def _origin(values: dict[str, str]) -> Origin | None:
    partition, offset = _int(values.get(retry.H_PARTITION)), _int(values.get(retry.H_OFFSET))
    topic = values.get(retry.H_TOPIC)
    if not topic or partition is None or offset is None:
        return None
    return Origin(topic, partition, offset)


def _int(raw: str | None) -> int | None:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def iso(millis: int | None) -> str | None:
    """``2026-11-23T12:00:00.000Z`` for epoch millis; None stays None, and so do millis no date can
    state (a header may hold any number: such a record is still shown, with the number as it is)."""
    if millis is None:
        return None
    try:
        moment = datetime.fromtimestamp(millis / 1000, UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def text(data: bytes | None) -> str | None:
    """Bytes as UTF-8 text, or as ``0x…`` hex when they are not UTF-8."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data.hex()


def record_fields(info: PendingDeleteLedgerInfo) -> dict[str, Any]:
    """Every field of a ``PendingDeleteLedgerInfo`` by name, nested records as dicts, enums by name."""
    fields = info.to_avro()
    fields["created_at_iso"] = iso(info.created_at)
    if info.offload_context is not None:
        fields["offload_context"]["uuid"] = str(info.offload_context.uuid)
    return fields
