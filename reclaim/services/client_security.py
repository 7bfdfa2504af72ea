"""Client security from the settings, at the composition root: the Kafka client properties every client
gets, the Schema Registry's credentials and CA, and the Spark Kafka connector's options."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from reclaim.exits import UsageError
from reclaim.producers import client_properties
from reclaim.producers.config import client_properties as installed_properties
from reclaim.producers.config import use_client_properties
from reclaim.producers.java_properties import is_security_property, java_kafka_options
from reclaim.schemas.registry_auth import registry_client_config
from reclaim.secret_files import secret_text
from reclaim.settings import Settings

log = logging.getLogger(__name__)


def install_kafka_properties(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Read the ``RECLAIM_KAFKA_*`` properties (the config file's ``[kafka]`` table is in the environment by
    now) and their secret files once, install them for every Kafka client of this process, and check the
    configured bootstrap's ``SCHEME://`` prefixes against them; one :class:`UsageError` line for a problem."""
    env = os.environ if environ is None else environ
    try:
        properties = client_properties.read_secret_files(client_properties.from_env(env))
        use_client_properties(properties)
        if settings.bootstrap:
            client_properties.bootstrap_servers(settings.bootstrap, properties)
    except client_properties.ClientPropertyError as exc:
        raise UsageError(str(exc)) from exc
    return properties


def shown_kafka_properties(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The configured Kafka properties as ``config show`` prints them: secrets masked, secret files by path."""
    env = os.environ if environ is None else environ
    try:
        return client_properties.masked(client_properties.from_env(env))
    except client_properties.ClientPropertyError as exc:
        raise UsageError(str(exc)) from exc


def registry_connection(settings: Settings) -> tuple[str | None, dict[str, str]]:
    """The Schema Registry URL without credentials and the client's settings (basic auth, CA), or
    ``(None, {})`` without a registry; one :class:`UsageError` line for a problem."""
    if not settings.schema_registry_url:
        return None, {}
    basic_auth = settings.schema_registry_basic_auth
    if settings.schema_registry_basic_auth_file is not None:
        basic_auth = _secret_file(settings.schema_registry_basic_auth_file, "schema_registry_basic_auth_file")
    ca = settings.schema_registry_ca_location
    try:
        return registry_client_config(settings.schema_registry_url, basic_auth=basic_auth,
                                      ca_location=str(ca) if ca is not None else None)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def spark_kafka_options() -> dict[str, str]:
    """The installed Kafka properties as the Spark Kafka connector's ``kafka.*`` options (prefix left off)."""
    properties = installed_properties()
    left_out = sorted(name for name in properties if not is_security_property(name))
    if left_out:
        log.info("Kafka properties %s are librdkafka's, not the Java client's: the Spark Kafka connector does "
                 "not get them", ", ".join(left_out))
    try:
        return java_kafka_options(properties)
    except client_properties.ClientPropertyError as exc:
        raise UsageError(str(exc)) from exc


def spark_bootstrap(bootstrap: str) -> str:
    """``bootstrap`` for the Java client: ``SCHEME://`` prefixes checked and dropped."""
    try:
        return client_properties.bootstrap_servers(bootstrap, installed_properties())
    except client_properties.ClientPropertyError as exc:
        raise UsageError(str(exc)) from exc


@functools.lru_cache(maxsize=8)
def _secret_file(path: Path, setting: str) -> str:
    """A secret file's text without its trailing newline, read once per process."""
    try:
        return secret_text(path)
    except ValueError as exc:
        raise UsageError(f"{setting}: {exc}") from exc
