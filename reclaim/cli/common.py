"""What every command module shares: the options every command takes, and JSON output."""

from __future__ import annotations

import argparse
import json
import math
import re
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol

from reclaim.durations import human, parse_duration
from reclaim.exits import ExitCode
from reclaim.settings import METADATA_URL_HELP, Settings

#: What a command runs: its parsed arguments and the settings of this run in, an exit status out.
Command = Callable[[argparse.Namespace, Settings], int]


class Common(Protocol):
    """Adds the options every command takes to a command's parser (:func:`common_options`)."""

    def __call__(self, parser: argparse.ArgumentParser, *, connects: bool = True, listed: bool = True) -> None: ...


class Parser(argparse.ArgumentParser):
    """argparse with reclaim's exit status for bad usage (64) instead of 2, which means "could not run", and its
    one-line errors: the usage is for ``--help``. A value that starts with a minus and a digit (``-5``, ``-1h``)
    is a value, not a flag, so the flag's own check can say what is wrong with it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)[a-z]*$", re.IGNORECASE)
        self.register("action", "parsers", _SubCommands)
        # The deepest parser a command line reached: it tells an unknown flag, and prints its help when no
        # sub-command follows (a parser reached later overrides this default).
        self.set_defaults(reached=self)

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]
        self.exit(ExitCode.USAGE, f"reclaim: error: {command + ': ' if command else ''}{message} "
                                  f"(see {self.prog} --help)\n")


class _SubCommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Sub-commands whose ``-v`` adds to those given before them. argparse parses a sub-command into a fresh
    namespace and copies it over the caller's, so ``reclaim -v worker -v`` would be 1, not 2."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        before = vars(namespace).pop("verbose", 0)
        super().__call__(parser, namespace, values, option_string)
        namespace.verbose = before + getattr(namespace, "verbose", 0)


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


_SIZE = re.compile(r"\s*(\d+)\s*([KMGT]i?B|B)?\s*", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}
MAX_BYTES = 2**62


def byte_size(text: str) -> int:
    """An argparse type: a number of bytes, as digits with an optional unit (B, KB, MB, GB, TB in powers of
    1000; KiB, MiB, GiB, TiB in powers of 1024), at most 2^62."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"must be a size such as 1073741824, 512MiB or 10GB, got {text!r}")
    size = int(match.group(1)) * _UNITS[(match.group(2) or "b").lower()]
    if size > MAX_BYTES:
        raise argparse.ArgumentTypeError(f"must be at most 2^62 bytes, got {text!r}")
    return size


def metrics_flags(parser: argparse.ArgumentParser) -> None:
    """A service's --metrics-port and --metrics-addr."""
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port (RECLAIM_METRICS_PORT)")
    parser.add_argument("--metrics-addr", default="127.0.0.1", help="address for --metrics-port (default 127.0.0.1)")


def global_options(parser: argparse.ArgumentParser, *, top: bool, listed: bool = True) -> None:
    """The options every command takes; on a command they only override what was given before it.
    ``listed`` False accepts them without listing them in the parser's help (a group of verbs)."""
    default = None if top else argparse.SUPPRESS

    def shown(text: str) -> str:
        return text if listed else argparse.SUPPRESS

    parser.add_argument("-v", "--verbose", action="count", default=0 if top else argparse.SUPPRESS,
                        help=shown("more log lines: -v info, -vv debug (default: warnings only; info for the "
                                   "services worker, offloader, truncation-applier and a running retention-job)"))
    parser.add_argument("-q", "--quiet", action="store_true", default=False if top else argparse.SUPPRESS,
                        help=shown("warnings and errors only, services too"))
    parser.add_argument("--log-format", choices=["text", "json"], default=default,
                        help=shown("log lines as text (default) or one JSON object each (RECLAIM_LOG_FORMAT)"))
    parser.add_argument("--config", type=Path, default=default, metavar="FILE",
                        help=shown("TOML config file with the same keys as the environment (RECLAIM_CONFIG)"))


