"""``present()``: which chunks have an object now, so a delete of a missing S3 key counts as already gone."""

from __future__ import annotations

import dataclasses
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reclaim.localstack.s3_server import S3Endpoint, ensure_bucket, s3_client
from reclaim.storage.chunks import ChunkTags, DeleteOutcome
from reclaim.storage.errors import StorageMisconfiguredError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage

TAGS = ChunkTags(component="c", stream="s", segment="s/0", writer_epoch=1)
#: Objects under big/: more than one ListObjectsV2 page.
BIG = [f"big/k-{i:04d}" for i in range(1200)]
SMALL = ["a/x", "a/y", "b/y", "b/sub/z", "top"]


@pytest.fixture(scope="module")
def listed_bucket(s3_endpoint: S3Endpoint) -> str:
    """One bucket for the module, holding BIG and SMALL (filled once: 1200 PUTs are not free)."""
    bucket = f"present-{uuid.uuid4().hex[:12]}"
    ensure_bucket(s3_endpoint, bucket)
    client = s3_client(s3_endpoint)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=b""), BIG + SMALL))
    return bucket


@pytest.fixture
def s3(s3_endpoint: S3Endpoint, listed_bucket: str) -> S3ChunkStorage:
    return S3ChunkStorage(s3_endpoint.binding_settings(listed_bucket))


@pytest.mark.integration
def test_present_mixes_existing_and_missing_across_prefixes(s3: S3ChunkStorage) -> None:
    names = ["a/x", "a/missing", "b/y", "b/sub/z", "b/missing", "a/x", "top", "topless", "c/none", "../bad", "a/y"]
    assert s3.present(names) == {"a/x", "a/y", "b/y", "b/sub/z", "top"}
    assert s3.present([]) == set()
    assert s3.present(["../bad", ""]) == set(), "invalid names are never present"


@pytest.mark.integration
def test_present_with_a_key_prefix(s3_endpoint: S3Endpoint, listed_bucket: str) -> None:
    prefixed = S3ChunkStorage(s3_endpoint.binding_settings(listed_bucket, key_prefix="big/"))
    assert prefixed.present(["k-1190", "k-1199", "k-1200", "a/x"]) == {"k-1190", "k-1199"}


@pytest.mark.integration
def test_present_pages_through_a_group_of_more_than_1000_names(s3: S3ChunkStorage) -> None:
    missing = [f"big/k-{i:04d}x" for i in range(0, 1200, 9)] + ["big/zz"]
    assert s3.present(BIG + missing) == set(BIG)


@pytest.mark.integration
def test_present_stops_a_group_early_and_reports_the_rest_present(s3: S3ChunkStorage) -> None:
    # Three names: a budget of 1000 keys, spent on the first page before the listing reaches big/zz.
    found = s3.present(["big/k-0000", "big/k-0500x", "big/zz-missing"])
    assert found == {"big/k-0000", "big/zz-missing"}, "the unreached name counts as present, conservatively"
    assert s3.present(["big/k-1100", "big/zz-missing"]) == {"big/k-1100"}, "a start near the end reaches it"


@pytest.mark.integration
def test_present_before_delete_tells_already_gone(s3_endpoint: S3Endpoint, s3_bucket: str) -> None:
    s3 = S3ChunkStorage(s3_endpoint.binding_settings(s3_bucket))
    s3.create_with_content("d/a", b"x", TAGS)
    before = s3.present(["d/a", "d/b"])
    results = s3.delete_many(["d/a", "d/b"])
    assert all(r.outcome is DeleteOutcome.DELETED for r in results), "S3 reports a missing key deleted"
    assert before == {"d/a"}, "so only present() knew d/b was gone already"
    assert s3.present(["d/a", "d/b"]) == set()


@pytest.mark.integration
def test_present_on_a_missing_bucket_is_a_misconfiguration(s3_endpoint: S3Endpoint) -> None:
    s3 = S3ChunkStorage(s3_endpoint.binding_settings(f"absent-{uuid.uuid4().hex[:12]}"))
    with pytest.raises(StorageMisconfiguredError):
        s3.present(["a/x"])


def test_fs_present_is_none_and_delete_many_tells_already_gone(tmp_path: Path) -> None:
    fs = FileSystemChunkStorage(tmp_path)
    for name in ("d/a", "d/b"):
        fs.create_with_content(name, b"x", TAGS)
    assert fs.present(["d/a", "d/missing"]) is None
    fs.data_path("d/b").unlink()  # a crash between the data file's unlink and its sidecar's
    results = {r.name: r.outcome for r in fs.delete_many(["d/a", "d/b", "d/missing"])}
    assert results == {"d/a": DeleteOutcome.DELETED, "d/b": DeleteOutcome.ALREADY_GONE,
                       "d/missing": DeleteOutcome.ALREADY_GONE}
    assert not fs.tags_path("d/b").exists() and not (tmp_path / "tags" / "d").exists()


def test_a_binding_set_not_to_count_missing_keys_lists_nothing(s3_endpoint: S3Endpoint, s3_bucket: str) -> None:
    settings = dataclasses.replace(s3_endpoint.binding_settings(s3_bucket), count_missing=False)
    binding = S3ChunkStorage(settings, name="s3-tier2")
    try:
        assert binding.present(["a/b", "a/c"]) is None
    finally:
        binding.close()
