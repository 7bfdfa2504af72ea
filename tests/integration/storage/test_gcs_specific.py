"""The GCS binding on fake-gcs-server: conditional deletes by generation, deletes in batches of 100 with
an answer per object, a missing bucket, an endpoint down, and throttling."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim.localstack.gcs_emulator import GcsEndpoint
from reclaim.localstack.procs import free_port
from reclaim.storage.chunks import ChunkTags, DeleteOutcome
from reclaim.storage.errors import (
    StorageMisconfiguredError,
    StorageUnavailableError,
)
from reclaim.storage.gcs import GcsChunkStorage, GcsSettings
from tests.support.refusing_server import Refusal, refusing_server

pytestmark = pytest.mark.integration

TAGS = ChunkTags(component="c", stream="s", segment="s/0", writer_epoch=1)


def test_deletes_answer_per_object_in_parts_of_a_hundred(gcs_binding: GcsChunkStorage,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    names = [f"s/1/c{i:03d}" for i in range(250)]
    for name in names[:240]:
        gcs_binding.create_with_content(name, b"x", TAGS)
    with caplog.at_level(logging.WARNING, logger="reclaim.storage.gcs"):
        results = gcs_binding.delete_many(names)
    assert [r.name for r in results] == names
    assert {r.outcome for r in results[:240]} == {DeleteOutcome.DELETED}
    assert {r.outcome for r in results[240:]} == {DeleteOutcome.ALREADY_GONE}
    assert list(gcs_binding.iter_names("s/1/")) == []
    # fake-gcs-server answers the client's batch request with no parts (GCS answers each): the binding says so
    # once and deletes one object per request; the outcomes above are those of that path.
    said = [r.getMessage() for r in caplog.records if "batch" in r.getMessage()]
    assert len(said) == 1 and "one object per request" in said[0]


def test_a_missing_bucket_is_a_misconfiguration_not_an_empty_bucket(fake_gcs: GcsEndpoint) -> None:
    binding = GcsChunkStorage(fake_gcs.binding_settings("no-such-bucket-here"))
    with pytest.raises(StorageMisconfiguredError, match="does not exist"):
        binding.check()
    with pytest.raises(StorageMisconfiguredError):
        binding.exists("s/0/c0")
    with pytest.raises(StorageMisconfiguredError):
        list(binding.iter_names())
    binding.close()


def test_an_endpoint_down_is_retryable() -> None:
    binding = GcsChunkStorage(GcsSettings("b", endpoint=f"http://127.0.0.1:{free_port()}", timeout=1,
                                          retry_deadline=1))
    with pytest.raises(StorageUnavailableError) as info:
        binding.exists("s/0/c0")
    assert info.value.retryable and info.value.binding == "gcs-tier2"
    [result] = binding.delete_many(["s/0/c0"])
    assert result.outcome is DeleteOutcome.FAILED and result.error is not None and result.error.retryable
    binding.close()


@pytest.fixture
def throttling() -> Iterator[Refusal]:
    """Answers every request 429 Too Many Requests. A stand-in on purpose: no emulator can be made to throttle."""
    body = b'{"error": {"code": 429, "message": "rate limit exceeded"}}'
    with refusing_server(Refusal(429, body, {"Content-Type": "application/json"})) as refusal:
        yield refusal


def test_throttling_is_retried_with_backoff_and_then_reported_retryable(throttling: Refusal) -> None:
    binding = GcsChunkStorage(GcsSettings("b", endpoint=throttling.url, retry_deadline=1.5))
    with pytest.raises(StorageUnavailableError):
        binding.get_info("s/0/c0")
    assert throttling.requests >= 2, "the client backs off and asks again before giving up"
    results = binding.delete_many(["s/0/c0", "s/0/c1"], versions={"s/0/c0": "7"})
    assert all(r.outcome is DeleteOutcome.FAILED and r.error is not None and r.error.retryable for r in results)
    binding.close()


def test_a_key_file_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "key.json").write_text("{}")
    binding = GcsChunkStorage(GcsSettings("b", credentials_file=tmp_path / "key.json"))
    with pytest.raises(StorageMisconfiguredError, match="service-account key file") as info:
        binding.check()
    assert "\n" not in str(info.value)
    with pytest.raises(StorageMisconfiguredError):
        binding.exists("s/0/c0")
