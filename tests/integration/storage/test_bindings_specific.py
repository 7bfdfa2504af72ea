"""Binding-specific behaviour: filesystem sidecars, S3 batching and error mapping, the bindings registry."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from reclaim.localstack.procs import free_port
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkLocation, ChunkTags, DeleteOutcome, Tier
from reclaim.storage.errors import (
    AccessDeniedError,
    ChunkNotFoundError,
    InvalidChunkNameError,
    MetadataConflictError,
    StorageError,
    StorageMisconfiguredError,
    StorageUnavailableError,
)
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage, S3Settings, map_s3_error

TAGS = ChunkTags(component="c", stream="s", segment="s/0", writer_epoch=1)


def test_fs_sidecar_lives_and_dies_with_chunk(tmp_path: Path) -> None:
    fs = FileSystemChunkStorage(tmp_path)
    fs.create_with_content("a/b/c.E-1", b"data", TAGS)
    assert fs.data_path("a/b/c.E-1").read_bytes() == b"data", "the chunk holds only the user's bytes"
    assert fs.tags_path("a/b/c.E-1").is_file()
    fs.delete(fs.open_write("a/b/c.E-1"))
    assert not fs.tags_path("a/b/c.E-1").exists()
    assert not (tmp_path / "chunks" / "a").exists(), "empty directories are pruned"
    assert list((tmp_path / "tmp").iterdir()) == [], "no staging files left behind"


def test_fs_delete_many_in_parallel(tmp_path: Path) -> None:
    fs = FileSystemChunkStorage(tmp_path, delete_workers=3)
    names = [f"seg/c{i}" for i in range(20)]
    for name in names:
        fs.create_with_content(name, b"x", TAGS)
    results = fs.delete_many([*names, "seg/c0"])
    assert all(r.outcome is DeleteOutcome.DELETED for r in results[:20])
    assert results[-1].ok
    assert not any(fs.tags_path(n).exists() for n in names)
    assert fs.delete_many(["seg/c1"])[0].outcome is DeleteOutcome.ALREADY_GONE


class _NoIOClient:
    def __getattr__(self, item: str) -> Any:
        raise AssertionError(f"no I/O expected, got {item}")


def test_s3_bad_name_rejected_before_io() -> None:
    s3 = S3ChunkStorage(S3Settings(bucket="b"), client=_NoIOClient())
    for bad in ("../etc/passwd", "", "a\x00"):
        with pytest.raises(InvalidChunkNameError):
            s3.get_info(bad)


class _BatchClient:
    """Records DeleteObjects calls; reports one key as an internal error and one as denied."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def delete_objects(self, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]:  # noqa: N803 - boto3 names
        keys = [obj["Key"] for obj in Delete["Objects"]]
        self.batches.append(keys)
        errors = [{"Key": k, "Code": "InternalError", "Message": "later"} for k in keys if k.endswith("-7")]
        errors += [{"Key": k, "Code": "AccessDenied", "Message": "no"} for k in keys if k.endswith("-8")]
        failed = {e["Key"] for e in errors}
        return {"Deleted": [{"Key": k} for k in keys if k not in failed], "Errors": errors}


def test_s3_delete_many_batches_by_1000_with_per_key_results() -> None:
    client = _BatchClient()
    s3 = S3ChunkStorage(S3Settings(bucket="b", key_prefix="pre/"), client=client)
    names = [f"seg/c-{i}" for i in range(2500)]
    results = s3.delete_many(names)
    assert [len(b) for b in client.batches] == [1000, 1000, 500]
    assert client.batches[0][0] == "pre/seg/c-0"
    assert [r.name for r in results] == names
    retry = next(r for r in results if r.name == "seg/c-7")
    denied = next(r for r in results if r.name == "seg/c-8")
    assert retry.outcome is DeleteOutcome.FAILED and retry.error is not None and retry.error.retryable
    assert isinstance(denied.error, AccessDeniedError) and not denied.error.retryable
    assert sum(r.ok for r in results) == 2500 - 2


def test_s3_endpoint_down_is_retryable() -> None:
    settings = S3Settings(bucket="b", endpoint_url=f"http://127.0.0.1:{free_port()}", access_key="k",
                          secret_key="s", max_attempts=1, connect_timeout=0.5, read_timeout=0.5)
    s3 = S3ChunkStorage(settings)
    with pytest.raises(StorageUnavailableError) as info:
        s3.exists("seg/x")
    assert info.value.retryable and info.value.binding == "s3-tier2"
    results = s3.delete_many(["seg/x"])
    assert results[0].outcome is DeleteOutcome.FAILED and results[0].error is not None
    assert results[0].error.retryable


def _client_error(code: str, status: int) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "Op")


@pytest.mark.parametrize(("code", "status", "expected", "retryable"), [
    ("NoSuchKey", 404, ChunkNotFoundError, False),
    ("AccessDenied", 403, AccessDeniedError, False),
    ("InvalidAccessKeyId", 403, AccessDeniedError, False),
    ("SlowDown", 503, StorageUnavailableError, True),
    ("InternalError", 500, StorageUnavailableError, True),
    ("Whatever", 502, StorageUnavailableError, True),
    ("NoSuchBucket", 404, StorageMisconfiguredError, False),
    # Keys a server will never store: too long for AWS, a path MinIO's disks cannot hold.
    ("KeyTooLongError", 400, InvalidChunkNameError, False),
    ("XMinioInvalidObjectName", 400, InvalidChunkNameError, False),
    ("XMinioInvalidResourceName", 400, InvalidChunkNameError, False),
])
def test_s3_error_mapping(code: str, status: int, expected: type[StorageError], retryable: bool) -> None:
    error = map_s3_error(_client_error(code, status), "c")
    assert type(error) is expected
    assert error.retryable is retryable


