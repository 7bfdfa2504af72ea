"""Each role's principal, granted with ``acls apply`` on the secured broker, does what its processes do and
is refused by the broker outside its ACLs.

What a role must be able to do is written out here from the code that runs as it (not taken from the
plan), so a grant missing from the plan fails a test as surely as one too many.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from reclaim.exits import Unavailable
from reclaim.localstack.kafka_security import SecureBroker
from reclaim.producers.client_properties import variable_name
from reclaim.producers.config import quiet_logger
from reclaim.producers.topics import TopicNames
from reclaim.settings import Settings
from reclaim.tools.acls import RETENTION_ENDS_GROUP, ROLES, Names, apply, plan
from reclaim.tools.dlq.reader import READER_GROUP
from reclaim.tools.topics import create_topics, describe_topics, dlq_replayed_topic, topic_specs
from tests.support.cli import run_reclaim

pytestmark = pytest.mark.integration

DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
          KafkaError.CLUSTER_AUTHORIZATION_FAILED}
_QUIET = quiet_logger("tests.security")


@dataclass(frozen=True)
class Granted:
    """Reclaim's topics under a fresh prefix, seeded with one record each, and a principal per role."""

    names: Names
    principals: dict[str, dict[str, str]]
    admin: AdminClient

    @property
    def topics(self) -> TopicNames:
        return self.names.topics


def _wait_for_acls(admin: AdminClient, principal: str, count: int, timeout_s: float = 15.0) -> None:
    """Until the broker's authorizer holds ``count`` ACLs of ``principal`` (ACLs are metadata: a moment late)."""
    wanted = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal,  # type: ignore[arg-type]
                              None, AclOperation.ANY, AclPermissionType.ANY)  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout_s
    while len(admin.describe_acls(wanted).result(timeout=10)) < count:
        assert time.monotonic() < deadline, f"{principal}'s ACLs did not arrive"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def granted(secure_kafka: SecureBroker) -> Granted:
    tag = uuid.uuid4().hex[:8]
    settings = Settings(topic_prefix=f"acl-{tag}.", retry_delays=(1, 2), partitions=1, group_id=f"workers-{tag}",
                        truncation_group_id=f"appliers-{tag}")
    admin = AdminClient({**secure_kafka.admin_properties(), "logger": _QUIET})
    create_topics(admin, topic_specs(settings))
    seed = Producer({**secure_kafka.admin_properties(), "logger": _QUIET})
    for spec in topic_specs(settings):
        seed.produce(spec.name, key=b"seed", value=b"seed")
    assert seed.flush(15) == 0
    names = Names.from_settings(settings, (f"user-{tag}",), (f"group-{tag}",))
    principals: dict[str, dict[str, str]] = {}
    for role in ROLES:
        principal = f"User:{role}-{tag}"
        principals[role] = secure_kafka.create_user(f"{role}-{tag}")
        grants = plan(role, names)
        assert set(apply(admin, principal, grants).values()) == {"created"}
        _wait_for_acls(admin, principal, len(grants))
        assert set(apply(admin, principal, grants).values()) == {"exists"}  # idempotent
    return Granted(names, principals, admin)


def produce(props: dict[str, str], topic: str) -> KafkaError | None:
    """The delivery error of one record an idempotent producer sends to ``topic`` (None: delivered)."""
    producer = Producer({**props, "enable.idempotence": True, "acks": "all", "logger": _QUIET,
                         "message.timeout.ms": 10000})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, key=b"k", value=b"v", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(15)
    assert outcome, f"no delivery report for {topic}"
    return outcome[0]


def consume(props: dict[str, str], topics: list[str], group: str, timeout_s: float = 20.0) -> set[str] | KafkaError:
    """Join ``group`` on ``topics`` and read a record of each, committing; the topics read, or the first error."""
    consumer = Consumer({**props, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "logger": _QUIET})
    consumer.subscribe(topics)
    read: set[str] = set()
    try:
        deadline = time.monotonic() + timeout_s
        while read != set(topics) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                return msg.error()
            read.add(msg.topic())
            consumer.commit(msg, asynchronous=False)
        return read
    finally:
        consumer.close()


