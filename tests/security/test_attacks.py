"""Attacks on the secured broker: a principal with produce rights, or with another role's credentials, tries to
truncate a stream or delete its chunks. reclaim's truncation applier and worker run as their own SCRAM
principals over TLS with their keyrings; every attempt ends with nothing truncated or deleted, the attempt
counted with its reason, the journal empty and ``reclaim audit`` clean. Then a genuine admin truncation
goes through end to end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from deletion.records import pending_deletes_for
from ops.acls import ROLES, Names, apply, plan
from ops.kafka_security import SecureBroker
from ops.procs import free_port, stop_pid
from ops.settings import Settings
from ops.topics import create_topics, topic_specs
from producers.client_properties import variable_name
from producers.config import quiet_logger
from producers.topics import TopicNames
from schemas import build_codec, millis_now
from schemas.streams import RetentionPolicy, RetentionType, StreamConfig, StreamCut, TruncationEvent, TruncationReason
from security.keyring import Algorithm, Keyring, KeyStatus, load_keyring, new_key
from security.signing import RecordSigner
from segments.chunked import ChunkedSegmentStorage
from segments.garbage import RecordingGarbageSink
from segments.streams import StreamController
from storage.filesystem import FileSystemChunkStorage
from storage.sql_store import SQLiteMetadataStore
from tests.cli import run_reclaim

pytestmark = pytest.mark.integration

STREAM, OTHER = "scope/victim", "scope/other"
SEGMENTS = (f"{STREAM}/0.#epoch.0", f"{STREAM}/1.#epoch.0")
_QUIET = quiet_logger("tests.security.attacks")


@dataclass
class Cluster:
    """reclaim's topics under a fresh prefix on the secured broker, a principal and a keyring per part, and the
    stream under attack with its chunks on tier-2."""

    broker: SecureBroker
    directory: Path
    prefix: str
    names: Names
    principals: dict[str, dict[str, str]]
    keyrings: dict[str, Path]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def topics(self) -> TopicNames:
        return self.names.topics

    def env(self, principal: str, keyring: str | None, **extra: str) -> dict[str, str]:
        """The environment of a reclaim process running as ``principal`` with keyring ``keyring``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
        env.update(RECLAIM_BOOTSTRAP=self.broker.bootstrap, RECLAIM_TOPIC_PREFIX=self.prefix,
                   RECLAIM_RETRY_DELAYS="1,2", RECLAIM_STATE_DIR=str(self.directory / "state"),
                   RECLAIM_METADATA_PATH=str(self.directory / "metadata.db"),
                   RECLAIM_FS_ROOT=str(self.directory / "tier2"), RECLAIM_GROUP_ID=self.names.group_id,
                   RECLAIM_TRUNCATION_GROUP_ID=self.names.truncation_group_id, RECLAIM_POLL_TIMEOUT_S="0.5", **extra)
        for name, value in self.principals[principal].items():
            if name != "bootstrap.servers":
                env[variable_name(name)] = value
        if keyring is not None:
            env["RECLAIM_KEYRING"] = str(self.keyrings[keyring])
        return env

    def start(self, principal: str, keyring: str, *args: str) -> int:
        """Start ``reclaim <args>`` in the background with a metrics port; the port."""
        port = free_port()
        log = (self.directory / f"{args[0]}.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "ops.cli", *args, "--metrics-port", str(port)],
                                env=self.env(principal, keyring), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.processes.append(proc)
        return port

    def producer(self, principal: str) -> Producer:
        return Producer({**self.principals[principal], "logger": _QUIET, "message.timeout.ms": 15000})


def _keyrings(directory: Path) -> dict[str, Path]:
    """Each part's keyring as an operator would make them with ``reclaim keys``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}

    def keys(*args: str) -> str:
        return run_reclaim("keys", *args, env=env, check=True).stdout

    own = {role: directory / f"{role}-own.toml" for role in ("controller", "admin", "retention-job", "old-admin")}
    for role, path in own.items():
        keys("new", "--role", role.removeprefix("old-"), "--id", f"{role}-1", "--keyring", str(path))
    keys("retire", "--keyring", str(own["old-admin"]), "--id", "old-admin-1")
    public = {role: keys("public", "--keyring", str(path)) for role, path in own.items()}
    paths = {
        # The worker verifies the controller's pending deletes: it needs the controller's HMAC secret.
        "worker": keys("public", "--keyring", str(own["controller"]), "--with-secrets"),
        # The applier runs phase 1 as the controller and verifies admins' and the job's truncations.
        "applier": own["controller"].read_text() + public["admin"] + public["retention-job"] + public["old-admin"],
        "controller": own["controller"].read_text(),
        "admin": own["admin"].read_text(),
    }
    made = {}
    for name, text in paths.items():
        made[name] = directory / f"{name}.toml"
        made[name].write_text(text)
        made[name].chmod(0o600)
        load_keyring(made[name])
    made.update({f"own-{role}": path for role, path in own.items()})
    return made


def _grant_produce_rights(admin: AdminClient, principal: str, topics: list[str]) -> None:
    """What an attacker has: WRITE (and DESCRIBE) on reclaim's topics, nothing else."""
    acls = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", operation,
                       AclPermissionType.ALLOW)
            for topic in topics for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)]
    for future in admin.create_acls(acls).values():
        future.result(timeout=30)


