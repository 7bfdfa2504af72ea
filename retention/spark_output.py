"""Where Spark's, Ivy's and py4j's output goes: one log file, not the terminal of the command that started Spark.

PySpark starts the driver's JVM (``spark-submit``, which resolves ``spark.jars.packages`` with Ivy first) as a
child process that inherits this process's stdout and stderr: Ivy's resolution table, ``:: loading settings ::``
and every later line the JVM prints reach the terminal. :func:`spark_output_to` points file descriptors 1 and 2
at the log file while the JVM starts, so the JVM keeps the file as its stdout and stderr; log4j2 writes Spark's
own lines to the same file (a configuration passed as ``LOG4J_CONFIGURATION_FILE``), and py4j's Python loggers
write their warnings there too.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from reclaim.logs import TEXT_FORMAT, asked_verbosity

#: The folder under the state directory that holds Spark's log files.
LOG_DIR = "logs"

#: The Python loggers of py4j, the bridge between PySpark and the JVM: one line per call at debug level,
#: and an info line with a traceback when the JVM goes away at exit.
PY4J_LOGGERS = ("py4j", "py4j.java_gateway", "py4j.clientserver")

#: The environment variable log4j2 reads its configuration file from; an explicit
#: ``-Dlog4j2.configurationFile`` (say in ``spark-defaults.conf``) still wins.
LOG4J_ENV = "LOG4J_CONFIGURATION_FILE"

LOG4J2 = """\
# Spark's log lines to reclaim's Spark log file instead of the terminal.
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yyyy-MM-dd HH:mm:ss,SSS}} %p %c: %m%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""


def spark_log_path(state_dir: Path, now: datetime | None = None) -> Path:
    """A new log file for one run's Spark output: ``<state-dir>/logs/spark-<UTC time>.log``."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return state_dir / LOG_DIR / f"spark-{stamp}-{os.getpid()}.log"


def spark_level(verbosity: int) -> str:
    """Spark's log4j level for reclaim's ``-v`` count: warnings by default, ``INFO`` with ``-v``, ``DEBUG``
    with ``-vv``."""
    return "DEBUG" if verbosity >= 2 else "INFO" if verbosity == 1 else "WARN"


def log4j2_config(log_file: Path, level: str) -> Path:
    """Write the log4j2 configuration that sends Spark's lines at ``level`` and above to ``log_file``; its path."""
    config = log_file.with_suffix(".log4j2.properties")
    config.write_text(LOG4J2.format(path=str(log_file.resolve()).replace("\\", "/"), level=level),
                      encoding="utf-8")
    return config


def py4j_to(log_file: Path) -> None:
    """py4j's warnings and errors to ``log_file``, nothing of py4j's to the terminal."""
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    for name in PY4J_LOGGERS:  # the others pass their lines on to "py4j", which alone writes them
        logger = logging.getLogger(name)
        logger.setLevel(logging.WARNING)
        for old in [h for h in logger.handlers if isinstance(h, logging.FileHandler)]:
            logger.removeHandler(old)
            old.close()
        logger.propagate = name != "py4j"
    logging.getLogger("py4j").addHandler(handler)


@contextmanager
def spark_output_to(log_file: Path) -> Iterator[Path]:
    """For the block that starts Spark's JVM: the JVM's stdout, stderr and log4j2 lines, and py4j's warnings,
    go to ``log_file`` (appended) from then on. This process's own stdout and stderr are back after the block;
    what it writes to them during the block goes to the file too."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    config = log4j2_config(log_file, spark_level(asked_verbosity()))
    py4j_to(log_file)
    previous_env = os.environ.get(LOG4J_ENV)
    os.environ[LOG4J_ENV] = str(config)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    target = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield log_file
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)
        if previous_env is None:
            os.environ.pop(LOG4J_ENV, None)
        else:
            os.environ[LOG4J_ENV] = previous_env
