"""librdkafka configuration for every reclaim client, built by one function with one merge order."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

from producers.kafka_errors import KafkaErrorLog, RdkafkaLogger

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


def kafka_config(bootstrap: str, role: Role, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The config dict for a client of ``role``.

    Merge order, later wins: common settings (bootstrap, logger) < the role's defaults < ``overrides``.
    ``error_cb`` is always a fresh :class:`KafkaErrorLog` for this one client (see :func:`error_log`);
    an ``error_cb`` in ``overrides`` is called by it for every event. ``logger`` is wrapped in a
    :class:`RdkafkaLogger` that tells the same log about librdkafka's fatal errors.
    """
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOG}
    config.update(_ROLE_DEFAULTS[role])
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
        raise ValueError("config has no reclaim error log: build it with producers.config.kafka_config")
    return errors


def _client_name(role: Role, config: Mapping[str, Any]) -> str:
    for key in ("client.id", "group.id"):
        if config.get(key):
            return f"{role} {config[key]}"
    return role
