"""The secured local broker's settings: SASL_SSL (SCRAM-SHA-512) for clients, ACLs enforced, test certificates.

The client listener takes SASL_SSL only: every client is a SCRAM principal over TLS, and the
StandardAuthorizer with ``allow.everyone.if.no.acl.found=false`` refuses whatever no ACL grants. The
KRaft controller listener, on loopback, takes mutual TLS only, with the broker's own certificate (see
:func:`server_properties`). Secrets live in files of mode 0600 and never in a log line or on a command line.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reclaim.localstack.certs import IssuedCert, ensure_ca
from reclaim.producers import client_properties

SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192
ADMIN_USER = "admin"
#: The common name of the broker's certificate; the controller listener knows the broker by it.
BROKER_CN = "reclaim-broker"
BROKER_PRINCIPAL = f"User:CN={BROKER_CN}"
#: The admin's librdkafka properties, beside the broker's data (mode 0600).
ADMIN_PROPERTIES = "admin.properties"
#: The same as a reclaim config file (``reclaim --config``): the bootstrap and a ``[kafka]`` table (mode 0600).
ADMIN_CONFIG = "admin.toml"


@dataclass(frozen=True)
class BrokerSecurity:
    """What the broker needs to run secured: its TLS files and the admin (super user) SCRAM credential."""

    ca_path: Path
    keystore_path: Path
    """PEM: the broker's private key and certificate, for both listeners."""
    admin_password: str = field(repr=False)
    admin_user: str = ADMIN_USER

    @property
    def admin_principal(self) -> str:
        return f"User:{self.admin_user}"

    def client_properties(self, username: str, password: str) -> dict[str, str]:
        """librdkafka properties for ``username`` (no bootstrap): SCRAM-SHA-512 over TLS checked against the CA."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": SCRAM_MECHANISM, "sasl.username": username,
                "sasl.password": password, "ssl.ca.location": str(self.ca_path)}

    def admin_properties(self) -> dict[str, str]:
        return self.client_properties(self.admin_user, self.admin_password)

    def scram_argument(self) -> str:
        """``kafka-storage format --add-scram``'s value creating the admin's credential with the storage."""
        return f"{SCRAM_MECHANISM}=[name={self.admin_user},password={self.admin_password}]"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only from the moment it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)  # a file that existed keeps its mode through O_CREAT


def read_properties(path: Path) -> dict[str, str]:
    """A Java-style ``key=value`` properties file (comments and blank lines skipped)."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith(("#", "!")):
            key, _, value = line.partition("=")
            found[key.strip()] = value.strip()
    return found


def admin_client_properties(path: Path) -> dict[str, str]:
    """The admin's librdkafka properties from its ``admin.properties`` file, less ``bootstrap.servers``: a
    reclaim client takes the address from its ``bootstrap`` setting, and a config file's ``[kafka]`` table
    refuses the property. Empty while the file does not exist."""
    found = read_properties(path) if path.exists() else {}
    found.pop("bootstrap.servers", None)
    return found


def prepare(directory: Path, bootstrap: str) -> BrokerSecurity:
    """The CA (kept while valid), a fresh broker certificate and the admin's password (made once, kept in
    ``directory/admin.properties`` with the rest of the admin's client properties for ``bootstrap``)."""
    tls = directory / "tls"
    ca = ensure_ca(tls)
    issued = ca.issue(BROKER_CN)
    keystore = tls / "broker-keystore.pem"
    write_private(keystore, _keystore_text(issued))
    properties = directory / ADMIN_PROPERTIES
    password = read_properties(properties).get("sasl.password") if properties.exists() else None
    security = BrokerSecurity(ca.cert_path, keystore, password or secrets.token_urlsafe(24))
    write_private(properties, "".join(f"{key}={value}\n" for key, value in
                                      {"bootstrap.servers": bootstrap, **security.admin_properties()}.items()))
    write_private(directory / ADMIN_CONFIG, reclaim_config(bootstrap, security.admin_properties()))
    return security


