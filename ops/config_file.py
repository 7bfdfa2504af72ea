"""reclaim's config file: TOML, with the same keys as the environment.

A key is a setting's name, the environment variable without ``RECLAIM_`` in lower case
(``bootstrap``, ``s3_endpoint``, ``retry_delays = [10, 60, 600]``). Precedence: a flag, then the
environment, then the file, then the default — the file's values enter as environment defaults, so
every part of reclaim (and every process it starts) reads them the same way.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping, MutableMapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from ops.exits import UsageError
from ops.retention_job import RetentionJobSettings

#: Every key a config file may set (the job's settings are a superset of the common ones).
KEYS = frozenset(f.name for f in fields(RetentionJobSettings))


def load(path: Path) -> dict[str, str]:
    """The file's settings as ``RECLAIM_*`` variables; one :class:`UsageError` line for anything wrong."""
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise UsageError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"config file {path}: {exc}") from exc
    env = {f"RECLAIM_{key.upper()}": _text(path, key, value) for key, value in data.items() if _known(path, key)}
    try:
        RetentionJobSettings.from_env(env)
    except ValueError as exc:
        raise UsageError(f"config file {path}: {exc}") from exc
    return env


def apply(path: Path, environ: MutableMapping[str, str] | None = None) -> None:
    """Put the file's settings into ``environ`` (``os.environ``) where the environment sets nothing."""
    environ = os.environ if environ is None else environ
    for name, value in load(path).items():
        if not environ.get(name):
            environ[name] = value


def _known(path: Path, key: str) -> bool:
    if key in KEYS:
        return True
    close = difflib.get_close_matches(key.lower().removeprefix("reclaim_"), KEYS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UsageError(f"config file {path}: unknown setting {key!r}{hint}")


def _text(path: Path, key: str, value: Any) -> str:
    """A TOML value as its environment variable would spell it."""
    if value == "" or value == []:
        # An empty variable means "not set"; in a file an empty value is a mistake, not the default.
        raise UsageError(f"config file {path}: {key} is empty (leave it out for the default)")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return ",".join(str(v) for v in value)
    kind = "table" if isinstance(value, Mapping) else type(value).__name__
    raise UsageError(f"config file {path}: {key} cannot be a {kind}")
