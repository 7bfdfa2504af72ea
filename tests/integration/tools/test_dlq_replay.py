"""``reclaim dlq replay`` and ``purge`` against a real broker: a replay sends each record once, ever; a
purge drops exactly what its plan said; a record replayed once its cause is fixed ends deleted; a replayed
record keeps its signature, so a verifying worker obeys a genuine one and refuses a forged one."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Message

from reclaim.consumers import retry
from reclaim.consumers.retry import Delivery, RetryTiers
from reclaim.consumers.routing import route
from reclaim.deletion.mark import LedgerDeletionService
from reclaim.exits import ExitCode
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.security.signing import AuthMode, RecordSigner, RecordVerifier, signature_headers
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.tools.dlq.reader import Reader, read_all, scan, watermarks
from reclaim.tools.dlq.replay import H_REPLAYED_FROM, H_REPLAYED_ORIGIN, Pacer, ReplaySource, ReplayTopics, replay
from reclaim.tools.dlq.selection import Sendable
from reclaim.tools.topics import dlq_replayed_topic
from tests.support.cli import run_reclaim
from tests.support.dlq import FATAL, SLOW, dead_letter, dlq, env_of, flush, one_line_error
from tests.support.pipeline import Pipeline, outcomes

pytestmark = pytest.mark.integration


def deletion_records(pipeline: Pipeline) -> list[Message]:
    messages, _ = read_all(pipeline.bootstrap, pipeline.topics.deletion)
    return messages


def dlq_watermarks(pipeline: Pipeline) -> tuple[int, int]:
    reading = Reader(pipeline.bootstrap)
    try:
        return watermarks(reading.consumer, pipeline.topics.dlq)[0]
    finally:
        reading.close()


def test_a_replay_sends_each_record_once_however_often_it_runs(pipe: Pipeline, tmp_path: Path) -> None:
    dead_letter(pipe, 3, FATAL, "group-a")
    dead_letter(pipe, 4, SLOW, "group-a")
    dead_letter(pipe, 5, FATAL, "group-a")
    dead_letter(pipe, 3, FATAL, "group-b")  # a copy of the first, from another group
    flush(pipe)

    dry = dlq(pipe, tmp_path, "replay", "--reason", "fatal", "--dry-run")
    assert (dry["to_send"], dry["duplicates"], [r["offset"] for r in dry["records"]]) == (2, 1, [0, 2])
    assert deletion_records(pipe) == []  # a dry run sends nothing

    first = dlq(pipe, tmp_path, "replay", "--reason", "fatal", "--rate", "50")
    assert (first["sent"], first["already_replayed"]) == (2, 0)
    sent = deletion_records(pipe)
    assert {m.key() for m in sent} == {b"scope/stream/0.#epoch.0.E-1-O-3.forged",
                                       b"scope/stream/0.#epoch.0.E-1-O-5.forged"}
    headers = [dict(m.headers() or []) for m in sent]
    assert {h[H_REPLAYED_FROM] for h in headers} == {f"{pipe.topics.dlq}/0/0".encode(),
                                                     f"{pipe.topics.dlq}/0/2".encode()}
    assert {h[H_REPLAYED_ORIGIN] for h in headers} == {f"{pipe.topics.deletion}/0/3".encode(),
                                                       f"{pipe.topics.deletion}/0/5".encode()}
    assert all(set(h) == {H_REPLAYED_FROM, H_REPLAYED_ORIGIN} for h in headers)  # no retry history

    again = dlq(pipe, tmp_path, "replay", "--reason", "fatal")
    assert (again["sent"], again["already_replayed"]) == (0, 2)
    everything = dlq(pipe, tmp_path, "replay")  # the rest, and nothing twice
    assert (everything["sent"], everything["already_replayed"]) == (1, 2)
    assert len(deletion_records(pipe)) == 3

    text = run_reclaim("dlq", "replay", env=env_of(pipe, tmp_path), timeout=120, check=True).stdout
    assert text.startswith(f"sent 0 record(s) to {pipe.topics.deletion} (3 already replayed, skipped)")



def test_a_record_purged_between_the_choosing_read_and_the_sending_one_is_counted_gone_not_sent(
        pipe: Pipeline, tmp_path: Path) -> None:
    # The first read holds only where each chosen record sits; one purged before the second read is not sent.
    for offset in range(3):
        dead_letter(pipe, offset, FATAL, "group-a")
    flush(pipe)
    found = scan(pipe.bootstrap, pipe.topics.dlq, pipe.codec, Sendable.of)
    assert [s.offset for s in found.letters] == [0, 1, 2]
    run_reclaim("dlq", "purge", "--up-to", "0:0", "--yes", env=env_of(pipe, tmp_path), timeout=120, check=True)
    topics = ReplayTopics(pipe.topics.deletion, dlq_replayed_topic(pipe.topics))
    progress: list[int] = []
    sent, gone = replay(ReplaySource(pipe.bootstrap, pipe.topics.dlq, pipe.codec), topics, found.letters,
                        Pacer(1000), on_sent=progress.append)
    assert (sent, gone, sum(progress)) == (2, 1, 2)
    assert sorted(m.key() for m in deletion_records(pipe)) == [b"scope/stream/0.#epoch.0.E-1-O-1.forged",
                                                               b"scope/stream/0.#epoch.0.E-1-O-2.forged"]
    # The command says the same of what it sends now: nothing new, the two remembered.
    again = dlq(pipe, tmp_path, "replay")
    assert (again["sent"], again["gone"], again["already_replayed"]) == (0, 0, 2)


def test_a_purge_drops_exactly_what_its_plan_says(pipe: Pipeline, tmp_path: Path) -> None:
    for offset, verdict in enumerate((FATAL, FATAL, SLOW, FATAL, SLOW)):
        dead_letter(pipe, offset, verdict, "group-a")
    flush(pipe)
    env = env_of(pipe, tmp_path)

    refused = run_reclaim("dlq", "purge", "--reason", "fatal", env=env, timeout=120)  # no terminal, no --yes
    assert "confirm with --yes" in one_line_error(refused, ExitCode.USAGE)
    assert "partition 0: drop offsets 0..1 (2 record(s)); keep offsets 2..4 (3 record(s)): offset 2 does not " \
           "match" in refused.stdout and "1 matching record(s) after it stay too" in refused.stdout
    assert dlq_watermarks(pipe) == (0, 5)

    plan = dlq(pipe, tmp_path, "purge", "--reason", "fatal", "--yes")
    [partition] = plan["partitions"]
    assert (plan["dropped"], plan["kept"], partition["drop_to"], partition["matching_kept"]) == (2, 3, 2, 1)
    assert dlq_watermarks(pipe) == (2, 5)
    left = dlq(pipe, tmp_path, "list", "--oldest-first")
    assert [r["offset"] for r in left["records"]] == [2, 3, 4] and left["total"] == 3

    # Nothing matches at the start any more: nothing is dropped.
    assert dlq(pipe, tmp_path, "purge", "--reason", "fatal", "--yes")["dropped"] == 0
    up_to = run_reclaim("dlq", "purge", "--up-to", "0:3", "--yes", env=env, timeout=120, check=True).stdout
    assert up_to.splitlines() == [
        "partition 0: drop offsets 2..3 (2 record(s)); keep offsets 4..4 (1 record(s)): only offsets up to 3 were "
        "asked for",
        f"purged partition 0 of {pipe.topics.dlq}: it now starts at offset 4"]
    assert dlq_watermarks(pipe) == (4, 5)
    assert [r["offset"] for r in dlq(pipe, tmp_path, "list")["records"]] == [4]


# The DLQ tools are what this checks; the S3 deletes are the deletion suites', which run on every S3 server.
@pytest.mark.s3_servers("moto")
def test_a_record_replayed_once_its_cause_is_fixed_ends_deleted_and_the_audit_is_clean(
        pipe: Pipeline, tmp_path: Path, make_tier2: Callable[[str], object], s3_endpoint: S3Endpoint,
        s3_bucket: str) -> None:
    s3 = make_tier2("s3")
    assert isinstance(s3, S3ChunkStorage)
    chunks = pipe.write_chunks(s3, "scope/stream/0.#epoch.0", 1)
    pipe.service.mark(chunks)
    # The worker is not configured with the S3 binding the record names: a fatal dead letter.
    first = pipe.worker()
    reports = pipe.drain(first, lambda rs: sum(r.dead_lettered for r in rs) >= 1)
    assert outcomes(reports) == {"fatal": 1}
    pipe.workers.remove(first)
    first.close()
    assert s3.exists(chunks[0].name)
    [dead] = dlq(pipe, tmp_path, "list", "--error-class", "UnknownBinding")["records"]
    assert dead["chunk"] == chunks[0].name

    # The fix: the worker gets the binding. Then the replay, and the worker deletes the chunk.
    pipe.bindings.register(s3)
    replayed = dlq(pipe, tmp_path, "replay", "--error-class", "UnknownBinding")
    assert replayed["sent"] == 1
    second = pipe.worker()
    reports = pipe.drain(second, lambda rs: outcomes(rs).get("deleted", 0) >= 1)
    assert outcomes(reports) == {"deleted": 1}
    second.commit()
    assert not s3.exists(chunks[0].name)

    audit_env = env_of(pipe, tmp_path, **s3_endpoint.reclaim_env(s3_bucket))
    audit = run_reclaim("audit", "--json", env=audit_env, timeout=120)
    assert audit.returncode == ExitCode.OK, (audit.stdout, audit.stderr)
    assert json.loads(audit.stdout)["clean"] is True


def test_a_replayed_record_keeps_its_signature_a_genuine_one_is_deleted_a_forged_one_refused(
        pipe: Pipeline, tmp_path: Path) -> None:
    keyring = Keyring([new_key("controller-1", "controller", Algorithm.HMAC_SHA256)])
    signing = LedgerDeletionService(pipe.store, KafkaPendingDeletePublisher(
        pipe.producer, pipe.codec, pipe.topics.deletion, signer=RecordSigner(keyring, "controller")))
    other = FileSystemChunkStorage(tmp_path / "other", name="fs-other")  # not the worker's yet: fatal
    [genuine] = pipe.write_chunks(other, "scope/stream/0.#epoch.0", 1)
    [unsigned] = pipe.write_chunks(other, "scope/stream/1.#epoch.0", 1)
    assert signing.mark([genuine]).failed == () and pipe.service.mark([unsigned]).failed == ()  # unsigned
    # Both dead-lettered while record authentication was rolling out (unsigned records obeyed).
    first = pipe.worker(verifier=RecordVerifier(keyring, AuthMode.ROLLOUT))
    reports = pipe.drain(first, lambda rs: sum(r.dead_lettered for r in rs) >= 2)
    assert outcomes(reports) == {"fatal": 2}
    pipe.workers.remove(first)
    first.close()
    letters = {m.key(): m for m in read_all(pipe.bootstrap, pipe.topics.dlq)[0]}
    signature = signature_headers(letters[genuine.name.encode()].headers())
    assert [name for name, _ in signature] == ["reclaim.key-id", "reclaim.signature"]
    # A forgery: the unsigned record's key and value with the genuine one's signature, dead-lettered as
    # another record (its own origin), so the replay does not take it for a copy of either.
    now = int(time.time() * 1000)
    forged = route(FATAL, Delivery(1, now, None, pipe.topics.deletion, 0, 99, now),
                   RetryTiers(pipe.topics.retries, max_attempts=3), pipe.topics.dlq, now, "group-x")
    victim = letters[unsigned.name.encode()]
    pipe.producer.send(pipe.topics.dlq, victim.value() or b"", key=victim.key(),
                       headers=[*(forged.headers or ()), *signature])
    flush(pipe)

    pipe.bindings.register(other)
    assert dlq(pipe, tmp_path, "replay")["sent"] == 3
    # The replayed records, told from phase 1's by their replay header (offsets are per partition: a chunk's
    # replayed record may follow its phase-1 record at offset 1).
    sent = [m for m in deletion_records(pipe) if H_REPLAYED_FROM in dict(m.headers() or [])]
    kept = [signature_headers(m.headers()) for m in sent if m.key() == genuine.name.encode()]
    assert kept == [signature]
    second = pipe.worker(verifier=RecordVerifier(keyring))  # enforce
    reports = pipe.drain(second, lambda rs: sum(outcomes(rs).values()) >= 3)
    assert outcomes(reports) == {"deleted": 1, "unauthenticated": 2}
    second.commit()
    assert not other.exists(genuine.name) and other.exists(unsigned.name)

    refused = dlq(pipe, tmp_path, "list", "--outcome", "unauthenticated")["records"]
    assert sorted(r["error"].split(":")[0] for r in refused) == ["unauthenticated (bad-signature)",
                                                                 "unauthenticated (unsigned)"]
    assert {(r["chunk"], r["error_class"]) for r in refused} == {(unsigned.name, "Unauthenticated")}
    counted = dlq(pipe, tmp_path, "stats")
    assert counted["by_outcome"] == {"fatal": 3, "unauthenticated": 2}
    table = run_reclaim("dlq", "list", "--outcome", "unauthenticated", env=env_of(pipe, tmp_path), timeout=120,
                        check=True).stdout
    assert table.count("unauthenticated") >= 2 and unsigned.name in table
    where = f"{refused[0]['partition']}:{refused[0]['offset']}"
    shown = run_reclaim("dlq", "show", where, env=env_of(pipe, tmp_path), timeout=120, check=True).stdout
    assert f"header {retry.H_OUTCOME}" in shown and "Unauthenticated" in shown
