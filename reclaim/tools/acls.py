"""The Kafka ACLs each reclaim role needs and nothing more: the plan (pure) and its idempotent apply.

A role is what one process of reclaim does on the bus; its grants follow from the code that runs as it
(topic names from :class:`reclaim.producers.topics.TopicNames`, groups from the settings). Topics and groups are
named LITERAL wherever reclaim knows the name, PREFIXED only where a name is made at run time.

No role gets ``IDEMPOTENT_WRITE`` on the cluster: since Kafka 3.0 (KIP-679) a broker gives an
idempotent producer its producer id when the principal may WRITE some topic, which every role that
produces may. Nothing in reclaim is transactional, so no role gets a ``TRANSACTIONAL_ID`` either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from reclaim.exits import Unavailable, UsageError
from reclaim.producers.topics import TopicNames
from reclaim.settings import Settings
from reclaim.tools.dlq.reader import READER_GROUP
from reclaim.tools.topics import dlq_replayed_topic

#: The group of the retention job's end-offset probe (:func:`reclaim.retention.spark_offsets.topic_ends`).
RETENTION_ENDS_GROUP = "reclaim-retention-ends"
# No grant on Spark's generated group ids (``spark-kafka-source-<uuid>-…``): Spark 4's Kafka source reads
# offsets through an AdminClient and its executors' consumers are assigned partitions and never join or
# commit, so a group ACL is needed only with spark.sql.streaming.kafka.useDeprecatedOffsetFetching=true
# (checked by running the job as its principal on the secured broker:
# tests/integration/security/test_secure_retention.py).

ROLES: dict[str, str] = {
    "controller": "the stream controller: phase 1 (pending deletes), topology, recorded cuts (streams create, "
                  "streams record); set-policy and truncate are the admin's, signed with its key",
    "worker": "phase 2: the deletion topic and its retry tiers as one group, retries and dead letters",
    "truncation-applier": "applies truncation events; through its controller also phase 1, topology and recorded cuts",
    "retention-job": "the Spark retention job: reads the retention inputs (streams' and plain topics'), writes "
                     "truncations, DeleteRecords decisions and rejects",
    "subscriber": "a subscriber: its registration and its truncation cuts",
    "operator": "the dead-letter tools (dlq list/stats/replay/purge), audit --repair, deletions inflight and "
                "deletions stalled --resend",
    "admin": "topics create/describe, manual truncation: everything on the topic prefix",
    "topic-retention": "the topic poller and the Kafka-topic applier: Describe on the retained topics and their "
                       "groups, Delete (DeleteRecords) on the topics (--retained-topic, --retained-group), Read on "
                       "__consumer_offsets to follow the groups' commits",
}
PRINCIPAL = re.compile(r"User:(?!\*$)\S+")


@dataclass(frozen=True)
class Grant:
    """One ALLOW ACL, any host: ``operation`` on the ``resource`` (TOPIC, GROUP) named ``name`` (``pattern``
    LITERAL or PREFIXED), with the reason it is needed."""

    resource: str
    pattern: str
    name: str
    operation: str
    why: str = field(default="", compare=False)


@dataclass(frozen=True)
class Names:
    """The names a plan is made of: the topics of one prefix and retry delays, and the consumer groups."""

    topics: TopicNames
    prefix: str
    group_id: str = "reclaim-deletion"
    truncation_group_id: str = "reclaim-truncation"
    retained_topics: tuple[str, ...] = ()
    retained_groups: tuple[str, ...] = ()
    """Plain Kafka topics under consumption retention and their required groups (``name*``: every name that
    starts with ``name``), for the topic-retention role."""
    retained_sizes: bool = False
    """The topic-retention role reads partition sizes (a policy with ``--max-bytes``): Describe on the cluster."""

    @classmethod
    def from_settings(cls, settings: Settings, retained_topics: Iterable[str] = (),
                      retained_groups: Iterable[str] = (), retained_sizes: bool = False) -> Names:
        return cls(TopicNames.for_prefix(settings.topic_prefix, settings.retry_delays), settings.topic_prefix,
                   settings.group_id, settings.truncation_group_id, tuple(retained_topics), tuple(retained_groups),
                   retained_sizes)


def _topics(operation: str, topics: Iterable[str], why: str) -> list[Grant]:
    return [Grant("TOPIC", "LITERAL", topic, operation, why) for topic in topics]


def _group(name: str, operation: str, why: str, pattern: str = "LITERAL") -> Grant:
    return Grant("GROUP", pattern, name, operation, why)


def _controller_writes(t: TopicNames) -> list[Grant]:
    return [
        *_topics("WRITE", [t.deletion], "phase 1 publishes pending deletes (idempotent producer)"),
        *_topics("WRITE", [t.stream_topology], "the controller publishes each stream's topology"),
        *_topics("WRITE", [t.stream_cuts], "the retention recorder publishes stream cuts"),
    ]


def _worker(n: Names) -> list[Grant]:
    t = n.topics
    return [
        *_topics("READ", t.deletion_inputs, "phase 2 consumes the deletion topic and its retry tiers"),
        *_topics("WRITE", t.retry_topics, "a retryable outcome is rerouted to the next retry tier"),
        *_topics("WRITE", [t.dlq], "an exhausted or fatal outcome is dead-lettered"),
        *_topics("DESCRIBE_CONFIGS", [*t.deletion_inputs, t.dlq], "the start check refuses compacted topics"),
        _group(n.group_id, "READ", "the workers' consumer group (join, commit offsets)"),
    ]


def _truncation_applier(n: Names) -> list[Grant]:
    t = n.topics
    return [
        *_topics("READ", [t.truncation], "the applier consumes truncation events"),
        _group(n.truncation_group_id, "READ", "the applier's consumer group (join, commit offsets)"),
        *_controller_writes(t),
    ]


def _retention_job(n: Names) -> list[Grant]:
    t = n.topics
    inputs = (t.stream_topology, t.stream_config, t.subscribers, t.subscriber_cuts, t.stream_cuts)
    return [
        *_topics("READ", inputs, "the job's Kafka source reads the retention inputs"),
        *_topics("WRITE", [t.truncation], "the job writes truncation events"),
        *_topics("WRITE", [t.retention_rejects], "the job writes the inputs it refuses"),
        *_topics("READ", [t.topic_retention, t.topic_cuts], "the job reads plain Kafka topics' consumption "
                                                            "retention policies and the topic poller's cuts"),
        *_topics("WRITE", [t.topic_truncation], "the job writes DeleteRecords decisions for plain Kafka topics"),
        *_topics("READ", [t.retention_wakeups], "the job's Kafka source reads its wake-ups"),
        *_topics("WRITE", [t.retention_wakeups], "the job writes a wake-up when it starts, so that Spark runs a "
                                                 "batch (and the time limits' timers) without waiting for input"),
        _group(RETENTION_ENDS_GROUP, "DESCRIBE", "the end-offset probe's consumer has this group id (no join, "
                                                 "no commit: finding its coordinator needs DESCRIBE)"),
    ]


def _operator(n: Names) -> list[Grant]:
    t = n.topics
    replayed = dlq_replayed_topic(t)
    return [
        *_topics("READ", [t.dlq], "dlq list/stats/replay/purge read the dead letters"),
        *_topics("DELETE", [t.dlq], "dlq purge deletes records (DeleteRecords) up to an offset"),
        *_topics("WRITE", [t.deletion], "dlq replay sends dead letters back to the deletion topic; audit --repair "
                                        "and deletions stalled --resend publish pending deletes (phase 1)"),
        *_topics("READ", [replayed], "dlq replay reads which letters were replayed already"),
        *_topics("WRITE", [replayed], "dlq replay records what it replayed"),
        _group(READER_GROUP, "DESCRIBE", "the DLQ reader's group id (assigned partitions, no join, no commit)"),
        *_topics("DESCRIBE", t.deletion_inputs, "deletions inflight reads the deletion topics' end offsets"),
        _group(n.group_id, "DESCRIBE", "deletions inflight reads the workers' committed offsets"),
    ]


def _named(resource: str, names: Iterable[str], operation: str, why: str) -> list[Grant]:
    """Grants on names given by hand: ``name*`` is every name that starts with ``name`` (PREFIXED)."""
    return [Grant(resource, "PREFIXED", name[:-1], operation, why) if name.endswith("*") and len(name) > 1
            else Grant(resource, "LITERAL", name, operation, why) for name in names]


def _topic_retention(n: Names) -> list[Grant]:
    from reclaim.services.topic_applier import TopicApplierConfig
    from reclaim.tools.group_commits import OFFSETS_TOPIC
    from reclaim.tools.topic_retention import POLLER_GROUP

    if not n.retained_topics:
        raise UsageError("the topic-retention role needs the topics it retains: --retained-topic NAME (repeatable; "
                         "NAME* for every topic that starts with NAME)")
    t = n.topics
    return [
        *_topics("READ", [t.topic_retention], "the poller and the applier read the consumption retention policies"),
        _group(POLLER_GROUP, "DESCRIBE", "the policy reader's group id (assigned partitions, no join, no commit)"),
        *_named("TOPIC", n.retained_topics, "DESCRIBE", "the poller reads the topics' partitions and offsets"),
        *_named("TOPIC", n.retained_topics, "DESCRIBE_CONFIGS", "a compacted-only topic is refused"),
        *_named("GROUP", n.retained_groups, "DESCRIBE", "the poller reads the required groups' committed offsets"),
        *_topics("WRITE", [t.topic_cuts], "the poller publishes what it saw of each topic"),
        Grant("TOPIC", "LITERAL", OFFSETS_TOPIC, "READ", "the poller follows the groups' commits, to observe a "
              "topic as soon as one of its groups moves (shows every group's offsets; without it, passes only)"),
        *([Grant("BROKER", "LITERAL", "kafka-cluster", "DESCRIBE", "the poller reads partition sizes for "
                 "--max-bytes (DescribeLogDirs; --retained-sizes)")] if n.retained_sizes else []),
        *_topics("READ", [t.topic_truncation], "the applier consumes the job's DeleteRecords decisions"),
        _group(TopicApplierConfig.group_id, "READ", "the applier's consumer group (join, commit offsets)"),
        *_named("TOPIC", n.retained_topics, "DELETE", "the applier deletes records (DeleteRecords)"),
        *_topics("WRITE", [t.topic_truncation_dlq], "a decision that keeps failing is dead-lettered"),
    ]


def _admin(n: Names) -> list[Grant]:
    return [Grant("TOPIC", "PREFIXED", n.prefix, "ALL",
                  "topics create/describe (CREATE, DESCRIBE_CONFIGS, ALTER_CONFIGS) of every topic the prefix and "
                  "retry delays make; streams set-policy (stream-config) and truncate (the truncation topic, or "
                  "phase 1 and topology through its controller): everything on the prefix"),
            *_named("TOPIC", n.retained_topics, "DESCRIBE", "topics retain names the topic's id; retention "
                    "show and plan read its partitions and offsets (--retained-topic)"),
            *_named("TOPIC", n.retained_topics, "DESCRIBE_CONFIGS", "topics retain refuses a compacted-only topic"),
            *_named("GROUP", n.retained_groups, "DESCRIBE", "topics retention show and plan read the required "
                    "groups' committed offsets (--retained-group)")]


_PLANS = {
    "controller": lambda n: _controller_writes(n.topics),
    "worker": _worker,
    "truncation-applier": _truncation_applier,
    "retention-job": _retention_job,
    "subscriber": lambda n: [
        *_topics("WRITE", [n.topics.subscribers], "a subscriber publishes its registration (add/remove)"),
        *_topics("WRITE", [n.topics.subscriber_cuts], "a subscriber publishes its truncation cuts"),
    ],
    "operator": _operator,
    "admin": _admin,
    "topic-retention": _topic_retention,
}


def check_principal(principal: str) -> str:
    """``principal`` when it is ``User:NAME`` (not the wildcard), else one usage line."""
    if not PRINCIPAL.fullmatch(principal):
        raise UsageError(f"--principal must be User:NAME (e.g. User:reclaim-worker), got {principal!r}")
    return principal


def plan(role: str, names: Names) -> list[Grant]:
    """The grants ``role`` needs, each once, in the order its processes use them."""
    if role not in _PLANS:
        raise UsageError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    if not names.prefix:
        raise UsageError("the topic prefix is empty: a PREFIXED grant on '' would cover every topic of the cluster")
    grants: list[Grant] = _PLANS[role](names)
    return list(dict.fromkeys(grants))


def binding_rows(principal: str, grants: Iterable[Grant]) -> list[dict[str, str]]:
    """The grants as rows (what ``acls plan`` prints)."""
    return [{"principal": principal, "resource": g.resource, "pattern": g.pattern, "name": g.name,
             "operation": g.operation, "permission": "ALLOW", "host": "*", "why": g.why} for g in grants]


def bindings(principal: str, grants: Iterable[Grant]) -> list[Any]:
    """The grants as confluent-kafka ``AclBinding``s for ``principal``, from any host."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return [AclBinding(ResourceType[g.resource], g.name, ResourcePatternType[g.pattern], principal, "*",
                       AclOperation[g.operation], AclPermissionType.ALLOW) for g in grants]