def assign_read(props: dict[str, str], topic: str, group: str) -> tuple[int, list[KafkaError]]:
    """Read ``topic``'s partition 0 by assignment with ``group`` as its id (no join, no commit), as reclaim's DLQ
    reader and the retention job's end-offset probe do: the records read and the errors met."""
    consumer = Consumer({**props, "group.id": group, "enable.auto.commit": False, "logger": _QUIET})
    errors: list[KafkaError] = []
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        consumer.assign([TopicPartition(topic, 0, low)])
        started, read = time.monotonic(), 0
        # at least a second (a group error comes from the coordinator lookup, after the fetch may have begun)
        while time.monotonic() - started < 5 and (read < high - low or time.monotonic() - started < 1):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.append(msg.error())
            else:
                read += 1
        return read, errors
    finally:
        consumer.close()


def refused(outcome: object) -> bool:
    return isinstance(outcome, KafkaError) and outcome.code() in DENIED


def _future_error(run: Callable[[], Any]) -> KafkaError | None:
    try:
        run()
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error
    return None


def test_controller(granted: Granted) -> None:
    props, t = granted.principals["controller"], granted.topics
    for topic in (t.deletion, t.stream_topology, t.stream_cuts):
        assert produce(props, topic) is None, topic
    # policies and truncations are the admin's; cuts the subscribers'; retries and dead letters the workers'
    for topic in (t.stream_config, t.truncation, t.subscriber_cuts, t.dlq, t.retry_topics[0]):
        assert refused(produce(props, topic)), topic
    assert refused(consume(props, [t.deletion], granted.names.group_id))


def test_worker(granted: Granted) -> None:
    props, t, group = granted.principals["worker"], granted.topics, granted.names.group_id
    assert consume(props, list(t.deletion_inputs), group) == set(t.deletion_inputs)
    for topic in (*t.retry_topics, t.dlq):
        assert produce(props, topic) is None, topic
    configs = [ConfigResource(ResourceType.TOPIC, topic) for topic in (*t.deletion_inputs, t.dlq)]
    admin = granted_admin(props)  # held while its futures run
    for future in admin.describe_configs(configs).values():
        assert "cleanup.policy" in future.result(timeout=10)
    # A worker cannot make pending deletes, truncations or cuts, read another group's topics or join it.
    for topic in (t.deletion, t.truncation, t.subscriber_cuts):
        assert refused(produce(props, topic)), topic
    assert refused(consume(props, [t.truncation], group))
    assert refused(consume(props, [t.deletion], granted.names.truncation_group_id))


def test_truncation_applier(granted: Granted) -> None:
    props, t = granted.principals["truncation-applier"], granted.topics
    assert consume(props, [t.truncation], granted.names.truncation_group_id) == {t.truncation}
    for topic in (t.deletion, t.stream_topology, t.stream_cuts):
        assert produce(props, topic) is None, topic
    for topic in (t.truncation, t.stream_config, t.subscriber_cuts, t.dlq):
        assert refused(produce(props, topic)), topic
    assert refused(consume(props, [t.truncation], granted.names.group_id))


def test_retention_job(granted: Granted) -> None:
    props, t = granted.principals["retention-job"], granted.topics
    inputs = [t.stream_topology, t.stream_config, t.subscribers, t.subscriber_cuts, t.stream_cuts]
    # Spark's source reads by assignment, never joining its generated group (the job itself runs as this
    # principal in test_secure_retention.py); here each input is read the same way.
    spark_group = f"spark-kafka-source-{uuid.uuid4()}-driver-0"
    for topic in inputs:
        read, errors = assign_read(props, topic, RETENTION_ENDS_GROUP)
        assert read >= 1 and not errors, topic
    for topic in (t.truncation, t.retention_rejects):
        assert produce(props, topic) is None, topic
    for topic in (t.deletion, t.stream_config, t.subscriber_cuts, t.stream_cuts):
        assert refused(produce(props, topic)), topic
    assert refused(consume(props, inputs, spark_group))  # no group of its own to join
    assert refused(consume(props, inputs, granted.names.group_id))


def test_subscriber(granted: Granted) -> None:
    props, t = granted.principals["subscriber"], granted.topics
    for topic in (t.subscribers, t.subscriber_cuts):
        assert produce(props, topic) is None, topic
    for topic in (t.stream_config, t.stream_cuts, t.truncation, t.deletion, t.stream_topology):
        assert refused(produce(props, topic)), topic
    assert refused(consume(props, [t.subscriber_cuts], f"subscriber-{uuid.uuid4().hex[:6]}"))


