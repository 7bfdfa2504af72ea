"""Session fixtures for reclaim's tests: the real servers (Kafka, S3 endpoints, Spark) and name factories.

Every server fixture starts its server once per session. Outside CI a server that cannot start
skips the tests that need it, with the reason; with ``CI=true`` it fails them instead.

A test that names ``s3_endpoint`` (itself or through ``s3_bucket`` or ``s3_binding``) runs once per S3
server: moto and MinIO, or only the endpoint ``RECLAIM_TEST_S3_ENDPOINT`` names. moto accepts any
credentials, key or bucket name; MinIO checks them as a real server does.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from devtools.minio_server import start_minio
from reclaim.localstack.kafka_security import SecureBroker
from reclaim.localstack.procs import StackError, free_port, stop_pid
from reclaim.localstack.s3_server import LOCAL_REGION, S3Endpoint, ensure_bucket, start_s3
from reclaim.storage.s3 import S3ChunkStorage

T = TypeVar("T")

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

#: An S3 endpoint named here replaces the local servers, as ``RECLAIM_KAFKA_BOOTSTRAP`` does the broker
#: (with ``RECLAIM_TEST_S3_ACCESS_KEY``, ``RECLAIM_TEST_S3_SECRET_KEY`` and ``RECLAIM_TEST_S3_REGION``).
EXTERNAL_S3 = os.environ.get("RECLAIM_TEST_S3_ENDPOINT", "")
#: The S3 servers the S3 tests run on, by id; the server of id ``x`` is the session fixture ``x_s3``.
S3_SERVERS: tuple[str, ...] = ("external",) if EXTERNAL_S3 else ("moto", "minio")


def server_unavailable(what: str, exc: BaseException) -> None:
    """Fail (in CI) or skip (elsewhere) because ``what`` could not be started."""
    message = f"{what} unavailable: {exc}"
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def started(what: str, start: Callable[[], T]) -> T:
    """What ``start()`` returns (a server of a test's own), or :func:`server_unavailable` when it raises:
    any failure to start is reported the same way."""
    try:
        return start()
    except Exception as exc:  # noqa: BLE001 - see the docstring
        server_unavailable(what, exc)
        raise AssertionError("unreachable") from exc


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A per-session directory for servers' data and logs."""
    return tmp_path_factory.mktemp("reclaim-state")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "s3_servers(*ids): run on these S3 servers only ('moto', 'minio', "
                                       "'external'), not on every one; the test says why")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that names ``s3_endpoint`` runs once per S3 server (ids ``moto``, ``minio``, ``external``).

    An ``s3_servers`` mark narrows that to the servers it names, e.g. ``s3_servers("minio", "external")``
    for what only a real server does; a test marked for none of this run's servers, such as one that
    needs moto's own API, starts those it names (moto is always at hand).
    """
    if "s3_endpoint" not in metafunc.fixturenames:
        return
    only = metafunc.definition.get_closest_marker("s3_servers")
    servers = S3_SERVERS if only is None else tuple(s for s in S3_SERVERS if s in only.args) or only.args
    metafunc.parametrize("s3_endpoint", servers, indirect=True)


@pytest.fixture(scope="session")
def moto_s3(state_dir: Path) -> Iterator[S3Endpoint]:
    """moto's S3 server on a free loopback port, for the whole session."""
    try:
        proc, endpoint = start_s3(state_dir / "s3.log")
    except (StackError, OSError) as exc:
        server_unavailable("S3 endpoint (moto)", exc)
        raise AssertionError("unreachable") from exc
    yield endpoint
    stop_pid(proc.pid)


@pytest.fixture(scope="session")
def minio_s3(state_dir: Path) -> Iterator[S3Endpoint]:
    """A MinIO server on a free loopback port with its root credentials, for the whole session (built
    from its Go module on first use: ``make test`` builds it before the tests)."""
    from reclaim.settings import Settings

    try:
        pid, endpoint = start_minio(state_dir / "minio", Settings.from_env().cache_dir)
    except (StackError, OSError) as exc:
        server_unavailable("S3 endpoint (MinIO)", exc)
        raise AssertionError("unreachable") from exc
    yield endpoint
    stop_pid(pid)


