"""A retry tier's record is verified before any of its headers is acted on, on the real broker: an unsigned
record with a far-future not-before is dead-lettered at once and the due records behind it are deleted; a
genuine record whose not-before was pushed far ahead waits its tier's delay, no longer."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from reclaim.consumers import retry
from reclaim.deletion.outcomes import Outcome, Verdict
from reclaim.deletion.records import pending_deletes_for
from reclaim.producers.topics import TopicNames
from reclaim.schemas import millis_now
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.security.signing import REJECTED, RecordSigner, RecordVerifier
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord
from reclaim.storage.sql_store import open_metadata_store
from tests.support.pipeline import Pipeline, inflight, outcomes, read_all

pytestmark = pytest.mark.integration

KEYRING = Keyring([new_key("controller-1", "controller", Algorithm.HMAC_SHA256)])
SHORT_S, LONG_S = 2, 600
"""The tiers' delays: a hold the test can wait out, and one it cannot."""
FAR_MS = 2**62


@pytest.fixture
def tiers(kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], tmp_path: Path,
          unique_name: Callable[[str], str]) -> Iterator[Pipeline]:
    """A pipeline whose retry tiers wait 2 s and 600 s."""
    fs = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    pipe = Pipeline(kafka_bootstrap, kafka_topics(retry_delays=(SHORT_S, LONG_S)),
                    open_metadata_store(str(tmp_path / "meta.db")), StorageBindings([fs]), unique_name("group"))
    yield pipe
    pipe.close()


def _garbage(pipe: Pipeline, segment: str, count: int) -> list[ChunkRecord]:
    """Chunks whose mark committed: a pending delete naming one of them is obeyed if it verifies."""
    chunks = pipe.write_chunks(pipe.bindings.get("fs-tier2"), segment, count)
    with pipe.store.transaction() as txn:
        pipe.service.commit_mark(txn, chunks, f"mark-{segment}")
    return chunks


def _retry_records(pipe: Pipeline, chunks: list[ChunkRecord], not_before_ms: int, signed: bool = True
                   ) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    """The chunks' pending deletes as a worker re-routes them to a retry tier, with ``not_before_ms``."""
    signer = RecordSigner(KEYRING, "controller")
    records = []
    for offset, info in enumerate(pending_deletes_for(chunks, f"mark-{chunks[0].segment}", millis_now())):
        value, key = pipe.codec.encode(info, pipe.topics.deletion), info.chunk_name.encode()
        origin = retry.Delivery.of(pipe.topics.deletion, 0, offset, None)
        rerouted = retry.reroute_headers(origin, Verdict(Outcome.RETRYABLE, "storage unavailable"), millis_now(), 2, 0)
        history = [(name, raw) for name, raw in rerouted if name != retry.H_NOT_BEFORE]
        history.append((retry.H_NOT_BEFORE, str(not_before_ms).encode()))
        signature = signer.headers(pipe.topics.deletion, key, value) if signed else []
        records.append((key, value, [*signature, *history]))
    return records


def _produce(pipe: Pipeline, topic: str, records: list[tuple[bytes, bytes, list[tuple[str, bytes]]]]) -> None:
    """Write ``records`` to partition 0 of ``topic``, in order."""
    producer = Producer({"bootstrap.servers": pipe.bootstrap, "enable.idempotence": True})
    for key, value, headers in records:
        producer.produce(topic, value, key, partition=0, headers=[*headers])
    assert producer.flush(10) == 0


def test_an_unsigned_record_with_a_far_not_before_is_dead_lettered_and_holds_nothing(tiers: Pipeline) -> None:
    binding = tiers.bindings.get("fs-tier2")
    tier = dict(tiers.topics.retries)[LONG_S]
    junk = _garbage(tiers, "scope/stream/0.#epoch.0", 1)
    genuine = _garbage(tiers, "scope/stream/1.#epoch.0", 3)
    refused_before = REJECTED.labels(tier, "unsigned")._value.get()
    _produce(tiers, tier, _retry_records(tiers, junk, FAR_MS, signed=False)
             + _retry_records(tiers, genuine, millis_now()))

    worker = tiers.worker(verifier=RecordVerifier(KEYRING))
    # Far within the tier's 600 s: neither its hold nor the clamp of a junk record's not-before stands.
    reports = tiers.drain(worker, lambda rs: sum(outcomes(rs).values()) >= 4, timeout_s=60)

    assert outcomes(reports) == {"unauthenticated": 1, "deleted": 3}
    assert sum(report.held for report in reports) == 0
    assert binding.exists(junk[0].name)
    assert not any(binding.exists(chunk.name) for chunk in genuine)
    [letter] = read_all(tiers, tiers.topics.dlq, 1)
    headers = {name: raw.decode() for name, raw in letter.headers() or []}
    assert headers[retry.H_OUTCOME] == "unauthenticated" and "unsigned" in headers[retry.H_ERROR]
    assert headers[retry.H_TOPIC] == tier  # where it was read, not the origin its headers claim
    assert REJECTED.labels(tier, "unsigned")._value.get() == refused_before + 1
    worker.commit()
    assert inflight(tiers) == 0


def test_a_genuine_record_with_its_not_before_pushed_far_ahead_waits_its_tiers_delay_only(tiers: Pipeline) -> None:
    binding = tiers.bindings.get("fs-tier2")
    tier = dict(tiers.topics.retries)[SHORT_S]
    chunks = _garbage(tiers, "scope/stream/0.#epoch.0", 1)
    worker = tiers.worker(verifier=RecordVerifier(KEYRING))
    # Every partition assigned first, so the record is read well within its tier's delay.
    assert worker.wait_for_assignment(partitions=2 * len(tiers.topics.deletion_inputs))
    written = time.time()
    _produce(tiers, tier, _retry_records(tiers, chunks, FAR_MS))

    reports = tiers.drain(worker, lambda rs: outcomes(rs).get("deleted", 0) >= 1, timeout_s=60)
    waited = time.time() - written

    assert outcomes(reports) == {"deleted": 1}
    assert not binding.exists(chunks[0].name)
    assert sum(report.held for report in reports) >= 1  # held first: the tier's delay still stands
    assert SHORT_S - 0.1 <= waited < SHORT_S + 20
    worker.commit()
    assert inflight(tiers) == 0
