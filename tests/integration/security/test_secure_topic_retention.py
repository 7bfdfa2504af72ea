"""Consumption retention of a plain Kafka topic end to end on the secured broker: the admin, the topic poller, the
retention job and the Kafka-topic applier each run as their own SCRAM principal over TLS with the ACLs ``reclaim
acls plan`` gives their role, and sign with their own keys. The slower group's committed offsets bound what
``DeleteRecords`` removes; the journal names the job's key."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from reclaim.localstack.kafka_security import SecureBroker
from reclaim.producers.config import quiet_logger
from reclaim.schemas.base import millis_now
from reclaim.tools.log_dirs import LogDirSizes
from tests.support.cli import run_reclaim
from tests.support.deployment import Deployment, deploy, metric, own_keys, wait_for, write_keyrings
from tests.support.kafka_topics import HOUR_MS, create_topic, start_offset

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROLE_OF = {"admin": "admin", "retention-job": "retention-job", "topic-poller": "topic-retention",
           "topic-applier": "topic-retention"}
_QUIET = quiet_logger("tests.security.topic_retention")


def _keyrings(directory: Path) -> dict[str, Path]:
    """Each signer's own key; each verifier the public halves of the signers it obeys."""
    own = own_keys(directory, {"admin": "admin", "retention-job": "retention-job", "topic-poller": "topic-retention"})
    return write_keyrings(directory, {
        "admin": own.text("admin"),
        "topic-poller": own.text("topic-poller") + own.public["admin"],  # signs cuts, obeys the admin's policies
        "retention-job": own.text("retention-job") + own.public["admin"] + own.public["topic-poller"],
        "topic-applier": own.public["admin"] + own.public["retention-job"],  # signs nothing
    })


@pytest.fixture(scope="module")
def deployment(secure_kafka: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    directory = tmp_path_factory.mktemp("secure-topic-retention")
    with deploy(secure_kafka, directory, "tret", ROLE_OF, _keyrings(directory)) as found:
        yield found


def test_a_topic_is_truncated_behind_its_slower_group_with_each_part_as_its_own_principal(
        deployment: Deployment) -> None:
    [topic], [fast] = deployment.names.retained_topics, deployment.names.retained_groups
    slow = f"{fast}-slow"  # not granted to the topic-retention principals: required, never readable by them
    owner_props = {**deployment.broker.admin_properties(), "logger": _QUIET}
    owner = AdminClient(owner_props)  # type: ignore[arg-type]
    create_topic(owner, topic, 2)
    producer = Producer(owner_props)
    written = millis_now() - 3 * HOUR_MS
    for partition in (0, 1):
        for index in range(10):
            producer.produce(topic, f"r{index}".encode(), partition=partition, timestamp=written + index)
    assert producer.flush(30) == 0
    for group, offsets in ((fast, {0: 4, 1: 6}), (slow, {0: 8, 1: 9})):
        consumer = Consumer({**owner_props, "group.id": group})
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        consumer.close()

    admin = deployment.env("admin")
    run_reclaim("topics", "retain", topic, "--groups", fast, "--min", "1h", env=admin, check=True)
    plan = run_reclaim("topics", "retention", "plan", topic, "--json", env=admin, check=True)
    assert [(p["start"], p["to"]) for p in json.loads(plan.stdout)["partitions"]] == [(0, 4), (0, 6)]

    polled = run_reclaim("topic-poller", "--once", env=deployment.env("topic-poller"), timeout=120)
    assert polled.returncode == 0, polled.stdout + polled.stderr
    assert f"{topic}: cut published ({fast} {{0: 4, 1: 6}})" in polled.stdout, polled.stdout
    job = run_reclaim("retention-job", "--once", "--master", "local[1]", "--state-buckets", "2",
                      env=deployment.env("retention-job"), timeout=240)
    assert job.returncode == 0, job.stdout + job.stderr
    applied = run_reclaim("topic-applier", "--once", env=deployment.env("topic-applier"), timeout=120)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "1 decision(s) applied, 1 deleted" in applied.stdout, applied.stdout + applied.stderr
    assert [start_offset(owner, topic, p) for p in (0, 1)] == [4, 6]

    history = run_reclaim("topics", "retention", "history", topic, "--json", env=admin, check=True)
    entries = json.loads(history.stdout)
    assert [(e["partition"], e["old_start"], e["new_start"], e["signer"]) for e in entries] == [
        (0, 0, 4, "retention-job/retention-job-1"), (1, 0, 6, "retention-job/retention-job-1")]

    # As a service, the poller follows the groups' commits on __consumer_offsets (Read granted by its role's plan):
    # a commit between its passes (an hour apart) is observed and its cut published at once.
    port = deployment.start("topic-poller", "topic-poller", "--every", "1h")
    wait_for("the poller's first pass", lambda: metric(port, "reclaim_topic_retention_cuts_total", topic=topic) >= 1)
    consumer = Consumer({**owner_props, "group.id": fast})
    consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    consumer.close()
    wait_for("the commit followed", lambda: metric(port, "reclaim_topic_retention_cuts_total", topic=topic) >= 2,
             timeout_s=30)
    log = (deployment.directory / "topic-poller.log").read_text()
    assert "not following" not in log, log

    # Partition sizes for --max-bytes come through kafka-python: the same principal over SCRAM and TLS, the
    # role's Describe on the cluster; a principal without it is described no partition.
    sizes = LogDirSizes(deployment.broker.bootstrap, deployment.properties("topic-poller"))
    unsized = LogDirSizes(deployment.broker.bootstrap, deployment.properties("retention-job"))
    try:
        found = sizes({topic: [0, 1]})
        assert set(found) == {(topic, 0), (topic, 1)} and all(size > 0 for size in found.values()), found
        assert unsized({topic: [0, 1]}) == {}
    finally:
        sizes.close()
        unsized.close()

    # The poller cannot read a group it is not granted: a policy naming it holds the topic where it is.
    run_reclaim("topics", "retain", topic, "--groups", f"{fast},{slow}", "--min", "1h", env=admin, check=True)
    refused = run_reclaim("topic-poller", "--once", env=deployment.env("topic-poller"), timeout=120)
    assert refused.returncode == 2 and f"{topic}: not observed" in refused.stderr, refused.stdout + refused.stderr
    assert [start_offset(owner, topic, p) for p in (0, 1)] == [4, 6]
