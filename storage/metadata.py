"""Segment, chunk and mark records (PDP-34 layout metadata) and the transactional metadata store protocol."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from reclaim.storage.chunks import ChunkLocation, ChunkTags

#: PDP-34's per-segment rolling policy: a chunk stops growing at this many bytes.
DEFAULT_MAX_ROLLING_LENGTH = 16 * 1024 * 1024

#: A chunk has at most a tier-1 and a tier-2 copy.
MAX_LOCATIONS = 2


class SegmentStatus(enum.IntFlag):
    """Status bit flags of a segment header record."""

    NONE = 0
    SEALED = 1
    DELETED = 2


@dataclass(frozen=True)
class SegmentRecord:
    """A segment header: status, offsets and the ends of its linked list of chunk records.

    ``version`` is the stored version (0 means not stored yet); every update bumps it by one.
    """

    name: str
    stream: str = ""
    status: SegmentStatus = SegmentStatus.NONE
    start_offset: int = 0
    length: int = 0
    first_chunk: str | None = None
    last_chunk: str | None = None
    max_rolling_length: int = DEFAULT_MAX_ROLLING_LENGTH
    owner_epoch: int = 0
    last_chunk_start_offset: int = 0
    first_chunk_start_offset: int = 0
    version: int = 0

    @property
    def sealed(self) -> bool:
        return SegmentStatus.SEALED in self.status

    @property
    def deleted(self) -> bool:
        return SegmentStatus.DELETED in self.status


@dataclass(frozen=True)
class ChunkRecord:
    """One chunk of a segment's layout, a node of the linked list (``next_chunk`` is the next key).

    ``start_offset`` is where the chunk's first byte sits in its segment; ``length`` counts the bytes
    the layout uses (tier-2 may hold more after a failed write; those are never read). Rows leave the
    layout by turning inactive with the ``mark_id`` of the deletion batch; they are removed only after
    their tier-2 delete. ``locations`` holds one or two copies (tier-1 and/or tier-2).
    """

    name: str
    segment: str
    start_offset: int
    length: int
    tags: ChunkTags
    locations: tuple[ChunkLocation, ...]
    next_chunk: str | None = None
    active: bool = True
    mark_id: str | None = None
    version: int = 0

    def __post_init__(self) -> None:
        if not 1 <= len(self.locations) <= MAX_LOCATIONS:
            raise ValueError(f"a chunk has 1..{MAX_LOCATIONS} locations, got {len(self.locations)}")

    @property
    def end_offset(self) -> int:
        """The segment offset just past this chunk's last byte."""
        return self.start_offset + self.length


class MarkState(enum.Enum):
    """State of a deletion mark batch (phase 1)."""

    PENDING = "PENDING"
    COMMITTED = "COMMITTED"


@dataclass(frozen=True)
class MarkRecord:
    """A phase-1 mark batch: its id, state and creation time (seconds since the epoch)."""

    mark_id: str
    state: MarkState
    created_at: float
    version: int = 0


class OffloadState(enum.Enum):
    """Where one offload of a chunk's copy stands (the protocol's steps; ``docs/concepts/offload.md``).

    INTENT: recorded before the first byte goes to the target; the upload may be in flight.
    UPLOADED: the whole copy is on the target. SWITCHED: the chunk's row reads from the target copy first
    and still lists the source copy. RELEASED: the source copy left the row under ``mark_id``; phase 2
    deletes it. CANCELLED: the chunk was retired, or the intent passed its deadline, before the switch; the
    target copy is to be deleted. ABANDONED: the target copy handed to phase 1 under ``mark_id``; phase 2
    deletes it. A finished offload's row is removed by phase 2's delete of its last detached copy.
    """

    INTENT = "INTENT"
    UPLOADED = "UPLOADED"
    SWITCHED = "SWITCHED"
    RELEASED = "RELEASED"
    CANCELLED = "CANCELLED"
    ABANDONED = "ABANDONED"


#: States whose copy is detached from the chunk row and named by the offload's own mark.
DETACHED_STATES = frozenset((OffloadState.RELEASED, OffloadState.ABANDONED))
#: States of an offload still on its way (no switch yet): a retirement cancels them.
OPEN_STATES = frozenset((OffloadState.INTENT, OffloadState.UPLOADED))