def test_error_classes_say_retryable() -> None:
    assert StorageUnavailableError.retryable and MetadataConflictError.retryable
    assert not AccessDeniedError.retryable and not ChunkNotFoundError.retryable
    from reclaim.errors import ReclaimError
    assert issubclass(StorageError, ReclaimError)


@pytest.mark.integration
def test_s3_key_prefix_is_applied(s3_endpoint: Any, s3_bucket: str) -> None:
    from reclaim.localstack.s3_server import s3_client

    s3 = S3ChunkStorage(s3_endpoint.binding_settings(s3_bucket, key_prefix="tier2/"))
    s3.create_with_content("seg/c", b"abc", TAGS)
    head = s3_client(s3_endpoint).head_object(Bucket=s3_bucket, Key="tier2/seg/c")
    assert head["Metadata"]["reclaim-segment"] == "s%2F0"
    assert list(s3.iter_names("seg/")) == ["seg/c"]


def test_bindings_registry(tmp_path: Path) -> None:
    fs1 = FileSystemChunkStorage(tmp_path / "hot", name="fs-tier1", tier=Tier.TIER1)
    fs2 = FileSystemChunkStorage(tmp_path / "cold", name="fs-tier2")
    bindings = StorageBindings([fs1, fs2])
    assert bindings.get("fs-tier1") is fs1 and "fs-tier2" in bindings and len(bindings) == 2
    assert bindings.by_tier(Tier.TIER1) == [fs1]
    assert bindings.for_location(ChunkLocation("fs-tier2", Tier.TIER2, None, "k")) is fs2
    with pytest.raises(StorageMisconfiguredError):
        bindings.get("s3-tier2")
    with pytest.raises(StorageMisconfiguredError):
        bindings.register(FileSystemChunkStorage(tmp_path / "x", name="fs-tier1"))
    with pytest.raises(StorageMisconfiguredError):
        bindings.for_location(ChunkLocation("fs-tier2", Tier.TIER2, "bucket", "k"))


def test_fs_delete_many_prunes_the_directories_it_empties_and_keeps_the_others(tmp_path: Path) -> None:
    fs = FileSystemChunkStorage(tmp_path)
    doomed = ["a/b/c.E-1", "a/b/d.E-1", "a/e.E-1", "x/y/z/deep.E-1"]
    for name in [*doomed, "a/keep.E-1"]:
        fs.create_with_content(name, b"data", TAGS)
    assert [r.outcome for r in fs.delete_many([*doomed, "a/b/never-written.E-1"])] == [
        DeleteOutcome.DELETED] * 4 + [DeleteOutcome.ALREADY_GONE]
    for top in ("chunks", "tags"):
        assert not (tmp_path / top / "a" / "b").exists() and not (tmp_path / top / "x").exists()
        assert (tmp_path / top / "a").is_dir(), "a directory still holding a chunk stays"
    assert fs.exists("a/keep.E-1") and fs.tags_path("a/keep.E-1").is_file()


@pytest.mark.s3_servers("moto")
def test_s3_conditional_deletes_keep_an_object_written_since_its_check(s3_endpoint: Any, s3_bucket: str) -> None:
    """On a server that honours ``If-Match`` on DeleteObject (AWS S3, Ceph; moto here), with conditional deletes
    on: a name with a version is deleted on its own, only while its ETag is the one checked; the rest of the
    batch goes in DeleteObjects. MinIO ignores the condition (measured), so the setting is off by default."""
    s3 = S3ChunkStorage(replace(s3_endpoint.binding_settings(s3_bucket), conditional_deletes=True))
    assert s3.supports_conditional_delete
    s3.create_with_content("v/c0", b"first", TAGS)
    checked = s3.get_info("v/c0").version
    s3.delete(s3.open_write("v/c0"))
    s3.create_with_content("v/c0", b"second!", TAGS)
    for name in ("v/c1", "v/c2"):
        s3.create_with_content(name, b"x", TAGS)
    assert checked is not None and s3.get_info("v/c0").version != checked
    results = s3.delete_many(["v/c1", "v/c0", "v/c2", "v/gone"], versions={"v/c0": checked, "v/gone": checked})
    assert [(r.name, r.outcome) for r in results] == [
        ("v/c1", DeleteOutcome.DELETED), ("v/c0", DeleteOutcome.CHANGED), ("v/c2", DeleteOutcome.DELETED),
        ("v/gone", DeleteOutcome.CHANGED)]
    assert list(s3.iter_names("v/")) == ["v/c0"]
    [result] = s3.delete_many(["v/c0"], versions={"v/c0": str(s3.get_info("v/c0").version)})
    assert result.outcome is DeleteOutcome.DELETED and not s3.exists("v/c0")
    s3.close()
