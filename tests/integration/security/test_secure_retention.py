"""Retention end to end on the secured broker: every part runs as its own SCRAM principal over TLS and signs
with its own key. The controller creates a stream and records its cuts, the admin sets its CONSUMPTION
policy, two subscribers publish their cuts, a third cut forged by one subscriber for the other is refused,
and so are that subscriber's registration and cut at the tail of a second stream its key is not granted;
``reclaim retention-job`` (Spark's Kafka connector on reclaim's own translation of the principal's
properties) writes one truncation signed with the job's key, the truncation applier verifies and applies it,
and the worker deletes the chunks before the cut.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reclaim.localstack.kafka_security import SecureBroker
from reclaim.producers.config import installed_client_properties
from reclaim.producers.producer import RecordProducer
from reclaim.producers.publisher import ConfirmedPublisher, PublishError
from reclaim.producers.subscribers import SubscriberClient, subscriber_key
from reclaim.schemas import (
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
from reclaim.schemas.rejects import RejectKind, RetentionReject
from reclaim.security.keyring import Keyring, load_keyring
from reclaim.security.rules import signers_of
from reclaim.security.signing import RecordSigner, RecordVerifier, Signer
from tests.support.cli import run_reclaim
from tests.support.deployment import Deployment, deploy, metric, own_keys, wait_for, write_keyrings
from tests.support.kafka_io import consume_from_start

pytestmark = [pytest.mark.integration, pytest.mark.spark]

STREAM = "scope/orders"
SEGMENTS = (f"{STREAM}/0.#epoch.0", f"{STREAM}/1.#epoch.0")
PAYMENTS = "scope/payments"
"""A second CONSUMPTION stream, which no subscriber's key is granted."""
SUBSCRIBERS = ("billing", "audit")
ROLE_OF = {"controller": "controller", "admin": "admin", "retention-job": "retention-job",
           "truncation-applier": "truncation-applier", "worker": "worker", "billing": "subscriber",
           "audit": "subscriber"}


def _keyrings(directory: Path) -> dict[str, Path]:
    """Each part's own keys, and what each verifier holds of the others' (public halves; the worker the
    controller's HMAC secret for pending deletes)."""
    own = own_keys(directory, {part: ROLE_OF[part] for part in ("controller", "admin", "retention-job", *SUBSCRIBERS)},
                   streams={name: [STREAM] for name in SUBSCRIBERS})
    return write_keyrings(directory, {
        **{part: own.text(part) for part in own.paths},
        # The job verifies its inputs: topology and recorded cuts (controller), policy (admin), each cut and
        # change (its subscriber's own key, granted STREAM only: its public half carries the grant); it signs
        # with its own.
        "retention-job": own.text("retention-job") + "".join(
            own.public[part] for part in ("controller", "admin", *SUBSCRIBERS)),
        # The applier runs phase 1 as the controller and verifies the job's and admins' truncations.
        "truncation-applier": own.text("controller") + own.public["retention-job"] + own.public["admin"],
        "worker": own.with_secrets("controller"),
    })


