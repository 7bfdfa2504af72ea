"""Pure stream metadata (PDP-24): key ranges, epochs with reference epochs, history queries and scale planning."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from reclaim.schemas.streams import RetentionPolicy
from reclaim.segments.ids import SegmentId, TxnId, segment_name, txn_segment_name
from reclaim.segments.stream_errors import InvalidScaleError

KEY_SPACE_END = 1.0


@dataclass(frozen=True, order=True)
class KeyRange:
    """The half-open routing-key interval ``[start, end)`` a segment owns, inside ``[0, 1)``."""

    start: float
    end: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.start < self.end <= KEY_SPACE_END:
            raise InvalidScaleError(f"key range [{self.start}, {self.end}) is not inside [0, 1) or is empty")

    def overlaps(self, other: KeyRange) -> bool:
        return self.start < other.end and other.start < self.end

    def contains(self, key: float) -> bool:
        return self.start <= key < self.end


@dataclass(frozen=True)
class StreamSegment:
    """One segment of an epoch: its id and key range."""

    id: SegmentId
    key_range: KeyRange


@dataclass(frozen=True)
class EpochRecord:
    """One row of the history table: the epoch, its reference epoch and its segments by key range.

    A fresh epoch (from a scale) refers to itself; a duplicate epoch (from a rolling commit) refers
    to the reference of the epoch it duplicates, so all duplicates share one root (PDP-24).
    """

    epoch: int
    reference: int
    segments: tuple[StreamSegment, ...]
    created_at: float = 0.0

    @property
    def is_duplicate(self) -> bool:
        return self.reference != self.epoch

    @property
    def segment_ids(self) -> tuple[SegmentId, ...]:
        return tuple(s.id for s in self.segments)

    def by_number(self, number: int) -> StreamSegment:
        """The segment of this epoch whose primary is ``number``."""
        for segment in self.segments:
            if segment.id.number == number:
                return segment
        raise KeyError(f"epoch {self.epoch} has no segment number {number}")


class StreamState(enum.Enum):
    """Lifecycle of a stream."""

    ACTIVE = "ACTIVE"
    SEALED = "SEALED"
    DELETED = "DELETED"


@dataclass(frozen=True)
class StreamRecord:
    """A stream's row: its policy, state, active epoch and the counters transactions draw from."""

    scope: str
    name: str
    policy: RetentionPolicy
    state: StreamState = StreamState.ACTIVE
    active_epoch: int = 0
    txn_counter: int = 0
    commit_counter: int = 0
    created_at: float = 0.0
    version: int = 0
    incarnation: str = ""
    """This stream's incarnation (:func:`~reclaim.schemas.base.new_incarnation`): another when its name is used
    again after a delete."""

    @property
    def qualified(self) -> str:
        return f"{self.scope}/{self.name}"


class TxnState(enum.Enum):
    """Lifecycle of a transaction: OPEN, then COMMITTING→COMMITTED or ABORTING→ABORTED."""

    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"


@dataclass(frozen=True)
class TxnRecord:
    """A transaction: its id (whose epoch is the reference epoch it was created against) and parents.

    ``parents`` are the reference epoch's segments, one transaction segment over each.
    ``commit_order`` is set when a commit is requested and orders commits of one epoch.
    """

    stream: str
    txn_id: TxnId
    parents: tuple[SegmentId, ...]
    state: TxnState = TxnState.OPEN
    commit_order: int | None = None
    created_at: float = 0.0
    version: int = 0

    @property
    def epoch(self) -> int:
        return self.txn_id.epoch

    def segment_names(self) -> list[str]:
        """The transaction's segments, one per parent, in key order."""
        return [txn_segment_name(segment_name(self.stream, parent), self.txn_id) for parent in self.parents]

    def segment_for(self, number: int) -> str:
        """The transaction segment over the parent whose primary is ``number``."""
        for parent in self.parents:
            if parent.number == number:
                return txn_segment_name(segment_name(self.stream, parent), self.txn_id)
        raise KeyError(f"transaction {self.txn_id} has no segment over number {number}")


class StreamHistory:
    """The history table of one stream (epochs 0..n, the last active) and the queries cuts need."""

    def __init__(self, epochs: Iterable[EpochRecord]) -> None:
        self.epochs = sorted(epochs, key=lambda e: e.epoch)
        if not self.epochs or [e.epoch for e in self.epochs] != list(range(len(self.epochs))):
            raise ValueError("a history holds epochs 0..n without gaps")

    @property
    def active(self) -> EpochRecord:
        return self.epochs[-1]

    def at(self, epoch: int) -> EpochRecord:
        if not 0 <= epoch < len(self.epochs):
            raise KeyError(f"no epoch {epoch}; the history has {len(self.epochs)}")
        return self.epochs[epoch]

    def span(self, segment: SegmentId) -> tuple[int, int]:
        """The first and last epochs ``segment`` belongs to (a segment unaffected by a scale carries over)."""
        found = [e.epoch for e in self.epochs if segment in e.segment_ids]
        if not found:
            raise KeyError(f"segment {segment} is in no epoch of this stream")
        return found[0], found[-1]

    def segment(self, segment: SegmentId) -> StreamSegment:
        first, _ = self.span(segment)
        return next(s for s in self.at(first).segments if s.id == segment)

    def key_range(self, segment: SegmentId) -> KeyRange:
        return self.segment(segment).key_range

    def successors(self, segment: SegmentId) -> list[StreamSegment]:
        """Segments of the epoch after ``segment``'s last one whose ranges overlap it (none while active)."""
        _, last = self.span(segment)
        if last == self.active.epoch:
            return []
        own = self.key_range(segment)
        return [s for s in self.at(last + 1).segments if s.key_range.overlaps(own)]

    def predecessors(self, segment: SegmentId) -> list[StreamSegment]:
        """Segments of the epoch before ``segment``'s first one whose ranges overlap it (none in epoch 0)."""
        first, _ = self.span(segment)
        if first == 0:
            return []
        own = self.key_range(segment)
        return [s for s in self.at(first - 1).segments if s.key_range.overlaps(own)]

    def all_segments(self) -> list[StreamSegment]:
        """Every segment the stream ever had, each once, in order of creation."""
        seen: dict[SegmentId, StreamSegment] = {}
        for epoch in self.epochs:
            for s in epoch.segments:
                seen.setdefault(s.id, s)
        return list(seen.values())

    def next_number(self) -> int:
        """The primary a new segment of a scale gets: one past every number used so far."""
        return 1 + max(s.id.number for s in self.all_segments())


