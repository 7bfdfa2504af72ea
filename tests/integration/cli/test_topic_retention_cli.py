"""``reclaim topics retain`` and ``reclaim topics retention list | show | plan | release`` on the real broker, with
real consumer groups and the policy signed with the admin key; forged and unsigned policies refused."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.localstack.procs import free_port
from reclaim.producers.producer import RecordProducer
from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.producers.topics import TopicNames
from reclaim.schemas.base import millis_now
from reclaim.schemas.codec import build_codec
from reclaim.schemas.topic_retention import TopicCut, TopicRetentionPolicy
from reclaim.security.keyring import load_keyring
from reclaim.security.signing import RecordSigner, RecordVerifier, Unauthenticated
from reclaim.tools.dlq.reader import read_all
from reclaim.tools.topics import admin_client
from tests.support.cli import clean_env, one_line_error, run_reclaim
from tests.support.deployment import metric, wait_for
from tests.support.kafka_topics import HOUR_MS, commit, create_topic, produce, start_offset

pytestmark = pytest.mark.integration


def test_retain_list_show_plan_and_release_a_topic_signed_by_the_admin(
        tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    keyring, other = tmp_path / "keys.toml", tmp_path / "other.toml"
    prefix = unique_name("tr") + "."
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_TOPIC_PREFIX=prefix,
                    RECLAIM_KEYRING=str(keyring))
    for ring, role in ((keyring, "admin"), (other, "operator")):
        run_reclaim("keys", "new", "--role", role, "--id", f"{role}-1", "--keyring", str(ring), env=env, check=True)
    run_reclaim("topics", "create", env=env, check=True, timeout=120)
    admin = admin_client(kafka_bootstrap)
    topic = unique_name("orders")
    create_topic(admin, topic, 2)
    for partition in (0, 1):
        produce(kafka_bootstrap, topic, partition, [millis_now() - 2 * HOUR_MS + i for i in range(10)])
    fast, slow = unique_name("fast"), unique_name("slow")
    commit(kafka_bootstrap, fast, topic, {0: 10, 1: 10})
    commit(kafka_bootstrap, slow, topic, {0: 4, 1: 6})

    # Refused in one line, before anything is published.
    compacted = unique_name("table")
    create_topic(admin, compacted, 1, {"cleanup.policy": "compact"})
    for args, expected in (
            ([compacted, "--groups", fast], "is compacted only (cleanup.policy=compact)"),
            ([unique_name("absent"), "--groups", fast], "does not exist"),
            (["bad/name", "--groups", fast], "is not a Kafka topic name"),
            ([topic], "retain needs the groups"),
            ([topic, "--groups", fast, "--min", "2h", "--max", "1h"], "--max (3600 s) must not be below --min"),
            ([topic, "--group-pattern", "etl-(", "--min", "1h"], "is not a regular expression"),
            ([topic, "--groups", fast, "--spark-query", "daily"], "--spark-query takes NAME=CHECKPOINT_LOCATION"),
            ([topic, "--groups", fast, "--max-bytes", "-1"], "--max-bytes")):
        refused = run_reclaim("topics", "retain", *args, env=env, timeout=120)
        assert expected in one_line_error(refused, 64), (args, refused.stderr)
    listed = run_reclaim("topics", "retention", "list", env=env, check=True, timeout=120)
    assert "no topic under consumption retention" in listed.stdout

    done = run_reclaim("topics", "retain", topic, "--groups", f"{fast},{slow}", "--min", "1h", "--max", "7d",
                       "--max-bytes", "1GiB", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"held by {fast}, {slow}; min 1h, max 1w, max 1073741824 bytes per partition" in done.stdout
    assert "signed by admin/admin-1" in done.stdout
    [policy] = json.loads(run_reclaim("topics", "retention", "list", "--json", env=env, check=True,
                                      timeout=120).stdout)
    assert (policy["topic"], policy["groups"], policy["min_ms"]) == (topic, [fast, slow], 3_600_000)

    planned = json.loads(run_reclaim("topics", "retention", "plan", topic, "--json", env=env, check=True,
                                     timeout=120).stdout)
    assert [(p["partition"], p["start"], p["to"], p["rule"], p["held_by"]) for p in planned["partitions"]] == [
        (0, 0, 4, "AT_BOUND", [slow]), (1, 0, 6, "AT_BOUND", [slow])]
    text = run_reclaim("topics", "retention", "plan", topic, env=env, check=True, timeout=120).stdout
    assert "10 record(s) would be deleted (dry run: nothing is deleted)" in text
    assert "--max-bytes is not in this plan: the topic poller reckons" in text
    assert f"partition 0: 0 -> 4: 4 record(s), at the slowest required group's committed offset (held by {slow})" \
        in text
    assert start_offset(admin, topic, 0) == 0  # a dry run
    shown = run_reclaim("topics", "retention", "show", topic, env=env, check=True, timeout=120).stdout
    assert f"{slow}: empty, committed on 2 of 2 partitions" in shown and "partition 1: records 0..10" in shown

    # A forged policy (another role's key) and an unsigned one are refused: the admin's stays in force.
    names = TopicNames.for_prefix(prefix)
    forged = TopicRetentionPolicy(topic, policy["topic_id"], (fast,), 0, millis_now() + 1000)
    for signer in (RecordSigner(load_keyring(other), "operator"), None):
        publisher = ConfirmedPublisher(RecordProducer(kafka_bootstrap, "idempotent-producer"), build_codec(),
                                       signer=signer)
        try:
            publisher.publish(names.topic_retention, forged, topic)
        finally:
            publisher.close()
    listed = run_reclaim("topics", "retention", "list", "--json", env=env, timeout=120)
    assert [p["groups"] for p in json.loads(listed.stdout)] == [[fast, slow]]
    assert "refused" in listed.stderr

    # Releasing the slow group: the fast one alone holds (the minimum keeps nothing of two-hour-old records).
    released = run_reclaim("topics", "retention", "release", topic, "--group", slow, env=env, check=True,
                           timeout=120)
    assert f"{slow} released" in released.stdout
    planned = json.loads(run_reclaim("topics", "retention", "plan", topic, "--json", env=env, check=True,
                                     timeout=120).stdout)
    assert [(p["to"], p["held_by"]) for p in planned["partitions"]] == [(10, [fast]), (10, [fast])]
    run_reclaim("topics", "retention", "release", topic, env=env, check=True, timeout=120)
    assert "no topic under consumption retention" in run_reclaim("topics", "retention", "list", env=env,
                                                                 check=True, timeout=120).stdout
    gone = run_reclaim("topics", "retention", "plan", topic, env=env, timeout=120)
    assert gone.returncode == 64 and "Traceback" not in gone.stderr  # the two refused records warned of first
    assert "is not under consumption retention" in gone.stderr.strip().splitlines()[-1]


def _cuts(bootstrap: str, topic: str, keyring: Path) -> list[TopicCut]:
    """Every topic cut on ``topic`` whose signature is the topic-retention role's, in order."""
    messages, _ = read_all(bootstrap, topic)
    verifier = RecordVerifier(load_keyring(keyring))
    codec = build_codec()
    return [codec.decode(m.value() or b"", topic, TopicCut) for m in messages
            if not isinstance(verifier.verify(topic, m.key(), m.value(), m.headers() or [],
                                              frozenset({"topic-retention"})), Unauthenticated)]


