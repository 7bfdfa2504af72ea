"""Secrets read from files (a mounted Kubernetes or Docker secret, say) rather than from a variable, whose value
``ps e`` and ``/proc/<pid>/environ`` show to whoever can see the process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def secret_text(path: Path, read_text: Callable[[Path], str] = lambda path: path.read_text(encoding="utf-8")) -> str:
    """The text of the secret file ``path`` without its trailing newline.

    Raises
    ------
    ValueError
        ``cannot read PATH: <reason>`` for a file that is missing or unreadable (or not UTF-8), ``PATH is empty``
        for one that holds nothing but a newline; the caller puts the setting's name in front.
    """
    try:
        text = read_text(path).rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"cannot read {path}: {reason}") from exc
    if not text:
        raise ValueError(f"{path} is empty")
    return text
