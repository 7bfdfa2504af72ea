"""What phase 2 knows about a batch before it judges it: frozen values, gathered by one I/O step.

:func:`reclaim.deletion.prefetch.gather` fills a :class:`Facts` (chunk rows, marks, where each binding keeps
each chunk, the tags of objects that have no row, which objects exist); :func:`reclaim.deletion.verify.judge`
then decides every record from it without any I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from reclaim.quick_init import quick_init
from reclaim.schemas.ledger import PendingDeleteLedgerInfo
from reclaim.storage.chunks import OFFLOAD_PREFIX, ChunkInfo, ChunkLocation
from reclaim.storage.errors import StorageError
from reclaim.storage.metadata import ChunkRecord, MarkRecord, OffloadRecord

#: A chunk copy as a record names it: (storage binding, the object's name there: the chunk name, or an
#: offloaded copy's ``_offload/<uuid>/<chunk name>``).
CopyKey = tuple[str, str]

#: A record created this far in the future (epoch millis) comes from a clock no one should trust.
MAX_CLOCK_SKEW_MS = 5 * 60 * 1000


class Proceed(enum.Enum):
    """The judgement that lets a record's copy be deleted."""

    DELETE = "delete"


@quick_init
@dataclass(frozen=True)
class Pending:
    """One record to judge, with when phase 2 first failed on it (its retry headers), if it did."""

    info: PendingDeleteLedgerInfo
    first_failure_ms: int | None = None
    copy: CopyKey = field(init=False, repr=False, compare=False)
    """(storage binding, chunk name): made once, since every step of a batch looks the copy up by it."""

    def __post_init__(self) -> None:
        info = self.info
        name = info.chunk_name
        key = info.location.key
        if OFFLOAD_PREFIX in key and info.offload_context is not None:
            # An offloaded copy's object is named by its uuid and chunk: the binding places that name, and
            # the record's key must be where it does (judge).
            offloaded = f"{OFFLOAD_PREFIX}{info.offload_context.uuid.hex}/{name}"
            if key.endswith(offloaded):
                name = offloaded
        object.__setattr__(self, "copy", (info.storage_binding, name))


@dataclass(frozen=True)
class Policy:
    """How long an uncommitted mark may take, and how far ahead a record's clock may be (millis)."""

    mark_timeout_ms: int
    max_clock_skew_ms: int = MAX_CLOCK_SKEW_MS


@dataclass(frozen=True)
class Facts:
    """Everything :func:`~reclaim.deletion.verify.judge` needs about one batch.

    ``places``: where the named binding keeps each copy, or the error saying it cannot (no such
    binding, a chunk name the binding refuses). ``objects``: for copies with no chunk row only, what
    the object's HEAD said (its tags, or the error — ``ChunkNotFoundError`` when there is none).
    ``offloads``: for copies their row does not list (or with no row), the offload of that copy.
    """

    now_ms: int
    rows: Mapping[str, ChunkRecord] = field(default_factory=dict)
    marks: Mapping[str, MarkRecord] = field(default_factory=dict)
    places: Mapping[CopyKey, ChunkLocation | StorageError] = field(default_factory=dict)
    objects: Mapping[CopyKey, ChunkInfo | StorageError] = field(default_factory=dict)
    offloads: Mapping[CopyKey, OffloadRecord] = field(default_factory=dict)
    """For copies their chunk's row does not list: the offload that made or released the copy, if any."""


def lists_copy(row: ChunkRecord | None, info: PendingDeleteLedgerInfo) -> bool:
    """Whether the chunk ``row`` lists the copy ``info`` names (its binding, bucket and key)."""
    if row is None:
        return False
    key, binding, bucket = info.location.key, info.storage_binding, info.location.bucket
    return any(loc.key == key and loc.binding == binding and loc.bucket == bucket for loc in row.locations)
