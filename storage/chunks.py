"""The tier-2 ``ChunkStorage`` protocol (PDP-34 verbs) and the plain values it passes around."""

from __future__ import annotations

import enum
import functools
import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from reclaim.quick_init import quick_init
from reclaim.storage.errors import InvalidChunkNameError, StorageError

#: The ``application`` ownership tag every chunk written by reclaim carries.
APPLICATION = "reclaim"

#: S3 keys are at most 1024 bytes; the same bound keeps filesystem paths sane.
MAX_CHUNK_NAME_BYTES = 1024
#: One path component: NAME_MAX of common filesystems, and MinIO refuses longer ones.
MAX_COMPONENT_BYTES = 255

_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")


class Tier(enum.Enum):
    """Where a binding sits: TIER1 is hot (local/network filesystem), TIER2 cold (S3, long-term fs)."""

    TIER1 = "TIER1"
    TIER2 = "TIER2"


@dataclass(frozen=True)
class ChunkTags:
    """Ownership tags stored with every chunk object, so an orphan can be attributed without metadata."""

    component: str
    stream: str
    segment: str
    writer_epoch: int
    application: str = APPLICATION

    def to_dict(self) -> dict[str, str]:
        """The tags as string pairs, the shape S3 user metadata and the sidecar file hold."""
        return {
            "application": self.application, "component": self.component, "stream": self.stream,
            "segment": self.segment, "writer-epoch": str(self.writer_epoch),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, str]) -> ChunkTags | None:
        """Parse tags written by :meth:`to_dict`; None when they are absent or malformed."""
        try:
            return cls(component=raw["component"], stream=raw["stream"], segment=raw["segment"],
                       writer_epoch=int(raw["writer-epoch"]), application=raw["application"])
        except (KeyError, ValueError):
            return None


def name_digest(chunk_name: str) -> str:
    """The SHA-256 (hex) of a chunk name's UTF-8 bytes: how an object's stored identity names its chunk."""
    return hashlib.sha256(chunk_name.encode("utf-8", errors="surrogatepass")).hexdigest()


@dataclass(frozen=True)
class WrittenAs:
    """What a binding wrote an object as, stored with its ownership tags: binding, bucket and chunk name.

    Every binding stamps it at create, whatever tags the caller passed, so an object answers for its own
    name: one reached under another name (a case-folding or trimming filesystem, a changed key prefix),
    or carrying metadata copied from another object, does not match the name a record gives it. The
    name is kept as its digest, a fixed 64 characters, so the tags of any chunk that fits the S3 user
    metadata limit without it still fit with it.
    """

    binding: str
    bucket: str | None
    chunk_sha256: str

    @classmethod
    def of(cls, binding: str, bucket: str | None, chunk_name: str) -> WrittenAs:
        return cls(binding, bucket, name_digest(chunk_name))

    def to_dict(self) -> dict[str, str]:
        """String pairs stored beside :meth:`ChunkTags.to_dict`'s (no key in common)."""
        pairs = {"chunk-sha256": self.chunk_sha256, "binding": self.binding}
        if self.bucket is not None:
            pairs["bucket"] = self.bucket
        return pairs

    @classmethod
    def from_dict(cls, raw: Mapping[str, str]) -> WrittenAs | None:
        """Parse what :meth:`to_dict` wrote; None when absent (an object written before it existed)."""
        digest, binding = raw.get("chunk-sha256"), raw.get("binding")
        if not isinstance(digest, str) or not isinstance(binding, str):
            return None
        bucket = raw.get("bucket")
        return cls(binding, bucket if isinstance(bucket, str) else None, digest)

    def mismatch(self, binding: str, bucket: str | None, chunk_name: str) -> str:
        """Why this object is not chunk ``chunk_name`` of ``binding``/``bucket``, or ``""`` when it is."""
        if self.chunk_sha256 != name_digest(chunk_name):
            return "the object was written under another chunk name"
        if self.binding != binding:
            return f"the object was written by storage binding {self.binding!r}, not {binding!r}"
        if self.bucket != bucket:
            return f"the object was written to bucket {self.bucket!r}, not {bucket!r}"
        return ""


