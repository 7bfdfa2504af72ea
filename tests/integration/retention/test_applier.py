"""Truncation on the real broker: the applier's at-least-once events, and manual truncation by an admin."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reclaim.consumers.truncation_applier import Applied, ApplierConfig, TruncationApplier
from reclaim.producers.topics import TopicNames
from reclaim.schemas import build_codec
from reclaim.schemas.base import millis_now
from reclaim.schemas.streams import (
    RetentionPolicy,
    RetentionType,
    StreamCut,
    StreamCutRecord,
    TruncationEvent,
    TruncationReason,
)
from reclaim.security.keyring import Algorithm, Keyring, load_keyring, new_key
from reclaim.security.live import KeyringFile
from reclaim.security.signing import RecordSigner, RecordVerifier
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.segments.streams import StreamController
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.cli import run_reclaim
from tests.support.kafka_io import Outgoing, produce_confirmed
from tests.support.orders import STREAM, orders_stream

pytestmark = pytest.mark.integration

POLICY = RetentionPolicy(RetentionType.CONSUMPTION)


def cut(a: int, b: int) -> StreamCut:
    return StreamCut.from_mapping({0: a, 1: b})


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[StreamController]:
    with orders_stream(tmp_path) as controller:
        controller.set_policy(STREAM, POLICY)  # the events below are consumption truncations
        yield controller


def event(at: StreamCut, stream: str = STREAM) -> bytes:
    # Decided now: an event decided before its stream was created is skipped as one for a deleted namesake.
    return build_codec().encode(TruncationEvent(stream, at, TruncationReason.CONSUMPTION, millis_now(), POLICY), "t")


def test_applier_applies_once_and_skips_duplicates_behind_unknown_and_garbage(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], controller: StreamController,
        unique_name: Callable[[str], str]) -> None:
    topics = kafka_topics(partitions=1)
    values = [event(cut(10, 10)), event(cut(10, 10)), event(cut(20, 16)), event(cut(5, 5)),
              event(cut(1, 1), "scope/missing"), b"not avro at all", event(StreamCut.from_mapping({0: 1}))]
    produce_confirmed(kafka_bootstrap, [Outgoing(topics.truncation, v, STREAM.encode()) for v in values])
    config = ApplierConfig(kafka_bootstrap, topics.truncation, unique_name("g"), poll_timeout_s=1.0)
    applier = TruncationApplier(config, controller, build_codec())
    outcomes: list[Applied] = []
    for _ in range(30):
        outcomes += applier.run_once()
        if len(outcomes) >= len(values):
            break
    applier.close()
    assert outcomes == [Applied.TRUNCATED, Applied.NO_OP, Applied.TRUNCATED, Applied.NO_OP, Applied.UNKNOWN_STREAM,
                        Applied.INVALID, Applied.INVALID]
    assert controller.head(STREAM) == cut(20, 16)
    assert controller.read_all(f"{STREAM}/0.#epoch.0") == b"x" * 20
    # Everything was final, so a new member of the group has nothing left to read.
    again = TruncationApplier(config, controller, build_codec())
    assert sum(len(again.run_once()) for _ in range(3)) == 0
    again.close()


def cli_env(bootstrap: str, tmp_path: Path, prefix: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    env.update(RECLAIM_BOOTSTRAP=bootstrap, RECLAIM_STATE_DIR=str(tmp_path / "state"), RECLAIM_TOPIC_PREFIX=prefix,
               RECLAIM_PARTITIONS="1", **extra)
    return env


def test_manual_truncation_needs_the_admin_key_is_idempotent_and_journaled(
        kafka_bootstrap: str, tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    admin_keys, other_keys = tmp_path / "admin.toml", tmp_path / "operator.toml"
    env = cli_env(kafka_bootstrap, tmp_path, unique_name("t") + ".", RECLAIM_KEYRING=str(admin_keys))
    for keyring, roles in ((admin_keys, ("controller", "admin")), (other_keys, ("controller", "operator"))):
        for role in roles:
            run_reclaim("keys", "new", "--role", role, "--id", f"{role}-1", "--keyring", str(keyring), env=env,
                        check=True)
    # Claims grant nothing: neither these variables nor the OS user.
    claims = dict(env, RECLAIM_KEYRING=str(other_keys), RECLAIM_PRINCIPAL="alice", RECLAIM_ADMIN_PRINCIPALS="alice",
                  LOGNAME="alice")
    run_reclaim("topics", "create", env=env, check=True)
    run_reclaim("streams", "create", STREAM, "--segments", "2", env=env, check=True)
    policy = run_reclaim("streams", "set-policy", STREAM, "--type", "size", env=env)
    assert policy.returncode == 64
    assert policy.stderr.strip().splitlines()[-1].startswith("reclaim: error: set-policy: a SIZE")
    run_reclaim("streams", "set-policy", STREAM, "--type", "time", "--min", "60000", env=env, check=True)
    store = SQLiteMetadataStore(tmp_path / "state" / "metadata.db")
    segments = ChunkedSegmentStorage(store, FileSystemChunkStorage(tmp_path / "state" / "tier2", name="fs-tier2"),
                                     RecordingGarbageSink())
    writer = StreamController.beside(segments, store.path)
    for number in (0, 1):
        writer.append(f"{STREAM}/{number}.#epoch.0", b"y" * 30)
    shown = json.loads(run_reclaim("streams", "cut", STREAM, env=env, check=True).stdout)
    assert shown["cut"] == {"0": 30, str(1): 30} and shown["size"] == 60 and shown["head"] == {}
    wanted = json.dumps({"0": 12, "1": 7})
    refused = run_reclaim("streams", "truncate", STREAM, "--cut", wanted, env=claims)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        "reclaim: error: the keyring has no active key to sign with for role 'admin'"]
    assert writer.head(STREAM) == StreamCut()
    done = run_reclaim("streams", "truncate", STREAM, "--cut", wanted, env=env, check=True)
    assert "truncated" in done.stdout
    again = run_reclaim("streams", "truncate", STREAM, "--cut", wanted, env=env, check=True)
    assert "nothing to do" in again.stdout
    assert writer.head(STREAM) == cut(12, 7)
    assert writer.read_all(f"{STREAM}/0.#epoch.0") == b"y" * 18
    [entry] = json.loads(run_reclaim("streams", "history", STREAM, "--json", env=env, check=True).stdout)
    assert (entry["reason"], entry["signer"], entry["cut"], entry["state"]) == \
        ("MANUAL", "admin/admin-1", {"0": 12, "1": 7}, "applied")
    assert entry["source"].startswith("reclaim streams truncate at ")
    bad = run_reclaim("streams", "truncate", STREAM, "--cut", "[1, 2]", env=env)
    assert bad.returncode == 64 and "--cut must be a JSON object" in bad.stderr
    writer.close()
    store.close()


def test_a_key_retired_under_a_running_applier_is_refused_within_seconds(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], controller: StreamController,
        unique_name: Callable[[str], str], tmp_path: Path) -> None:
    """Finding 3: an admin key retired with `reclaim keys retire` still truncated until the applier restarted."""
    keyring = tmp_path / "applier.toml"
    env = cli_env(kafka_bootstrap, tmp_path, "unused.")
    run_reclaim("keys", "new", "--role", "admin", "--id", "admin-1", "--keyring", str(keyring), env=env, check=True)
    signer = RecordSigner(load_keyring(keyring), "admin")  # the admin's key as its holder keeps it
    topics = kafka_topics(partitions=1)

    def manual(at: StreamCut) -> Outgoing:
        value = build_codec().encode(TruncationEvent(STREAM, at, TruncationReason.MANUAL, millis_now(), POLICY),
                                     topics.truncation)
        return Outgoing(topics.truncation, value, STREAM.encode(),
                        signer.headers(topics.truncation, STREAM.encode(), value))

    verifier = RecordVerifier(KeyringFile(keyring, check_every_s=0.5))
    applier = TruncationApplier(ApplierConfig(kafka_bootstrap, topics.truncation, unique_name("g"), poll_timeout_s=0.5),
                                controller, build_codec(), verifier=verifier)
    try:
        produce_confirmed(kafka_bootstrap, [manual(cut(4, 4))])
        assert _until_outcome(applier) == [Applied.TRUNCATED]
        run_reclaim("keys", "retire", "--id", "admin-1", "--keyring", str(keyring), env=env, check=True)
        time.sleep(0.6)  # the applier looks at its keyring every 0.5 s here (every 2 s by default)
        produce_confirmed(kafka_bootstrap, [manual(cut(8, 8))])
        assert _until_outcome(applier) == [Applied.UNAUTHENTICATED]
    finally:
        applier.close()
    assert controller.head(STREAM) == cut(4, 4)
    assert [entry.cut for entry in controller.journal(STREAM)] == [tuple(cut(4, 4).as_dict().items())]


def _until_outcome(applier: TruncationApplier) -> list[Applied]:
    for _ in range(40):
        outcomes = applier.run_once()
        if outcomes:
            return outcomes
    return []


def test_a_job_signed_time_truncation_inside_the_policys_minimum_is_refused(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], controller: StreamController,
        unique_name: Callable[[str], str]) -> None:
    """Finding 5: a TIME truncation at the tail, signed with the retention job's genuine key, was applied although
    the stream's policy keeps at least 10^11 ms: a stolen job key truncated anything."""
    keys = Keyring([new_key("job-1", "retention-job", Algorithm.ED25519)])
    policy = RetentionPolicy(RetentionType.TIME, None, 10**11)
    controller.set_policy(STREAM, policy)
    tail, size = controller.tail_cut(STREAM)
    with controller.store.transaction() as txn:  # what the recorder keeps: the tail, recorded just now
        txn.put_recorded(StreamCutRecord(STREAM, tail, millis_now(), size), keep_from_ms=0)
    topics = kafka_topics(partitions=1)
    value = build_codec().encode(TruncationEvent(STREAM, tail, TruncationReason.TIME, millis_now(), policy,
                                                 controller.incarnation(STREAM)), topics.truncation)
    headers = RecordSigner(keys, "retention-job").headers(topics.truncation, STREAM.encode(), value)
    produce_confirmed(kafka_bootstrap, [Outgoing(topics.truncation, value, STREAM.encode(), headers)])
    applier = TruncationApplier(ApplierConfig(kafka_bootstrap, topics.truncation, unique_name("g"), poll_timeout_s=0.5),
                                controller, build_codec(), verifier=RecordVerifier(keys))
    try:
        assert _until_outcome(applier) == [Applied.UNAUTHENTICATED]
    finally:
        applier.close()
    assert controller.head(STREAM) == StreamCut() and controller.journal(STREAM) == []
    assert controller.read_all(f"{STREAM}/0.#epoch.0") == b"x" * 40
