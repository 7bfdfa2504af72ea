"""Log lines of a condition that repeats (a server down) written at most once per interval.

Shared by every package that reports a dependency failing over and over: the Kafka clients' error
callbacks and the storage bindings.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable

#: Least seconds between two lines about the same condition.
LOG_INTERVAL_S = 30.0


class LogLimiter:
    """Says whether a line about ``key`` is written now, and how many were held back since the last one."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        if interval_s < 0:
            raise ValueError(f"interval_s must not be negative, got {interval_s}")
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[Hashable, float] = {}
        self._held: dict[Hashable, int] = {}

    def admit(self, key: Hashable) -> int | None:
        """The lines held back for ``key`` since its last one when this one is written, else ``None``."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                self._held[key] = self._held.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._held.pop(key, 0)

    def suffix(self, held: int) -> str:
        """What a written line adds about the lines held back before it."""
        return f" ({held} more like it in the last {self.interval_s:g}s)" if held else ""
