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
from reclaim.storage.chunks import ChunkInfo, ChunkLocation
from reclaim.storage.errors import StorageError
from reclaim.storage.metadata import ChunkRecord, MarkRecord

#: A chunk copy as a record names it: (storage binding, chunk name).
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
        object.__setattr__(self, "copy", (self.info.storage_binding, self.info.chunk_name))


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
    """

    now_ms: int
    rows: Mapping[str, ChunkRecord] = field(default_factory=dict)
    marks: Mapping[str, MarkRecord] = field(default_factory=dict)
    places: Mapping[CopyKey, ChunkLocation | StorageError] = field(default_factory=dict)
    objects: Mapping[CopyKey, ChunkInfo | StorageError] = field(default_factory=dict)
