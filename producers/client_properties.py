"""The librdkafka properties an operator gives every reclaim Kafka client (security above all): their
names in the environment, the ones reclaim refuses, secrets read from files, and how they are shown.

The properties come from the config file's ``[kafka]`` table and from ``RECLAIM_KAFKA_<PROP>``
variables: the property in upper case with ``_`` for ``.`` and ``__`` for ``_``
(``RECLAIM_KAFKA_SASL_PASSWORD`` is ``sasl.password``). ``<secret>.file`` names a file holding a
secret property's value (``sasl.password.file``, ``RECLAIM_KAFKA_SASL_PASSWORD_FILE``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

from reclaim.errors import ReclaimError
from reclaim.secret_files import read_secret, secret_text

ENV_PREFIX = "RECLAIM_KAFKA_"
#: ``RECLAIM_KAFKA_*`` variables that are not properties: the tests' external broker.
NOT_PROPERTIES = frozenset({"RECLAIM_KAFKA_BOOTSTRAP"})
FILE_SUFFIX = ".file"
#: The secret properties a ``<name>.file`` may give instead of the value itself.
FILE_SECRETS = ("sasl.password", "ssl.key.password", "ssl.keystore.password", "sasl.oauthbearer.client.secret")
MASK = "********"

_ONE_PER_CONSUMER = "each reclaim component names its own consumer group (group_id, truncation_group_id)"
_EAGER = "reclaim's consumers use the classic group protocol (its eager or cooperative-sticky assignment)"
_IDEMPOTENT = "phase 1 relies on the idempotent producer's ordering and retries"
_CALLBACK = "reclaim installs its own callbacks (error log, librdkafka logger, delivery reports)"

#: Properties reclaim sets itself because its guarantees rest on them, with the reason given when one is set.
REFUSED: dict[str, str] = {
    "bootstrap.servers": "use bootstrap (--bootstrap, RECLAIM_BOOTSTRAP)",
    "metadata.broker.list": "use bootstrap (--bootstrap, RECLAIM_BOOTSTRAP)",
    "group.id": _ONE_PER_CONSUMER,
    "group.instance.id": "use instance_id (--instance-id, RECLAIM_INSTANCE_ID)",
    "enable.auto.commit": "offsets are committed only after a record's outcome is final",
    "enable.auto.offset.store": "offsets are stored by hand once a record's outcome is final",
    "auto.commit.interval.ms": "use commit_interval_ms (--commit-interval-ms, RECLAIM_COMMIT_INTERVAL_MS)",
    "auto.offset.reset": "a new consumer group must start at the earliest record, or pending deletes are skipped",
    "isolation.level": "reclaim reads committed records only (read_committed)",
    "enable.partition.eof": "reclaim's consumers do not expect end-of-partition events",
    "partition.assignment.strategy": "use assignment (--assignment, RECLAIM_ASSIGNMENT): eager or cooperative-sticky",
    "group.protocol": _EAGER,
    "enable.idempotence": _IDEMPOTENT,
    "enable.gapless.guarantee": _IDEMPOTENT,
    "max.in.flight.requests.per.connection": _IDEMPOTENT,
    "max.in.flight": _IDEMPOTENT,
    "acks": "every record is acknowledged by all in-sync replicas (acks=all)",
    "request.required.acks": "every record is acknowledged by all in-sync replicas (acks=all)",
    "transactional.id": "reclaim's producers are not transactional",
    "delivery.report.only.error": "reclaim waits for every record's delivery report",
    "logger": _CALLBACK,
    "on_delivery": _CALLBACK,
    "on_commit": _CALLBACK,
}

_NAME = re.compile(r"[a-z0-9]+(?:[._][a-z0-9]+)*")
_SECRET_WORDS = ("password", "secret", "passphrase")
_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")


class ClientPropertyError(ReclaimError, ValueError):
    """A Kafka client property reclaim cannot use; the message is one line naming it."""


def property_name(variable: str) -> str:
    """The property a ``RECLAIM_KAFKA_*`` variable sets: lower case, ``_`` -> ``.``, ``__`` -> ``_``."""
    rest = variable.removeprefix(ENV_PREFIX).lower()
    return "_".join(part.replace("_", ".") for part in rest.split("__"))


def variable_name(prop: str) -> str:
    """The ``RECLAIM_KAFKA_*`` variable of property ``prop`` (the inverse of :func:`property_name`)."""
    return ENV_PREFIX + "__".join(part.replace(".", "_") for part in prop.split("_")).upper()


def from_env(env: Mapping[str, str]) -> dict[str, str]:
    """The properties ``RECLAIM_KAFKA_*`` variables set (empty ones set nothing), checked by :func:`check`."""
    properties = {property_name(name): value for name, value in env.items()
                  if name.startswith(ENV_PREFIX) and name not in NOT_PROPERTIES and value}
    check(properties)
    return properties


def check(properties: Mapping[str, str]) -> None:
    """Refuse, in one line, a malformed name, a property reclaim controls, or a ``.file`` it cannot read."""
    for name in properties:
        if not _NAME.fullmatch(name):
            raise ClientPropertyError(f"Kafka property {name!r} is not a librdkafka property name "
                                      f"(variable {variable_name(name)})")
        if name in REFUSED or name.endswith("_cb"):
            reason = REFUSED.get(name, _CALLBACK)
            raise ClientPropertyError(f"Kafka property {name} cannot be set: {reason}")
        if name.endswith(FILE_SUFFIX):
            secret = name.removesuffix(FILE_SUFFIX)
            if secret not in FILE_SECRETS:
                raise ClientPropertyError(f"Kafka property {name}: only {', '.join(FILE_SECRETS)} can be read "
                                          "from a file (<name>.file)")
            if secret in properties:
                raise ClientPropertyError(f"Kafka properties {secret} and {name} are both set: keep one")


def read_secret_files(properties: Mapping[str, str],
                      read_text: Callable[[Path], str] = read_secret,
                      ) -> dict[str, str]:
    """``properties`` with each ``<secret>.file`` replaced by ``<secret>`` = the file's text, trailing
    newlines stripped; a file that is missing, unreadable or empty is one :class:`ClientPropertyError` line."""
    check(properties)
    resolved: dict[str, str] = {}
    for name, value in properties.items():
        if not name.endswith(FILE_SUFFIX):
            resolved[name] = value
            continue
        try:
            resolved[name.removesuffix(FILE_SUFFIX)] = secret_text(Path(value), read_text)
        except ValueError as exc:
            raise ClientPropertyError(f"Kafka property {name}: {exc}") from exc
    return resolved


def is_secret(name: str) -> bool:
    """Whether property ``name`` holds a secret or private key material (never printed or logged)."""
    if name.endswith(FILE_SUFFIX):
        return False  # a path, not the secret
    return (any(word in name for word in _SECRET_WORDS) or name.endswith("key.pem")
            or name == "sasl.oauthbearer.config")


def masked(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` as they may be shown: every secret replaced by ``********``."""
    return {name: MASK if is_secret(name) else value for name, value in sorted(properties.items())}