@pytest.fixture(scope="module")
def deployment(secure_kafka: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    directory = tmp_path_factory.mktemp("secure-retention")
    with deploy(secure_kafka, directory, "ret", ROLE_OF, _keyrings(directory)) as found:
        yield found


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


def at(first: int, second: int) -> StreamCut:
    return StreamCut.from_mapping({0: first, 1: second})


def test_a_retention_job_truncation_runs_end_to_end_as_each_parts_own_principal(deployment: Deployment) -> None:
    t, codec = deployment.topics, build_codec()

    # The controller creates the stream (its topology goes out signed) and writes 40 bytes to each segment;
    # the admin, whose keyring holds the admin's key only, sets the policy; the controller records the cut.
    for stream in (STREAM, PAYMENTS):
        run_reclaim("streams", "create", stream, "--segments", "2", env=deployment.env("controller"), check=True)
    applier = deployment.start("truncation-applier", "truncation-applier", "--record-every-s", "0")
    worker = deployment.start("worker", "worker")
    common = at(40, 16)  # all of segment 0, and some of segment 1
    with deployment.controller() as (controller, store):
        for segment in (*SEGMENTS, f"{PAYMENTS}/0.#epoch.0", f"{PAYMENTS}/1.#epoch.0"):
            controller.append(segment, b"x" * 40)
        before_cut = [chunk.name for number, segment in enumerate(SEGMENTS) for chunk in store.list_chunks(segment)
                      if chunk.start_offset + chunk.length <= common.as_dict()[number]]
    assert before_cut
    for stream in (STREAM, PAYMENTS):
        run_reclaim("streams", "set-policy", stream, "--type", "consumption", env=deployment.env("admin"),
                    check=True)
    run_reclaim("streams", "record", env=deployment.env("controller"), check=True)
    files_before = deployment.chunk_files()
    with deployment.controller() as (controller, _):  # what a subscriber learns of each stream's incarnation
        incarnations = {stream: controller.incarnation(stream) for stream in (STREAM, PAYMENTS)}

    # Each subscriber publishes as its own principal, signed with its own key; audit is the slower one.
    cuts = {"billing": at(40, 32), "audit": common}
    for name in SUBSCRIBERS:
        with _publisher(deployment, name) as publisher:
            client = SubscriberClient(publisher, t, keyring=load_keyring(deployment.keyrings[name]),
                                      incarnations=incarnations.get)
            client.add_subscriber(STREAM, name, 1)
            client.update_truncation_cut(STREAM, name, 1, cuts[name])
    # audit, with its own credentials and its own key, claims billing has read everything.
    audit_key = RecordSigner(load_keyring(deployment.keyrings["audit"]), "subscriber", subject="audit")
    with _publisher(deployment, "audit", audit_key) as forger:
        forger.publish(t.subscriber_cuts, SubscriberCut(STREAM, "billing", 1, at(40, 40), millis_now(),
                                                        incarnations[STREAM]), subscriber_key(STREAM, "billing"))
    # Issue #39's finding 2: audit adds itself to PAYMENTS, where no subscriber holds a cut, and cuts at its
    # tail. Before grants the job truncated PAYMENTS whole; audit's key is granted STREAM only.
    with _publisher(deployment, "audit") as publisher:
        client = SubscriberClient(publisher, t, keyring=load_keyring(deployment.keyrings["audit"]),
                                  incarnations=incarnations.get)
        client.add_subscriber(PAYMENTS, "audit", 1)
        client.update_truncation_cut(PAYMENTS, "audit", 1, at(40, 40))

    job = run_reclaim("retention-job", "--once", "--master", "local[1]", "--state-buckets", "2",
                      env=deployment.env("retention-job"), timeout=240)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "1 event(s), 3 reject(s)" in job.stdout, job.stdout + job.stderr  # the run's summary, its output

    superuser = {k: v for k, v in deployment.broker.admin_properties().items() if k != "bootstrap.servers"}
    with installed_client_properties(superuser):
        [message] = consume_from_start(deployment.broker.bootstrap, [t.truncation], f"reader-{uuid.uuid4()}", 1)
        refused = consume_from_start(deployment.broker.bootstrap, [t.retention_rejects], f"reader-{uuid.uuid4()}", 3)
    value = message.value()
    assert value is not None
    rejected = [codec.decode(m.value() or b"", t.retention_rejects, RetentionReject) for m in refused]
    assert sorted((r.stream, r.subscriber, r.kind, r.source_topic, r.reason.split(":")[0]) for r in rejected) == [
        (STREAM, "billing", RejectKind.UNAUTHENTICATED, t.subscriber_cuts, "wrong-subject"),
        (PAYMENTS, "audit", RejectKind.UNAUTHENTICATED, t.subscriber_cuts, "not-granted"),
        (PAYMENTS, "audit", RejectKind.UNAUTHENTICATED, t.subscribers, "not-granted")]
    event = codec.decode(value, t.truncation, TruncationEvent)
    assert (event.stream, event.reason, event.cut) == (STREAM, TruncationReason.CONSUMPTION, common)
    verifier = RecordVerifier(Keyring(key.public_only() for key in load_keyring(deployment.keyrings["retention-job"])))
    signer = verifier.verify(t.truncation, message.key(), value, message.headers(),
                             signers_of(TruncationEvent))
    assert isinstance(signer, Signer) and (signer.role, signer.key_id) == ("retention-job", "retention-job-1")

    # The applier verifies the job's signature and the reason against the stored policy, truncates, and
    # the worker deletes the chunks before the cut.
    wait_for("the applier to apply the job's truncation",
             lambda: metric(applier, "reclaim_truncations_total", outcome="truncated") == 1)
    wait_for("the worker to delete the chunks before the cut",
             lambda: metric(worker, "reclaim_deletion_outcomes_total", outcome="deleted") >= len(before_cut))
    history = run_reclaim("streams", "history", STREAM, "--json", env=deployment.env("admin"), check=True)
    [entry] = json.loads(history.stdout)
    assert (entry["reason"], entry["cut"], entry["incarnation"]) == ("CONSUMPTION", {"0": 40, "1": 16},
                                                                     incarnations[STREAM])
    # The journal names the job and the subscribers whose cuts made the bound, with the keys that signed them.
    signed_by, _, bound_by = entry["signer"].partition("; bound by ")
    assert signed_by == "retention-job/retention-job-1"
    assert bound_by.split(", ") == [f"{name} (subscriber:{name}/{name}-1)" for name in
                                    sorted(SUBSCRIBERS)]
    with deployment.controller() as (controller, _):
        assert controller.head(STREAM) == common
        assert controller.head(PAYMENTS) == StreamCut()  # never truncated
    assert files_before - deployment.chunk_files() == {f"chunks/{name}" for name in before_cut}
    assert metric(applier, "reclaim_unauthenticated_records_total", topic=t.truncation, reason="unsigned") == 0


def test_the_retention_job_principal_is_refused_outside_its_acls(deployment: Deployment) -> None:
    # The job may write truncations and rejects, not the policies it obeys: with its own credentials and
    # its own key, a policy it publishes is refused by the broker.
    job_key = RecordSigner(load_keyring(deployment.keyrings["retention-job"]), "retention-job")
    shrunk = StreamConfig(STREAM, RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, 1), millis_now())
    with _publisher(deployment, "retention-job", job_key) as publisher, pytest.raises(PublishError) as refused:
        publisher.publish(deployment.topics.stream_config, shrunk, STREAM)
    assert "TOPIC_AUTHORIZATION_FAILED" in refused.value.detail, refused.value
