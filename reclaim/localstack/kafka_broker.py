"""The local Apache Kafka broker: KRaft, single node, run with ``java`` from jars Maven fetches once."""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from reclaim.localstack.kafka_security import BrokerSecurity, write_private
from reclaim.localstack.kafka_security import server_properties as security_properties
from reclaim.localstack.procs import StackError, free_port, port_open, spawn, wait_until

log = logging.getLogger(__name__)

#: The Apache Kafka version the local broker runs; it must match ``reclaim/localstack/kafka/pom.xml``.
KAFKA_VERSION = "4.1.1"
HEAP = "-Xmx512m"


@dataclass(frozen=True)
class BrokerPorts:
    """The listeners of a single-node KRaft broker, all on ``host``.

    Clients reach it on ``client``, which it advertises as ``advertised`` (``host:client`` when None: a
    proxy in front of the broker advertises itself so that clients keep going through it). With
    ``direct``, a second client listener advertises itself, for a client that must bypass that proxy.
    """

    client: int
    controller: int
    host: str = "127.0.0.1"
    advertised: str | None = None
    direct: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.client}"

    @property
    def direct_bootstrap(self) -> str:
        """The listener that advertises itself: ``direct``'s when there is one, else the client one."""
        return f"{self.host}:{self.direct}" if self.direct is not None else self.bootstrap


def _resource(name: str) -> Path:
    return Path(str(resources.files("reclaim.localstack") / "kafka" / name))


def require_tool(tool: str, what: str) -> str:
    """Return the path of ``tool`` or raise one clear message saying what to install."""
    found = shutil.which(tool)
    if found is None:
        raise StackError(f"`{tool}` not found on PATH: install {what} to run the local Kafka broker")
    return found


def fetch_jars(cache_dir: Path) -> Path:
    """Fetch the broker's jars with Maven into ``cache_dir`` unless they are there already."""
    libs = cache_dir / f"kafka-{KAFKA_VERSION}" / "libs"
    done = libs / ".complete"
    if done.exists():
        return libs
    require_tool("java", "a Java 17+ runtime (e.g. Debian's openjdk-17-jre-headless)")
    mvn = require_tool("mvn", "Apache Maven (e.g. Debian's maven)")
    log.info("fetching Apache Kafka %s jars with Maven into %s (first use only)", KAFKA_VERSION, libs)
    if libs.exists():
        shutil.rmtree(libs)
    result = subprocess.run(
        [mvn, "-q", "-B", "-f", str(_resource("pom.xml")), "dependency:copy-dependencies",
         f"-DoutputDirectory={libs}", "-DincludeScope=runtime"],
        capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        raise StackError(f"Maven could not fetch the Kafka jars:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    done.touch()
    return libs


def _server_properties(data_dir: Path, ports: BrokerPorts, security: BrokerSecurity | None = None) -> str:
    if security is not None:
        return _secured_properties(data_dir, ports, security)
    host = ports.host
    listeners = [f"PLAINTEXT://{host}:{ports.client}", f"CONTROLLER://{host}:{ports.controller}"]
    advertised = [f"PLAINTEXT://{ports.advertised or ports.bootstrap}"]
    if ports.direct is not None:
        listeners.append(f"DIRECT://{ports.direct_bootstrap}")
        advertised.append(f"DIRECT://{ports.direct_bootstrap}")
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@{host}:{ports.controller}",
        f"listeners={','.join(listeners)}",
        f"advertised.listeners={','.join(advertised)}",
        "controller.listener.names=CONTROLLER",
        # the broker talks to itself on a listener no proxy stands in front of
        f"inter.broker.listener.name={'DIRECT' if ports.direct is not None else 'PLAINTEXT'}",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,DIRECT:PLAINTEXT",
        *_storage_properties(data_dir),
    ])


