"""Secrets read from files (a mounted Kubernetes or Docker secret, say) rather than from a variable, whose value
``ps e`` and ``/proc/<pid>/environ`` show to whoever can see the process."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

MAX_SECRET_BYTES = 64 * 1024
"""The most a secret file may hold: a password, a key or a token is far less; a path naming a device, a log
or a disk image by mistake is refused rather than read whole."""


def read_secret_bytes(path: Path, limit: int = MAX_SECRET_BYTES) -> bytes:
    """The contents of the regular file ``path`` (links followed), at most ``limit`` bytes.

    Raises OSError (``not a regular file``, ``larger than N KiB``) for anything else; opening does not wait on
    a FIFO with no writer."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"larger than {limit // 1024} KiB")
    return data


def read_secret(path: Path) -> str:
    """:func:`read_secret_bytes` as UTF-8 text."""
    return read_secret_bytes(path).decode("utf-8")


def secret_text(path: Path, read_text: Callable[[Path], str] = read_secret) -> str:
    """The text of the secret file ``path`` without its trailing newline.

    Raises
    ------
    ValueError
        ``cannot read PATH: <reason>`` for a file that is missing, unreadable, not a regular file, over
        :data:`MAX_SECRET_BYTES` or not UTF-8; ``PATH is empty`` for one that holds nothing but a newline. The
        caller puts the setting's name in front.
    """
    try:
        text = read_text(path).rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"cannot read {path}: {reason}") from exc
    if not text:
        raise ValueError(f"{path} is empty")
    return text
