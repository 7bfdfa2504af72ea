"""Client security settings as an operator gives them: the config file's [kafka] table and RECLAIM_KAFKA_*
variables, secret files, what is refused, secrets masked by `config show`, the retention job's connector
options, and the Schema Registry's basic auth and CA reaching its client."""

from __future__ import annotations

import base64
import http.server
import json
import os
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim import config_file
from reclaim.exits import ExitCode, UsageError
from reclaim.localstack.certs import make_ca
from reclaim.producers import client_properties as client_properties_module
from reclaim.producers.config import client_properties, installed_client_properties
from reclaim.services import client_security, runtime
from reclaim.services.retention_job import RetentionJobSettings, job_config
from reclaim.settings import Settings
from tests.support.cli import run_reclaim

SECRETS = ("hunter2", "kafka-pw", "key-pw", "sr-pw", "s3-secret", "s3-token", "file-pw")


@pytest.fixture(autouse=True)
def nothing_installed() -> Iterator[None]:
    with installed_client_properties({}):
        yield


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    return {**env, "RECLAIM_STATE_DIR": str(tmp_path / "state"), **extra}


def one_error_line(result: object, code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)  # type: ignore[attr-defined]
    lines = [line for line in result.stderr.splitlines() if line.strip()]  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("reclaim: error: "), lines
    return lines[0]


def test_the_kafka_table_enters_as_variables_dotted_or_quoted_or_nested(tmp_path: Path) -> None:
    config = tmp_path / "reclaim.toml"
    config.write_text('bootstrap = "b:9093"\n[kafka]\n"security.protocol" = "SASL_SSL"\n'
                      'sasl.mechanism = "SCRAM-SHA-512"\nsasl.username = "worker"\n'
                      '"sasl.password.file" = "/run/secrets/kafka"\nsocket.keepalive.enable = true\n'
                      '[kafka.ssl]\nca.location = "/etc/ca.pem"\n')
    assert config_file.load(config) == {
        "RECLAIM_BOOTSTRAP": "b:9093", "RECLAIM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "RECLAIM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "RECLAIM_KAFKA_SASL_USERNAME": "worker",
        "RECLAIM_KAFKA_SASL_PASSWORD_FILE": "/run/secrets/kafka", "RECLAIM_KAFKA_SOCKET_KEEPALIVE_ENABLE": "true",
        "RECLAIM_KAFKA_SSL_CA_LOCATION": "/etc/ca.pem"}


def test_the_environment_wins_over_the_file_and_a_secret_file_over_the_files_secret(tmp_path: Path) -> None:
    config = tmp_path / "reclaim.toml"
    config.write_text('[kafka]\nsasl.username = "file-user"\n"sasl.password" = "file-pw"\n')
    environ = {"RECLAIM_KAFKA_SASL_USERNAME": "env-user", "RECLAIM_KAFKA_SASL_PASSWORD_FILE": "/pw"}
    config_file.apply(config, environ)
    assert environ == {"RECLAIM_KAFKA_SASL_USERNAME": "env-user", "RECLAIM_KAFKA_SASL_PASSWORD_FILE": "/pw"}


@pytest.mark.parametrize(("table", "message"), [
    ('[kafka]\n"group.id" = "mine"\n', "Kafka property group.id cannot be set"),
    ('[kafka]\n"bootstrap.servers" = "b:1"\n', "use bootstrap"),
    ('[kafka]\nbootstrap = "b:1"\n', r"\[kafka\] bootstrap is not a librdkafka property"),
    ('[kafka]\n"ssl.ca.location.file" = "/x"\n', "only sasl.password, .* can be read from a file"),
    ('[kafka]\n"sasl.password" = ""\n', r"\[kafka\] sasl.password is empty"),
    ('kafka = "SASL_SSL"\n', "must be a table of librdkafka properties"),
])
def test_a_kafka_table_reclaim_cannot_use_is_one_line(tmp_path: Path, table: str, message: str) -> None:
    config = tmp_path / "reclaim.toml"
    config.write_text(table)
    with pytest.raises(UsageError, match=f"config file {config}: .*{message}"):
        config_file.load(config)


