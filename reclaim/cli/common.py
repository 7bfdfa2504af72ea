"""What every command module shares: the options every command takes, and JSON output."""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from reclaim.durations import human, parse_duration
from reclaim.exits import ExitCode
from reclaim.settings import METADATA_URL_HELP, Settings

#: What a command runs: its parsed arguments and the settings of this run in, an exit status out.
Command = Callable[[argparse.Namespace, Settings], int]
#: Adds the options every command takes to a command's parser.
Common = Callable[[argparse.ArgumentParser], None]


class Parser(argparse.ArgumentParser):
    """argparse with reclaim's exit status for bad usage (64) instead of 2, which means "could not run", and its
    one-line errors: the usage is for ``--help``. A value that starts with a minus and a digit (``-5``, ``-1h``)
    is a value, not a flag, so the flag's own check can say what is wrong with it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)[a-z]*$", re.IGNORECASE)

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]
        self.exit(ExitCode.USAGE, f"reclaim: error: {command + ': ' if command else ''}{message} "
                                  f"(see {self.prog} --help)\n")


def duration(at_least: float = 0.0, *, positive: bool = False) -> Callable[[str], float]:
    """An argparse type: seconds of a duration (:func:`reclaim.durations.parse_duration`) of at least ``at_least``
    (``positive``: more than 0); argparse names the flag in front of the message."""

    def read(text: str) -> float:
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if positive and not (math.isfinite(seconds) and seconds > 0):
            raise argparse.ArgumentTypeError(f"must be a duration above 0, got {text!r}")
        if not (math.isfinite(seconds) and seconds >= at_least):
            raise argparse.ArgumentTypeError(f"must be at least {human(at_least)}, got {text!r}")
        return seconds

    return read


def global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The options every command takes; on a command they only override what was given before it."""
    default = None if top else argparse.SUPPRESS
    parser.add_argument("-v", "--verbose", action="store_true", default=False if top else argparse.SUPPRESS,
                        help="log at debug level")
    parser.add_argument("-q", "--quiet", action="store_true", default=False if top else argparse.SUPPRESS,
                        help="log warnings and errors only")
    parser.add_argument("--log-format", choices=["text", "json"], default=default,
                        help="log lines as text (default) or one JSON object each (RECLAIM_LOG_FORMAT)")
    parser.add_argument("--config", type=Path, default=default, metavar="FILE",
                        help="TOML config file with the same keys as the environment (RECLAIM_CONFIG)")


def common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, help="local stack data and logs (default .reclaim)")
    parser.add_argument("--cache-dir", type=Path, help="downloaded jars (Kafka, s3a, JDBC) and the archives of "
                        "reclaim shipped to a Spark cluster (default ~/.cache/reclaim)")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack's broker)")
    parser.add_argument("--topic-prefix", help="prefix of every topic name (default 'reclaim.')")
    parser.add_argument("--s3-endpoint", help="S3 endpoint URL, or 'aws' for AWS S3 itself (default: the local "
                        "stack's endpoint)")
    parser.add_argument("--s3-bucket", help="tier-2 bucket (default reclaim-tier2)")
    global_options(parser, top=False)


def print_json(value: object) -> None:
    print(json.dumps(value, indent=2, default=str))


def store_flags(parser: argparse.ArgumentParser, fs_root_help: str = "") -> None:
    """``--metadata-path``, ``--metadata-url`` and ``--fs-root``: where a command finds the metadata store and
    the filesystem tier-2 binding."""
    parser.add_argument("--metadata-path", type=Path, help="SQLite metadata store (default <state-dir>/metadata.db)")
    parser.add_argument("--metadata-url", help=METADATA_URL_HELP)
    parser.add_argument("--fs-root", type=Path,
                        help="filesystem tier-2 root (default <state-dir>/tier2)" + fs_root_help)
