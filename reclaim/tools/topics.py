"""``reclaim topics create | describe``: idempotent provisioning of reclaim's topics with the Admin API."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from reclaim.exits import UsageError
from reclaim.localstack.procs import StackError
from reclaim.producers.config import kafka_config
from reclaim.producers.topics import TopicNames
from reclaim.settings import Settings

COMPACTED = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
#: What Kafka accepts as a topic name (checked by the broker only, one topic at a time).
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@dataclass(frozen=True)
class TopicSpec:
    """One topic as reclaim wants it."""

    name: str
    partitions: int
    config: Mapping[str, str]


WAKEUPS_RETENTION_MS = 24 * 3600 * 1000
"""A wake-up record is read once, by the job that wrote it: a day is plenty."""


def topic_specs(settings: Settings) -> list[TopicSpec]:
    """The topics of the deletion pipeline and of retention, with their partitions and configs."""
    names = TopicNames.for_prefix(settings.topic_prefix, settings.retry_delays)
    parts = settings.partitions
    deleting = {"cleanup.policy": "delete", "retention.ms": str(settings.deletion_retention_ms)}
    dead = {"cleanup.policy": "delete", "retention.ms": str(settings.dlq_retention_ms)}
    specs = [
        TopicSpec(names.deletion, parts, deleting),
        *(TopicSpec(topic, parts, deleting) for topic in names.retry_topics),
        TopicSpec(names.dlq, 1, dead),
        # Which dead letters `reclaim dlq replay` has sent back, keyed by their DLQ coordinates.
        TopicSpec(dlq_replayed_topic(names), 1, COMPACTED),
        # Keyed by stream/subscriber or stream: only the latest value per key matters.
        TopicSpec(names.subscriber_cuts, parts, COMPACTED),
        TopicSpec(names.subscribers, parts, COMPACTED),
        TopicSpec(names.stream_config, parts, COMPACTED),
        # Plain Kafka topics' consumption retention policies, keyed by topic: one partition, read whole.
        TopicSpec(names.topic_retention, 1, COMPACTED),
        # What the topic poller saw of each such topic, keyed by topic: the job needs only the latest.
        TopicSpec(names.topic_cuts, parts, COMPACTED),
        # DeleteRecords decisions for the Kafka-topic applier.
        TopicSpec(names.topic_truncation, parts, deleting),
        TopicSpec(names.topic_truncation_dlq, 1, dead),
        # The controller republishes a stream's whole topology on every change, keyed by stream.
        TopicSpec(names.stream_topology, parts, COMPACTED),
        # The retention set keeps every recorded cut of a stream, so it is not compacted.
        TopicSpec(names.stream_cuts, parts, deleting),
        TopicSpec(names.truncation, parts, deleting),
        # Rejected retention inputs are for operators to look at, kept as long as the deletion records.
        TopicSpec(names.retention_rejects, parts, deleting),
        # One record each time a retention job starts, so that Spark runs a batch (and its timers) at once.
        TopicSpec(names.retention_wakeups, 1, {"cleanup.policy": "delete", "retention.ms": str(WAKEUPS_RETENTION_MS)}),
    ]
    illegal = [spec.name for spec in specs if not LEGAL_TOPIC.fullmatch(spec.name) or spec.name in (".", "..")]
    if illegal:
        # Refused before any topic is created: the broker would create the legal names and refuse the rest.
        longest = max(0, 249 - max(len(spec.name) for spec in specs) + len(settings.topic_prefix))
        raise UsageError(f"--topic-prefix / RECLAIM_TOPIC_PREFIX {settings.topic_prefix!r} makes topic names Kafka "
                         f"refuses (e.g. {illegal[-1]!r}): use ASCII letters, digits, '.', '_' and '-', "
                         f"and at most {longest} characters")
    return specs


def dlq_replayed_topic(names: TopicNames) -> str:
    """The compacted topic remembering replayed dead letters: ``<prefix>ledger-deletion.dlq-replayed``."""
    return f"{names.dlq}-replayed"


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient(kafka_config(bootstrap, "admin"))


def create_topics(admin: AdminClient, specs: list[TopicSpec], replication_factor: int = 1,
                  timeout: float = 30.0) -> dict[str, str]:
    """Create the topics that do not exist yet; return ``{topic: "created" | "exists"}``."""
    new = [NewTopic(s.name, num_partitions=s.partitions, replication_factor=replication_factor,
                    config=dict(s.config)) for s in specs]
    outcome: dict[str, str] = {}
    for topic, future in admin.create_topics(new, request_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
            outcome[topic] = "created"
        except KafkaException as exc:
            error = exc.args[0]
            if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                outcome[topic] = "exists"
            else:
                raise StackError(f"creating topic {topic} failed: {error}") from exc
    return outcome


def mismatches(specs: list[TopicSpec], described: list[dict[str, object]]) -> dict[str, str]:
    """What differs between each existing topic and its spec: partitions or cleanup policy (which
    ``topics create`` never changes on an existing topic)."""
    wanted = {spec.name: spec for spec in specs}
    found: dict[str, str] = {}
    for row in described:
        spec = wanted[str(row["topic"])]
        if not row["exists"]:
            continue
        problems = []
        if row["partitions"] != spec.partitions:
            problems.append(f"{row['partitions']} partitions, configured {spec.partitions}")
        policy = spec.config.get("cleanup.policy")
        if policy and row["cleanup.policy"] != policy:
            problems.append(f"cleanup.policy {row['cleanup.policy']}, configured {policy}")
        if problems:
            found[spec.name] = "; ".join(problems)
    return found


def describe_topics(admin: AdminClient, specs: list[TopicSpec], timeout: float = 30.0) -> list[dict[str, object]]:
    """Partitions, cleanup policy and retention of each topic as the broker has it."""
    metadata = admin.list_topics(timeout=timeout)
    resources = [ConfigResource(ResourceType.TOPIC, s.name) for s in specs if s.name in metadata.topics]
    configs = {r.name: f.result(timeout=timeout) for r, f in admin.describe_configs(resources).items()} \
        if resources else {}
    rows: list[dict[str, object]] = []
    for spec in specs:
        topic = metadata.topics.get(spec.name)
        if topic is None:
            rows.append({"topic": spec.name, "exists": False})
            continue
        entries = configs.get(spec.name, {})
        rows.append({
            "topic": spec.name, "exists": True, "partitions": len(topic.partitions),
            "cleanup.policy": entries["cleanup.policy"].value if "cleanup.policy" in entries else None,
            "retention.ms": entries["retention.ms"].value if "retention.ms" in entries else None,
        })
    return rows
