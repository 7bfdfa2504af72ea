"""Segment ids, transaction ids and qualified segment names (PDP-24)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from reclaim.segments.stream_errors import MalformedNameError

#: Segment numbers and epochs are non-negative 32-bit Java ints in PDP-24.
MAX_INT32 = 2**31 - 1
#: A transaction id is 128 bits: the epoch in the high 32, a counter in the low 96.
TXN_COUNTER_BITS = 96
MAX_TXN_COUNTER = 2**TXN_COUNTER_BITS - 1

_NAME_PART = r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,254}"
_NUMBER = r"0|[1-9][0-9]{0,9}"
_SEGMENT_RE = re.compile(
    rf"(?P<scope>{_NAME_PART})/(?P<stream>{_NAME_PART})/(?P<number>{_NUMBER})\.#epoch\.(?P<epoch>{_NUMBER})"
    r"(?:#transaction\.(?P<txn>[0-9a-f]{32}))?")
_NAME_PART_RE = re.compile(_NAME_PART)


def _check_int32(what: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT32:
        raise ValueError(f"{what} must be an int in [0, {MAX_INT32}], got {value!r}")


def compose_segment_id(number: int, epoch: int) -> int:
    """The 64-bit segment id ``epoch << 32 | number``."""
    _check_int32("segment number", number)
    _check_int32("epoch", epoch)
    return epoch << 32 | number


def split_segment_id(value: int) -> tuple[int, int]:
    """``(number, epoch)`` of a 64-bit segment id; rejects values no valid pair composes to."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"segment id must be a non-negative int, got {value!r}")
    number, epoch = value & 0xFFFF_FFFF, value >> 32
    _check_int32("segment number", number)
    _check_int32("epoch", epoch)
    return number, epoch


@dataclass(frozen=True, order=True)
class SegmentId:
    """A segment of a stream: ``number`` is the primary (it decides placement), ``epoch`` the secondary.

    Ordered like the 64-bit value. Duplicates made by rolling transactions share the number and
    differ in epoch.

    Examples
    --------
    >>> SegmentId(number=3, epoch=2).value
    8589934595
    >>> SegmentId.from_value(8589934595)
    SegmentId(epoch=2, number=3)
    """

    epoch: int
    number: int

    def __post_init__(self) -> None:
        _check_int32("segment number", self.number)
        _check_int32("epoch", self.epoch)

    @property
    def value(self) -> int:
        return compose_segment_id(self.number, self.epoch)

    @classmethod
    def from_value(cls, value: int) -> SegmentId:
        number, epoch = split_segment_id(value)
        return cls(epoch=epoch, number=number)

    def duplicate(self, epoch: int) -> SegmentId:
        """The segment with the same primary ``number`` at ``epoch`` (PDP-24's duplicate segment)."""
        return SegmentId(epoch=epoch, number=self.number)

    def __str__(self) -> str:
        return f"{self.number}.#epoch.{self.epoch}"


@dataclass(frozen=True, order=True)
class TxnId:
    """A transaction id, a function of (epoch, counter): the epoch sits in the high 32 of 128 bits.

    Transactions created against one (reference) epoch therefore share their high bits and can be
    grouped and committed together, as PDP-24 asks.
    """

    epoch: int
    counter: int

    def __post_init__(self) -> None:
        _check_int32("transaction epoch", self.epoch)
        if isinstance(self.counter, bool) or not isinstance(self.counter, int) or not (
                0 <= self.counter <= MAX_TXN_COUNTER):
            raise ValueError(f"transaction counter must be an int in [0, 2^96), got {self.counter!r}")

    @property
    def value(self) -> int:
        return self.epoch << TXN_COUNTER_BITS | self.counter

    @property
    def hex(self) -> str:
        """The 32 lower-case hex digits that name the transaction's segments."""
        return f"{self.value:032x}"

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self.value)

    @classmethod
    def from_value(cls, value: int) -> TxnId:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**128:
            raise ValueError(f"transaction id must be a 128-bit unsigned int, got {value!r}")
        return cls(epoch=value >> TXN_COUNTER_BITS, counter=value & MAX_TXN_COUNTER)

    @classmethod
    def from_hex(cls, text: str) -> TxnId:
        if not re.fullmatch(r"[0-9a-f]{32}", text):
            raise MalformedNameError(f"transaction id must be 32 lower-case hex digits, got {text!r}")
        try:
            return cls.from_value(int(text, 16))
        except ValueError as exc:
            raise MalformedNameError(f"bad transaction id {text!r}: {exc}") from exc

    def __str__(self) -> str:
        return self.hex


@dataclass(frozen=True)
class SegmentName:
    """A parsed qualified segment name: ``scope/stream/<number>.#epoch.<epoch>[#transaction.<hex>]``."""

    scope: str
    stream: str
    segment: SegmentId
    txn: TxnId | None = None

    @property
    def qualified_stream(self) -> str:
        return f"{self.scope}/{self.stream}"

    @property
    def parent(self) -> str:
        """The name of the (non-transactional) segment this name's primary and epoch identify."""
        return segment_name(self.qualified_stream, self.segment)

    def __str__(self) -> str:
        return self.parent if self.txn is None else txn_segment_name(self.parent, self.txn)


def validate_stream_part(what: str, value: str) -> str:
    """Return a scope or stream name if it is allowed (letters, digits, ``_.-``, not leading)."""
    if not isinstance(value, str) or not _NAME_PART_RE.fullmatch(value):
        raise MalformedNameError(f"{what} name {value!r} must match {_NAME_PART}")
    return value


def qualified_stream(scope: str, stream: str) -> str:
    """``scope/stream``, after validating both parts."""
    return f"{validate_stream_part('scope', scope)}/{validate_stream_part('stream', stream)}"


def split_stream(qualified: str) -> tuple[str, str]:
    """``(scope, stream)`` of a qualified stream name."""
    scope, sep, stream = qualified.partition("/")
    if not sep:
        raise MalformedNameError(f"stream name {qualified!r} is not 'scope/stream'")
    return validate_stream_part("scope", scope), validate_stream_part("stream", stream)


def segment_name(stream: str, segment: SegmentId) -> str:
    """The qualified name ``scope/stream/<number>.#epoch.<epoch>`` of a stream's segment."""
    split_stream(stream)
    return f"{stream}/{segment}"


def txn_segment_name(parent: str, txn: TxnId) -> str:
    """The name of ``txn``'s segment over ``parent``: ``<parent>#transaction.<32 hex digits>``."""
    parsed = parse_segment_name(parent)
    if parsed.txn is not None:
        raise MalformedNameError(f"{parent!r} is a transaction segment already")
    return f"{parent}#transaction.{txn.hex}"


def parse_segment_name(name: str) -> SegmentName:
    """Parse a qualified (transaction) segment name; anything not in the canonical form is rejected."""
    if not isinstance(name, str):
        raise MalformedNameError(f"segment name must be a string, got {type(name).__name__}")
    match = _SEGMENT_RE.fullmatch(name)
    if match is None:
        raise MalformedNameError(
            f"{name[:200]!r} is not 'scope/stream/<number>.#epoch.<epoch>[#transaction.<32 hex>]'")
    try:
        segment = SegmentId(epoch=int(match["epoch"]), number=int(match["number"]))
    except ValueError as exc:
        raise MalformedNameError(f"{name[:200]!r}: {exc}") from exc
    txn = TxnId.from_hex(match["txn"]) if match["txn"] is not None else None
    return SegmentName(match["scope"], match["stream"], segment, txn)
