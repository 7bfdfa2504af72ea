"""The filesystem binding's low-level helpers: ``OSError`` to storage errors, whole writes, directory fsync."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from reclaim.storage.errors import (
    AccessDeniedError,
    ChunkAlreadyExistsError,
    ChunkNotFoundError,
    InvalidChunkNameError,
    StorageError,
    StorageUnavailableError,
)

#: errnos after which the same call may succeed later.
_TRANSIENT_ERRNOS = {errno.ENOSPC, errno.EIO, errno.EAGAIN, errno.EBUSY, errno.ESTALE, errno.ETIMEDOUT,
                     errno.EINTR, errno.EMFILE, errno.ENFILE}
COPY_BLOCK = 1 << 20


def map_os_error(exc: OSError, name: str) -> StorageError:
    """Translate an ``OSError`` about chunk ``name`` into the storage error hierarchy."""
    if isinstance(exc, FileNotFoundError):
        return ChunkNotFoundError(f"chunk not found: {exc.strerror}", chunk=name)
    if isinstance(exc, FileExistsError):
        return ChunkAlreadyExistsError("chunk exists already", chunk=name)
    if isinstance(exc, PermissionError):
        return AccessDeniedError(f"access denied: {exc.strerror}", chunk=name)
    if isinstance(exc, NotADirectoryError | IsADirectoryError):
        return InvalidChunkNameError("chunk name collides with a directory of other chunks", chunk=name)
    if exc.errno in _TRANSIENT_ERRNOS:
        return StorageUnavailableError(f"filesystem unavailable: {exc.strerror}", chunk=name)
    return StorageError(f"filesystem error: {exc}", chunk=name)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def writable(mode: int) -> bool:
    return bool(mode & stat.S_IWUSR)
