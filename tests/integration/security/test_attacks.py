"""Attacks on the secured broker: a principal with produce rights, or with another role's credentials, tries to
truncate a stream or delete its chunks. reclaim's truncation applier and worker run as their own SCRAM
principals over TLS with their keyrings; every attempt ends with nothing truncated or deleted, the attempt
counted with its reason, the journal empty and ``reclaim audit`` clean. Then a genuine admin truncation
goes through end to end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from reclaim.deletion.records import pending_deletes_for
from reclaim.localstack.kafka_security import SecureBroker
from reclaim.producers.config import quiet_logger
from reclaim.producers.topics import TopicNames
from reclaim.schemas import build_codec, millis_now
from reclaim.schemas.streams import (
    RetentionPolicy,
    RetentionType,
    StreamConfig,
    StreamCut,
    TruncationEvent,
    TruncationReason,
)
from reclaim.security.keyring import Algorithm, Keyring, KeyStatus, load_keyring, new_key
from reclaim.security.signing import RecordSigner
from reclaim.tools.acls import ROLES
from tests.support.cli import run_reclaim
from tests.support.deployment import ATTACKER, Deployment, deploy, metric, own_keys, wait_for, write_keyrings

pytestmark = pytest.mark.integration

STREAM, OTHER = "scope/victim", "scope/other"
SEGMENTS = (f"{STREAM}/0.#epoch.0", f"{STREAM}/1.#epoch.0")
_QUIET = quiet_logger("tests.security.attacks")


def _keyrings(directory: Path) -> dict[str, Path]:
    """Each part's keyring as an operator would make them with ``reclaim keys``."""
    own = own_keys(directory, {"controller": "controller", "admin": "admin", "retention-job": "retention-job",
                               "old-admin": "admin"}, retired=("old-admin",))
    made = write_keyrings(directory, {
        # The worker verifies the controller's pending deletes: it needs the controller's HMAC secret.
        "worker": own.with_secrets("controller"),
        # The applier runs phase 1 as the controller and verifies admins' and the job's truncations.
        "truncation-applier": own.text("controller") + own.public["admin"] + own.public["retention-job"]
        + own.public["old-admin"],
        "controller": own.text("controller"),
        "admin": own.text("admin"),
    })
    made.update({f"own-{part}": path for part, path in own.paths.items()})
    return made


def _attacker_writes(t: TopicNames) -> list[str]:
    """The topics the attacker may write (and describe): reclaim's, nothing else."""
    return [t.truncation, t.deletion, t.stream_config, t.stream_cuts, t.subscriber_cuts, t.subscribers,
            t.stream_topology]


