"""Retention end to end on the secured broker: every part runs as its own SCRAM principal over TLS and signs
with its own key. The controller creates a stream and records its cuts, the admin sets its CONSUMPTION
policy, two subscribers publish their cuts, a third cut forged by one subscriber for the other is refused,
``reclaim retention-job`` (Spark's Kafka connector on reclaim's own translation of the principal's
properties) writes a truncation signed with the job's key, the truncation applier verifies and applies it,
and the worker deletes the chunks before the cut.
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
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from ops.acls import Names, apply, plan
from ops.kafka_security import SecureBroker
from ops.procs import free_port, stop_pid
from ops.settings import Settings
from ops.topics import create_topics, topic_specs
from producers.client_properties import variable_name
from producers.config import installed_client_properties, quiet_logger
from producers.producer import RecordProducer
from producers.publisher import ConfirmedPublisher, PublishError
from producers.subscribers import SubscriberClient, subscriber_key
from producers.topics import TopicNames
from schemas import (
    LimitType,
    RetentionPolicy,
    RetentionType,
    StreamConfig,
    StreamCut,
    SubscriberCut,
    TruncationEvent,
    TruncationReason,
    build_codec,
    millis_now,
)
from schemas.rejects import RejectKind, RetentionReject
from security.keyring import Keyring, load_keyring
from security.rules import signers_of
from security.signing import RecordSigner, RecordVerifier, Signer
from segments.chunked import ChunkedSegmentStorage
from segments.garbage import RecordingGarbageSink
from segments.streams import StreamController
from storage.filesystem import FileSystemChunkStorage
from storage.sql_store import SQLiteMetadataStore
from tests.cli import run_reclaim
from tests.integration.kafka_io import consume_from_start

pytestmark = [pytest.mark.integration, pytest.mark.spark]

STREAM = "scope/orders"
SEGMENTS = (f"{STREAM}/0.#epoch.0", f"{STREAM}/1.#epoch.0")
SUBSCRIBERS = ("billing", "audit")
ROLE_OF = {"controller": "controller", "admin": "admin", "retention-job": "retention-job",
           "truncation-applier": "truncation-applier", "worker": "worker", "billing": "subscriber",
           "audit": "subscriber"}
_QUIET = quiet_logger("tests.security.secure_retention")


@dataclass
class Deployment:
    """reclaim's topics under a fresh prefix on the secured broker; a principal (with its role's ACLs) and a
    keyring per part, made as an operator makes them (``reclaim acls``, ``reclaim keys``)."""

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

    def properties(self, part: str) -> dict[str, str]:
        """``part``'s librdkafka properties without the bootstrap (what ``RECLAIM_KAFKA_*`` carries)."""
        return {k: v for k, v in self.principals[part].items() if k != "bootstrap.servers"}

    def env(self, part: str, keyring: str | None = None) -> dict[str, str]:
        """The environment of a reclaim process of ``part``: its principal, and its keyring (``part``'s own
        unless named)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_") or k == "RECLAIM_CACHE_DIR"}
        env.update(RECLAIM_BOOTSTRAP=self.broker.bootstrap, RECLAIM_TOPIC_PREFIX=self.prefix,
                   RECLAIM_RETRY_DELAYS="1,2", RECLAIM_STATE_DIR=str(self.directory / "state"),
                   RECLAIM_METADATA_PATH=str(self.directory / "metadata.db"),
                   RECLAIM_FS_ROOT=str(self.directory / "tier2"), RECLAIM_GROUP_ID=self.names.group_id,
                   RECLAIM_TRUNCATION_GROUP_ID=self.names.truncation_group_id, RECLAIM_POLL_TIMEOUT_S="0.5",
                   RECLAIM_PARTITIONS="1", RECLAIM_KEYRING=str(self.keyrings[keyring or part]))
        env.update({variable_name(name): value for name, value in self.properties(part).items()})
        return env

    def start(self, part: str, *args: str) -> int:
        """``reclaim <args>`` in the background as ``part`` with a metrics port; the port."""
        port = free_port()
        log = (self.directory / f"{args[0]}.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "ops.cli", *args, "--metrics-port", str(port)],
                                env=self.env(part), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(proc)
        return port


def _keyrings(directory: Path) -> dict[str, Path]:
    """Each part's own keys, and what each verifier holds of the others' (public halves; the worker the
    controller's HMAC secret for pending deletes)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}

    def keys(*args: str) -> str:
        return run_reclaim("keys", *args, env=env, check=True).stdout

    own = {part: directory / f"{part}-own.toml" for part in ("controller", "admin", "retention-job", *SUBSCRIBERS)}
    for part, path in own.items():
        role = ROLE_OF[part]
        subject = ("--subject", part) if role == "subscriber" else ()
        keys("new", "--role", role, "--id", f"{part}-1", *subject, "--keyring", str(path))
    public = {part: keys("public", "--keyring", str(path)) for part, path in own.items()}
    texts = {
        **{part: path.read_text() for part, path in own.items()},
        # The job verifies its inputs: topology and recorded cuts (controller), policy (admin), each cut and
        # change (its subscriber's own key); it signs with its own.
        "retention-job": own["retention-job"].read_text() + "".join(
            public[part] for part in ("controller", "admin", *SUBSCRIBERS)),
        # The applier runs phase 1 as the controller and verifies the job's and admins' truncations.
        "truncation-applier": own["controller"].read_text() + public["retention-job"] + public["admin"],
        "worker": keys("public", "--keyring", str(own["controller"]), "--with-secrets"),
    }
    made = {}
    for part, text in texts.items():
        made[part] = directory / f"{part}.toml"
        made[part].write_text(text)
        made[part].chmod(0o600)
        load_keyring(made[part])
    return made


@pytest.fixture(scope="module")
def deployment(secure_kafka: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    directory = tmp_path_factory.mktemp("secure-retention")
    tag = uuid.uuid4().hex[:8]
    settings = Settings(topic_prefix=f"ret-{tag}.", retry_delays=(1, 2), partitions=1, group_id=f"workers-{tag}",
                        truncation_group_id=f"appliers-{tag}")
    admin = AdminClient({**secure_kafka.admin_properties(), "logger": _QUIET})  # type: ignore[dict-item]
    create_topics(admin, topic_specs(settings))
    names = Names.from_settings(settings)
    principals = {}
    for part, role in ROLE_OF.items():
        principals[part] = secure_kafka.create_user(f"{part}-{tag}")
        apply(admin, f"User:{part}-{tag}", plan(role, names))
    time.sleep(1.0)  # ACLs are metadata: the authorizer holds them a moment later
    found = Deployment(secure_kafka, directory, settings.topic_prefix, names, principals, _keyrings(directory))
    yield found
    for proc in found.processes:
        stop_pid(proc.pid)


@contextmanager
def _controller(deployment: Deployment) -> Iterator[tuple[StreamController, SQLiteMetadataStore]]:
    """The stream controller of the deployment's metadata store, in this process (appends need no broker)."""
    store = SQLiteMetadataStore(deployment.directory / "metadata.db")
    segments = ChunkedSegmentStorage(store, FileSystemChunkStorage(deployment.directory / "tier2", name="fs-tier2"),
                                     RecordingGarbageSink(), max_rolling_length=8)
    controller = StreamController.beside(segments, store.path)
    try:
        yield controller, store
    finally:
        controller.close()
        store.close()


@contextmanager
def _publisher(deployment: Deployment, part: str, signer: RecordSigner | None = None
               ) -> Iterator[ConfirmedPublisher]:
    """A publisher whose producer connects as ``part`` (its properties installed while it is built)."""
    with installed_client_properties(deployment.properties(part)):
        producer = RecordProducer(deployment.broker.bootstrap, "idempotent-producer")
    publisher = ConfirmedPublisher(producer, build_codec(), timeout_s=15.0, signer=signer)
    try:
        yield publisher
    finally:
        publisher.close()


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


def _chunk_files(deployment: Deployment) -> set[str]:
    root = deployment.directory / "tier2"
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "tags" not in p.parts}


def at(first: int, second: int) -> StreamCut:
    return StreamCut.from_mapping({0: first, 1: second})


def test_a_retention_job_truncation_runs_end_to_end_as_each_parts_own_principal(deployment: Deployment) -> None:
    t, codec = deployment.topics, build_codec()

    # The controller creates the stream (its topology goes out signed) and writes 40 bytes to each segment;
    # the admin, whose keyring holds the admin's key only, sets the policy; the controller records the cut.
    run_reclaim("streams", "create", STREAM, "--segments", "2", env=deployment.env("controller"), check=True)
    applier = deployment.start("truncation-applier", "truncation-applier", "--record-every-s", "0")
    worker = deployment.start("worker", "worker")
    common = at(40, 16)  # all of segment 0, and some of segment 1
    with _controller(deployment) as (controller, store):
        for segment in SEGMENTS:
            controller.append(segment, b"x" * 40)
        before_cut = [chunk.name for number, segment in enumerate(SEGMENTS) for chunk in store.list_chunks(segment)
                      if chunk.start_offset + chunk.length <= common.as_dict()[number]]
    assert before_cut
    run_reclaim("streams", "set-policy", STREAM, "--type", "consumption", env=deployment.env("admin"), check=True)
    run_reclaim("streams", "record", env=deployment.env("controller"), check=True)
    files_before = _chunk_files(deployment)

    # Each subscriber publishes as its own principal, signed with its own key; audit is the slower one.
    cuts = {"billing": at(40, 32), "audit": common}
    for name in SUBSCRIBERS:
        with _publisher(deployment, name) as publisher:
            client = SubscriberClient(publisher, t, keyring=load_keyring(deployment.keyrings[name]))
            client.add_subscriber(STREAM, name, 1)
            client.update_truncation_cut(STREAM, name, 1, cuts[name])
    # audit, with its own credentials and its own key, claims billing has read everything.
    audit_key = RecordSigner(load_keyring(deployment.keyrings["audit"]), "subscriber", subject="audit")
    with _publisher(deployment, "audit", audit_key) as forger:
        forger.publish(t.subscriber_cuts, SubscriberCut(STREAM, "billing", 1, at(40, 40), millis_now()),
                       subscriber_key(STREAM, "billing"))

    job = run_reclaim("retention-job", "--once", "--master", "local[1]", "--state-buckets", "2",
                      env=deployment.env("retention-job"), timeout=240)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "1 event(s), 1 reject(s)" in job.stderr, job.stderr

    superuser = {k: v for k, v in deployment.broker.admin_properties().items() if k != "bootstrap.servers"}
    with installed_client_properties(superuser):
        [message] = consume_from_start(deployment.broker.bootstrap, [t.truncation], f"reader-{uuid.uuid4()}", 1)
        [refused] = consume_from_start(deployment.broker.bootstrap, [t.retention_rejects],
                                       f"reader-{uuid.uuid4()}", 1)
    value, rejected = message.value(), refused.value()
    assert value is not None and rejected is not None
    event = codec.decode(value, t.truncation, TruncationEvent)
    assert (event.stream, event.reason, event.cut) == (STREAM, TruncationReason.CONSUMPTION, common)
    verifier = RecordVerifier(Keyring(key.public_only() for key in load_keyring(deployment.keyrings["retention-job"])))
    signer = verifier.verify(t.truncation, message.key(), value, message.headers(),
                             signers_of(TruncationEvent))
    assert isinstance(signer, Signer) and (signer.role, signer.key_id) == ("retention-job", "retention-job-1")
    reject = codec.decode(rejected, t.retention_rejects, RetentionReject)
    assert (reject.stream, reject.subscriber, reject.kind, reject.source_topic) == (
        STREAM, "billing", RejectKind.UNAUTHENTICATED, t.subscriber_cuts)
    assert reject.reason.startswith("wrong-subject"), reject.reason

    # The applier verifies the job's signature and the reason against the stored policy, truncates, and
    # the worker deletes the chunks before the cut.
    _wait("the applier to apply the job's truncation",
          lambda: _metric(applier, "reclaim_truncations_total", outcome="truncated") == 1)
    _wait("the worker to delete the chunks before the cut",
          lambda: _metric(worker, "reclaim_deletion_outcomes_total", outcome="deleted") >= len(before_cut))
    history = run_reclaim("streams", "history", STREAM, "--json", env=deployment.env("admin"), check=True)
    [entry] = json.loads(history.stdout)
    assert (entry["reason"], entry["signer"], entry["cut"]) == ("CONSUMPTION", "retention-job/retention-job-1",
                                                                {"0": 40, "1": 16})
    with _controller(deployment) as (controller, _):
        assert controller.head(STREAM) == common
    assert files_before - _chunk_files(deployment) == {f"chunks/{name}" for name in before_cut}
    assert _metric(applier, "reclaim_unauthenticated_records_total", topic=t.truncation, reason="unsigned") == 0


def test_the_retention_job_principal_is_refused_outside_its_acls(deployment: Deployment) -> None:
    # The job may write truncations and rejects, not the policies it obeys: with its own credentials and
    # its own key, a policy it publishes is refused by the broker.
    job_key = RecordSigner(load_keyring(deployment.keyrings["retention-job"]), "retention-job")
    shrunk = StreamConfig(STREAM, RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, 1), millis_now())
    with _publisher(deployment, "retention-job", job_key) as publisher, pytest.raises(PublishError) as refused:
        publisher.publish(deployment.topics.stream_config, shrunk, STREAM)
    assert "TOPIC_AUTHORIZATION_FAILED" in refused.value.detail, refused.value