def test_operator(granted: Granted) -> None:
    props, t = granted.principals["operator"], granted.topics
    replayed = dlq_replayed_topic(t)
    for topic in (t.dlq, replayed):
        read, errors = assign_read(props, topic, READER_GROUP)
        assert read >= 1 and not errors, (topic, errors)
    for topic in (t.deletion, replayed):
        assert produce(props, topic) is None, topic
    admin = granted_admin(props)
    purge = admin.delete_records([TopicPartition(t.dlq, 0, 1)])
    assert next(iter(purge.values())).result(timeout=10).low_watermark == 1
    committed = Consumer({**props, "group.id": granted.names.group_id, "logger": _QUIET})
    try:  # deletions inflight: the workers' committed offsets, read without joining
        assert committed.committed([TopicPartition(t.deletion, 0)], timeout=10)
    finally:
        committed.close()
    # Dead letters cannot be forged, nor the deletion topic purged, nor a truncation sent.
    for topic in (t.dlq, t.truncation, t.retry_topics[0]):
        assert refused(produce(props, topic)), topic
    refusal = _future_error(lambda: next(iter(admin.delete_records([TopicPartition(t.deletion, 0, 1)]).values()))
                            .result(timeout=10))
    assert refusal is not None and refusal.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert refused(consume(props, [t.dlq], READER_GROUP))  # DESCRIBE on its group is no right to join it