def reclaim_config(bootstrap: str, properties: dict[str, str], **settings: str) -> str:
    """A reclaim config file (TOML) naming ``bootstrap`` and the other ``settings``, with ``properties`` (if
    any) as its ``[kafka]`` table.

    Raises
    ------
    ValueError
        When ``properties`` hold one the ``[kafka]`` table refuses (``bootstrap.servers`` above all): the
        file written would stop every command given it.
    """
    client_properties.check(properties)
    lines = [f"{name} = {json.dumps(value)}" for name, value in {"bootstrap": bootstrap, **settings}.items()]
    if properties:
        lines += ["", "[kafka]"]
        lines += [f"{json.dumps(key)} = {json.dumps(value)}" for key, value in properties.items()]
    return "\n".join(lines) + "\n"


def _keystore_text(issued: IssuedCert) -> str:
    # Kafka's PEM keystore file holds the private key (PKCS#8) followed by the certificate chain.
    return issued.key_path.read_text() + issued.cert_path.read_text()


def server_properties(security: BrokerSecurity, client_listener: str) -> list[str]:
    """The broker's security settings, for a ``client_listener`` of protocol SASL_SSL and the ``CONTROLLER``
    listener of protocol SSL."""
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{security.admin_user}" '
            f'password="{security.admin_password}";')
    listener = client_listener.lower()
    return [
        f"sasl.enabled.mechanisms={SCRAM_MECHANISM}",
        # The broker reaches itself on the client listener, as the admin (a super user).
        f"sasl.mechanism.inter.broker.protocol={SCRAM_MECHANISM}",
        f"listener.name.{listener}.{SCRAM_MECHANISM.lower()}.sasl.jaas.config={jaas}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={security.keystore_path}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={security.ca_path}",
        # The controller listener takes only a client certificate the test CA signed. The broker's requests
        # to its controller (registration, heartbeats, forwarded admin requests) are authorized as the
        # principal of that listener, which must be a super user. A PLAINTEXT controller listener would make
        # that User:ANONYMOUS, and then any local process connecting to the loopback port a super user.
        "listener.name.controller.ssl.client.auth=required",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=false",
        f"super.users={security.admin_principal};{BROKER_PRINCIPAL}",
    ]


def create_scram_user(bootstrap: str, security: BrokerSecurity, name: str, password: str,
                      timeout_s: float = 30.0) -> None:
    """Create or update the SCRAM-SHA-512 credential of ``name`` through the Admin API, as the admin, and
    wait until the broker knows it (a credential is metadata: the broker learns it a moment after the
    controller accepted it)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    from reclaim.producers.config import kafka_config

    admin = AdminClient(kafka_config(bootstrap, "admin", security.admin_properties()))
    upsert = UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
                                          password.encode())
    for future in admin.alter_user_scram_credentials([upsert], request_timeout=timeout_s).values():
        future.result()
    deadline = time.monotonic() + timeout_s
    while True:
        described: Any = admin.describe_user_scram_credentials([name], request_timeout=timeout_s)
        try:
            if described[name].result().scram_credential_infos:
                return
        except Exception:  # noqa: BLE001 - RESOURCE_NOT_FOUND until the broker has the credential
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


@dataclass(frozen=True)
class SecureBroker:
    """A running secured broker as its clients see it: its address, its CA and its admin."""

    bootstrap: str
    security: BrokerSecurity

    @property
    def ca_path(self) -> Path:
        return self.security.ca_path

    def admin_properties(self) -> dict[str, str]:
        """The admin's (a super user's) librdkafka properties, bootstrap included."""
        return {"bootstrap.servers": self.bootstrap, **self.security.admin_properties()}

    def properties(self, username: str, password: str) -> dict[str, str]:
        """librdkafka properties for ``username`` with ``password``, bootstrap included."""
        return {"bootstrap.servers": self.bootstrap, **self.security.client_properties(username, password)}

    def create_user(self, name: str, password: str | None = None) -> dict[str, str]:
        """Create SCRAM user ``name`` (a random password unless given); its librdkafka properties."""
        password = password or secrets.token_urlsafe(18)
        create_scram_user(self.bootstrap, self.security, name, password)
        return self.properties(name, password)

