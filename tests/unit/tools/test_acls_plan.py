"""``reclaim acls plan``: what each role is granted, and the refusals, without a broker."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from reclaim.cli.main import main
from reclaim.exits import UsageError
from reclaim.producers.topics import TopicNames
from reclaim.tools.acls import ROLES, Grant, Names, binding_rows, bindings, check_principal, plan

NAMES = Names(TopicNames.for_prefix("p.", (1, 2)), "p.", "workers", "appliers", ("orders",), ("billing",))


def _ops(role: str) -> set[tuple[str, str, str, str]]:
    return {(g.resource, g.pattern, g.name, g.operation) for g in plan(role, NAMES)}


def test_every_role_has_a_plan_and_nothing_on_the_cluster_or_transactional_ids() -> None:
    for role in ROLES:
        grants = plan(role, NAMES)
        assert grants and all(g.why for g in grants), role
        assert {g.resource for g in grants} <= {"TOPIC", "GROUP"}, role  # no IDEMPOTENT_WRITE, no CLUSTER
        assert len(grants) == len({(g.resource, g.pattern, g.name, g.operation) for g in grants})


def test_only_names_made_at_run_time_are_prefixed() -> None:
    prefixed = {(role, g.resource, g.name) for role in ROLES for g in plan(role, NAMES) if g.pattern == "PREFIXED"}
    assert prefixed == {("admin", "TOPIC", "p.")}


def test_the_roles_that_write_a_deletion_or_a_truncation() -> None:
    writers = {role: {g.name for g in plan(role, NAMES) if g.operation == "WRITE"} for role in ROLES}
    assert {role for role, topics in writers.items() if "p.ledger-deletion" in topics} == {
        "controller", "truncation-applier", "operator"}
    assert {role for role, topics in writers.items() if "p.truncation" in topics} == {"retention-job"}
    assert not any("p.stream-config" in topics for topics in writers.values())  # the admin's (its prefix) only
    assert writers["controller"] == {"p.ledger-deletion", "p.stream-topology", "p.stream-cuts"}
    assert writers["subscriber"] == {"p.subscribers", "p.subscriber-cuts"}
    assert writers["worker"] == {"p.ledger-deletion.retry-1s", "p.ledger-deletion.retry-2s", "p.ledger-deletion.dlq"}
    # The admin's prefix, and what it reads of the retained topics and groups to set, show and plan their policies.
    assert _ops("admin") == {("TOPIC", "PREFIXED", "p.", "ALL"), ("TOPIC", "LITERAL", "orders", "DESCRIBE"),
                             ("TOPIC", "LITERAL", "orders", "DESCRIBE_CONFIGS"),
                             ("GROUP", "LITERAL", "billing", "DESCRIBE")}


def test_readers_and_groups() -> None:
    assert ("GROUP", "LITERAL", "workers", "READ") in _ops("worker")
    assert ("GROUP", "LITERAL", "appliers", "READ") in _ops("truncation-applier")
    assert {name for _, _, name, op in _ops("retention-job") if op == "READ"} == {
        "p.stream-topology", "p.stream-config", "p.subscribers", "p.subscriber-cuts", "p.stream-cuts",
        "p.retention-wakeups", "p.topic-retention", "p.topic-cuts"}
    assert {(name, op) for res, _, name, op in _ops("operator") if res == "GROUP"} == {
        ("reclaim-dlq-reader", "DESCRIBE"), ("workers", "DESCRIBE")}
    assert ("TOPIC", "LITERAL", "p.ledger-deletion.dlq", "DELETE") in _ops("operator")


def test_refusals() -> None:
    with pytest.raises(UsageError, match="unknown role 'root'"):
        plan("root", NAMES)
    with pytest.raises(UsageError, match="prefix is empty"):
        plan("admin", Names(TopicNames.for_prefix(""), ""))
    for bad in ("alice", "User:", "User:*", "Group:x", "User:a b"):
        with pytest.raises(UsageError, match="User:NAME"):
            check_principal(bad)
    assert check_principal("User:CN=reclaim-worker,O=example") == "User:CN=reclaim-worker,O=example"


def test_bindings_are_confluent_kafka_acl_bindings() -> None:
    binding = bindings("User:w", [Grant("GROUP", "PREFIXED", "g-", "READ")])[0]
    assert (binding.restype.name, binding.resource_pattern_type.name, binding.name, binding.principal,
            binding.host, binding.operation.name, binding.permission_type.name) == (
        "GROUP", "PREFIXED", "g-", "User:w", "*", "READ", "ALLOW")


def test_cli_plan_table_json_and_one_line_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acls", "plan", "--role", "subscriber", "--principal", "User:sub", "--topic-prefix", "q."]) == 0
    out = capsys.readouterr().out
    assert "subscriber as User:sub" in out and "q.subscriber-cuts" in out and "WRITE" in out
    assert main(["acls", "plan", "--role", "worker", "--principal", "User:w", "--json", "--retry-delays", "5",
                 "--group-id", "g"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == binding_rows("User:w", plan("worker", Names(TopicNames.for_prefix("reclaim.", (5,)), "reclaim.",
                                                               "g")))
    for argv in (["--role", "nobody", "--principal", "User:w"], ["--role", "worker", "--principal", "w"]):
        assert main(["acls", "plan", *argv]) == 64
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("reclaim: error: ")


def test_the_topic_retention_role_is_granted_on_the_topics_and_groups_it_retains() -> None:
    names = Names(TopicNames.for_prefix("p."), "p.", retained_topics=("orders", "clicks-*"),
                  retained_groups=("etl-*",))
    grants = {(g.resource, g.pattern, g.name, g.operation) for g in plan("topic-retention", names)}
    assert {("TOPIC", "LITERAL", "orders", "DELETE"), ("TOPIC", "PREFIXED", "clicks-", "DELETE"),
            ("TOPIC", "PREFIXED", "clicks-", "DESCRIBE_CONFIGS"), ("GROUP", "PREFIXED", "etl-", "DESCRIBE"),
            ("TOPIC", "LITERAL", "p.topic-cuts", "WRITE"), ("TOPIC", "LITERAL", "p.topic-truncation", "READ"),
            ("GROUP", "LITERAL", "reclaim-topic-truncation", "READ"),
            ("TOPIC", "LITERAL", "__consumer_offsets", "READ")} <= grants
    assert not any(op in ("ALL", "ALTER") or name == "" for _, _, name, op in grants)
    assert not any(resource == "BROKER" for resource, *_ in grants)  # the cluster only for --max-bytes' sizes
    sized = {(g.resource, g.name, g.operation) for g in plan("topic-retention", replace(names, retained_sizes=True))}
    assert sized - {(r, n, o) for r, _, n, o in grants} == {("BROKER", "kafka-cluster", "DESCRIBE")}
    with pytest.raises(UsageError, match="--retained-topic NAME"):
        plan("topic-retention", Names(TopicNames.for_prefix("p."), "p."))
