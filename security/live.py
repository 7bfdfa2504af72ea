"""A keyring file followed while a process runs: read again within seconds of a change, so that a key retired
or removed with ``reclaim keys`` (or a stream grant taken from it) is refused by every running worker, applier
and retention job from then on.

A change is seen by the file's identity (inode, size, modification and change times, in nanoseconds):
``reclaim keys`` replaces the file whole (a new inode), an editor rewrites it (new times). A file that
cannot be read or parsed any more keeps the keys last read, with an error logged and counted on every
check until it can be: a half-written edit must not stop deletion, and the edit that follows it is
seen within one period.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from prometheus_client import Counter, Gauge

from reclaim.logs import LogLimiter
from reclaim.security.errors import KeyringError
from reclaim.security.keyring import Keyring, load_keyring

log = logging.getLogger(__name__)

CHECK_EVERY_S = 2.0
"""How often a running process looks at its keyring file: a retired key is refused at most this long after."""

RELOADS = Counter("reclaim_keyring_reloads", "Times this process read its keyring file again after it changed, "
                  "by outcome (loaded, failed: the keys read before are kept)", ["outcome"])
LOADED_AT = Gauge("reclaim_keyring_loaded_timestamp_seconds",
                  "When this process last read its keyring file whole, Unix time")
for _outcome in ("loaded", "failed"):
    RELOADS.labels(_outcome)

Stamp = tuple[int, int, int, int, int]


class KeySource(Protocol):
    """What signers and verifiers read their keys from: a :class:`Keyring` (fixed) or a :class:`KeyringFile`."""

    def current(self) -> Keyring:
        """The keys to use now; the same object for as long as they have not changed."""
        ...


def _stamp(path: Path) -> Stamp:
    found = os.stat(path)
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns


class KeyringFile:
    """The keyring in ``path``, read again when the file changes (looked at every ``check_every_s``)."""

    def __init__(self, path: Path, check_every_s: float = CHECK_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._every = check_every_s
        self._clock = clock
        self._limiter = LogLimiter()
        self._stamp = self._look()
        self._keyring = load_keyring(path)  # a keyring that cannot be read at start is one line, as before
        LOADED_AT.set_to_current_time()
        self._due = clock() + check_every_s

    def current(self) -> Keyring:
        """The keys in the file as of at most ``check_every_s`` ago (the call that finds it changed reads it)."""
        now = self._clock()
        if now >= self._due:
            self._due = now + self._every
            self.check()
        return self._keyring

    def check(self) -> bool:
        """Read the file again if it changed since it was last read; True when the keys changed."""
        stamp = self._look()
        if stamp == self._stamp:
            return False
        try:
            keyring = load_keyring(self.path)
        except KeyringError as exc:  # kept as last read; looked at again next period (the stamp is not taken)
            RELOADS.labels("failed").inc()
            held = self._limiter.admit("failed")
            if held is not None:
                log.error("keyring %s changed and cannot be read, keeping the keys read before: %s%s", self.path,
                          exc, self._limiter.suffix(held))
            return False
        before = {key.id: (key.status, key.streams) for key in self._keyring}
        self._stamp, self._keyring = stamp, keyring
        RELOADS.labels("loaded").inc()
        LOADED_AT.set_to_current_time()
        after = {key.id: (key.status, key.streams) for key in keyring}
        log.info("keyring %s read again: %s", self.path, _changes(before, after))
        return True

    def _look(self) -> Stamp | None:
        try:
            return _stamp(self.path)
        except OSError:
            return None


def _changes(before: Mapping[str, object], after: Mapping[str, object]) -> str:
    """What changed, by key id: added, removed, or its status or grants changed (never any key material)."""
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(key for key in set(before) & set(after) if before[key] != after[key])
    parts = [f"{label} {', '.join(ids)}" for label, ids in (("added", added), ("removed", removed),
                                                              ("status or grants changed", changed)) if ids]
    return "; ".join(parts) or "no key changed"
