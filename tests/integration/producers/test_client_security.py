"""Client security properties: the environment mapping, what is refused, secret files, masking, bootstrap
prefixes, the Java client's translation, the registry's credentials; and a client built with installed
properties reaching the real broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from reclaim.producers import client_properties as props
from reclaim.producers.config import (
    client_properties,
    installed_client_properties,
    kafka_config,
    quiet_logger,
    use_client_properties,
)
from reclaim.producers.java_properties import java_kafka_options
from reclaim.producers.producer import RecordProducer
from reclaim.schemas.registry_auth import registry_client_config

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(autouse=True)
def nothing_installed() -> Iterator[None]:
    """Every test starts with no installed properties, and what was installed before is put back after it."""
    with installed_client_properties({}):
        yield


@pytest.mark.parametrize(("variable", "prop"), [
    ("RECLAIM_KAFKA_SECURITY_PROTOCOL", "security.protocol"),
    ("RECLAIM_KAFKA_SASL_PASSWORD", "sasl.password"),
    ("RECLAIM_KAFKA_SASL_PASSWORD_FILE", "sasl.password.file"),
    ("RECLAIM_KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM", "ssl.endpoint.identification.algorithm"),
    ("RECLAIM_KAFKA_SOME__UNDERSCORED_NAME", "some_underscored.name"),
])
def test_variables_map_to_properties_and_back(variable: str, prop: str) -> None:
    assert props.property_name(variable) == prop
    assert props.variable_name(prop) == variable


def test_from_env_reads_only_kafka_variables_and_never_the_tests_broker_address() -> None:
    env = {"RECLAIM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "RECLAIM_KAFKA_BOOTSTRAP": "elsewhere:9092",
           "RECLAIM_KAFKA_CLIENT_ID": "", "RECLAIM_BOOTSTRAP": "b:9092", "KAFKA_SASL_PASSWORD": "x"}
    assert props.from_env(env) == {"security.protocol": "SASL_SSL"}


@pytest.mark.parametrize(("prop", "reason"), [
    ("bootstrap.servers", "use bootstrap"),
    ("group.id", "names its own consumer group"),
    ("enable.auto.offset.store", "stored by hand"),
    ("enable.auto.commit", "outcome is final"),
    ("isolation.level", "read_committed"),
    ("auto.offset.reset", "earliest record"),
    ("enable.idempotence", "idempotent producer"),
    ("acks", "acks=all"),
    ("transactional.id", "not transactional"),
    ("error_cb", "own callbacks"),
    ("stats_cb", "own callbacks"),
    ("logger", "own callbacks"),
    ("on_delivery", "own callbacks"),
])
def test_properties_reclaim_controls_are_refused_in_one_line(prop: str, reason: str) -> None:
    with pytest.raises(props.ClientPropertyError, match=f"Kafka property {prop} cannot be set: .*{reason}"):
        props.from_env({props.variable_name(prop): "x"})
    with pytest.raises(props.ClientPropertyError):
        use_client_properties({prop: "x"})
    assert client_properties() == {}


def test_every_role_default_and_every_callers_override_but_tuning_is_refused() -> None:
    """What the role defaults and the callers set for correctness cannot be replaced by an operator."""
    from reclaim.producers.config import _ROLE_DEFAULTS

    tuning = {"linger.ms"}
    for defaults in _ROLE_DEFAULTS.values():
        for name in defaults.keys() - tuning:
            assert name in props.REFUSED, name
    for name in ("group.id", "group.instance.id", "auto.commit.interval.ms"):
        assert name in props.REFUSED


def test_only_secret_properties_come_from_files_and_not_beside_their_value() -> None:
    with pytest.raises(props.ClientPropertyError, match="only sasl.password, .* can be read from a file"):
        props.check({"ssl.ca.location.file": "/x"})
    with pytest.raises(props.ClientPropertyError, match="sasl.password and sasl.password.file are both set"):
        props.check({"sasl.password": "p", "sasl.password.file": "/x"})
    with pytest.raises(props.ClientPropertyError, match="not a librdkafka property name"):
        props.check({"Security.Protocol": "SSL"})


def test_secret_files_are_read_once_without_their_trailing_newline(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cr3t \n")
    (tmp_path / "key-pw").write_text("other\r\n")
    resolved = props.read_secret_files({"sasl.password.file": str(tmp_path / "pw"), "sasl.username": "u",
                                        "ssl.key.password.file": str(tmp_path / "key-pw")})
    assert resolved == {"sasl.password": "s3cr3t ", "sasl.username": "u", "ssl.key.password": "other"}


def test_a_missing_or_empty_secret_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(props.ClientPropertyError,
                       match=r"^Kafka property sasl.password.file: cannot read /no/such/file: No such file"):
        props.read_secret_files({"sasl.password.file": "/no/such/file"})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(props.ClientPropertyError, match="is empty"):
        props.read_secret_files({"sasl.password.file": str(tmp_path / "empty")})
    with pytest.raises(props.ClientPropertyError, match="read the file first"):
        use_client_properties({"sasl.password.file": str(tmp_path / "empty")})


def test_masked_hides_passwords_and_key_material_but_not_paths() -> None:
    shown = props.masked({"sasl.username": "u", "sasl.password": "p", "ssl.key.password": "k",
                          "ssl.key.pem": "-----BEGIN", "ssl.key.location": "/k.pem", "sasl.password.file": "/pw",
                          "sasl.oauthbearer.client.secret": "c", "ssl.certificate.pem": "cert",
                          "sasl.oauthbearer.config": "principal=x"})
    assert shown == {"sasl.username": "u", "sasl.password": props.MASK, "ssl.key.password": props.MASK,
                     "ssl.key.pem": props.MASK, "ssl.key.location": "/k.pem", "sasl.password.file": "/pw",
                     "sasl.oauthbearer.client.secret": props.MASK, "ssl.certificate.pem": "cert",
                     "sasl.oauthbearer.config": props.MASK}


def test_a_bootstrap_prefix_must_match_the_security_protocol_and_is_dropped() -> None:
    sasl = {"security.protocol": "sasl_ssl"}
    assert props.bootstrap_servers("SASL_SSL://a:9093, SASL_SSL://b:9093", sasl) == "a:9093,b:9093"
    assert props.bootstrap_servers("a:9093,b:9093", sasl) == "a:9093,b:9093"
    assert props.bootstrap_servers("PLAINTEXT://a:9092", {}) == "a:9092"
    with pytest.raises(props.ClientPropertyError, match=r"names protocol SASL_SSL, but security.protocol is "
                                                        r"PLAINTEXT: set security.protocol = \"SASL_SSL\""):
        props.bootstrap_servers("SASL_SSL://a:9093", {})
    with pytest.raises(props.ClientPropertyError, match="unknown protocol 'http'"):
        props.bootstrap_servers("http://a:9093", sasl)


def test_kafka_config_merges_installed_properties_after_role_defaults_and_before_overrides() -> None:
    with installed_client_properties({"security.protocol": "SASL_SSL", "linger.ms": "50", "client.id": "ops"}):
        config = kafka_config("SASL_SSL://a:9093", "producer", {"client.id": "mine"})
        assert config["bootstrap.servers"] == "a:9093"
        assert config["security.protocol"] == "SASL_SSL"
        assert config["linger.ms"] == "50", "an installed property wins over a role default"
        assert config["client.id"] == "mine", "a call's override wins over an installed property"
        assert config["acks"] == "all"
        assert "debug" not in config, "librdkafka's debug output stays off unless asked for"
    assert "security.protocol" not in kafka_config("a:9092", "admin"), "the block's properties are put back"


def test_java_options_for_scram_over_tls_with_a_client_certificate(tmp_path: Path) -> None:
    for name in ("ca", "cert", "key"):
        (tmp_path / f"{name}.pem").write_text(f"-----BEGIN {name}-----\n")
    options = java_kafka_options({
        "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "worker",
        "sasl.password": 'p"a\\ss', "ssl.ca.location": str(tmp_path / "ca.pem"),
        "ssl.certificate.location": str(tmp_path / "cert.pem"), "ssl.key.location": str(tmp_path / "key.pem"),
        "ssl.key.password": "kp", "ssl.endpoint.identification.algorithm": "none", "linger.ms": "5",
        "debug": "all"})
    assert options == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="worker" password="p\\"a\\\\ss";',
        "ssl.truststore.type": "PEM", "ssl.truststore.certificates": "-----BEGIN ca-----\n",
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": "-----BEGIN cert-----\n",
        "ssl.keystore.key": "-----BEGIN key-----\n", "ssl.key.password": "kp",
        "ssl.endpoint.identification.algorithm": ""}


def test_java_options_for_plain_and_scram_256_and_plaintext() -> None:
    plain = java_kafka_options({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                                "sasl.username": "u", "sasl.password": "p"})
    assert plain["sasl.jaas.config"] == ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                                         'username="u" password="p";')
    assert "ssl.truststore.type" not in plain
    scram = java_kafka_options({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                                "sasl.username": "u", "sasl.password": "p",
                                "ssl.endpoint.identification.algorithm": "https"})
    assert scram["sasl.jaas.config"].startswith(f"{SCRAM} required")
    assert scram["ssl.endpoint.identification.algorithm"] == "https"
    assert java_kafka_options({}) == {}
    assert java_kafka_options({"client.id": "x"}) == {}


@pytest.mark.parametrize(("properties", "message"), [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism GSSAPI has no translation"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER has no translation"),
    ({"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p"}, "GSSAPI has no translation"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"}, "needs sasl.username and"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/k.p12"}, "ssl.keystore.location has no translation"),
    ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"}, "has no translation"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"}, "needs both ssl.certificate.location"),
    ({"security.protocol": "SSL", "ssl.ca.location": "probe"}, "probe has no translation"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/no/ca.pem"}, "cannot read /no/ca.pem"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"}, "none or https"),
])
def test_what_the_java_client_cannot_be_given_is_refused_in_one_line(properties: dict[str, str],
                                                                    message: str) -> None:
    with pytest.raises(props.ClientPropertyError, match=message):
        java_kafka_options(properties)


def test_registry_credentials_leave_the_url() -> None:
    assert registry_client_config("https://sr:p%40ss@reg-1:8081,https://sr:p%40ss@reg-2:8081") == (
        "https://reg-1:8081,https://reg-2:8081", {"basic.auth.user.info": "sr:p@ss"})
    assert registry_client_config("https://reg:8081", basic_auth="u:p", ca_location="/ca.pem") == (
        "https://reg:8081", {"basic.auth.user.info": "u:p", "ssl.ca.location": "/ca.pem"})
    assert registry_client_config("mock://scope") == ("mock://scope", {})
    with pytest.raises(ValueError, match="keep one"):
        registry_client_config("https://u:p@reg:8081", basic_auth="u:p")
    with pytest.raises(ValueError, match="USER:PASSWORD"):
        registry_client_config("https://reg:8081", basic_auth="token")
    with pytest.raises(ValueError, match="different credentials"):
        registry_client_config("https://a:1@r1,https://b:2@r2")


def test_clients_with_installed_properties_produce_and_consume_on_the_broker(kafka_bootstrap: str) -> None:
    """Installed properties reach real clients: PLAINTEXT named, a prefixed bootstrap, a client id; the
    admin creates a topic, the idempotent producer writes to it, a consumer reads the record back."""
    topic, group = f"props-{uuid.uuid4().hex[:12]}", f"props-{uuid.uuid4().hex[:8]}"
    with installed_client_properties({"security.protocol": "PLAINTEXT", "client.id": "reclaim-props",
                                      "socket.keepalive.enable": "true"}):
        admin = AdminClient(kafka_config(f"PLAINTEXT://{kafka_bootstrap}", "admin"))
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
        producer = RecordProducer(f"PLAINTEXT://{kafka_bootstrap}", "idempotent-producer")
        delivered: list[object] = []
        producer.producer.produce(topic, b"value", b"key", on_delivery=lambda err, msg: delivered.append(err))
        assert producer.producer.flush(30) == 0 and delivered == [None]
        producer.close()
        consumer = Consumer(kafka_config(kafka_bootstrap, "consumer", {"group.id": group}))
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 60
            message = None
            while message is None and time.monotonic() < deadline:
                polled = consumer.poll(1.0)
                message = polled if polled is not None and polled.error() is None else None
            assert message is not None and message.value() == b"value"
        finally:
            consumer.close()
            admin.delete_topics([topic])


def test_an_installed_protocol_the_broker_does_not_speak_fails_the_client(kafka_bootstrap: str) -> None:
    """The properties really are used: SSL against the plaintext test broker does not connect."""
    with installed_client_properties({"security.protocol": "SSL"}):
        admin = AdminClient(kafka_config(kafka_bootstrap, "admin", {"logger": quiet_logger("test-ssl"),
                                                                    "error_cb": lambda error: None}))
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=3)