@quick_init
@dataclass(frozen=True)
class ChunkLocation:
    """One copy of a chunk: the binding that holds it, its tier, bucket (None for a filesystem) and key.

    ``key`` is the object's name as the binding addresses it (an S3 binding adds its key prefix): the chunk
    name for a copy written there, :func:`offload_object_name` for one an offload made. ``copy`` is an offloaded
    copy's uuid (32 hex digits), None for a copy written in place.
    """

    binding: str
    tier: Tier
    bucket: str | None
    key: str
    copy: str | None = None


#: The first path component of every offloaded copy's object name; segment names may not start with it.
OFFLOAD_PREFIX = "_offload/"
_COPY_ID = re.compile(r"[0-9a-f]{32}")


def offload_object_name(copy: str, chunk_name: str) -> str:
    """Where an offload puts copy ``copy`` of ``chunk_name`` in its target binding: ``_offload/<copy>/<chunk>``.

    The copy's uuid is part of the name, so no two offloads of one chunk ever share an object: a pending
    delete of an abandoned copy can never remove a later copy of the same chunk.
    """
    if not _COPY_ID.fullmatch(copy):
        raise InvalidChunkNameError("an offloaded copy's id is 32 lowercase hex digits", chunk=chunk_name)
    return f"{OFFLOAD_PREFIX}{copy}/{chunk_name}"


def object_name(chunk_name: str, location: ChunkLocation) -> str:
    """The name ``location``'s binding keeps that copy of ``chunk_name`` under (``location.key`` less the
    binding's own prefix): the chunk name, or an offloaded copy's name."""
    return chunk_name if location.copy is None else offload_object_name(location.copy, chunk_name)


def offloaded_copy_of(object_name: str) -> tuple[str, str] | None:
    """``(copy, chunk name)`` of an offloaded copy's object name, or None when it is not one."""
    if not object_name.startswith(OFFLOAD_PREFIX):
        return None
    copy, _, chunk_name = object_name[len(OFFLOAD_PREFIX):].partition("/")
    return (copy, chunk_name) if _COPY_ID.fullmatch(copy) and chunk_name else None


@dataclass(frozen=True)
class ChunkHandle:
    """A handle returned by ``open_read``/``open_write``/``create``; carries no server state here."""

    name: str
    read_only: bool


@dataclass(frozen=True)
class ChunkInfo:
    """What ``get_info`` reports: the physical length, the ownership tags (None if missing) and what the
    binding wrote the object as (None when missing: untagged, or written before bindings stamped it)."""

    name: str
    length: int
    tags: ChunkTags | None
    read_only: bool = False
    written_as: WrittenAs | None = None
    modified_at: float | None = None
    """When the object was last written (seconds since the epoch), where the binding tells it."""
    version: str | None = None
    """Which write of the object this is, where the binding can make a delete conditional on it (a GCS
    generation, an Azure or S3 ETag): ``delete_many(..., versions=)`` then removes this write only."""


@dataclass(frozen=True)
class ConcatArgument:
    """One chunk taking part in a native concat: its name and the number of its bytes to use."""

    name: str
    length: int


@dataclass(frozen=True)
class ChunkListPage:
    """One page of ``list``: chunk names in lexicographic order and the token for the next page."""

    names: tuple[str, ...]
    continuation: str | None = None


class DeleteOutcome(enum.Enum):
    """Per-key result of ``delete_many``."""

    DELETED = "DELETED"
    ALREADY_GONE = "ALREADY_GONE"
    #: A conditional delete refused: the object under the name is no longer the version given (written
    #: again since it was checked). The new object is kept.
    CHANGED = "CHANGED"
    FAILED = "FAILED"

    # Singletons compared by identity: hashed by it too, in C (every key's outcome is counted once).
    __hash__ = object.__hash__


@quick_init
@dataclass(frozen=True)
class DeleteResult:
    """The outcome of deleting one chunk; ``error`` is set (and says if retryable) when FAILED."""

    name: str
    outcome: DeleteOutcome
    error: StorageError | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        """True when the chunk is gone, whether this call removed it or it was absent already."""
        return self.outcome is DeleteOutcome.DELETED or self.outcome is DeleteOutcome.ALREADY_GONE