def initial_epoch(count: int, created_at: float = 0.0) -> EpochRecord:
    """Epoch 0: ``count`` segments numbered 0.. that split the key space evenly."""
    if count < 1:
        raise InvalidScaleError(f"a stream needs at least one segment, got {count}")
    bounds = [i / count for i in range(count)] + [KEY_SPACE_END]
    segments = tuple(StreamSegment(SegmentId(epoch=0, number=i), KeyRange(bounds[i], bounds[i + 1]))
                     for i in range(count))
    return EpochRecord(0, 0, segments, created_at)


def _union(ranges: Sequence[KeyRange], what: str) -> list[tuple[float, float]]:
    """The maximal contiguous intervals covered by ``ranges``; overlapping ranges are an error."""
    merged: list[tuple[float, float]] = []
    for current in sorted(ranges):
        if merged and current.start < merged[-1][1]:
            raise InvalidScaleError(f"{what} overlap at [{current.start}, {current.end})")
        if merged and current.start == merged[-1][1]:
            merged[-1] = (merged[-1][0], current.end)
        else:
            merged.append((current.start, current.end))
    return merged


def plan_scale(history: StreamHistory, seal: Sequence[SegmentId], new_ranges: Sequence[tuple[float, float]],
               created_at: float = 0.0) -> EpochRecord:
    """The epoch a scale creates, after checking that ``new_ranges`` exactly cover the sealed segments.

    Endpoints are compared exactly: take them from :meth:`StreamHistory.key_range` (or values that
    are equal as floats). Unaffected segments carry over; new ones get fresh numbers at the new epoch.
    """
    active = history.active
    if not seal or not new_ranges:
        raise InvalidScaleError("a scale seals at least one segment and creates at least one")
    if len(set(seal)) != len(seal):
        raise InvalidScaleError("a segment is named twice in the segments to seal")
    inactive = [str(s) for s in seal if s not in active.segment_ids]
    if inactive:
        raise InvalidScaleError(f"segments {inactive} are not active in epoch {active.epoch}")
    ranges = sorted(KeyRange(float(start), float(end)) for start, end in new_ranges)
    sealed = [history.key_range(s) for s in seal]
    if _union(ranges, "new ranges") != _union(sealed, "sealed ranges"):
        raise InvalidScaleError(f"new ranges {[(r.start, r.end) for r in ranges]} do not exactly cover "
                                f"the sealed ranges {sorted((r.start, r.end) for r in sealed)}")
    epoch, first = active.epoch + 1, history.next_number()
    created = [StreamSegment(SegmentId(epoch=epoch, number=first + i), r) for i, r in enumerate(ranges)]
    kept = [s for s in active.segments if s.id not in seal]
    segments = tuple(sorted(kept + created, key=lambda s: s.key_range))
    return EpochRecord(epoch, epoch, segments, created_at)


def duplicate_epoch(source: EpochRecord, epoch: int, created_at: float = 0.0) -> EpochRecord:
    """A duplicate of ``source`` at ``epoch``: same primaries and ranges, referring to ``source``'s root."""
    segments = tuple(StreamSegment(s.id.duplicate(epoch), s.key_range) for s in source.segments)
    return EpochRecord(epoch, source.reference, segments, created_at)


def scaled_epoch(history: StreamHistory, seal: Sequence[SegmentId],
                 new_ranges: Sequence[tuple[float, float]]) -> EpochRecord | None:
    """The fresh epoch a completed scale with exactly this request created, if any (for retries)."""
    wanted = sorted((float(s), float(e)) for s, e in new_ranges)
    for record in history.epochs[1:]:
        before = history.at(record.epoch - 1).segment_ids
        if record.is_duplicate or not all(s in before and s not in record.segment_ids for s in seal):
            continue
        created = sorted((s.key_range.start, s.key_range.end) for s in record.segments if s.id not in before)
        gone = {s for s in before if s not in record.segment_ids}
        if created == wanted and gone == set(seal):
            return record
    return None


class JournalState(enum.Enum):
    """Where a journaled truncation stands: authorized and under way, or applied."""

    APPLYING = "applying"
    APPLIED = "applied"


@dataclass(frozen=True)
class JournalEntry:
    """One truncation of the journal: the stream, the record it came from (``topic[partition]@offset``, or
    the command that applied it), the cut, the reason, who signed it, and when it was authorized."""

    stream: str
    source: str
    cut: tuple[tuple[int, int], ...]
    reason: str
    signer: str
    state: JournalState
    recorded_at: float
    incarnation: str = ""
    """The incarnation of the stream truncated ("" for an entry written before incarnations, of a namesake)."""
