"""reclaim's parts on the secured broker, each as its own SCRAM principal with its own keyring: the deployment
the security tests run, its keyrings made with ``reclaim keys`` and the helpers that watch its processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from reclaim.localstack.kafka_security import SecureBroker
from reclaim.localstack.procs import free_port, stop_pid
from reclaim.producers.client_properties import variable_name
from reclaim.producers.config import quiet_logger
from reclaim.producers.topics import TopicNames
from reclaim.security.keyring import load_keyring
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.segments.streams import StreamController
from reclaim.settings import Settings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from reclaim.tools.acls import Names, apply, plan
from reclaim.tools.topics import create_topics, topic_specs
from tests.support.cli import run_reclaim

ATTACKER = "attacker"
_QUIET = quiet_logger("tests.support.deployment")


@dataclass
class Deployment:
    """reclaim's topics under a fresh prefix on the secured broker; a principal (with its role's ACLs) and a
    keyring per part, made as an operator makes them (``reclaim acls``, ``reclaim keys``)."""

    broker: SecureBroker
    directory: Path
    names: Names
    principals: dict[str, dict[str, str]]
    keyrings: dict[str, Path]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def topics(self) -> TopicNames:
        return self.names.topics

    def properties(self, part: str) -> dict[str, str]:
        """``part``'s librdkafka properties without the bootstrap (what ``RECLAIM_KAFKA_*`` carries)."""
        return {k: v for k, v in self.principals[part].items() if k != "bootstrap.servers"}

    def env(self, part: str, keyring: str | None = None) -> dict[str, str]:
        """The environment of a reclaim process of ``part``: its principal, and a keyring (``part``'s own unless
        named; none where the part has none)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_") or k == "RECLAIM_CACHE_DIR"}
        env.update(RECLAIM_BOOTSTRAP=self.broker.bootstrap, RECLAIM_TOPIC_PREFIX=self.names.prefix,
                   RECLAIM_RETRY_DELAYS="1,2", RECLAIM_STATE_DIR=str(self.directory / "state"),
                   RECLAIM_METADATA_PATH=str(self.directory / "metadata.db"),
                   RECLAIM_FS_ROOT=str(self.directory / "tier2"), RECLAIM_GROUP_ID=self.names.group_id,
                   RECLAIM_TRUNCATION_GROUP_ID=self.names.truncation_group_id, RECLAIM_POLL_TIMEOUT_S="0.5",
                   RECLAIM_PARTITIONS="1")
        env.update({variable_name(name): value for name, value in self.properties(part).items()})
        if keyring is not None or part in self.keyrings:
            env["RECLAIM_KEYRING"] = str(self.keyrings[keyring or part])
        return env

    def start(self, part: str, *args: str, keyring: str | None = None) -> int:
        """``reclaim <args>`` in the background as ``part`` (see :meth:`env`) with a metrics port; the port."""
        port = free_port()
        log = (self.directory / f"{args[0]}.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "reclaim", *args, "--metrics-port", str(port)],
                                env=self.env(part, keyring), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.processes.append(proc)
        return port

    def producer(self, part: str) -> Producer:
        """A plain producer connecting as ``part``."""
        return Producer({**self.principals[part], "logger": _QUIET, "message.timeout.ms": 15000})

    @contextmanager
    def controller(self) -> Iterator[tuple[StreamController, SQLiteMetadataStore]]:
        """The stream controller of the deployment's metadata store, in this process (appends need no broker)."""
        store = SQLiteMetadataStore(self.directory / "metadata.db")
        segments = ChunkedSegmentStorage(store, FileSystemChunkStorage(self.directory / "tier2", name="fs-tier2"),
                                         RecordingGarbageSink(), max_rolling_length=8)
        controller = StreamController.beside(segments, store.path)
        try:
            yield controller, store
        finally:
            controller.close()
            store.close()

    def chunk_files(self) -> set[str]:
        """The chunk files on tier-2, relative to its root."""
        root = self.directory / "tier2"
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "tags" not in p.parts}