def test_admin_role_creates_and_configures_its_prefix_only(granted: Granted) -> None:
    props = granted.principals["admin"]
    admin = granted_admin(props)
    prefix = granted.names.prefix
    # its prefix's topics exist already (made by the super user): creating again is "exists", describing works
    specs = topic_specs(Settings(topic_prefix=prefix, retry_delays=(1, 2), partitions=1))
    assert set(create_topics(admin, specs).values()) == {"exists"}
    assert all(row["exists"] for row in describe_topics(admin, specs))
    extra = topic_specs(Settings(topic_prefix=prefix, retry_delays=(1, 2, 3), partitions=1))
    assert create_topics(admin, extra)[f"{prefix}ledger-deletion.retry-3s"] == "created"  # a new retry tier
    alter = ConfigResource(ResourceType.TOPIC, granted.topics.truncation, incremental_configs=[
        ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([alter]).values():
        future.result(timeout=10)
    assert produce(props, granted.topics.truncation) is None
    # Outside its prefix, and on the cluster, it is refused.
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED|authoriz"):
        create_topics(admin, topic_specs(Settings(topic_prefix=f"other-{uuid.uuid4().hex[:6]}.", partitions=1)))
    grants = plan("worker", granted.names)
    with pytest.raises(Unavailable, match="CLUSTER_AUTHORIZATION_FAILED"):
        apply(admin, "User:someone", grants)


def granted_admin(props: dict[str, str]) -> AdminClient:
    return AdminClient({**props, "logger": _QUIET})


def test_cli_apply_creates_then_finds_and_a_refusal_is_one_line_exit_2(
        granted: Granted, secure_kafka: SecureBroker, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from reclaim.cli import acls as acls_cli
    from reclaim.cli.main import main

    argv = ["acls", "apply", "--role", "subscriber", "--principal", f"User:sub-{uuid.uuid4().hex[:6]}",
            "--topic-prefix", granted.names.prefix, "--json"]
    monkeypatch.setattr(acls_cli, "_admin", lambda _settings: granted.admin)
    assert main(argv) == 0
    assert {row["outcome"] for row in json.loads(capsys.readouterr().out)} == {"created"}
    _wait_for_acls(granted.admin, argv[5], 2)
    assert main(argv) == 0
    assert {row["outcome"] for row in json.loads(capsys.readouterr().out)} == {"exists"}

    worker = granted_admin(granted.principals["worker"])  # may not alter ACLs
    monkeypatch.setattr(acls_cli, "_admin", lambda _settings: worker)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("reclaim: error: ") and "CLUSTER_AUTHORIZATION_FAILED" in err


def _reclaim_as(props: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``reclaim <args>`` as a user runs it against the secured broker: the principal's client properties as
    ``RECLAIM_KAFKA_*`` variables, its password from a file (mode 0600), no broker of the local stack."""
    password = tmp_path / f"{props['sasl.username']}.password"
    password.write_text(props["sasl.password"] + "\n")
    password.chmod(0o600)
    env = {key: value for key, value in os.environ.items() if not key.startswith("RECLAIM_")}
    env.update({variable_name(name): value for name, value in props.items()
                if name not in ("bootstrap.servers", "sasl.password")})
    env.update({variable_name("sasl.password.file"): str(password), "RECLAIM_BOOTSTRAP": props["bootstrap.servers"],
                "RECLAIM_STATE_DIR": str(tmp_path / "state"), "RECLAIM_RETRY_DELAYS": "1,2,5"})
    return run_reclaim(*args, env=env, timeout=120)


def test_reclaim_topics_create_over_sasl_ssl_as_the_admin_role_and_refused_as_another(
        granted: Granted, tmp_path: Path) -> None:
    prefix = ["--topic-prefix", granted.names.prefix, "--partitions", "1"]
    created = _reclaim_as(granted.principals["admin"], tmp_path, "topics", "create", *prefix)
    assert created.returncode == 0, created.stderr
    assert f"created  {granted.names.prefix}ledger-deletion.retry-5s" in created.stdout
    assert f"exists   {granted.topics.truncation}" in created.stdout
    assert granted.principals["admin"]["sasl.password"] not in created.stdout + created.stderr

    refused_run = _reclaim_as(granted.principals["subscriber"], tmp_path, "topics", "create", *prefix)
    assert refused_run.returncode == 2
    assert refused_run.stderr.count("\n") == 1 and "authoriz" in refused_run.stderr.lower(), refused_run.stderr


def test_topic_retention_observes_and_deletes_records_of_the_topics_it_retains_only(
        granted: Granted, secure_kafka: SecureBroker) -> None:
    from reclaim.schemas.base import millis_now
    from reclaim.schemas.topic_retention import TopicRetentionPolicy
    from reclaim.services.topic_applier import TopicApplierConfig
    from reclaim.tools.topic_retention import POLLER_GROUP, DeleteFailed, delete_records, describe_topic, observe
    from tests.support.kafka_topics import create_topic, start_offset

    props, t = granted.principals["topic-retention"], granted.topics
    [topic], [group] = granted.names.retained_topics, granted.names.retained_groups
    owner = AdminClient({**secure_kafka.admin_properties(), "logger": _QUIET})
    create_topic(owner, topic, 1)
    seed = Producer({**secure_kafka.admin_properties(), "logger": _QUIET})
    for index in range(6):
        seed.produce(topic, value=f"r{index}".encode(), partition=0)
    assert seed.flush(15) == 0
    committer = Consumer({**secure_kafka.admin_properties(), "group.id": group, "logger": _QUIET})
    committer.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    committer.close()

    admin = granted_admin(props)
    topic_id, _ = describe_topic(admin, topic)
    view = observe(admin, TopicRetentionPolicy(topic, topic_id, (group,), 0, millis_now()), millis_now())
    assert [(p.low, p.high, dict(p.committed)) for p in view.partitions] == [(0, 6, {group: 4})]
    assert delete_records(admin, topic, {0: 4}) == {0: (0, 4)}
    read, errors = assign_read(props, t.topic_retention, POLLER_GROUP)
    assert read >= 1 and not errors
    assert produce(props, t.topic_cuts) is None and produce(props, t.topic_truncation_dlq) is None
    assert consume(props, [t.topic_truncation], TopicApplierConfig.group_id) == {t.topic_truncation}
    # Not the policies (the admin's), not the decisions (the job's), not another topic's records.
    for denied in (t.topic_retention, t.topic_truncation, t.deletion):
        assert refused(produce(props, denied)), denied
    other = f"{topic}-not-retained"
    create_topic(owner, other, 1)
    for index in range(3):
        seed.produce(other, value=f"r{index}".encode(), partition=0)
    assert seed.flush(15) == 0
    with pytest.raises(DeleteFailed):  # the topic is not even described to it: "no leaders found"
        delete_records(admin, other, {0: 2})
    assert start_offset(owner, other, 0) == 0