def _secured_properties(data_dir: Path, ports: BrokerPorts, security: BrokerSecurity) -> str:
    """SASL_SSL on the client listener, mutual TLS on the controller's, ACLs (see
    :mod:`reclaim.localstack.kafka_security`)."""
    if ports.direct is not None or ports.advertised is not None:
        raise ValueError("a secured broker has one client listener, advertised as itself")
    host = ports.host
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@{host}:{ports.controller}",
        f"listeners=SASL_SSL://{ports.bootstrap},CONTROLLER://{host}:{ports.controller}",
        f"advertised.listeners=SASL_SSL://{ports.bootstrap}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=SASL_SSL",
        "listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL",
        *security_properties(security, "SASL_SSL"),
        *_storage_properties(data_dir),
    ])


def _storage_properties(data_dir: Path) -> list[str]:
    return [
        f"log.dirs={data_dir / 'logs'}",
        "num.partitions=1",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=4",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "transaction.state.log.num.partitions=4",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",
        "",
    ]


def _java(libs: Path, *args: str) -> list[str]:
    java = require_tool("java", "a Java 17+ runtime (e.g. Debian's openjdk-17-jre-headless)")
    return [java, HEAP, "-cp", f"{libs}/*", f"-Dlog4j2.configurationFile={_resource('log4j2.properties')}", *args]


def _format_storage(libs: Path, data_dir: Path, config: Path, security: BrokerSecurity | None = None) -> None:
    if (data_dir / "logs" / "meta.properties").exists():
        return
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    tool = ["kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", f"--config={config}"]
    argfile = data_dir / "format.args"
    if security is not None:
        # The admin's SCRAM credential is made with the storage: nobody could create it later, since only
        # a super user may. Its password goes through a java @argfile (mode 0600), never a command line.
        write_private(argfile, "\n".join([*tool, "--add-scram", security.scram_argument()]) + "\n")
        tool = [f"@{argfile}"]
    try:
        result = subprocess.run(_java(libs, *tool), capture_output=True, text=True, check=False)
    finally:
        argfile.unlink(missing_ok=True)
    if result.returncode != 0:
        raise StackError(f"formatting Kafka storage failed:\n{result.stdout}{result.stderr}")


def choose_ports(previous: BrokerPorts | None) -> BrokerPorts:
    """Reuse the ports a broker had before when both are free, else take two free ports."""
    if previous and not port_open("127.0.0.1", previous.client) and not port_open("127.0.0.1", previous.controller):
        return previous
    return BrokerPorts(client=free_port(), controller=free_port())


def start_broker(data_dir: Path, cache_dir: Path, ports: BrokerPorts, timeout: float = 90.0,
                 security: BrokerSecurity | None = None) -> subprocess.Popen[bytes]:
    """Start the broker on ``ports`` with its data under ``data_dir`` and wait until it takes clients.

    With ``security``, the broker is secured (SASL_SSL, ACLs; see :mod:`reclaim.localstack.kafka_security`), its data
    directory formatted with the admin's credential: a directory once formatted for one kind of broker
    cannot serve the other.
    """
    libs = fetch_jars(cache_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir / "server.properties"
    if security is None:
        config.write_text(_server_properties(data_dir, ports))
    else:
        write_private(config, _server_properties(data_dir, ports, security))  # it holds the admin's password
    _format_storage(libs, data_dir, config, security)
    log_file = data_dir / "broker.log"
    proc = spawn(_java(libs, "kafka.Kafka", str(config)), log_file)
    properties = security.admin_properties() if security is not None else None
    wait_until(lambda: broker_answers(ports.direct_bootstrap, properties=properties), timeout, "Kafka broker",
               proc, log_file)
    return proc


def broker_answers(bootstrap: str, timeout: float = 1.0, properties: Mapping[str, str] | None = None) -> bool:
    """True when a broker at ``bootstrap`` answers a metadata request (of a client with ``properties``)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from reclaim.producers.config import kafka_config

    host, _, port = bootstrap.rpartition(":")
    if not port_open(host, int(port)):
        return False
    try:
        metadata = AdminClient(kafka_config(bootstrap, "admin", properties)).list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(metadata.brokers)