@contextmanager
def deploy(broker: SecureBroker, directory: Path, prefix: str, roles: Mapping[str, str],
           keyrings: Mapping[str, Path],
           attacker_writes: Callable[[TopicNames], Iterable[str]] | None = None) -> Iterator[Deployment]:
    """reclaim's topics under a fresh ``prefix-<tag>.``; for each part of ``roles`` (part -> role) a SCRAM user
    with its role's ACLs. With ``attacker_writes``, also an ``attacker`` user that may write (and describe) the
    topics it names, and nothing else. The processes started on the deployment are stopped on the way out."""
    tag = uuid.uuid4().hex[:8]
    settings = Settings(topic_prefix=f"{prefix}-{tag}.", retry_delays=(1, 2), partitions=1,
                        group_id=f"workers-{tag}", truncation_group_id=f"appliers-{tag}")
    admin = AdminClient({**broker.admin_properties(), "logger": _QUIET})  # type: ignore[dict-item]
    create_topics(admin, topic_specs(settings))
    # The topic-retention role is granted on the users' topics and groups it retains: here, under the prefix; and
    # on the cluster for partition sizes (--max-bytes).
    names = Names.from_settings(settings, (f"{prefix}-{tag}-user",), (f"{prefix}-{tag}-group",), True)
    principals = {}
    for part, role in roles.items():
        principals[part] = broker.create_user(f"{part}-{tag}")
        apply(admin, f"User:{part}-{tag}", plan(role, names))
    if attacker_writes is not None:
        principals[ATTACKER] = broker.create_user(f"{ATTACKER}-{tag}")
        _grant_writes(admin, f"User:{ATTACKER}-{tag}", attacker_writes(names.topics))
    time.sleep(1.0)  # ACLs are metadata: the authorizer holds them a moment later
    found = Deployment(broker, directory, names, principals, dict(keyrings))
    try:
        yield found
    finally:
        for proc in found.processes:
            stop_pid(proc.pid)


def _grant_writes(admin: AdminClient, principal: str, topics: Iterable[str]) -> None:
    """What an attacker has: WRITE (and DESCRIBE) on ``topics``, nothing else."""
    acls = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", operation,
                       AclPermissionType.ALLOW)
            for topic in topics for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)]
    for future in admin.create_acls(acls).values():
        future.result(timeout=30)


def _keys(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    return run_reclaim("keys", *args, env=env, check=True).stdout


@dataclass(frozen=True)
class OwnKeys:
    """Each part's own keyring as an operator makes it with ``reclaim keys new``, and its public half."""

    paths: dict[str, Path]
    public: dict[str, str]

    def text(self, part: str) -> str:
        return self.paths[part].read_text()

    def with_secrets(self, part: str) -> str:
        """``part``'s public keys with its HMAC secrets (what a verifier of its HMAC signatures holds)."""
        return _keys("public", "--keyring", str(self.paths[part]), "--with-secrets")


def own_keys(directory: Path, roles: Mapping[str, str], retired: Iterable[str] = (),
             streams: Mapping[str, Iterable[str]] | None = None) -> OwnKeys:
    """A key ``<part>-1`` for each part of ``roles`` (part -> role; a subscriber's for the subject ``part``,
    granted its ``streams``) in ``<part>-own.toml``; the parts of ``retired`` have theirs retired."""
    paths = {part: directory / f"{part}-own.toml" for part in roles}
    for part, role in roles.items():
        subject = ("--subject", part) if role == "subscriber" else ()
        granted = [arg for stream in (streams or {}).get(part, ()) for arg in ("--stream", stream)]
        _keys("new", "--role", role, "--id", f"{part}-1", *subject, *granted, "--keyring", str(paths[part]))
    for part in retired:
        _keys("retire", "--keyring", str(paths[part]), "--id", f"{part}-1")
    return OwnKeys(paths, {part: _keys("public", "--keyring", str(path)) for part, path in paths.items()})


def write_keyrings(directory: Path, texts: Mapping[str, str]) -> dict[str, Path]:
    """Each keyring of ``texts`` as ``<name>.toml``, readable by its owner only, checked to load."""
    made = {}
    for name, text in texts.items():
        made[name] = directory / f"{name}.toml"
        made[name].write_text(text)
        made[name].chmod(0o600)
        load_keyring(made[name])
    return made


def metric(port: int, name: str, **labels: str) -> float:
    """One sample of a counter the process on ``port`` serves (0 while it has none)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and ",".join(sorted(match.group(1).split(","))) == wanted:
            return float(match.group(2))
    return 0.0


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 90.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except OSError:  # the process is still starting its metrics server
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")