@pytest.fixture(scope="session")
def external_s3() -> S3Endpoint:
    """The S3 endpoint ``RECLAIM_TEST_S3_ENDPOINT`` names, with the credentials beside it."""
    access_key = os.environ.get("RECLAIM_TEST_S3_ACCESS_KEY")
    secret_key = os.environ.get("RECLAIM_TEST_S3_SECRET_KEY")
    if not (access_key and secret_key):
        pytest.fail("RECLAIM_TEST_S3_ENDPOINT needs RECLAIM_TEST_S3_ACCESS_KEY and RECLAIM_TEST_S3_SECRET_KEY",
                    pytrace=False)
    return S3Endpoint(EXTERNAL_S3, access_key=access_key, secret_key=secret_key,
                      region=os.environ.get("RECLAIM_TEST_S3_REGION") or LOCAL_REGION)


@pytest.fixture(scope="module")
def s3_endpoint(request: pytest.FixtureRequest) -> S3Endpoint:
    """The S3 endpoint of the test's server (see ``pytest_generate_tests``).

    A fixture that looks it up at run time (``request.getfixturevalue``) for a test that names no
    server gets the first of :data:`S3_SERVERS`.
    """
    server = getattr(request, "param", S3_SERVERS[0])
    endpoint: S3Endpoint = request.getfixturevalue(f"{server}_s3")
    return endpoint


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """A factory of unique names (topics, groups, buckets, streams): ``unique_name("topic")``."""

    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:12]}"

    return make


@pytest.fixture
def s3_bucket(s3_endpoint: S3Endpoint, unique_name: Callable[[str], str]) -> str:
    """A fresh, empty bucket on the test's S3 endpoint."""
    bucket = unique_name("bucket")
    ensure_bucket(s3_endpoint, bucket)
    return bucket


@pytest.fixture
def s3_binding(s3_endpoint: S3Endpoint, s3_bucket: str) -> Iterator[S3ChunkStorage]:
    """A fresh S3 binding (``s3-tier2``) on an empty bucket of the test's S3 endpoint."""
    binding = S3ChunkStorage(s3_endpoint.binding_settings(s3_bucket), name="s3-tier2")
    yield binding
    binding.close()


@pytest.fixture
def s3_binding_on(request: pytest.FixtureRequest,
                  unique_name: Callable[[str], str]) -> Iterator[Callable[[str], S3ChunkStorage]]:
    """A factory of fresh S3 bindings (``s3-tier2``) on a new bucket of the named server, for a fixture
    whose own parameters name it (``chunk_storage``'s are "fs" and the ids of :data:`S3_SERVERS`)."""
    made: list[S3ChunkStorage] = []

    def make(server: str) -> S3ChunkStorage:
        endpoint: S3Endpoint = request.getfixturevalue(f"{server}_s3")
        bucket = unique_name("bucket")
        ensure_bucket(endpoint, bucket)
        made.append(S3ChunkStorage(endpoint.binding_settings(bucket), name="s3-tier2"))
        return made[-1]

    yield make
    for binding in made:
        binding.close()


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:  # noqa: BLE001 - any failure means "no engine here"
        return False
    return True


@pytest.fixture(scope="session")
def kafka_bootstrap(state_dir: Path) -> Iterator[str]:
    """A real Kafka broker's bootstrap address, for the whole session.

    In order: ``RECLAIM_KAFKA_BOOTSTRAP`` when set; a testcontainers Kafka when a Docker engine
    answers; else the Apache Kafka broker run from its jars (fetched by Maven on first use).
    """
    explicit = os.environ.get("RECLAIM_KAFKA_BOOTSTRAP")
    if explicit:
        yield explicit
        return
    if _docker_answers():
        from testcontainers.community.kafka import KafkaContainer

        # The image testcontainers' Kafka module is written for (its start script and readiness line).
        with KafkaContainer("confluentinc/cp-kafka:7.6.0").with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    from reclaim.localstack.kafka_broker import BrokerPorts, start_broker
    from reclaim.settings import Settings

    try:
        ports = BrokerPorts(client=free_port(), controller=free_port())
        proc = start_broker(state_dir / "kafka", Settings.from_env().cache_dir, ports)
    except (StackError, OSError) as exc:
        server_unavailable("Kafka broker", exc)
        raise AssertionError("unreachable") from exc
    yield ports.bootstrap
    stop_pid(proc.pid)