def test_the_topic_poller_publishes_signed_cuts_when_the_groups_move_and_stops_on_sigterm(
        tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    keyring = tmp_path / "keys.toml"
    prefix = unique_name("tp") + "."
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_TOPIC_PREFIX=prefix)
    refused = run_reclaim("topic-poller", env=env, timeout=120)
    assert "the topic poller obeys records" in one_line_error(refused, 64)
    env["RECLAIM_KEYRING"] = str(keyring)
    for role in ("admin", "topic-retention"):
        run_reclaim("keys", "new", "--role", role, "--id", f"{role}-1", "--keyring", str(keyring), env=env, check=True)
    run_reclaim("topics", "create", env=env, check=True, timeout=120)
    admin = admin_client(kafka_bootstrap)
    topic = unique_name("clicks")
    create_topic(admin, topic, 2)
    for partition in (0, 1):
        produce(kafka_bootstrap, topic, partition, [millis_now() - 2 * HOUR_MS + i for i in range(10)])
    prefix_groups = unique_name("etl")
    loader, other = f"{prefix_groups}-loader", f"{prefix_groups}-other"
    commit(kafka_bootstrap, loader, topic, {0: 3, 1: 5})
    elsewhere = unique_name("elsewhere")
    create_topic(admin, elsewhere, 1)
    commit(kafka_bootstrap, other, elsewhere, {0: 0})  # matches, but reads another topic: holds nothing here
    run_reclaim("topics", "retain", topic, "--group-pattern", f"{prefix_groups}-.*", "--min", "1h",
                "--stale-after", "1s", env=env, check=True, timeout=120)
    names = TopicNames.for_prefix(prefix)
    port = free_port()
    poller = subprocess.Popen([sys.executable, "-m", "reclaim", "topic-poller", "--every", "0.5", "--metrics-port",
                               str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("the first cut", lambda: len(_cuts(kafka_bootstrap, names.topic_cuts, keyring)) >= 1)
        first = _cuts(kafka_bootstrap, names.topic_cuts, keyring)[0]
        assert [(p.partition, p.start, p.end) for p in first.partitions] == [(0, 0, 10), (1, 0, 10)]
        assert [(g.group, g.committed.as_dict()) for g in first.groups] == [(loader, {0: 3, 1: 5})]
        assert all(p.young_from is None for p in first.partitions)  # nothing is younger than an hour
        wait_for("the held-back records counted", lambda: metric(
            port, "reclaim_topic_retention_held_records", topic=topic) == 12)
        # The loader's consumers are down (its group is Empty): past --stale-after it is stale, and still holds.
        wait_for("the Empty group reported stale", lambda: metric(
            port, "reclaim_topic_retention_stale_groups", topic=topic) == 1)
        assert metric(port, "reclaim_topic_retention_stalest_group_seconds", topic=topic) >= 1
        assert len(_cuts(kafka_bootstrap, names.topic_cuts, keyring)) == 1  # unchanged: not published again
        commit(kafka_bootstrap, loader, topic, {0: 9})
        wait_for("a cut after the commit", lambda: len(_cuts(kafka_bootstrap, names.topic_cuts, keyring)) == 2)
        assert _cuts(kafka_bootstrap, names.topic_cuts, keyring)[1].groups[0].committed.as_dict() == {0: 9, 1: 5}
    finally:
        poller.terminate()
        code = poller.wait(timeout=60)
    assert code == 0, poller.stderr.read() if poller.stderr else ""
