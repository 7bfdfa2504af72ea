"""``BaseChunkStorage``: name checks, logging and metrics added once around every binding's verbs."""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TypeVar

from reclaim.logs import LogLimiter
from reclaim.storage.chunks import (
    ChunkHandle,
    ChunkInfo,
    ChunkListPage,
    ChunkLocation,
    ChunkTags,
    ConcatArgument,
    DeleteOutcome,
    DeleteResult,
    Tier,
    WrittenAs,
    validate_chunk_name,
)
from reclaim.storage.errors import (
    ChunkReadOnlyError,
    InvalidChunkNameError,
    InvalidOffsetError,
    StorageError,
    UnsupportedOperationError,
)
from reclaim.storage.metrics import (
    STORAGE_BYTES,
    STORAGE_DELETED_CHUNKS,
    STORAGE_OPERATION_SECONDS,
    STORAGE_OPERATIONS,
    snake,
)

logger = logging.getLogger(__name__)
_FAILURES = LogLimiter()

#: Module-level aliases: inside the class, ``list`` names the ``list`` verb, not the builtin.
DeleteResults = list[DeleteResult]
ObjectPage = list["StoredObject"]
PageT = TypeVar("PageT")

#: ListObjectsV2 and DeleteObjects both stop at 1000 keys per request.
MAX_PAGE_SIZE = 1000


@dataclass(frozen=True)
class StoredObject:
    """One object as a listing sees it: its chunk name, size in bytes and last modification time
    (seconds since the epoch, as the storage's own clock wrote it)."""

    name: str
    size: int
    modified: float


@dataclass(frozen=True)
class LevelPage:
    """A page of one level of the name tree: objects directly under the prefix, and child prefixes."""

    objects: list[StoredObject]
    prefixes: list[str]