@dataclass(frozen=True)
class OffloadRecord:
    """One offload of chunk ``chunk``'s ``source`` copy to ``target`` (copy ``copy``, 32 hex digits).

    ``deadline``: the time (seconds since the epoch) by which the switch must commit, else the offload is
    cancelled and its copy deleted. ``switched_at``: when the switch committed (the source copy may leave the row
    once the release lag has passed since). ``mark_id``: the mark of the detached copy's pending delete.
    ``tags`` and ``segment`` are the chunk's, kept so a cancelled copy's delete can be built after the
    chunk's row is gone.
    """

    copy: str
    chunk: str
    segment: str
    tags: ChunkTags
    source: ChunkLocation
    target: ChunkLocation
    length: int
    state: OffloadState
    created_at: float
    deadline: float
    switched_at: float | None = None
    mark_id: str | None = None
    version: int = 0

    @property
    def detached(self) -> ChunkLocation | None:
        """The copy this offload handed to phase 1 on its own, if any: the source once released, the target
        once abandoned."""
        if self.state is OffloadState.RELEASED:
            return self.source
        return self.target if self.state is OffloadState.ABANDONED else None


@dataclass(frozen=True)
class OffloadPolicy:
    """When a stream's sealed chunks are offloaded by the ``reclaim offloader`` service
    (``docs/concepts/offload.md``): to binding ``target``, a chunk once it is ``after_s`` old, or once the hot
    bytes of the stream newer than it and its own pass ``after_bytes`` (Pulsar's
    ``managedLedgerOffloadThresholdInSeconds`` and ``…InBytes``; None: that threshold is off, 0: at once).
    ``release_after_s``: how long a hot copy is kept after its switch."""

    stream: str
    target: str
    after_bytes: int | None = None
    after_s: float | None = None
    release_after_s: float = 4 * 3600.0
    version: int = 0

    def __post_init__(self) -> None:
        if self.after_bytes is None and self.after_s is None:
            raise ValueError("an offload policy needs a threshold in bytes or in seconds")
        if self.after_bytes is not None and self.after_bytes < 0:
            raise ValueError(f"after_bytes must be >= 0, got {self.after_bytes}")
        for name in ("after_s", "release_after_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value}")

    def describe(self) -> str:
        rules = ([f"{self.after_bytes} hot bytes"] if self.after_bytes is not None else []) + \
            ([f"{self.after_s:g} s old"] if self.after_s is not None else [])
        return (f"offload to {self.target} after {' or '.join(rules)}; hot copies released "
                f"{self.release_after_s:g} s after the switch")


@dataclass(frozen=True)
class LeaseRecord:
    """A named lease in the metadata store, held by ``owner`` until ``expires_at`` (seconds since the epoch).
    ``epoch`` grows by one each time another owner takes it; ``version`` is the row's compare-and-set."""

    name: str
    owner: str
    epoch: int
    expires_at: float
    version: int = 0


@dataclass(frozen=True)
class TopicTruncationEntry:
    """One DeleteRecords the Kafka-topic applier did: a partition of ``topic`` (of id ``topic_id``) whose start
    moved from ``old_start`` to ``new_start``, decided at ``decided_at`` (epoch ms) by ``why`` (the rule and the
    groups that held it), signed by ``signer``, applied at ``applied_at`` (seconds since the epoch) from the
    record at ``source``. ``bytes_freed``: None when the broker does not say."""

    topic: str
    topic_id: str
    partition: int
    old_start: int
    new_start: int
    decided_at: int
    applied_at: float
    why: str
    signer: str
    source: str
    bytes_freed: int | None = None