def test_install_reads_secret_files_once_and_checks_the_bootstrap_prefix(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("file-pw\n")
    env = {"RECLAIM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "RECLAIM_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "pw"),
           "RECLAIM_KAFKA_BOOTSTRAP": "tests-only:9092"}
    installed = client_security.install_kafka_properties(Settings(bootstrap="SASL_SSL://b:9093"), env)
    assert installed == client_properties() == {"security.protocol": "SASL_SSL", "sasl.password": "file-pw"}
    with pytest.raises(UsageError, match="names protocol SASL_SSL, but security.protocol is PLAINTEXT"):
        client_security.install_kafka_properties(Settings(bootstrap="SASL_SSL://b:9093"), {})


def test_cli_refusals_are_one_line_and_exit_64(tmp_path: Path) -> None:
    cases = [
        ({"RECLAIM_KAFKA_ENABLE_AUTO_COMMIT": "true"}, [], "Kafka property enable.auto.commit cannot be set"),
        ({"RECLAIM_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "missing")}, [],
         f"Kafka property sasl.password.file: cannot read {tmp_path / 'missing'}: No such file or directory"),
        ({}, ["--bootstrap", "SASL_SSL://127.0.0.1:1"], "names protocol SASL_SSL, but security.protocol is PLAINTEXT"),
        ({"RECLAIM_SCHEMA_REGISTRY_URL": "https://r:8081",
          "RECLAIM_SCHEMA_REGISTRY_BASIC_AUTH_FILE": str(tmp_path / "missing")}, [],
         "schema_registry_basic_auth_file: cannot read"),
        ({"RECLAIM_S3_ACCESS_KEY": "AKIA", "RECLAIM_S3_SECRET_KEY_FILE": str(tmp_path / "missing")}, [],
         f"RECLAIM_S3_SECRET_KEY_FILE: cannot read {tmp_path / 'missing'}: No such file or directory"),
    ]
    for variables, flags, message in cases:
        result = run_reclaim("config", "show", *flags, env=clean_env(tmp_path, **variables), timeout=60)
        assert message in one_error_line(result, ExitCode.USAGE)


def test_config_show_masks_every_secret(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("file-pw\n")
    config = tmp_path / "reclaim.toml"
    config.write_text('[kafka]\n"security.protocol" = "SASL_SSL"\n"sasl.username" = "worker"\n'
                      '"sasl.password" = "kafka-pw"\n"ssl.key.password" = "key-pw"\n')
    env = clean_env(tmp_path, RECLAIM_METADATA_URL="postgresql://reclaim:hunter2@db-1:5432/reclaim",
                    RECLAIM_SCHEMA_REGISTRY_URL="https://sr:sr-pw@registry:8081",
                    RECLAIM_S3_ACCESS_KEY="AKIA", RECLAIM_S3_SECRET_KEY="s3-secret",
                    RECLAIM_S3_SESSION_TOKEN="s3-token", RECLAIM_KAFKA_SSL_KEYSTORE_PASSWORD_FILE=str(tmp_path / "pw"))
    shown = run_reclaim("--config", str(config), "config", "show", "--json", env=env, timeout=60, check=True)
    values = json.loads(shown.stdout)
    assert values["kafka"] == {"security.protocol": "SASL_SSL", "sasl.username": "worker",
                               "sasl.password": "********", "ssl.key.password": "********",
                               "ssl.keystore.password.file": str(tmp_path / "pw")}
    assert values["metadata_url"] == "postgresql://reclaim:********@db-1:5432/reclaim"
    assert values["schema_registry_url"] == "https://sr:********@registry:8081"
    assert values["s3_secret_key"] == values["s3_session_token"] == "********"
    assert values["s3_access_key"] == "AKIA"
    text = run_reclaim("--config", str(config), "config", "show", env=env, timeout=60, check=True)
    assert "kafka.sasl.password = ********" in text.stdout.splitlines()
    for output in (shown.stdout + shown.stderr, text.stdout + text.stderr):
        assert not [secret for secret in SECRETS if secret in output]


def test_s3_credentials_from_files_are_read_once_shown_as_their_paths_and_never_printed(tmp_path: Path) -> None:
    for name, text in (("access", "AKIAFROMFILE\n"), ("secret", "s3-secret\n"), ("token", "s3-token")):
        (tmp_path / name).write_text(text)
    env = clean_env(tmp_path, RECLAIM_S3_ACCESS_KEY_FILE=str(tmp_path / "access"),
                    RECLAIM_S3_SECRET_KEY_FILE=str(tmp_path / "secret"),
                    RECLAIM_S3_SESSION_TOKEN_FILE=str(tmp_path / "token"))
    shown = run_reclaim("config", "show", "--json", env=env, timeout=60, check=True)
    values = json.loads(shown.stdout)
    assert values["s3_access_key"] == "AKIAFROMFILE"
    assert values["s3_secret_key"] == values["s3_session_token"] == "********"
    assert values["s3_secret_key_file"] == str(tmp_path / "secret")
    assert not [secret for secret in SECRETS if secret in shown.stdout + shown.stderr]
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("RECLAIM_S3_")})
    assert (settings.s3_access_key, settings.s3_secret_key, settings.s3_session_token) == (
        "AKIAFROMFILE", "s3-secret", "s3-token")