@pytest.fixture(scope="module")
def cluster(secure_kafka: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    directory = tmp_path_factory.mktemp("attacks")
    with deploy(secure_kafka, directory, "atk", {role: role for role in ROLES}, _keyrings(directory),
                attacker_writes=_attacker_writes) as found:
        for stream in (STREAM, OTHER):
            run_reclaim("streams", "create", stream, "--segments", "2", env=found.env("controller"), check=True)
        with found.controller() as (controller, _):  # 40 bytes in each segment
            for segment in (*SEGMENTS, f"{OTHER}/0.#epoch.0"):
                controller.append(segment, b"x" * 40)
        yield found


def _signed(signer: RecordSigner, topic: str, key: bytes, value: bytes) -> list[tuple[str, bytes]]:
    return signer.headers(topic, key, value)


def _send(producer: Producer, topic: str, key: bytes, value: bytes,
          headers: list[tuple[str, bytes]] | None = None) -> None:
    errors: list[object] = []
    producer.produce(topic, value, key, headers=headers, on_delivery=lambda err, _m: errors.append(err))
    producer.flush(15)
    assert errors == [None], f"the attacker's produce to {topic} was refused: {errors}"


def _audit_clean(cluster: Deployment) -> None:
    audit = run_reclaim("audit", "--grace", "0s", "--json", env=cluster.env("controller"))
    assert audit.returncode == 0, audit.stdout + audit.stderr
    totals = json.loads(audit.stdout)["totals"]
    assert totals.get("orphans", 0) == 0 and totals.get("missing", 0) == 0, totals


def test_forged_truncations_and_pending_deletes_change_nothing(cluster: Deployment) -> None:
    t, codec = cluster.topics, build_codec()
    applier = cluster.start("truncation-applier", "truncation-applier", "--record-every-s", "0")
    worker = cluster.start("worker", "worker")
    files_before = cluster.chunk_files()
    with cluster.controller() as (controller, store):
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
    attacker = cluster.producer(ATTACKER)
    for attack_value, headers in attacks:
        _send(attacker, t.truncation, key, attack_value, headers)
    forged = pending_deletes_for(chunks, "forged-mark", millis_now())  # live chunks, their real tags copied
    impostor = RecordSigner(Keyring([new_key("controller-1.deletes", "controller", Algorithm.HMAC_SHA256)]),
                            "controller")
    for record in forged:
        raw, chunk_key = codec.encode(record, t.deletion), record.chunk_name.encode()
        _send(attacker, t.deletion, chunk_key, raw)
        _send(attacker, t.deletion, chunk_key, raw, _signed(impostor, t.deletion, chunk_key, raw))

    wait_for("the applier to refuse every forged truncation",
             lambda: metric(applier, "reclaim_truncations_total", outcome="unauthenticated") >= len(attacks))
    wait_for("the worker to dead-letter every forged pending delete",
             lambda: metric(worker, "reclaim_deletion_outcomes_total", outcome="unauthenticated") >= 2 * len(forged))
    reasons = {reason: metric(applier, "reclaim_unauthenticated_records_total", topic=t.truncation, reason=reason)
               for reason in ("unsigned", "bad_signature", "against_policy", "retired_key")}
    assert reasons == {"unsigned": 1, "bad_signature": 3, "against_policy": 1, "retired_key": 1}
    assert metric(applier, "reclaim_truncations_total", outcome="truncated") == 0
    assert metric(worker, "reclaim_unauthenticated_records_total", topic=t.deletion, reason="unsigned") == len(forged)
    assert metric(worker, "reclaim_unauthenticated_records_total", topic=t.deletion,
                   reason="bad_signature") == len(forged)
    assert cluster.chunk_files() == files_before  # 0 bytes deleted
    history = run_reclaim("streams", "history", STREAM, "--json", env=cluster.env("controller"), check=True)
    assert json.loads(history.stdout) == []
    with cluster.controller() as (controller, _):
        assert controller.head(STREAM) == StreamCut()
    _audit_clean(cluster)

    # The genuine path, end to end: the admin's key (and the admin's principal) truncates; the applier, signing its
    # pending deletes with the controller's key, hands the chunks to the worker, which deletes them.
    wanted = {"0": 40, "1": 0}  # all of segment 0
    run_reclaim("streams", "truncate", STREAM, "--cut", json.dumps(wanted), "--publish",
                env=cluster.env("admin"), check=True)
    wait_for("the applier to apply the admin's truncation",
             lambda: metric(applier, "reclaim_truncations_total", outcome="truncated") == 1)
    wait_for("the worker to delete the chunks before the cut",
             lambda: metric(worker, "reclaim_deletion_outcomes_total", outcome="deleted") >= len(first_segment))
    [entry] = json.loads(run_reclaim("streams", "history", STREAM, "--json",
                                     env=cluster.env("controller"), check=True).stdout)
    assert (entry["reason"], entry["signer"], entry["cut"]) == ("MANUAL", "admin/admin-1", wanted)
    assert entry["source"].startswith(f"{t.truncation}[0]@")
    assert len(files_before - cluster.chunk_files()) == len(first_segment)
    _audit_clean(cluster)


def test_each_part_refused_by_the_broker_outside_its_acls_is_one_line_and_exit_2(cluster: Deployment) -> None:
    # A worker's credentials cannot publish a truncation, even with the admin's key in hand.
    refused = run_reclaim("streams", "truncate", STREAM, "--cut", '{"0": 8}', "--publish",
                          env=cluster.env("worker", "admin"))
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()[-1:]
    assert line.startswith("reclaim: error:") and "authoriz" in line.lower(), line
    # The attacker, who may write but not read, cannot run a worker.
    worker = run_reclaim("deletions", "inflight", env=cluster.env(ATTACKER))
    assert worker.returncode == 2 and worker.stderr.strip().splitlines()[-1].startswith("reclaim: error:")


def test_a_forged_record_never_reaches_a_topic_the_attacker_has_no_acl_for(cluster: Deployment) -> None:
    consumer = Consumer({**cluster.principals[ATTACKER], "group.id": "attacker", "logger": _QUIET,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([cluster.topics.dlq])
        errors = [m.error() for m in consumer.consume(10, 5.0) if m.error() is not None]
    finally:
        consumer.close()
    assert errors and all("AUTHORIZATION" in e.name() for e in errors)
    denied: list[object] = []
    producer = cluster.producer(ATTACKER)
    producer.produce(cluster.topics.retry_topics[0], b"v", b"k", on_delivery=lambda err, _m: denied.append(err))
    producer.flush(15)
    assert denied and denied[0] is not None and "AUTHORIZATION" in denied[0].name()  # type: ignore[attr-defined]
