"""How a reclaim process logs: text lines or one JSON object a line, on stderr."""

from __future__ import annotations

import json
import logging
import sys


class JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, message, and the exception when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"), "level": record.levelname.lower(),
                "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


def configure_logging(*, verbose: bool = False, quiet: bool = False, json_lines: bool = False) -> None:
    """Root logging for a command: debug with ``verbose``, warnings only with ``quiet``, else info."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if json_lines else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, handlers=[handler], force=True)
