"""librdkafka's security properties as the Java Kafka client's, for the Spark Kafka connector's ``kafka.*`` options.

Only the connection's security is translated: SASL PLAIN and SCRAM become a JAAS line, PEM files
(CA, client certificate and key) become the Java client's inline PEM stores, so the options work on
every Spark executor without files there. A security property with no Java equivalent is refused in
one line; any other librdkafka property (tuning, debugging) is not the Java client's and is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from reclaim.producers.client_properties import ClientPropertyError

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_ENDPOINT_CHECK = {"none": "", "https": "https"}
#: Properties read while translating the others (their Java form is built from several at once).
_TRANSLATED = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location",
    "ssl.key.pem", "ssl.key.password", "ssl.endpoint.identification.algorithm",
})
_SECURITY_PREFIXES = ("security.", "sasl.", "ssl.", "ssl_", "enable.ssl.")


def is_security_property(name: str) -> bool:
    """Whether ``name`` configures the connection's security (and so must reach the Java client too)."""
    return name.startswith(_SECURITY_PREFIXES)


def java_kafka_options(properties: Mapping[str, str],
                       read_text: Callable[[Path], str] = lambda path: path.read_text(encoding="utf-8"),
                       ) -> dict[str, str]:
    """The Java client's settings (without the connector's ``kafka.`` prefix) for librdkafka ``properties``.

    ``security.protocol``, ``sasl.mechanism`` and ``ssl.endpoint.identification.algorithm`` carry
    over; ``sasl.username`` and ``sasl.password`` become ``sasl.jaas.config`` for PLAIN and SCRAM;
    ``ssl.ca.location`` (a PEM file) becomes a PEM trust store and ``ssl.certificate.location`` with
    ``ssl.key.location`` a PEM key store, both inline (the files' text, read with ``read_text``).
    Secret files must already be read (:func:`reclaim.producers.client_properties.read_secret_files`).

    Raises
    ------
    ClientPropertyError
        One line naming a security property the Java client cannot be given.

    Examples
    --------
    >>> java_kafka_options({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
    ...                     "sasl.username": "u", "sasl.password": "p"})["sasl.jaas.config"]
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    """
    for name in properties:
        if is_security_property(name) and name not in _TRANSLATED:
            raise ClientPropertyError(f"Kafka property {name} has no translation for the Spark Kafka connector "
                                      "(the Java client): use PEM files (ssl.ca.location, ssl.certificate.location, "
                                      "ssl.key.location) and SASL PLAIN or SCRAM")
    options: dict[str, str] = {}
    protocol = properties.get("security.protocol", "plaintext").upper()
    if "security.protocol" in properties:
        options["security.protocol"] = protocol
    if protocol.startswith("SASL_"):
        options.update(_sasl(properties))
    if protocol.endswith("SSL"):
        options.update(_ssl(properties, read_text))
    return options


def _sasl(properties: Mapping[str, str]) -> dict[str, str]:
    # librdkafka's default mechanism is GSSAPI; "sasl.mechanisms" is its older spelling.
    mechanism = properties.get("sasl.mechanism", properties.get("sasl.mechanisms", "GSSAPI")).upper()
    module = _LOGIN_MODULES.get(mechanism)
    if module is None:
        raise ClientPropertyError(f"sasl.mechanism {mechanism} has no translation for the Spark Kafka connector: "
                                  f"use {', '.join(_LOGIN_MODULES)}")
    username, password = properties.get("sasl.username"), properties.get("sasl.password")
    if not username or not password:
        raise ClientPropertyError(f"sasl.mechanism {mechanism} needs sasl.username and sasl.password")
    jaas = f'{module} required username="{_jaas_quoted(username)}" password="{_jaas_quoted(password)}";'
    return {"sasl.mechanism": mechanism, "sasl.jaas.config": jaas}


def _jaas_quoted(value: str) -> str:
    """``value`` inside a JAAS option's double quotes (Java's JaasConfig reads backslash escapes there)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _ssl(properties: Mapping[str, str], read_text: Callable[[Path], str]) -> dict[str, str]:
    options: dict[str, str] = {}
    ca = _pem(properties, "ssl.ca", read_text)
    if ca is not None:
        options.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": ca})
    given = [any(properties.get(f"{stem}.{form}") for form in ("location", "pem"))
             for stem in ("ssl.certificate", "ssl.key")]
    if given[0] != given[1]:
        raise ClientPropertyError("a client certificate needs both ssl.certificate.location and ssl.key.location "
                                  "(or their .pem forms)")
    certificate, key = _pem(properties, "ssl.certificate", read_text), _pem(properties, "ssl.key", read_text)
    if certificate is not None and key is not None:
        options.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": certificate,
                        "ssl.keystore.key": key})
        if properties.get("ssl.key.password"):
            options["ssl.key.password"] = properties["ssl.key.password"]
    check = properties.get("ssl.endpoint.identification.algorithm")
    if check is not None:
        if check.lower() not in _ENDPOINT_CHECK:
            raise ClientPropertyError(f"ssl.endpoint.identification.algorithm {check!r}: none or https")
        options["ssl.endpoint.identification.algorithm"] = _ENDPOINT_CHECK[check.lower()]
    return options


def _pem(properties: Mapping[str, str], stem: str, read_text: Callable[[Path], str]) -> str | None:
    """The PEM text ``<stem>.pem`` gives inline or ``<stem>.location`` names; None when neither is set."""
    if properties.get(f"{stem}.pem"):
        return properties[f"{stem}.pem"]
    location = properties.get(f"{stem}.location")
    if not location:
        return None
    if location == "probe":  # librdkafka's search of the system's CA stores
        raise ClientPropertyError(f"{stem}.location probe has no translation for the Spark Kafka connector: name "
                                  "the CA's PEM file")
    try:
        return read_text(Path(location))
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ClientPropertyError(f"{stem}.location: cannot read {location}: {reason}") from exc
