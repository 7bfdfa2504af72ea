"""librdkafka configuration for every reclaim client, built by one function with one merge order."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

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
    """
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOG}
    config.update(_ROLE_DEFAULTS[role])
    if overrides:
        config.update(overrides)
    return config
