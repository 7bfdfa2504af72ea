"""How reclaim logs: a command's log lines (text, or one JSON object a line, on stderr), and lines about a
condition that repeats (a server down) written at most once per interval.

A command is quiet by default: its own output and warnings only; ``-v`` adds info lines, ``-vv`` debug lines,
``-q`` keeps warnings and errors only. A long-running service (``worker``, ``truncation-applier``, a
``retention-job`` that runs on) logs info lines unless ``-q`` is given: its log is its output
(:func:`log_as_service`).

Every logger of reclaim is under ``reclaim.`` (``logging.getLogger("reclaim")`` reaches them all); the
limiter is shared by every package that reports a dependency failing over and over: the Kafka clients'
error callbacks and the storage bindings.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path

#: How a log line reads as text.
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, message, and the exception when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"), "level": record.levelname.lower(),
                "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


def log_to_file(path: Path, *, level: int = logging.INFO, terminal: int = logging.WARNING) -> Path:
    """Send the full log to ``path`` (appended, text lines); the terminal keeps lines at ``terminal`` and above.

    For a command that tells a story of its own on stdout (``reclaim demo``): what its parts log is kept, in
    the file, instead of drowning the story.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    for handler in root.handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.setLevel(max(handler.level, terminal))
    to_file = logging.FileHandler(path, encoding="utf-8")
    to_file.setFormatter(logging.Formatter(TEXT_FORMAT))
    to_file.setLevel(level)
    root.addHandler(to_file)
    root.setLevel(min(root.level, level) if root.level else level)
    return path


#: The verbosity the command line asked for: the count of ``-v``, -1 for ``-q``, 0 for neither (the
#: default); None until :func:`configure_logging` runs (reclaim used as a library).
_asked: int | None = None


def level_of(verbose: int | bool = 0) -> int:
    """The root level of a command: warnings by default (and with ``-q``), info with one ``-v`` (``True``
    counts as one), debug with two or more."""
    count = int(verbose)
    return logging.DEBUG if count >= 2 else logging.INFO if count == 1 else logging.WARNING


def configure_logging(*, verbose: int | bool = 0, quiet: bool = False, json_lines: bool = False) -> None:
    """Root logging for a command, on stderr: see :func:`level_of`; a ``-v`` wins over ``quiet``."""
    global _asked
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if json_lines else
                         logging.Formatter(TEXT_FORMAT))
    _asked = int(verbose) if verbose else -1 if quiet else 0
    logging.basicConfig(level=level_of(verbose), handlers=[handler], force=True)


def log_as_service() -> None:
    """Info lines by default for a long-running service, whose log is what operators and their tools read;
    ``-v``, ``-vv`` and ``-q`` keep the level they set, and a process that never configured logging its own."""
    if _asked == 0:
        logging.getLogger().setLevel(logging.INFO)


def asked_verbosity() -> int:
    """What the command line asked for: the count of ``-v``, -1 for ``-q``, 0 for neither (or no command
    line). Other programs' logs (Spark's) follow it, not a service's default."""
    return _asked or 0


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