@pytest.mark.parametrize(("contents", "extra", "message"), [
    (None, {}, "RECLAIM_S3_SECRET_KEY_FILE: cannot read .*secret: No such file or directory"),
    ("\n", {}, "RECLAIM_S3_SECRET_KEY_FILE: .*secret is empty"),
    (b"\xff\xfe", {}, "RECLAIM_S3_SECRET_KEY_FILE: cannot read .*secret: 'utf-8' codec"),
    ("s3-secret", {"RECLAIM_S3_SECRET_KEY": "s3-secret"},
     "RECLAIM_S3_SECRET_KEY and RECLAIM_S3_SECRET_KEY_FILE are both set"),
])
def test_an_s3_secret_file_that_cannot_be_used_is_one_line_without_the_secret(
        tmp_path: Path, contents: str | bytes | None, extra: dict[str, str], message: str) -> None:
    if isinstance(contents, bytes):
        (tmp_path / "secret").write_bytes(contents)
    elif contents is not None:
        (tmp_path / "secret").write_text(contents)
    env = {"RECLAIM_S3_ACCESS_KEY": "AKIA", "RECLAIM_S3_SECRET_KEY_FILE": str(tmp_path / "secret"), **extra}
    with pytest.raises(ValueError, match=message) as refused:
        Settings.from_env(env)
    assert "s3-secret" not in str(refused.value)