def bootstrap_servers(bootstrap: str, properties: Mapping[str, str]) -> str:
    """``bootstrap`` for a client: a ``SCHEME://`` prefix on an entry (``SASL_SSL://host:9093``) is
    accepted when it names the protocol ``security.protocol`` sets (PLAINTEXT when unset), and dropped.

    librdkafka checks such a prefix against ``security.protocol`` and the Java client does not take
    one; a prefix never sets the protocol, so one entry cannot quietly speak another protocol.
    """
    if "://" not in bootstrap:
        return bootstrap
    protocol = properties.get("security.protocol", "plaintext").lower()
    hosts: list[str] = []
    for entry in bootstrap.split(","):
        scheme, separator, host = entry.strip().partition("://")
        if separator:
            if scheme.lower() not in _PROTOCOLS:
                raise ClientPropertyError(f"bootstrap {entry.strip()}: unknown protocol {scheme!r} "
                                          "(PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)")
            if scheme.lower() != protocol:
                raise ClientPropertyError(
                    f"bootstrap {entry.strip()} names protocol {scheme.upper()}, but security.protocol is "
                    f"{protocol.upper()}: set security.protocol = \"{scheme.upper()}\" in the config file's [kafka] "
                    f"table ({variable_name('security.protocol')}), or drop the prefix")
            entry = host
        hosts.append(entry.strip())
    return ",".join(hosts)