def apply(admin: Any, principal: str, grants: list[Grant], timeout_s: float = 30.0) -> dict[Grant, str]:
    """Create the grants ``principal`` lacks; ``{grant: "created" | "exists"}``. Idempotent: ACLs the
    principal has already are left as they are, and so are any others it has (nothing is revoked)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    # None matches any name and any host (the library's stubs say str only).
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal,  # type: ignore[arg-type]
                                  None, AclOperation.ANY, AclPermissionType.ANY)  # type: ignore[arg-type]
    try:
        present = admin.describe_acls(everything, request_timeout=timeout_s).result(timeout=timeout_s)
        have = {(b.restype.name, b.resource_pattern_type.name, b.name, b.operation.name) for b in present
                if b.permission_type == AclPermissionType.ALLOW and b.host == "*"}
        outcome = {g: "exists" if (g.resource, g.pattern, g.name, g.operation) in have else "created" for g in grants}
        missing = [g for g in grants if outcome[g] == "created"]
        if missing:
            for future in admin.create_acls(bindings(principal, missing), request_timeout=timeout_s).values():
                future.result(timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError.SECURITY_DISABLED:
            raise Unavailable("the broker has no authorizer (authorizer.class.name): it has no ACLs to apply") \
                from exc
        if isinstance(error, KafkaError) and error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            # The broker's own message is a dump of the Java request; the error's name says it all.
            raise Unavailable("the broker refused to describe or create ACLs (CLUSTER_AUTHORIZATION_FAILED): "
                              "acls apply must connect as a principal allowed DESCRIBE and ALTER on the cluster, "
                              "e.g. a super user") from exc
        raise
    return outcome
