"""Phase 2 obeys only pending deletes signed by the controller's key, on the real broker: a forged,
altered, re-targeted or retired-key record is dead-lettered as unauthenticated before any metadata or
storage call, and the chunks it names stay."""

from __future__ import annotations

import pytest

from reclaim.consumers import retry
from reclaim.deletion.mark import LedgerDeletionService
from reclaim.deletion.records import pending_deletes_for
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher
from reclaim.schemas import millis_now
from reclaim.security.keyring import Algorithm, Key, Keyring, KeyStatus, new_key
from reclaim.security.signing import REJECTED, AuthMode, RecordSigner, RecordVerifier
from tests.support.pipeline import Pipeline, outcomes, read_all

pytestmark = pytest.mark.integration

CONTROLLER_KEY = new_key("controller-1", "controller", Algorithm.HMAC_SHA256)
KEYRING = Keyring([CONTROLLER_KEY, new_key("job-1", "retention-job", Algorithm.ED25519)])


def signed_service(pipe: Pipeline, keyring: Keyring = KEYRING) -> LedgerDeletionService:
    publisher = KafkaPendingDeletePublisher(pipe.producer, pipe.codec, pipe.topics.deletion,
                                            signer=RecordSigner(keyring, "controller"))
    return LedgerDeletionService(pipe.store, publisher)


def mark(pipe: Pipeline, service: LedgerDeletionService, segment: str, count: int) -> list[str]:
    chunks = pipe.write_chunks(pipe.bindings.get("fs-tier2"), segment, count)
    assert service.mark(chunks).failed == ()
    return [chunk.name for chunk in chunks]


def dead_letter_outcomes(pipe: Pipeline, expected: int) -> list[tuple[str, str]]:
    letters = read_all(pipe, pipe.topics.dlq, expected)
    headers = [dict(letter.headers() or []) for letter in letters]
    return [(h[retry.H_OUTCOME].decode(), h[retry.H_ERROR].decode()) for h in headers]


def test_unsigned_pending_deletes_are_dead_lettered_and_delete_nothing(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    forged = mark(pipeline, pipeline.service, "scope/stream/0.#epoch.0", 3)  # the fixture's publisher signs nothing
    genuine = mark(pipeline, signed_service(pipeline), "scope/stream/1.#epoch.0", 2)
    refused_before = REJECTED.labels(pipeline.topics.deletion, "unsigned")._value.get()

    worker = pipeline.worker(verifier=RecordVerifier(KEYRING))
    reports = pipeline.drain(worker, lambda rs: sum(outcomes(rs).values()) >= 5)

    assert outcomes(reports) == {"unauthenticated": 3, "deleted": 2}
    assert all(binding.exists(name) for name in forged)
    assert not any(binding.exists(name) for name in genuine)
    letters = dead_letter_outcomes(pipeline, 3)
    assert [outcome for outcome, _ in letters] == ["unauthenticated"] * 3
    assert all("unsigned" in reason for _, reason in letters)
    assert REJECTED.labels(pipeline.topics.deletion, "unsigned")._value.get() == refused_before + 3


def test_records_signed_for_another_topic_or_record_or_by_another_key_are_refused(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 4)
    records = pending_deletes_for(chunks, "forged-mark", millis_now())
    values = [pipeline.codec.encode(r, pipeline.topics.deletion) for r in records]
    keys = [r.chunk_name.encode() for r in records]
    genuine = RecordSigner(KEYRING, "controller")
    impostor = RecordSigner(Keyring([new_key("controller-1", "controller", Algorithm.HMAC_SHA256)]), "controller")
    job = RecordSigner(KEYRING, "retention-job")
    forgeries = [
        genuine.headers(pipeline.topics.truncation, keys[0], values[0]),  # a genuine signature, for another topic
        genuine.headers(pipeline.topics.deletion, keys[0], values[0]),  # ... for another chunk's record
        impostor.headers(pipeline.topics.deletion, keys[2], values[2]),  # the right key id, not the right key
        job.headers(pipeline.topics.deletion, keys[3], values[3]),  # a valid key of a role that may not
    ]
    for index, headers in enumerate(forgeries):
        pipeline.producer.send(pipeline.topics.deletion, values[index], key=keys[index], headers=headers)
    pipeline.producer.producer.flush(10)
    with pipeline.store.transaction() as txn:  # the chunks really are garbage: only the signature stands
        pipeline.service.commit_mark(txn, chunks, "forged-mark")

    worker = pipeline.worker(verifier=RecordVerifier(KEYRING))
    reports = pipeline.drain(worker, lambda rs: sum(outcomes(rs).values()) >= 4)
    assert outcomes(reports) == {"unauthenticated": 4}
    assert all(binding.exists(chunk.name) for chunk in chunks)
    reasons = [reason for _, reason in dead_letter_outcomes(pipeline, 4)]
    assert sorted(reason.split(")")[0] for reason in reasons) == sorted(
        ["unauthenticated (bad-signature"] * 3 + ["unauthenticated (wrong-role"])


def test_records_signed_by_a_retired_key_are_refused(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    retired = Keyring([Key(CONTROLLER_KEY.id, "controller", Algorithm.HMAC_SHA256, KeyStatus.RETIRED,
                           secret=CONTROLLER_KEY.secret)])
    names = mark(pipeline, signed_service(pipeline), "scope/stream/1.#epoch.0", 1)
    worker = pipeline.worker(verifier=RecordVerifier(retired))
    reports = pipeline.drain(worker, lambda rs: sum(outcomes(rs).values()) >= 1)
    assert outcomes(reports) == {"unauthenticated": 1}
    assert binding.exists(names[0])


def test_rollout_accepts_unsigned_records_and_still_refuses_forged_ones(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    unsigned = mark(pipeline, pipeline.service, "scope/stream/0.#epoch.0", 2)
    signed = mark(pipeline, signed_service(pipeline), "scope/stream/1.#epoch.0", 1)
    other = Keyring([new_key("controller-1", "controller", Algorithm.HMAC_SHA256)])
    forged = mark(pipeline, signed_service(pipeline, other), "scope/stream/2.#epoch.0", 1)

    worker = pipeline.worker(verifier=RecordVerifier(KEYRING, AuthMode.ROLLOUT))
    reports = pipeline.drain(worker, lambda rs: sum(outcomes(rs).values()) >= 4)
    assert outcomes(reports) == {"deleted": 3, "unauthenticated": 1}
    assert not any(binding.exists(name) for name in unsigned + signed)
    assert binding.exists(forged[0])


def test_a_retried_record_keeps_its_signature_through_the_retry_tier(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 2)
    publisher = KafkaPendingDeletePublisher(pipeline.producer, pipeline.codec, pipeline.topics.deletion,
                                            signer=RecordSigner(KEYRING, "controller"))
    assert publisher.publish(pending_deletes_for(chunks, "late-mark", millis_now())) == []
    worker = pipeline.worker(verifier=RecordVerifier(KEYRING), mark_timeout_s=120)
    first = pipeline.drain(worker, lambda rs: outcomes(rs).get("mark-pending", 0) >= 2)
    assert outcomes(first) == {"mark-pending": 2}  # to the retry tier, signature carried along
    with pipeline.store.transaction() as txn:
        pipeline.service.commit_mark(txn, chunks, "late-mark")
    later = pipeline.drain(worker, lambda rs: outcomes(rs).get("deleted", 0) >= 2, timeout_s=60)
    assert outcomes(later) == {"deleted": 2}
    assert not any(binding.exists(chunk.name) for chunk in chunks)
