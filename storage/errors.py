"""Typed errors of the storage layer (chunk bindings and metadata store), with the retryable/fatal split."""

from __future__ import annotations

from reclaim.errors import ReclaimError


class StorageError(ReclaimError):
    """A tier-1/tier-2 storage or metadata-store operation failed.

    ``retryable`` is a class attribute the retry router reads: True means the same request may
    succeed later (throttling, endpoint down); False means retrying cannot help.
    """

    retryable: bool = False

    def __init__(self, message: str, *, chunk: str | None = None, binding: str | None = None) -> None:
        super().__init__(message)
        self.chunk = chunk
        self.binding = binding


class InvalidChunkNameError(StorageError):
    """A chunk name was rejected before any I/O (empty, too long, NUL, path traversal, ...)."""


class ChunkTagsTooLargeError(StorageError):
    """A chunk's ownership tags exceed what its binding can store with it (S3: 2 KB of user metadata)."""


class ChunkNotFoundError(StorageError):
    """The named chunk does not exist in the binding."""


class ChunkAlreadyExistsError(StorageError):
    """A chunk with this name exists already; chunk names are never reused."""


class InvalidOffsetError(StorageError):
    """A write offset is not the chunk's current length, or a read range lies outside the chunk."""


class ChunkReadOnlyError(StorageError):
    """The chunk was made read-only and cannot be written, truncated or concatenated to."""


class UnsupportedOperationError(StorageError):
    """The binding does not offer this optional verb (concat, truncate, set_read_only)."""


class StorageUnavailableError(StorageError):
    """The storage could not serve the request now: 5xx, throttling, connection refused, timeouts."""

    retryable = True


class AccessDeniedError(StorageError):
    """Credentials or permissions refuse the request; retrying will not help."""


class StorageMisconfiguredError(StorageError):
    """The binding is set up wrongly (missing bucket, unknown binding name); fatal."""


class MetadataError(StorageError):
    """A metadata-store operation failed."""


class MetadataConflictError(MetadataError):
    """A compare-and-set saw a different version than expected; the transaction changed nothing.

    Retryable: re-reading the records and recomputing the update may succeed.
    """

    retryable = True

    def __init__(self, message: str, *, key: str, expected: int, actual: int) -> None:
        super().__init__(message)
        self.key = key
        self.expected = expected
        self.actual = actual


class MetadataMissingError(MetadataError):
    """A store opened without creating found no store at its path (a missing, foreign or corrupt file)."""


class MetadataUnavailableError(MetadataError):
    """The metadata store stayed locked or unreachable past its busy timeout."""

    retryable = True
