"""reclaim's config file: TOML, with the same keys as the environment.

A key is a setting's name, the environment variable without ``RECLAIM_`` in lower case
(``bootstrap``, ``s3_endpoint``, ``retry_delays = [10, 60, 600]``). Precedence: a flag, then the
environment, then the file, then the default — the file's values enter as environment defaults, so
every part of reclaim (and every process it starts) reads them the same way.

The ``[kafka]`` table holds librdkafka properties for every Kafka client (``"security.protocol" =
"SASL_SSL"``, or dotted keys ``sasl.mechanism = "SCRAM-SHA-512"``); each enters as its
``RECLAIM_KAFKA_<PROP>`` variable (:mod:`reclaim.producers.client_properties`).
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping, MutableMapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from reclaim.exits import UsageError
from reclaim.producers import client_properties
from reclaim.services.retention_job import RetentionJobSettings
from reclaim.settings import READ_SECRET_FILES, SECRET_FILES

#: Every key a config file may set (the job's settings are a superset of the common ones).
KEYS = frozenset(f.name for f in fields(RetentionJobSettings))
#: The table of Kafka client properties.
KAFKA_TABLE = "kafka"


def load(file: str | os.PathLike[str]) -> dict[str, str]:
    """The file's settings as ``RECLAIM_*`` variables; one :class:`UsageError` line for anything wrong."""
    path = Path(file)
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise UsageError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"config file {path}: {exc}") from exc
    kafka = _kafka_properties(path, data.pop(KAFKA_TABLE, {}))
    env = {f"RECLAIM_{key.upper()}": _text(path, key, value) for key, value in data.items() if _known(path, key)}
    env.update({client_properties.variable_name(name): value for name, value in kafka.items()})
    try:
        RetentionJobSettings.from_env(_secret_files_unread(env), spelled={key: key for key in KEYS})
    except ValueError as exc:
        raise UsageError(f"config file {path}: {exc}") from exc
    return env


def apply(path: str | os.PathLike[str], environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Put the file's settings into ``environ`` (``os.environ``) where the environment sets nothing; the
    variables it put there (what ``config show --sources`` names the file for)."""
    environ = os.environ if environ is None else environ
    applied: dict[str, str] = {}
    for name, value in load(path).items():
        # A secret and its file are one setting: the environment's file wins over the file's secret.
        if not environ.get(name) and not environ.get(_secret_twin(name)):
            environ[name] = applied[name] = value
    return applied


def _secret_files_unread(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` to check the file's settings with: each secret the file names a file of stands in as set, unread
    (the environment may give the secret itself, or name another file, where the file's is not there)."""
    checked = dict(env)
    for secret, file in READ_SECRET_FILES.items():
        secret_variable, file_variable = f"RECLAIM_{secret.upper()}", f"RECLAIM_{file.upper()}"
        if file_variable in checked and secret_variable not in checked:
            checked[secret_variable] = checked.pop(file_variable)
    return checked


def _secret_twin(variable: str) -> str:
    """``RECLAIM_KAFKA_SASL_PASSWORD_FILE`` for ``RECLAIM_KAFKA_SASL_PASSWORD`` (``RECLAIM_S3_SECRET_KEY_FILE`` for
    ``RECLAIM_S3_SECRET_KEY``) and the other way round; "" for a variable that is no secret's."""
    if variable in _SETTING_TWINS:
        return _SETTING_TWINS[variable]
    if not variable.startswith(client_properties.ENV_PREFIX):
        return ""
    return variable.removesuffix("_FILE") if variable.endswith("_FILE") else f"{variable}_FILE"


_SETTING_TWINS = {f"RECLAIM_{secret.upper()}": f"RECLAIM_{file.upper()}" for secret, file in SECRET_FILES.items()}
_SETTING_TWINS |= {file: secret for secret, file in _SETTING_TWINS.items()}


def _kafka_properties(path: Path, table: Any) -> dict[str, str]:
    """The ``[kafka]`` table's properties, dotted keys and nested tables flattened (``sasl.mechanism``)."""
    if not isinstance(table, Mapping):
        raise UsageError(f"config file {path}: {KAFKA_TABLE} must be a table of librdkafka properties ([kafka])")
    flat: dict[str, str] = {}

    def walk(prefix: str, node: Mapping[str, Any]) -> None:
        for key, value in node.items():
            name = f"{prefix}{key}"
            if isinstance(value, Mapping):
                walk(f"{name}.", value)
            else:
                flat[name] = _text(path, f"[kafka] {name}", value)

    walk("", table)
    for name in flat:
        if client_properties.variable_name(name) in client_properties.NOT_PROPERTIES:
            raise UsageError(f"config file {path}: [kafka] {name} is not a librdkafka property (use the top-level "
                             "bootstrap setting)")
    try:
        client_properties.check(flat)
    except ValueError as exc:
        raise UsageError(f"config file {path}: {exc}") from exc
    return flat


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
