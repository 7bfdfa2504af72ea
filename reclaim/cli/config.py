"""``reclaim config show``: the settings in effect, every secret masked; ``--sources`` says where each came from."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from reclaim.cli.common import GROUP_EPILOG, Common, add_verb, add_verbs, json_flag, print_json
from reclaim.producers import client_properties
from reclaim.services import client_security
from reclaim.settings import READ_SECRET_FILES, Settings, redact_password


@dataclass(frozen=True)
class Source:
    """Where a setting's value came from: a flag, a ``RECLAIM_*`` variable, a config file's key or the default."""

    kind: str
    """``flag``, ``environment``, ``config file`` or ``default``."""
    name: str = ""
    """The flag (``--bootstrap``), the variable (``RECLAIM_BOOTSTRAP``) or the key (``[kafka] sasl.mechanism``)."""
    file: str | None = None
    """The config file, for a key of one."""
    via: str | None = None
    """How the value was read from there, when not as given (a secret read from the file a setting names)."""

    def __str__(self) -> str:
        where = {"default": "default", "config file": f"config file {self.file}: {self.name}"}
        return where.get(self.kind, f"{self.kind} {self.name}") + (f" ({self.via})" if self.via else "")

    def to_dict(self) -> dict[str, str]:
        shown = {"from": self.kind, "name": self.name, "file": self.file, "via": self.via}
        return {key: value for key, value in shown.items() if value}


DEFAULT = Source("default")


def setting_sources(names: Iterable[str], flags: Mapping[str, object], environ: Mapping[str, str],
                    from_file: Mapping[str, str], file: Path | None) -> dict[str, Source]:
    """Where each setting of ``names`` came from, in reclaim's precedence: a flag given (``flags``, by setting),
    its ``RECLAIM_*`` variable set by the config ``file`` (``from_file``: what :func:`reclaim.config_file.apply`
    put in ``environ``) or else by the environment, then the default."""
    sources = {name: _source(name, f"RECLAIM_{name.upper()}", environ, from_file, file,
                             flag=f"--{name.replace('_', '-')}" if flags.get(name) is not None else None)
               for name in names}
    for secret, file_setting in READ_SECRET_FILES.items():  # a secret read from the file a setting names
        named_by = sources.get(file_setting, DEFAULT)
        if sources.get(secret) == DEFAULT and named_by != DEFAULT:
            sources[secret] = replace(named_by, via=f"the text of the file {file_setting} names")
    return sources


def kafka_sources(properties: Iterable[str], environ: Mapping[str, str], from_file: Mapping[str, str],
                  file: Path | None) -> dict[str, Source]:
    """Where each Kafka client property came from: the config file's ``[kafka]`` table or ``RECLAIM_KAFKA_*``."""
    return {prop: _source(f"[kafka] {prop}", client_properties.variable_name(prop), environ, from_file, file)
            for prop in properties}


def _source(key: str, variable: str, environ: Mapping[str, str], from_file: Mapping[str, str], file: Path | None,
            flag: str | None = None) -> Source:
    if flag is not None:
        return Source("flag", flag)
    if variable in from_file:
        return Source("config file", key, str(file))
    if environ.get(variable):  # an empty variable sets nothing
        return Source("environment", variable)
    return DEFAULT


def cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    values = {name: (str(value) if isinstance(value, Path) else value) for name, value in asdict(settings).items()}
    # The access key is an identifier, shown as configured; a secret's file shows as its path.
    for secret in ("s3_secret_key", "s3_session_token", "schema_registry_basic_auth", "azure_connection_string",
                   "azure_account_key", "azure_sas_token"):
        if values[secret]:
            values[secret] = "********"
    if values["azure_account_url"] and "?" in values["azure_account_url"]:  # a SAS token may ride in its query
        values["azure_account_url"] = values["azure_account_url"].split("?", 1)[0] + "?********"
    for url in ("metadata_url", "schema_registry_url"):
        if values[url]:
            values[url] = redact_password(values[url])
    kafka = client_security.shown_kafka_properties()
    sources = _sources(args, values, kafka) if args.sources else None
    if args.json:
        document: dict[str, Any] = {**values, "kafka": kafka}
        if sources is not None:
            document["sources"] = {name: source.to_dict() for name, source in sources.items() if name != "kafka"}
            document["sources"]["kafka"] = {prop: source.to_dict() for prop, source in sources["kafka"].items()}
            config = _config_file(args)
            document["config_file"] = None if config is None else {"path": str(config[0]), **config[1].to_dict()}
        print_json(document)
        return 0
    if sources is not None:
        config = _config_file(args)
        print(f"# config file: {config[0]} ({config[1]})" if config else "# config file: none")
    for name, value in values.items():
        shown = ",".join(map(str, value)) if isinstance(value, tuple | list) else value
        print(f"{name} = {shown}" + (f"  # {sources[name]}" if sources is not None else ""))
    for name, value in kafka.items():
        print(f"kafka.{name} = {value}" + (f"  # {sources['kafka'][name]}" if sources is not None else ""))
    return 0


def _sources(args: argparse.Namespace, values: Mapping[str, object], kafka: Mapping[str, str]) -> dict[str, Any]:
    """Each shown setting's :class:`Source`, and the Kafka properties' under ``kafka``."""
    file, from_file = getattr(args, "config_applied", None) or (None, {})
    flags = {f.name: getattr(args, f.name, None) for f in fields(Settings)}
    sources: dict[str, Any] = setting_sources(values, flags, os.environ, from_file, file)
    sources["kafka"] = kafka_sources(kafka, os.environ, from_file, file)
    return sources


def _config_file(args: argparse.Namespace) -> tuple[Path, Source] | None:
    """The config file of this run and what named it, or None."""
    applied = getattr(args, "config_applied", None)
    if applied is None:
        return None
    named_by = Source("flag", "--config") if getattr(args, "config", None) is not None else \
        Source("environment", "RECLAIM_CONFIG")
    return applied[0], named_by


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    config = sub.add_parser("config", help="show the settings in effect (flags, environment, config file, defaults)",
                            description="The settings of a run, read as every command reads them.",
                            epilog=GROUP_EPILOG.format(group="config"))
    verbs = add_verbs(config)
    json_flag(config)
    show = add_verb(verbs, "show", "the settings in effect, every secret masked",
                    "Every setting in effect and the Kafka client properties, every secret masked; with --sources, "
                    "where each came from.",
                    ["reclaim config show", "reclaim --config prod.toml config show --sources",
                     "RECLAIM_BOOTSTRAP=kafka-1:9092 reclaim config show --json"])
    json_flag(show, "print the settings as JSON")
    show.add_argument("--sources", action="store_true",
                      help="say where each value came from: a flag, a RECLAIM_* variable, the config file and "
                           "its key, or the default (with --json: a sources object)")
    common(show)
    show.set_defaults(run=cmd_config)
