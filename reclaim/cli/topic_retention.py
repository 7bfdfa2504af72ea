"""``reclaim topics retain TOPIC`` and ``reclaim topics retention list | show | plan | release``: consumption
retention for plain Kafka topics (:mod:`reclaim.tools.topic_retention`, docs/concepts/kafka-topics.md)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from reclaim.cli.common import Common, add_verb, byte_size, duration, json_flag, print_json, store_flags
from reclaim.exits import ExitCode, UsageError
from reclaim.services import preflight, runtime
from reclaim.settings import Settings

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

    from reclaim.retention.topic_decision import PartitionDecision
    from reclaim.schemas.topic_retention import TopicRetentionPolicy
    from reclaim.tools.topic_retention import TopicView

log = logging.getLogger(__name__)

POLICY_READER_GROUP = "reclaim-topic-retention-reader"
"""The group id of the consumer reading the policies (assigned partitions: never joined, nothing committed)."""

_RETAIN = """\
Put TOPIC under consumption retention: a record is deleted (Kafka's DeleteRecords) once every required consumer
group has committed past it and it is older than --min; records older than --max go even when a group has not
read them. A required group that has never committed holds the topic at
its start; a group whose offsets Kafka deleted or expired holds it too, until released by hand (`reclaim topics
retention release TOPIC --group G`). Setting a policy again replaces it, releases included. The policy is a
record on the topic-retention topic, signed with the admin key of the keyring (RECLAIM_KEYRING)."""

_RETENTION = """\
list     the topics under consumption retention and their policies
show     a topic's policy, its required groups' states and each partition's offsets
plan     what would be deleted now, per partition, and why (a dry run: nothing is deleted)
release  release a group (--group) from holding the topic, or the whole topic from consumption retention
history  every DeleteRecords the Kafka-topic applier did on the topic, from its journal"""


def cmd_retain(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.schemas.base import millis_now
    from reclaim.schemas.topic_retention import DEFAULT_STALE_AFTER_MS, TopicRetentionPolicy
    from reclaim.tools.topic_retention import check_topic_name, describe_topic

    topic = check_topic_name(args.topic)
    groups = tuple(dict.fromkeys(g.strip() for g in (args.groups or "").split(",") if g.strip()))
    checkpoints = _checkpoints(args.spark_query or [])
    if not groups and args.group_pattern is None and not checkpoints:
        raise UsageError("retain needs the groups that hold the topic: --groups, --group-pattern, --spark-query "
                         "or several")
    min_ms = round(args.min * 1000)
    max_ms = None if args.max is None else round(args.max * 1000)
    if max_ms is not None and max_ms < min_ms:
        raise UsageError(f"--max ({args.max:g} s) must not be below --min ({args.min:g} s)")
    stale_ms = DEFAULT_STALE_AFTER_MS if args.stale_after is None else round(args.stale_after * 1000)
    try:
        draft = TopicRetentionPolicy(topic, "", groups, min_ms, millis_now(), group_pattern=args.group_pattern,
                                     spark_checkpoints=checkpoints, max_ms=max_ms, max_bytes=args.max_bytes,
                                     stale_after_ms=stale_ms)
    except ValueError as exc:
        raise UsageError(f"retain: {exc}") from None
    admin_key = _admin_signer(settings)
    admin = _admin(settings)
    topic_id, partitions = _refusing(lambda: describe_topic(admin, topic))
    policy = _replace(draft, topic_id=topic_id)
    _publish(settings, policy, admin_key)
    count = f"{len(partitions)} partition{'' if len(partitions) == 1 else 's'}"
    print(f"topic {topic} ({count}, id {topic_id}): consumption retention {policy.describe()}; "
          f"signed by {_signed_by(admin_key)}")
    return ExitCode.OK


def cmd_retention(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.tools.topic_retention import check_topic_name

    if args.retention_action != "list":
        check_topic_name(args.topic)
    if args.retention_action == "history":
        return _history(args, settings)
    policies = read_policies(settings)
    if args.retention_action == "list":
        return _list(args, policies)
    policy = policies.get(args.topic)
    if policy is None or not policy.active:
        raise UsageError(f"topic {args.topic!r} is not under consumption retention (see `reclaim topics retention "
                         "list`)")
    if args.retention_action == "release":
        return _release(args, settings, policy)
    from reclaim.schemas.base import millis_now
    from reclaim.tools.topic_retention import Checkpoints, observe, plan

    admin = _admin(settings)
    s3 = runtime.s3_binding(settings)
    checkpoints = Checkpoints(None if s3 is None else s3.client)
    try:
        view = _refusing(lambda: observe(admin, policy, millis_now(), checkpoints=checkpoints))
    finally:
        if s3 is not None:
            s3.close()
    decisions = plan(policy, view)
    if args.retention_action == "show":
        return _show(args, policy, view, decisions)
    return _plan(args, view, decisions, policy)


def read_policies(settings: Settings) -> dict[str, TopicRetentionPolicy]:
    """The policy in force per topic (active or ended), as the records on the topic-retention topic say, each
    signature checked as the services check it (refused ones are warned of and left out)."""
    from reclaim.tools.dlq.reader import read_all
    from reclaim.tools.topic_retention import latest_policies

    topic = runtime.topic_names(settings).topic_retention
    address = preflight.broker(settings)
    preflight.require_topics(address, [topic])
    messages, _ = read_all(address, topic)
    return latest_policies(messages, runtime.codec(settings), runtime.record_verifier(settings))


def _list(args: argparse.Namespace, policies: dict[str, TopicRetentionPolicy]) -> int:
    active = [p for _, p in sorted(policies.items()) if p.active]
    if args.json:
        print_json([_policy_dict(p) for p in active])
        return ExitCode.OK
    if not active:
        print("no topic under consumption retention (reclaim topics retain TOPIC --groups ... sets one)")
    for policy in active:
        print(f"{policy.topic}: {policy.describe()}")
    return ExitCode.OK


def _show(args: argparse.Namespace, policy: TopicRetentionPolicy, view: TopicView,
          decisions: list[PartitionDecision]) -> int:
    if args.json:
        print_json({"policy": _policy_dict(policy), "topic_id": view.topic_id, "problems": list(view.problems),
                    "groups": [{"group": g.group, "state": g.state, "committed_partitions": g.committed_partitions}
                               for g in view.groups],
                    "partitions": [{"partition": p.partition, "start": p.low, "end": p.high,
                                    "committed": dict(p.committed)} for p in view.partitions],
                    "plan": [_decision_dict(d, view) for d in decisions]})
        return ExitCode.OK
    print(f"topic {policy.topic} (id {view.topic_id}): {policy.describe()}")
    for problem in view.problems:
        print(f"  NOT APPLIED: {problem}")
    print("required:" if view.groups else "required: none listed now")
    for group in view.groups:
        print(f"  {group.group}: {group.state}, committed on {group.committed_partitions} of {len(view.partitions)} "
              "partitions")
    for partition in view.partitions:
        offsets = ", ".join(f"{g} {o if o is not None else '-'}" for g, o in sorted(partition.committed.items()))
        print(f"  partition {partition.partition}: records {partition.low}..{partition.high}"
              f"{'; ' + offsets if offsets else ''}")
    return ExitCode.OK


SIZE_NOT_PLANNED = ("--max-bytes is not in this plan: the topic poller reckons each partition's bytes from what it "
                    "grew by between its passes")


def _plan(args: argparse.Namespace, view: TopicView, decisions: list[PartitionDecision],
          policy: TopicRetentionPolicy) -> int:
    rows = [_decision_dict(d, view) for d in decisions]
    notes = [SIZE_NOT_PLANNED] if policy.max_bytes is not None else []
    if args.json:
        print_json({"topic": view.topic, "topic_id": view.topic_id, "problems": list(view.problems),
                    "partitions": rows, "notes": notes})
        return ExitCode.OK
    for problem in view.problems:
        print(f"topic {view.topic}: nothing is deleted: {problem}")
    total = sum(row["records"] for row in rows)
    print(f"topic {view.topic}: {total} record(s) would be deleted (dry run: nothing is deleted)")
    for row in rows:
        held = f" (held by {', '.join(row['held_by'])})" if row["held_by"] else ""
        moves = f"{row['start']} -> {row['to']}: {row['records']} record(s)" if row["to"] is not None \
            else f"stays at {row['start']}"
        print(f"  partition {row['partition']}: {moves}, {row['why']}{held}")
    for note in notes:
        print(f"  {note}")
    return ExitCode.OK


def _release(args: argparse.Namespace, settings: Settings, policy: TopicRetentionPolicy) -> int:
    from reclaim.schemas.base import millis_now

    admin_key = _admin_signer(settings)
    if not args.group:
        _publish(settings, _replace(policy, active=False, updated_at=max(millis_now(), policy.updated_at + 1)),
                 admin_key)
        print(f"topic {policy.topic}: released from consumption retention (its records stay until Kafka's own "
              f"retention deletes them); signed by {_signed_by(admin_key)}")
        return ExitCode.OK
    released = tuple(sorted({*policy.released, *args.group}))
    _publish(settings, _replace(policy, released=released, updated_at=max(millis_now(), policy.updated_at + 1)),
             admin_key)
    print(f"topic {policy.topic}: {', '.join(args.group)} released: no longer holding its records; signed by "
          f"{_signed_by(admin_key)}")
    return ExitCode.OK


def _history(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.cli.audit import open_to_read

    with ExitStack() as stack:
        store, _ = open_to_read(settings, stack)
        entries = store.topic_truncations(args.topic)
    if args.json:
        print_json([dataclasses.asdict(entry) for entry in entries])
        return ExitCode.OK
    if not entries:
        print(f"topic {args.topic}: no DeleteRecords journaled")
    for entry in entries:
        when = datetime.fromtimestamp(entry.applied_at, UTC).isoformat(timespec="seconds")
        print(f"{when} {entry.topic}[{entry.partition}] {entry.old_start} -> {entry.new_start} "
              f"({entry.new_start - entry.old_start} records): {entry.why or '-'}; signed by {entry.signer}")
    return ExitCode.OK


def _decision_dict(decision: PartitionDecision, view: TopicView) -> dict[str, Any]:
    start = next(p.low for p in view.partitions if p.partition == decision.partition)
    return {"partition": decision.partition, "start": start, "to": decision.start,
            "records": 0 if decision.start is None else decision.start - start, "rule": decision.rule.name,
            "why": decision.rule.value, "held_by": list(decision.held_by)}


def _policy_dict(policy: TopicRetentionPolicy) -> dict[str, Any]:
    return {"topic": policy.topic, "topic_id": policy.topic_id, "groups": list(policy.groups),
            "group_pattern": policy.group_pattern, "spark_queries": policy.checkpoints,
            "released": list(policy.released), "min_ms": policy.min_ms, "max_ms": policy.max_ms,
            "max_bytes": policy.max_bytes, "stale_after_ms": policy.stale_after_ms, "updated_at": policy.updated_at}


def _replace(policy: TopicRetentionPolicy, **changes: Any) -> TopicRetentionPolicy:
    return dataclasses.replace(policy, **changes)


def _checkpoints(values: list[str]) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    for value in values:
        name, sep, location = value.partition("=")
        if not sep or not name.strip() or not location.strip():
            raise UsageError(f"--spark-query takes NAME=CHECKPOINT_LOCATION, got {value!r}")
        found[name.strip()] = location.strip()
    return tuple(sorted(found.items()))


def _refusing(call: Any) -> Any:
    from reclaim.tools.topic_retention import TopicRetentionError

    try:
        return call()
    except TopicRetentionError as exc:
        raise UsageError(str(exc)) from None


def _admin(settings: Settings) -> AdminClient:
    from reclaim.tools.topics import admin_client

    return admin_client(preflight.broker(settings))


def _admin_signer(settings: Settings) -> Any:
    from reclaim.cli.streams import admin_signer

    return admin_signer(settings)


def _signed_by(signer: Any) -> str:
    from reclaim.cli.streams import signed_by

    return signed_by(signer)


def _publish(settings: Settings, policy: TopicRetentionPolicy, signer: Any) -> None:
    from reclaim.producers.producer import RecordProducer
    from reclaim.producers.publisher import ConfirmedPublisher

    topic, address = runtime.topic_names(settings).topic_retention, preflight.broker(settings)
    preflight.require_topics(address, [topic])
    publisher = ConfirmedPublisher(RecordProducer(address, "idempotent-producer"), runtime.codec(settings),
                                   signer=signer)
    try:
        publisher.publish(topic, policy, policy.topic)
    finally:
        publisher.close()


def register_verbs(verbs: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    """``topics retain`` and ``topics retention VERB`` on the ``topics`` group's verbs."""
    from reclaim.durations import EXAMPLES

    retain = add_verb(verbs, "retain", "put a Kafka topic under consumption retention (its groups hold it)", _RETAIN,
                      ["reclaim topics retain orders --groups billing,audit --min 1h --max 7d",
                       "reclaim topics retain clicks --group-pattern 'etl-.*' --min 10m --max 3d",
                       "reclaim topics retain events --groups loader --spark-query daily=/checkpoints/daily"])
    retain.add_argument("topic", help="the Kafka topic")
    retain.add_argument("--groups", metavar="G1,G2", help="the consumer groups that must read a record before it goes")
    retain.add_argument("--group-pattern", metavar="REGEX",
                        help="every group whose whole name matches is required too (e.g. 'etl-.*')")
    retain.add_argument("--spark-query", action="append", metavar="NAME=CHECKPOINT",
                        help="a Spark Structured Streaming query required too, read from its checkpoint location "
                             "(a path, or s3a://bucket/prefix through the S3 endpoint; Spark commits nothing to "
                             "Kafka); repeatable")
    retain.add_argument("--min", type=duration(0.0), default=0.0, metavar="DURATION",
                        help=f"records younger than this always stay: {EXAMPLES} (default 0)")
    retain.add_argument("--max", type=duration(0.0), metavar="DURATION",
                        help="records older than this go even when a group has not read them (default: none)")
    retain.add_argument("--max-bytes", type=byte_size, metavar="SIZE",
                        help="a partition keeps at most about this many bytes, whatever the groups (sizes from "
                             "DescribeLogDirs: the poller needs Describe on the cluster)")
    retain.add_argument("--stale-after", type=duration(0.0, positive=True), metavar="DURATION",
                        help="a required group Empty this long is reported stale; it keeps holding (default 1d)")
    common(retain)
    retain.set_defaults(run=cmd_retain)

    retention = verbs.add_parser("retention", help="list, show, plan or release topics under consumption retention",
                                 description=_RETENTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    common(retention, listed=False)
    json_flag(retention)
    sub = retention.add_subparsers(dest="retention_action", metavar="VERB", title="verbs")
    retention.set_defaults(retention_action=None)  # no verb: its help, exit 0, as every group
    listing = add_verb(sub, "list", "the topics under consumption retention",
                       "Every topic under consumption retention and its policy, as the topic-retention topic holds "
                       "them (signatures checked).", ["reclaim topics retention list", "reclaim topics retention list "
                                                      "--json"])
    show = add_verb(sub, "show", "a topic's policy, groups and partitions",
                    "The topic's policy, each required group's state (absent: Kafka holds no offsets of it) and "
                    "each partition's start, end and the groups' committed offsets.",
                    ["reclaim topics retention show orders"])
    planned = add_verb(sub, "plan", "what would be deleted now, and why (dry run)",
                       "Per partition: where its start would move now and by which rule (the slowest group, the "
                       "minimum, the maximum); nothing is deleted.", ["reclaim topics retention plan orders --json"])
    release = add_verb(sub, "release", "release a group, or the whole topic",
                       "With --group: the group no longer holds the topic's records (a consumer gone for good). "
                       "Without: the topic leaves consumption retention; Kafka's own retention still applies.",
                       ["reclaim topics retention release orders --group old-etl",
                        "reclaim topics retention release orders"])
    release.add_argument("--group", action="append", metavar="GROUP", help="the group to release; repeatable")
    history = add_verb(sub, "history", "the DeleteRecords done on the topic, from the journal",
                       "Every partition whose start the Kafka-topic applier moved: when, from where to where, why "
                       "(the rule and the groups that held it) and whose key signed the decision.",
                       ["reclaim topics retention history orders", "reclaim topics retention history orders --json"])
    store_flags(history)
    for parser in (show, planned, release, history):
        parser.add_argument("topic", help="the Kafka topic")
    for parser in (listing, show, planned, release, history):
        if parser is not release:
            json_flag(parser, "print the result as JSON")
        common(parser)
        parser.set_defaults(run=cmd_retention)