def test_a_secret_file_is_a_regular_file_of_at_most_64_kib_never_a_fifo_or_a_device(tmp_path: Path) -> None:
    """A path naming the wrong thing is refused in one line instead of waiting on a FIFO no one writes to, or
    reading a device or a huge file whole; a link to a secret file (as Kubernetes mounts them) is followed."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "huge").write_bytes(b"x" * (64 * 1024 + 1))
    (tmp_path / "secret").write_text("s3-secret\n")
    (tmp_path / "link").symlink_to(tmp_path / "secret")
    refused = {tmp_path / "fifo": "not a regular file", Path("/dev/zero"): "not a regular file",
               tmp_path / "huge": "larger than 64 KiB"}
    for path, reason in refused.items():
        with pytest.raises(ValueError, match=f"RECLAIM_S3_SECRET_KEY_FILE: cannot read {path}: {reason}"):
            Settings.from_env({"RECLAIM_S3_ACCESS_KEY": "AKIA", "RECLAIM_S3_SECRET_KEY_FILE": str(path)})
    linked = Settings.from_env({"RECLAIM_S3_ACCESS_KEY": "AKIA", "RECLAIM_S3_SECRET_KEY_FILE": str(tmp_path / "link")})
    assert linked.s3_secret_key == "s3-secret"
    with pytest.raises(client_properties_module.ClientPropertyError, match="sasl.password.file: cannot read .*fifo: "
                                                                           "not a regular file"):
        client_properties_module.read_secret_files({"sasl.password.file": str(tmp_path / "fifo")})


def test_a_secret_and_its_file_are_one_setting_across_the_environment_and_the_file(tmp_path: Path) -> None:
    """The environment wins over the config file whichever of the two forms each uses: a secret given in the
    environment is not refused as given twice because the file names its file, nor the other way round."""
    config = tmp_path / "reclaim.toml"
    config.write_text('s3_access_key = "AKIA"\ns3_secret_key_file = "/run/secrets/s3"\n'
                      'schema_registry_basic_auth = "sr:sr-pw"\ns3_session_token = "s3-token"\n')
    given = {"RECLAIM_S3_SECRET_KEY": "s3-secret", "RECLAIM_SCHEMA_REGISTRY_BASIC_AUTH_FILE": "/run/secrets/sr"}
    environ = dict(given)
    config_file.apply(config, environ)
    assert environ == {**given, "RECLAIM_S3_ACCESS_KEY": "AKIA", "RECLAIM_S3_SESSION_TOKEN": "s3-token"}


def test_the_retention_job_gets_the_properties_as_connector_options(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    settings = RetentionJobSettings(bootstrap="SASL_SSL://b-1:9093,b-2:9093", state_dir=tmp_path,
                                    schema_registry_url="https://sr:sr-pw@registry:8081")
    with installed_client_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                      "sasl.username": "retention", "sasl.password": "kafka-pw",
                                      "ssl.ca.location": str(tmp_path / "ca.pem"), "linger.ms": "5"}):
        config = job_config(settings, once=True)
    assert config.bootstrap == "b-1:9093,b-2:9093"
    assert config.kafka_options == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="retention" '
                            'password="kafka-pw";',
        "ssl.truststore.type": "PEM", "ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----\n"}
    assert config.registry_url == "https://registry:8081"
    assert dict(config.registry_config) == {"basic.auth.user.info": "sr:sr-pw"}
    assert not [secret for secret in SECRETS if secret in repr(config)]
    with installed_client_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}), \
            pytest.raises(UsageError, match="sasl.mechanism GSSAPI has no translation"):
        job_config(settings, once=True)


class _Registry(http.server.BaseHTTPRequestHandler):
    """Answers every request with the registry's 404 and keeps the Authorization header it was sent."""

    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append(self.headers.get("Authorization"))
        body = json.dumps({"error_code": 40403, "message": "Schema not found"}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def tls_registry(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A TLS HTTP server standing in for a Schema Registry (it answers 404), and its CA's certificate."""
    ca = make_ca(tmp_path / "ca")
    issued = ca.issue("registry", hosts=("127.0.0.1",), client=False)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(issued.cert_path, issued.key_path)
    _Registry.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", issued.ca_path
    server.shutdown()
    server.server_close()


def _ask_registry(settings: Settings) -> str:
    """The error the codec's registry client gets asking for schema 1."""
    codec = runtime.codec(settings)
    with pytest.raises(Exception) as failure:  # noqa: PT011 - the registry's 404, or the TLS refusal
        codec.client.get_schema(1)  # type: ignore[attr-defined]
    return f"{type(failure.value).__name__}: {failure.value}"


def test_registry_basic_auth_and_ca_reach_the_client(tmp_path: Path, tls_registry: tuple[str, Path]) -> None:
    address, ca = tls_registry
    (tmp_path / "sr-auth").write_text("sr:file-pw\n")
    from_url = Settings(schema_registry_url=f"https://sr:sr%2Fpw@{address}", schema_registry_ca_location=ca)
    assert "Schema not found" in _ask_registry(from_url)
    from_file = Settings(schema_registry_url=f"https://{address}", schema_registry_ca_location=ca,
                         schema_registry_basic_auth_file=tmp_path / "sr-auth")
    assert "Schema not found" in _ask_registry(from_file)
    assert _Registry.seen[:1] == ["Basic " + base64.b64encode(b"sr:sr/pw").decode()]
    assert _Registry.seen[-1] == "Basic " + base64.b64encode(b"sr:file-pw").decode()
    without_ca = _ask_registry(Settings(schema_registry_url=f"https://{address}"))
    assert "CERTIFICATE_VERIFY_FAILED" in without_ca or "certificate verify failed" in without_ca
