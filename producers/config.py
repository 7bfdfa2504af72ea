"""librdkafka configuration for every reclaim client, built by one function with one merge order."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

from reclaim.producers import client_properties as properties
from reclaim.producers.kafka_errors import KafkaErrorLog, RdkafkaLogger

Role = Literal["admin", "producer", "idempotent-producer", "consumer"]

#: librdkafka's own log lines go through this logger, not to stderr.
RDKAFKA_LOG = logging.getLogger("reclaim.rdkafka")

_ROLE_DEFAULTS: dict[Role, dict[str, Any]] = {
    "admin": {},
    "producer": {"linger.ms": 5, "acks": "all"},
    # PIP-186 phase 1 must never lose or duplicate a pending delete on a retried send.
    "idempotent-producer": {"linger.ms": 5, "acks": "all", "enable.idempotence": True},
    # At-least-once: offsets are stored by hand once a record's outcome is final.
    "consumer": {"enable.auto.commit": True, "enable.auto.offset.store": False,
                 "auto.offset.reset": "earliest", "isolation.level": "read_committed"},
}

#: The operator's properties (security above all) for every client this process builds; see
#: :func:`use_client_properties`.
_installed: dict[str, str] = {}


def use_client_properties(props: Mapping[str, str]) -> None:
    """Give ``props`` (librdkafka properties, secret files already read) to every client built from now on.

    The process's composition root (``reclaim``'s ``main``) installs them once, before any client is
    built; a property reclaim controls is refused (:data:`reclaim.producers.client_properties.REFUSED`).
    """
    properties.check(props)
    unread = [name for name in props if name.endswith(properties.FILE_SUFFIX)]
    if unread:
        raise properties.ClientPropertyError(f"Kafka property {unread[0]}: read the file first "
                                             "(reclaim.producers.client_properties.read_secret_files)")
    _installed.clear()
    _installed.update(props)


def client_properties() -> dict[str, str]:
    """A copy of the properties :func:`use_client_properties` installed."""
    return dict(_installed)


@contextmanager
def installed_client_properties(props: Mapping[str, str]) -> Iterator[None]:
    """Install ``props`` for the block, then put back what was installed before (for tests and tools)."""
    previous = client_properties()
    use_client_properties(props)
    try:
        yield
    finally:
        use_client_properties(previous)


def kafka_config(bootstrap: str, role: Role, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The config dict for a client of ``role``.

    Merge order, later wins: common settings (bootstrap, logger) < the role's defaults < the installed
    client properties (:func:`use_client_properties`: security and other operator settings) < ``overrides``.
    A ``SCHEME://`` prefix on a bootstrap entry must match ``security.protocol`` and is dropped
    (:func:`reclaim.producers.client_properties.bootstrap_servers`).
    ``error_cb`` is always a fresh :class:`KafkaErrorLog` for this one client (see :func:`error_log`);
    an ``error_cb`` in ``overrides`` is called by it for every event. ``logger`` is wrapped in a
    :class:`RdkafkaLogger` that tells the same log about librdkafka's fatal errors.
    """
    config: dict[str, Any] = {"bootstrap.servers": properties.bootstrap_servers(bootstrap, _installed),
                              "logger": RDKAFKA_LOG}
    config.update(_ROLE_DEFAULTS[role])
    config.update(_installed)
    if overrides:
        config.update(overrides)
    errors = KafkaErrorLog(_client_name(role, config), forward=config.get("error_cb"))
    config["error_cb"] = errors
    config["logger"] = RdkafkaLogger(config["logger"], errors)
    return config


def quiet_logger(purpose: str) -> logging.Logger:
    """A ``logger`` for a client whose failures its owner reports itself (a command's one-line error):
    librdkafka's lines go nowhere, not even to the root logger."""
    quiet = logging.getLogger(f"reclaim.rdkafka.{purpose}")
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    return quiet


def error_log(config: Mapping[str, Any]) -> KafkaErrorLog:
    """The :class:`KafkaErrorLog` that :func:`kafka_config` installed in ``config``."""
    errors = config.get("error_cb")
    if not isinstance(errors, KafkaErrorLog):
        raise ValueError("config has no reclaim error log: build it with reclaim.producers.config.kafka_config")
    return errors


def _client_name(role: Role, config: Mapping[str, Any]) -> str:
    for key in ("client.id", "group.id"):
        if config.get(key):
            return f"{role} {config[key]}"
    return role