def validate_chunk_name(name: str) -> str:
    """Return ``name`` if it is a safe chunk name, else raise :class:`InvalidChunkNameError`.

    Names may contain ``/`` separators, but no empty components, none that is ``.`` or ``..`` once
    trimmed of whitespace, no leading or trailing ``/``, no control characters, NUL or backslash, at most
    255 UTF-8 bytes a component and 1024 in all.
    """
    if not isinstance(name, str) or not name:
        raise InvalidChunkNameError("chunk name is empty", chunk=str(name))
    return _checked_name(name)


@functools.lru_cache(maxsize=16384)
def _checked_name(name: str) -> str:
    # Phase 2 checks each name before a batch's checks, its delete and its listing: remember the good ones.
    # An ASCII name (nearly every one) has as many UTF-8 bytes as characters: no encoding to count them.
    size = len if name.isascii() else _utf8_len
    if size(name) > MAX_CHUNK_NAME_BYTES:
        raise InvalidChunkNameError(f"chunk name longer than {MAX_CHUNK_NAME_BYTES} bytes", chunk=name[:64])
    if _CONTROL.search(name):
        raise InvalidChunkNameError("chunk name holds a control character or backslash", chunk=repr(name))
    for part in name.split("/"):
        if not part or part.strip() in (".", ".."):
            raise InvalidChunkNameError("chunk name has an empty, '.' or '..' path component "
                                        "(whitespace around it aside)", chunk=name)
        if size(part) > MAX_COMPONENT_BYTES:
            raise InvalidChunkNameError(f"chunk name has a path component longer than {MAX_COMPONENT_BYTES} "
                                        "bytes", chunk=name[:64])
    return name


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


@runtime_checkable
class ChunkStorage(Protocol):
    """A tier-1/tier-2 binding offering the PDP-34 chunk verbs.

    Write contract (PDP-34): ``offset`` must equal the chunk's current length, otherwise
    :class:`~reclaim.storage.errors.InvalidOffsetError`. A binding without append (``supports_append`` False,
    e.g. S3) accepts one write at offset 0 into an empty chunk, so callers write each piece as a new chunk.
    """

    @property
    def name(self) -> str: ...
    @property
    def tier(self) -> Tier: ...
    @property
    def bucket(self) -> str | None: ...
    @property
    def supports_append(self) -> bool: ...
    @property
    def supports_concat(self) -> bool: ...
    @property
    def supports_truncation(self) -> bool: ...
    @property
    def supports_conditional_delete(self) -> bool: ...

    def check(self) -> None: ...
    def location(self, chunk_name: str) -> ChunkLocation: ...
    def exists(self, chunk_name: str) -> bool: ...
    def create(self, chunk_name: str, tags: ChunkTags | None = None) -> ChunkHandle: ...
    def create_with_content(self, chunk_name: str, data: bytes,
                            tags: ChunkTags | None = None) -> ChunkHandle: ...
    def delete(self, handle: ChunkHandle) -> None: ...
    def delete_many(self, chunk_names: Sequence[str],
                    versions: Mapping[str, str] | None = None) -> list[DeleteResult]: ...
    def open_read(self, chunk_name: str) -> ChunkHandle: ...
    def open_write(self, chunk_name: str) -> ChunkHandle: ...
    def get_info(self, chunk_name: str) -> ChunkInfo: ...
    def read(self, handle: ChunkHandle, from_offset: int, length: int) -> bytes: ...
    def write(self, handle: ChunkHandle, offset: int, data: bytes) -> int: ...
    def list(self, prefix: str = "", *, page_size: int = 1000,
             continuation: str | None = None) -> ChunkListPage: ...
    def iter_names(self, prefix: str = "") -> Iterator[str]: ...
    def concat(self, chunks: Sequence[ConcatArgument]) -> int: ...
    def truncate(self, handle: ChunkHandle, offset: int) -> bool: ...
    def set_read_only(self, handle: ChunkHandle, read_only: bool) -> None: ...
    def close(self) -> None: ...