def connection_options(parser: argparse.ArgumentParser, *, top: bool = False, listed: bool = True) -> None:
    """Where a command finds the broker, tier-2 and its local files; on a command they only override what was
    given before it, as :func:`global_options` do."""
    default = None if top else argparse.SUPPRESS

    def add(flag: str, text: str, **kwargs: Any) -> None:
        parser.add_argument(flag, default=default, help=text if listed else argparse.SUPPRESS, **kwargs)

    add("--state-dir", "local stack data and logs (default .reclaim)", type=Path)
    add("--cache-dir", "downloaded jars (Kafka, s3a, JDBC) and the archives of reclaim shipped to a Spark "
        "cluster (default ~/.cache/reclaim)", type=Path)
    add("--bootstrap", "Kafka bootstrap servers (default: the local stack's broker)")
    add("--topic-prefix", "prefix of every topic name (default 'reclaim.')")
    add("--s3-endpoint", "S3 endpoint URL, or 'aws' for AWS S3 itself (default: the local stack's endpoint)")
    add("--s3-bucket", "tier-2 bucket (default reclaim-tier2)")


def common_options(parser: argparse.ArgumentParser, *, connects: bool = True, listed: bool = True) -> None:
    """The global and connection options on a command's parser. ``connects`` False (a command that reaches no
    server and keeps no state) accepts the connection options without listing them; ``listed`` False lists
    none (a group of verbs: ``reclaim --help`` lists them)."""
    connection_options(parser, listed=listed and connects)
    global_options(parser, top=False, listed=listed)


def add_verbs(group: argparse.ArgumentParser) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    """The verbs of ``group`` (``reclaim streams create``), each a sub-command with its own flags and help.
    The global and connection options are taken before the verb too; ``args.action`` is the verb given."""
    common_options(group, listed=False)
    return group.add_subparsers(dest="action", metavar="VERB", title="verbs")


def add_verb(verbs: argparse._SubParsersAction, name: str, summary: str, description: str,  # type: ignore[type-arg]
             example_lines: Sequence[str]) -> argparse.ArgumentParser:
    """One verb's parser: ``summary`` in its group's list, ``description`` (wrapped unless it has line breaks of
    its own) and ``example_lines`` in its ``--help``."""
    parser: argparse.ArgumentParser = verbs.add_parser(
        name, help=summary, description=description if "\n" in description else textwrap.fill(description, 100),
        **examples(*example_lines))
    return parser


def examples(*lines: str) -> dict[str, Any]:
    """The ``add_parser`` keywords of a help that ends in ``lines`` as examples, its description as written."""
    return {"epilog": "examples:\n" + "\n".join(f"  {line}" for line in lines),
            "formatter_class": argparse.RawDescriptionHelpFormatter}


def json_flag(parser: argparse.ArgumentParser, text: str | None = None) -> None:
    """``--json`` on a group whose every verb takes it (``text`` None: accepted before the verb, not listed), or
    on one of its verbs, where it only adds to what came before the verb."""
    if text is None:
        parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    else:
        parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=text)


GROUP_EPILOG = ("Global options (-v, -q, --log-format, --config, --bootstrap, --state-dir, ...) go before or after "
                "the command and its verb: see reclaim --help. `reclaim {group} VERB --help` shows a verb's flags.")


def print_json(value: object) -> None:
    print(json.dumps(value, indent=2, default=str))


def store_flags(parser: argparse.ArgumentParser, fs_root_help: str = "") -> None:
    """``--metadata-path``, ``--metadata-url`` and ``--fs-root``: where a command finds the metadata store and
    the filesystem tier-2 binding."""
    parser.add_argument("--metadata-path", type=Path, help="SQLite metadata store (default <state-dir>/metadata.db)")
    parser.add_argument("--metadata-url", help=METADATA_URL_HELP)
    parser.add_argument("--fs-root", type=Path,
                        help="filesystem tier-2 root (default <state-dir>/tier2)" + fs_root_help)