@pytest.fixture(scope="module")
def cluster(secure_kafka: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("attacks")
    tag = uuid.uuid4().hex[:8]
    settings = Settings(topic_prefix=f"atk-{tag}.", retry_delays=(1, 2), partitions=1, group_id=f"workers-{tag}",
                        truncation_group_id=f"appliers-{tag}")
    admin = AdminClient({**secure_kafka.admin_properties(), "logger": _QUIET})
    create_topics(admin, topic_specs(settings))
    names = Names.from_settings(settings)
    principals: dict[str, dict[str, str]] = {}
    for role in ROLES:
        principals[role] = secure_kafka.create_user(f"{role}-{tag}")
        apply(admin, f"User:{role}-{tag}", plan(role, names))
    principals["attacker"] = secure_kafka.create_user(f"attacker-{tag}")
    t = names.topics
    _grant_produce_rights(admin, f"User:attacker-{tag}", [t.truncation, t.deletion, t.stream_config, t.stream_cuts,
                                                          t.subscriber_cuts, t.subscribers, t.stream_topology])
    time.sleep(1.0)  # ACLs are metadata: the authorizer holds them a moment later
    found = Cluster(secure_kafka, directory, settings.topic_prefix, names, principals, _keyrings(directory))
    for stream in (STREAM, OTHER):
        run_reclaim("streams", "create", stream, "--segments", "2", env=found.env("controller", "controller"),
                    check=True)
    with _controller(found) as (controller, _):  # 40 bytes in each segment
        for segment in (*SEGMENTS, f"{OTHER}/0.#epoch.0"):
            controller.append(segment, b"x" * 40)
    yield found
    for proc in found.processes:
        stop_pid(proc.pid)


@contextmanager
def _controller(cluster: Cluster) -> Iterator[tuple[StreamController, SQLiteMetadataStore]]:
    """The stream controller of the cluster's metadata store, in this process (appends need no broker)."""
    store = SQLiteMetadataStore(cluster.directory / "metadata.db")
    segments = ChunkedSegmentStorage(store, FileSystemChunkStorage(cluster.directory / "tier2", name="fs-tier2"),
                                     RecordingGarbageSink(), max_rolling_length=8)
    controller = StreamController.beside(segments, store.path)
    try:
        yield controller, store
    finally:
        controller.close()
        store.close()


def _metric(port: int, name: str, **labels: str) -> float:
    """One sample of a counter the process on ``port`` serves (0 while it has none)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and ",".join(sorted(match.group(1).split(","))) == wanted:
            return float(match.group(2))
    return 0.0


def _wait(what: str, condition: Callable[[], bool], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except OSError:  # the process is still starting its metrics server
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _chunk_files(cluster: Cluster) -> set[str]:
    root = cluster.directory / "tier2"
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "tags" not in p.parts}


def _signed(signer: RecordSigner, topic: str, key: bytes, value: bytes) -> list[tuple[str, bytes]]:
    return signer.headers(topic, key, value)


def _send(producer: Producer, topic: str, key: bytes, value: bytes,
          headers: list[tuple[str, bytes]] | None = None) -> None:
    errors: list[object] = []
    producer.produce(topic, value, key, headers=headers, on_delivery=lambda err, _m: errors.append(err))
    producer.flush(15)
    assert errors == [None], f"the attacker's produce to {topic} was refused: {errors}"


def _audit_clean(cluster: Cluster) -> None:
    audit = run_reclaim("audit", "--grace", "0s", "--json", env=cluster.env("controller", "controller"))
    assert audit.returncode == 0, audit.stdout + audit.stderr
    totals = json.loads(audit.stdout)["totals"]
    assert totals.get("orphans", 0) == 0 and totals.get("missing", 0) == 0, totals


def test_forged_truncations_and_pending_deletes_change_nothing(cluster: Cluster) -> None:
    t, codec = cluster.topics, build_codec()
    applier = cluster.start("truncation-applier", "applier", "truncation-applier", "--record-every-s", "0")
    worker = cluster.start("worker", "worker", "worker")
    files_before = _chunk_files(cluster)
    with _controller(cluster) as (controller, store):
        tail, _ = controller.tail_cut(STREAM)
        chunks = [chunk for segment in SEGMENTS for chunk in store.list_chunks(segment)]
    first_segment = [chunk.name for chunk in chunks if chunk.segment == SEGMENTS[0]]
    assert first_segment and len(chunks) > len(first_segment)

    def truncation(stream: str = STREAM, reason: TruncationReason = TruncationReason.MANUAL) -> bytes:
        event = TruncationEvent(stream, tail, reason, millis_now(), RetentionPolicy(RetentionType.NONE))
        return codec.encode(event, t.truncation)

    mine = Keyring([new_key("admin-1", "admin", Algorithm.ED25519)])  # the attacker's own key, the admin's key id
    admin = RecordSigner(load_keyring(cluster.keyrings["admin"]), "admin")
    job = RecordSigner(load_keyring(cluster.keyrings["own-retention-job"]), "retention-job")
    # The retired key's private half, as if stolen: the applier's keyring holds it as retired.
    retired = RecordSigner(Keyring(replace(k, status=KeyStatus.ACTIVE)
                                   for k in load_keyring(cluster.keyrings["own-old-admin"])), "admin")
    key, value, consumption = STREAM.encode(), truncation(), truncation(reason=TruncationReason.CONSUMPTION)
    config = codec.encode(StreamConfig(STREAM, RetentionPolicy(RetentionType.NONE), millis_now()), t.stream_config)
    attacks = [
        (value, None),  # unsigned
        (value, _signed(RecordSigner(mine, "admin"), t.truncation, key, value)),  # a key it made, a known key id
        (consumption, _signed(job, t.truncation, key, consumption)),  # the job's real key, against the policy
        (value, _signed(admin, t.truncation, OTHER.encode(), truncation(OTHER))),  # a genuine one, another stream
        (value, _signed(admin, t.stream_config, key, config)),  # a genuine one, for another topic
        (value, _signed(retired, t.truncation, key, value)),  # a retired admin key
    ]
    attacker = cluster.producer("attacker")
    for attack_value, headers in attacks:
        _send(attacker, t.truncation, key, attack_value, headers)
    forged = pending_deletes_for(chunks, "forged-mark", millis_now())  # live chunks, their real tags copied
    impostor = RecordSigner(Keyring([new_key("controller-1.deletes", "controller", Algorithm.HMAC_SHA256)]),
                            "controller")
    for record in forged:
        raw, chunk_key = codec.encode(record, t.deletion), record.chunk_name.encode()
        _send(attacker, t.deletion, chunk_key, raw)
        _send(attacker, t.deletion, chunk_key, raw, _signed(impostor, t.deletion, chunk_key, raw))

    _wait("the applier to refuse every forged truncation",
          lambda: _metric(applier, "reclaim_truncations_total", outcome="unauthenticated") >= len(attacks))
    _wait("the worker to dead-letter every forged pending delete",
          lambda: _metric(worker, "reclaim_deletion_outcomes_total", outcome="unauthenticated") >= 2 * len(forged))
    reasons = {reason: _metric(applier, "reclaim_unauthenticated_records_total", topic=t.truncation, reason=reason)
               for reason in ("unsigned", "bad-signature", "against-policy", "retired-key")}
    assert reasons == {"unsigned": 1, "bad-signature": 3, "against-policy": 1, "retired-key": 1}
    assert _metric(applier, "reclaim_truncations_total", outcome="truncated") == 0
    assert _metric(worker, "reclaim_unauthenticated_records_total", topic=t.deletion, reason="unsigned") == len(forged)
    assert _metric(worker, "reclaim_unauthenticated_records_total", topic=t.deletion,
                   reason="bad-signature") == len(forged)
    assert _chunk_files(cluster) == files_before  # 0 bytes deleted
    history = run_reclaim("streams", "history", STREAM, "--json", env=cluster.env("controller", "controller"),
                          check=True)
    assert json.loads(history.stdout) == []
    with _controller(cluster) as (controller, _):
        assert controller.head(STREAM) == StreamCut()
    _audit_clean(cluster)

    # The genuine path, end to end: the admin's key (and the admin's principal) truncates; the applier, signing its
    # pending deletes with the controller's key, hands the chunks to the worker, which deletes them.
    wanted = {"0": 40, "1": 0}  # all of segment 0
    run_reclaim("streams", "truncate", STREAM, "--cut", json.dumps(wanted), "--publish",
                env=cluster.env("admin", "admin"), check=True)
    _wait("the applier to apply the admin's truncation",
          lambda: _metric(applier, "reclaim_truncations_total", outcome="truncated") == 1)
    _wait("the worker to delete the chunks before the cut",
          lambda: _metric(worker, "reclaim_deletion_outcomes_total", outcome="deleted") >= len(first_segment))
    [entry] = json.loads(run_reclaim("streams", "history", STREAM, "--json",
                                     env=cluster.env("controller", "controller"), check=True).stdout)
    assert (entry["reason"], entry["signer"], entry["cut"]) == ("MANUAL", "admin/admin-1", wanted)
    assert entry["source"].startswith(f"{t.truncation}[0]@")
    assert len(files_before - _chunk_files(cluster)) == len(first_segment)
    _audit_clean(cluster)


def test_each_part_refused_by_the_broker_outside_its_acls_is_one_line_and_exit_2(cluster: Cluster) -> None:
    # A worker's credentials cannot publish a truncation, even with the admin's key in hand.
    refused = run_reclaim("streams", "truncate", STREAM, "--cut", '{"0": 8}', "--publish",
                          env=cluster.env("worker", "admin"))
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()[-1:]
    assert line.startswith("reclaim: error:") and "authoriz" in line.lower(), line
    # The attacker, who may write but not read, cannot run a worker.
    worker = run_reclaim("deletions", "inflight", env=cluster.env("attacker", None))
    assert worker.returncode == 2 and worker.stderr.strip().splitlines()[-1].startswith("reclaim: error:")


def test_a_forged_record_never_reaches_a_topic_the_attacker_has_no_acl_for(cluster: Cluster) -> None:
    consumer = Consumer({**cluster.principals["attacker"], "group.id": "attacker", "logger": _QUIET,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([cluster.topics.dlq])
        errors = [m.error() for m in consumer.consume(10, 5.0) if m.error() is not None]
    finally:
        consumer.close()
    assert errors and all("AUTHORIZATION" in e.name() for e in errors)
    denied: list[object] = []
    producer = cluster.producer("attacker")
    producer.produce(cluster.topics.retry_topics[0], b"v", b"k", on_delivery=lambda err, _m: denied.append(err))
    producer.flush(15)
    assert denied and denied[0] is not None and "AUTHORIZATION" in denied[0].name()  # type: ignore[attr-defined]