class BaseChunkStorage(ABC):
    """Implements the public ``ChunkStorage`` verbs on top of ``_do_*`` methods a binding provides.

    Every verb validates its chunk name before any I/O (the shared rules, then the binding's own limits
    through ``_check_address``), then times the call, counts its outcome by binding and operation, and
    logs one line naming the chunk.
    """

    def __init__(self, name: str, tier: Tier) -> None:
        self._name = name
        self._tier = tier

    @property
    def name(self) -> str:
        return self._name

    @property
    def tier(self) -> Tier:
        return self._tier

    @property
    def bucket(self) -> str | None:
        return None

    @property
    def supports_append(self) -> bool:
        return False

    @property
    def supports_concat(self) -> bool:
        return False

    @property
    def supports_truncation(self) -> bool:
        return False

    @property
    def supports_conditional_delete(self) -> bool:
        """Whether ``delete_many(..., versions=)`` removes only the version given (GCS, Azure, S3 where the
        server honours it); a binding without it deletes whatever the name holds."""
        return False

    def location(self, chunk_name: str) -> ChunkLocation:
        """Where ``chunk_name`` lives in this binding, as a metadata chunk record stores it."""
        return ChunkLocation(self._name, self._tier, self.bucket, self._valid(chunk_name))

    def written_as(self, chunk_name: str) -> WrittenAs:
        """What this binding stamps on the object it creates for ``chunk_name``, beside its ownership tags.

        Stamped by the binding, not passed by callers, so every path that creates a chunk's object
        names it, and tags copied from another chunk are re-stamped with the new object's own name.
        """
        return WrittenAs.of(self._name, self.bucket, chunk_name)

    def _valid(self, chunk_name: str) -> str:
        """``chunk_name`` if it is a valid name this binding can address, else InvalidChunkNameError; no I/O."""
        self._check_address(validate_chunk_name(chunk_name))
        return chunk_name

    @contextmanager
    def _observe(self, operation: str, chunk: str | None) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        except StorageError as exc:
            exc.binding = exc.binding or self._name
            exc.chunk = exc.chunk or chunk
            STORAGE_OPERATIONS.labels(self._name, operation, snake(type(exc).__name__)).inc()
            # A failed check is reported by whoever asked for it (a command's one-line error); an
            # endpoint that stays down is one warning per interval, not one per request.
            held = _FAILURES.admit((self._name, operation, type(exc))) if exc.retryable and operation != "check" \
                else None
            if held is None:
                logger.debug("storage %s %s chunk=%s failed: %s", self._name, operation, chunk, exc)
            else:
                logger.warning("storage %s %s chunk=%s failed: %s%s", self._name, operation, chunk, exc,
                               _FAILURES.suffix(held))
            raise
        except Exception:
            STORAGE_OPERATIONS.labels(self._name, operation, "unexpected").inc()
            logger.exception("storage %s %s chunk=%s failed unexpectedly", self._name, operation, chunk)
            raise
        else:
            STORAGE_OPERATIONS.labels(self._name, operation, "ok").inc()
            logger.debug("storage %s %s chunk=%s ok", self._name, operation, chunk)
        finally:
            STORAGE_OPERATION_SECONDS.labels(self._name, operation).observe(time.perf_counter() - started)

    def check(self) -> None:
        """Prove the binding can serve before trusting its answers: its bucket or root directory exists.

        Raises :class:`~reclaim.storage.errors.StorageMisconfiguredError` when it does not.
        """
        with self._observe("check", None):
            self._do_check()

    def exists(self, chunk_name: str) -> bool:
        self._valid(chunk_name)
        with self._observe("exists", chunk_name):
            return self._do_exists(chunk_name)

    def create(self, chunk_name: str, tags: ChunkTags | None = None) -> ChunkHandle:
        self._valid(chunk_name)
        with self._observe("create", chunk_name):
            self._do_create(chunk_name, b"", tags)
        return ChunkHandle(chunk_name, read_only=False)

    def create_with_content(self, chunk_name: str, data: bytes, tags: ChunkTags | None = None) -> ChunkHandle:
        """Create a chunk holding ``data`` in one step (one PUT on S3, one atomic link on a filesystem)."""
        self._valid(chunk_name)
        with self._observe("create", chunk_name):
            self._do_create(chunk_name, bytes(data), tags)
        STORAGE_BYTES.labels(self._name, "written").inc(len(data))
        return ChunkHandle(chunk_name, read_only=False)

    def delete(self, handle: ChunkHandle) -> None:
        self._valid(handle.name)
        with self._observe("delete", handle.name):
            self._do_delete(handle.name)
        STORAGE_DELETED_CHUNKS.labels(self._name, snake(DeleteOutcome.DELETED.value)).inc()

    def delete_many(self, chunk_names: Sequence[str],
                    versions: Mapping[str, str] | None = None) -> list[DeleteResult]:
        """Delete many chunks; one result per name in input order. Missing chunks count as gone.

        ``versions`` maps names to the :attr:`~reclaim.storage.chunks.ChunkInfo.version` their checks saw: on a
        binding that ``supports_conditional_delete``, such a name's object is deleted only while it is that
        version, else its result is ``CHANGED`` and the object is kept. Other bindings ignore it."""
        results: dict[str, DeleteResult] = {}
        valid: list[str] = []
        for name in chunk_names:
            try:
                valid.append(self._valid(name))
            except StorageError as exc:
                results[name] = DeleteResult(name, DeleteOutcome.FAILED, exc)
        unique = list(dict.fromkeys(valid))
        with self._observe("delete_many", f"<{len(unique)} chunks>"):
            for result in self._do_delete_many(unique, versions or {}) if unique else []:
                results[result.name] = result
        for outcome, count in Counter(result.outcome for result in results.values()).items():
            STORAGE_DELETED_CHUNKS.labels(self._name, snake(outcome.value)).inc(count)
        self._log_failures(list(results.values()))
        return [results[name] for name in chunk_names]

    def _log_failures(self, results: list[DeleteResult]) -> None:
        """A batched delete reports failures per key, not by raising: the retryable ones (an endpoint
        down) are one warning per binding and error per interval, with the count held back."""
        failed = [r.error for r in results if r.error is not None and r.error.retryable]
        if not failed:
            return
        first = failed[0]
        held = _FAILURES.admit((self._name, "delete_many", type(first)))
        if held is not None:
            logger.warning("storage %s delete_many: %d of %d chunks failed, will be retried: %s%s", self._name,
                           len(failed), len(results), first, _FAILURES.suffix(held))

    def open_read(self, chunk_name: str) -> ChunkHandle:
        self._valid(chunk_name)
        with self._observe("open_read", chunk_name):
            self._do_get_info(chunk_name)
        return ChunkHandle(chunk_name, read_only=True)

    def open_write(self, chunk_name: str) -> ChunkHandle:
        self._valid(chunk_name)
        with self._observe("open_write", chunk_name):
            if self._do_get_info(chunk_name).read_only:
                raise ChunkReadOnlyError("chunk is read-only", chunk=chunk_name)
        return ChunkHandle(chunk_name, read_only=False)

    def get_info(self, chunk_name: str) -> ChunkInfo:
        self._valid(chunk_name)
        with self._observe("get_info", chunk_name):
            return self._do_get_info(chunk_name)

    def read(self, handle: ChunkHandle, from_offset: int, length: int) -> bytes:
        self._valid(handle.name)
        if from_offset < 0 or length < 0:
            raise InvalidOffsetError(f"negative read range {from_offset}+{length}", chunk=handle.name)
        with self._observe("read", handle.name):
            data = self._do_read(handle.name, from_offset, length)
        STORAGE_BYTES.labels(self._name, "read").inc(len(data))
        return data

    def write(self, handle: ChunkHandle, offset: int, data: bytes) -> int:
        self._valid(handle.name)
        if handle.read_only:
            raise ChunkReadOnlyError("handle was opened for reading", chunk=handle.name)
        if offset < 0:
            raise InvalidOffsetError(f"negative write offset {offset}", chunk=handle.name)
        with self._observe("write", handle.name):
            written = self._do_write(handle.name, offset, bytes(data))
        STORAGE_BYTES.labels(self._name, "written").inc(written)
        return written

    def list(self, prefix: str = "", *, page_size: int = MAX_PAGE_SIZE,
             continuation: str | None = None) -> ChunkListPage:
        """One page of chunk names starting with ``prefix``, in lexicographic order."""
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be within 1..{MAX_PAGE_SIZE}")
        with self._observe("list", prefix or "<all>"):
            return self._do_list(prefix, page_size, continuation)

    def iter_names(self, prefix: str = "") -> Iterator[str]:
        """Every chunk name starting with ``prefix``, following ``list`` pages."""
        token: str | None = None
        while True:
            page = self.list(prefix, continuation=token)
            yield from page.names
            if page.continuation is None:
                return
            token = page.continuation

    def iter_object_pages(self, prefix: str = "", *, page_size: int = MAX_PAGE_SIZE
                          ) -> Iterator[ObjectPage]:
        """Every object whose chunk name starts with ``prefix``, with its size and modification time, in
        pages of at most ``page_size``; memory stays bounded by a page whatever the number of objects.

        The order is the binding's: S3 lists in name order, a filesystem in directory order.
        """
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be within 1..{MAX_PAGE_SIZE}")
        return self._observed_pages(self._do_object_pages(prefix, page_size), prefix)

    def iter_level_pages(self, prefix: str = "") -> Iterator[LevelPage]:
        """One level of the name tree under ``prefix`` (which is empty or ends with ``/``), in pages: the
        objects whose names have no ``/`` after ``prefix``, and the child prefixes (``prefix + part + "/"``)
        holding the rest. With :meth:`iter_object_pages` on each child it covers every object once: how
        the audit's Spark job splits a listing into tasks (as a directory tree)."""
        if prefix and not prefix.endswith("/"):
            raise ValueError(f"a level's prefix is empty or ends with '/', got {prefix!r}")
        return self._observed_pages(self._do_level_pages(prefix), prefix)

    def _observed_pages(self, pages: Iterator[PageT], prefix: str) -> Iterator[PageT]:
        """``pages``, each request timed and counted as a ``list_objects`` of ``prefix``."""
        while True:
            with self._observe("list_objects", prefix or "<all>"):
                page = next(pages, None)
            if page is None:
                return
            yield page

    def iter_objects(self, prefix: str = "") -> Iterator[StoredObject]:
        """Every object whose chunk name starts with ``prefix``, following :meth:`iter_object_pages`."""
        for page in self.iter_object_pages(prefix):
            yield from page

    def exists_many(self, chunk_names: Sequence[str]) -> set[str]:
        """Which of ``chunk_names`` have an object right now, exactly.

        A name that is no valid chunk name never exists. S3 answers from listings, not a HEAD per name.
        """
        valid: list[str] = []
        for name in chunk_names:
            with suppress(InvalidChunkNameError):
                valid.append(self._valid(name))
        unique = list(dict.fromkeys(valid))
        if not unique:
            return set()
        with self._observe("exists_many", f"<{len(unique)} chunks>"):
            return self._do_exists_many(unique)

    def concat(self, chunks: Sequence[ConcatArgument]) -> int:
        """Append ``chunks[1:]`` to ``chunks[0]`` natively; returns the number of bytes concatenated."""
        if not self.supports_concat:
            raise UnsupportedOperationError(f"{self._name} does not support concat", binding=self._name)
        if len(chunks) < 2:
            raise ValueError("concat needs a target and at least one source")
        for arg in chunks:
            self._valid(arg.name)
        with self._observe("concat", chunks[0].name):
            return self._do_concat(chunks)

    def truncate(self, handle: ChunkHandle, offset: int) -> bool:
        if not self.supports_truncation:
            raise UnsupportedOperationError(f"{self._name} does not support truncate", binding=self._name)
        self._valid(handle.name)
        if offset < 0:
            raise InvalidOffsetError(f"negative truncate offset {offset}", chunk=handle.name)
        with self._observe("truncate", handle.name):
            return self._do_truncate(handle.name, offset)

    def set_read_only(self, handle: ChunkHandle, read_only: bool) -> None:
        self._valid(handle.name)
        with self._observe("set_read_only", handle.name):
            self._do_set_read_only(handle.name, read_only)

    def close(self) -> None:  # noqa: B027 - optional hook: most bindings hold nothing to release
        """Release clients and pools; the default binding holds none."""

    def _check_address(self, name: str) -> None:  # noqa: B027 - optional hook: most bindings add no limit
        """Raise InvalidChunkNameError when the binding cannot address ``name`` (S3: key prefix + name too long)."""

    def _do_check(self) -> None:  # noqa: B027 - optional hook: a binding with nothing to prove passes
        """Raise when the binding's bucket or root is missing; the default binding has none."""

    @abstractmethod
    def _do_exists(self, name: str) -> bool: ...

    @abstractmethod
    def _do_create(self, name: str, data: bytes, tags: ChunkTags | None) -> None: ...

    @abstractmethod
    def _do_delete(self, name: str) -> None: ...

    @abstractmethod
    def _do_delete_many(self, names: Sequence[str], versions: Mapping[str, str]) -> DeleteResults: ...

    @abstractmethod
    def _do_get_info(self, name: str) -> ChunkInfo: ...

    @abstractmethod
    def _do_read(self, name: str, from_offset: int, length: int) -> bytes: ...

    @abstractmethod
    def _do_write(self, name: str, offset: int, data: bytes) -> int: ...

    @abstractmethod
    def _do_list(self, prefix: str, page_size: int, continuation: str | None) -> ChunkListPage: ...

    @abstractmethod
    def _do_object_pages(self, prefix: str, page_size: int) -> Iterator[ObjectPage]: ...

    @abstractmethod
    def _do_level_pages(self, prefix: str) -> Iterator[LevelPage]: ...

    def _do_exists_many(self, names: Sequence[str]) -> set[str]:
        """One existence check per name; a binding that can list many at once overrides this."""
        return {name for name in names if self._do_exists(name)}

    def _do_concat(self, chunks: Sequence[ConcatArgument]) -> int:
        raise UnsupportedOperationError(f"{self._name} does not support concat", binding=self._name)

    def _do_truncate(self, name: str, offset: int) -> bool:
        raise UnsupportedOperationError(f"{self._name} does not support truncate", binding=self._name)

    def _do_set_read_only(self, name: str, read_only: bool) -> None:
        raise UnsupportedOperationError(f"{self._name} does not support set_read_only", binding=self._name)