@pytest.fixture(scope="session")
def secure_kafka(state_dir: Path) -> Iterator[SecureBroker]:
    """A second, secured broker for the whole session: SASL_SSL with SCRAM-SHA-512 on its client listener,
    TLS from a CA of its own, ACLs enforced (nothing allowed that no ACL grants). The value is an
    :class:`reclaim.localstack.kafka_security.SecureBroker`: its ``bootstrap``, ``ca_path``, ``admin_properties()`` (a
    super user) and ``create_user(name)``, which makes a SCRAM user and returns its librdkafka properties."""
    from reclaim.localstack.kafka_broker import BrokerPorts, start_broker
    from reclaim.localstack.kafka_security import prepare
    from reclaim.settings import Settings

    ports = BrokerPorts(client=free_port(), controller=free_port())
    directory = state_dir / "kafka-secure"

    def start() -> tuple[SecureBroker, int]:
        security = prepare(directory, ports.bootstrap)
        proc = start_broker(directory / "kafka", Settings.from_env().cache_dir, ports, security=security)
        return SecureBroker(ports.bootstrap, security), proc.pid

    broker, pid = started("secured Kafka broker", start)
    yield broker
    stop_pid(pid)


@pytest.fixture(scope="session")
def spark(kafka_bootstrap: str) -> Iterator[object]:
    """One local Spark session for the whole run, with the Kafka connector on its classpath."""
    from reclaim.retention.spark_session import build_spark_session
    from reclaim.settings import Settings

    try:
        session = build_spark_session("reclaim-tests", Settings.from_env().cache_dir)
    except Exception as exc:  # noqa: BLE001 - Spark start-up fails in many ways; all mean "no Spark"
        server_unavailable("Spark", exc)
        raise AssertionError("unreachable") from exc
    yield session
    # The JVM outlives the session until the process exits; its cached Kafka producers would log a
    # reconnect warning every second once the broker fixture has stopped the broker.
    session.sparkContext.setLogLevel("ERROR")
    session.stop()


@pytest.fixture
def make_tier2(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], object]]:
    """A factory of fresh tier-2 bindings: ``make_tier2("fs")`` under tmp_path, ``make_tier2("s3")`` on the
    test's S3 endpoint (to run on every S3 server, a test names ``s3_endpoint`` or takes ``s3_binding``)."""
    from reclaim.storage.filesystem import FileSystemChunkStorage

    made: list[FileSystemChunkStorage | S3ChunkStorage] = []

    def make(kind: str) -> FileSystemChunkStorage | S3ChunkStorage:
        binding: FileSystemChunkStorage | S3ChunkStorage
        if kind == "fs":
            binding = FileSystemChunkStorage(tmp_path / f"tier2-{len(made)}", name="fs-tier2")
        else:
            endpoint: S3Endpoint = request.getfixturevalue("s3_endpoint")
            bucket: str = request.getfixturevalue("s3_bucket")
            binding = S3ChunkStorage(endpoint.binding_settings(bucket), name="s3-tier2")
        made.append(binding)
        return binding

    yield make
    for binding in made:
        binding.close()


@pytest.fixture
def kafka_topics(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Callable[..., object]:
    """Create reclaim's topics under a fresh prefix; returns their ``TopicNames``."""
    from reclaim.producers.topics import TopicNames
    from reclaim.settings import Settings
    from reclaim.tools.topics import admin_client, create_topics, topic_specs

    def make(retry_delays: tuple[int, ...] = (1, 2, 4), partitions: int = 2) -> TopicNames:
        prefix = unique_name("t") + "."
        settings = Settings(topic_prefix=prefix, retry_delays=retry_delays, partitions=partitions)
        create_topics(admin_client(kafka_bootstrap), topic_specs(settings))
        return TopicNames.for_prefix(prefix, retry_delays)

    return make


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL database the session may make schemas in: ``RECLAIM_TEST_METADATA_URL`` when set,
    else a server of Debian's package started on a free loopback port (installed on first use)."""
    explicit = os.environ.get("RECLAIM_TEST_METADATA_URL")
    if explicit:
        yield explicit
        return
    from devtools import pg_server

    try:
        server = pg_server.start()
    except (StackError, OSError) as exc:
        server_unavailable("PostgreSQL", exc)
        raise AssertionError("unreachable") from exc
    yield server.url()
    server.stop(remove=True)


def postgres_schema_url(url: str, schema: str) -> str:
    """``url`` with its tables in ``schema`` (made now): a test's own namespace in the session's database."""
    from urllib.parse import quote

    from devtools.pg_server import create_schema

    create_schema(url, schema)
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}')}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def metadata_location(request: pytest.FixtureRequest, tmp_path: Path, unique_name: Callable[[str], str]) -> str:
    """Where a test's metadata lives, once per engine: a fresh SQLite file, or a fresh schema of the
    session's PostgreSQL database (a ``postgresql://`` URL)."""
    if request.param == "sqlite":
        return str(tmp_path / "metadata.db")
    url: str = request.getfixturevalue("postgres_url")
    return postgres_schema_url(url, unique_name("t").replace("-", "_"))