class MetadataTransaction(Protocol):
    """One atomic unit over several keys; every ``put`` is a compare-and-set on versions.

    ``expected_version`` defaults to the record's own ``version`` (the version it was read at);
    0 means "must not exist yet". A mismatch raises :class:`~reclaim.storage.errors.MetadataConflictError`
    and, once it leaves the ``with`` block, the whole transaction changes nothing. Puts return the
    record as stored, with its new version.
    """

    def get_segment(self, name: str) -> SegmentRecord | None: ...
    def put_segment(self, record: SegmentRecord, *, expected_version: int | None = None) -> SegmentRecord: ...
    def delete_segment(self, name: str, *, expected_version: int) -> None: ...
    def get_chunk(self, name: str) -> ChunkRecord | None: ...
    def get_chunks(self, names: Iterable[str]) -> dict[str, ChunkRecord]: ...
    def list_chunks(self, segment: str, *, active_only: bool = True) -> list[ChunkRecord]: ...
    def put_chunk(self, record: ChunkRecord, *, expected_version: int | None = None) -> ChunkRecord: ...
    def remove_chunks(self, names: Iterable[str]) -> list[str]: ...
    def get_mark(self, mark_id: str) -> MarkRecord | None: ...
    def get_marks(self, mark_ids: Iterable[str]) -> dict[str, MarkRecord]: ...
    def put_mark(self, record: MarkRecord, *, expected_version: int | None = None) -> MarkRecord: ...
    def get_offload(self, copy: str) -> OffloadRecord | None: ...
    def offloads_of(self, chunks: Iterable[str]) -> list[OffloadRecord]: ...
    def put_offload(self, record: OffloadRecord, *, expected_version: int | None = None) -> OffloadRecord: ...
    def cancel_offloads(self, chunks: Iterable[str]) -> list[str]: ...
    def remove_offloads(self, copies: Iterable[str]) -> list[str]: ...
    def get_offload_policy(self, stream: str) -> OffloadPolicy | None: ...
    def put_offload_policy(self, record: OffloadPolicy, *,
                           expected_version: int | None = None) -> OffloadPolicy: ...
    def delete_offload_policy(self, stream: str) -> bool: ...
    def get_lease(self, name: str) -> LeaseRecord | None: ...
    def put_lease(self, record: LeaseRecord, *, expected_version: int | None = None) -> LeaseRecord: ...
    def delete_lease(self, name: str, *, expected_version: int) -> bool: ...
    def journal_topic_truncation(self, entry: TopicTruncationEntry) -> bool: ...
    def on_commit(self, callback: Callable[[], None]) -> None: ...


class MetadataStore(Protocol):
    """Segment/chunk/mark records with multi-key CAS transactions.

    ``transaction()`` opens one serializable transaction (commit on normal exit, rollback on any
    exception); ``transactions_committed`` counts committed ones so tests can assert how many an
    operation used. The plain ``get_*`` readers run outside any transaction and are not counted.
    ``get_chunks`` and ``get_marks`` read many keys at once; keys not stored are left out of the result.
    ``chunks_after`` pages through every chunk row in name order (an audit's walk).
    """

    transactions_committed: int

    def transaction(self) -> AbstractContextManager[MetadataTransaction]: ...
    def get_segment(self, name: str) -> SegmentRecord | None: ...
    def get_chunk(self, name: str) -> ChunkRecord | None: ...
    def get_chunks(self, names: Iterable[str]) -> dict[str, ChunkRecord]: ...
    def list_chunks(self, segment: str, *, active_only: bool = True) -> list[ChunkRecord]: ...
    def chunks_after(self, after: str, limit: int) -> list[ChunkRecord]: ...
    def get_mark(self, mark_id: str) -> MarkRecord | None: ...
    def get_marks(self, mark_ids: Iterable[str]) -> dict[str, MarkRecord]: ...
    def segment_names(self, prefix: str = "") -> list[str]: ...
    def binding_names(self) -> set[str]: ...
    def remove_chunks(self, names: Iterable[str]) -> list[str]: ...
    def get_offload(self, copy: str) -> OffloadRecord | None: ...
    def offloads_of(self, chunks: Iterable[str]) -> list[OffloadRecord]: ...
    def offloads_after(self, after: str, limit: int) -> list[OffloadRecord]: ...
    def offload_policies(self) -> list[OffloadPolicy]: ...
    def leases(self, prefix: str) -> list[LeaseRecord]: ...
    def topic_truncations(self, topic: str) -> list[TopicTruncationEntry]: ...
    def close(self) -> None: ...


def chunk_chain(first: str | None, chunks: Sequence[ChunkRecord]) -> list[ChunkRecord]:
    """Order ``chunks`` by following ``next_chunk`` from ``first``; stops at a missing or repeated key."""
    by_name = {chunk.name: chunk for chunk in chunks}
    ordered: list[ChunkRecord] = []
    seen: set[str] = set()
    current = first
    while current is not None and current in by_name and current not in seen:
        seen.add(current)
        ordered.append(by_name[current])
        current = by_name[current].next_chunk
    return ordered

