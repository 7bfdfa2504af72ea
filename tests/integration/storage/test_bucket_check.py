"""A binding proves its bucket or root exists: a missing one is a misconfiguration, never a missing chunk."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from reclaim.localstack.procs import free_port
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkHandle, ChunkTags, DeleteOutcome
from reclaim.storage.errors import (
    AccessDeniedError,
    ChunkNotFoundError,
    StorageMisconfiguredError,
    StorageUnavailableError,
)
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage, S3Settings
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.paths import REPO

TAGS = ChunkTags(component="c", stream="s", segment="s/0", writer_epoch=1)



@pytest.fixture
def no_bucket(s3_endpoint: S3Endpoint, unique_name: Callable[[str], str]) -> S3ChunkStorage:
    """An S3 binding on the real endpoint naming a bucket that was never created."""
    return S3ChunkStorage(s3_endpoint.binding_settings(unique_name("absent")), name="s3-tier2")


@pytest.mark.integration
def test_s3_check_refuses_a_missing_bucket(no_bucket: S3ChunkStorage) -> None:
    with pytest.raises(StorageMisconfiguredError) as info:
        no_bucket.check()
    message = str(info.value)
    assert no_bucket.bucket is not None and no_bucket.bucket in message and "s3-tier2" in message
    assert "\n" not in message and not info.value.retryable


@pytest.mark.integration
def test_s3_missing_bucket_is_never_a_missing_chunk(no_bucket: S3ChunkStorage) -> None:
    calls: list[Callable[[], object]] = [
        lambda: no_bucket.exists("seg/c"), lambda: no_bucket.get_info("seg/c"),
        lambda: no_bucket.open_read("seg/c"), lambda: no_bucket.open_write("seg/c"),
        lambda: no_bucket.delete(ChunkHandle("seg/c", read_only=False)),
        lambda: no_bucket.write(ChunkHandle("seg/c", read_only=False), 0, b"x"),
        lambda: no_bucket.list("seg/"), lambda: no_bucket.create_with_content("seg/c", b"x", TAGS),
    ]
    for call in calls:
        with pytest.raises(StorageMisconfiguredError):
            call()
    result = no_bucket.delete_many(["seg/c"])[0]
    assert result.outcome is DeleteOutcome.FAILED and isinstance(result.error, StorageMisconfiguredError)


@pytest.mark.integration
def test_s3_a_bucket_name_the_server_refuses_is_a_misconfiguration(s3_endpoint: S3Endpoint) -> None:
    """MinIO, like AWS, answers a HEAD on a bucket name it does not accept with a bare 400, not a 404."""
    bad = S3ChunkStorage(s3_endpoint.binding_settings("Not_A_Bucket_Name"), name="s3-tier2")
    with pytest.raises(StorageMisconfiguredError) as info:
        bad.check()
    assert "'Not_A_Bucket_Name'" in str(info.value) and "s3-tier2" in str(info.value)
    for call in (lambda: bad.exists("seg/c"), lambda: bad.get_info("seg/c"), lambda: bad.list("seg/"),
                 lambda: bad.create_with_content("seg/c", b"x", TAGS)):
        with pytest.raises(StorageMisconfiguredError):
            call()
    result = bad.delete_many(["seg/c"])[0]
    assert result.outcome is DeleteOutcome.FAILED and isinstance(result.error, StorageMisconfiguredError)


@pytest.fixture
def wrong_secret(s3_endpoint: S3Endpoint) -> S3Endpoint:
    """The endpoint with a secret key it does not know."""
    return dataclasses.replace(s3_endpoint, secret_key=s3_endpoint.secret_key + "-wrong")


@pytest.mark.integration
@pytest.mark.s3_servers("minio", "external")  # moto grants every request, whatever its signature
def test_s3_wrong_credentials_are_denied_and_never_retried(wrong_secret: S3Endpoint, s3_bucket: str) -> None:
    denied = S3ChunkStorage(wrong_secret.binding_settings(s3_bucket), name="s3-tier2")
    with pytest.raises(AccessDeniedError) as info:
        denied.check()
    assert "s3-tier2" in str(info.value) and "secret key" in str(info.value) and not info.value.retryable
    for call in (lambda: denied.exists("seg/c"), lambda: denied.create_with_content("seg/c", b"x", TAGS),
                 lambda: denied.exists_many(["seg/c"]), lambda: denied.list("seg/")):
        with pytest.raises(AccessDeniedError):
            call()
    result = denied.delete_many(["seg/c"])[0]
    assert isinstance(result.error, AccessDeniedError) and not result.error.retryable


@pytest.mark.integration
@pytest.mark.s3_servers("minio", "external")  # moto grants every request, whatever its signature
def test_worker_refuses_to_start_with_wrong_credentials(tmp_path: Path, wrong_secret: S3Endpoint,
                                                         s3_bucket: str) -> None:
    env = {**os.environ, "RECLAIM_STATE_DIR": str(tmp_path / "state"), **wrong_secret.reclaim_env(s3_bucket),
           "RECLAIM_BOOTSTRAP": f"127.0.0.1:{free_port()}", "RECLAIM_FS_CREATE_ROOT": "true"}
    (tmp_path / "state").mkdir()
    SQLiteMetadataStore(tmp_path / "state" / "metadata.db").close()
    done = subprocess.run([sys.executable, "-m", "reclaim", "worker"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"reclaim: error: storage binding 's3-tier2', S3 bucket {s3_bucket!r}: access denied (HeadBucket: 403 "
        "Forbidden): check the access key, the secret key and the bucket's policy")


@pytest.mark.integration
def test_s3_with_its_bucket_a_missing_key_is_still_not_found(s3_endpoint: S3Endpoint, s3_bucket: str) -> None:
    s3 = S3ChunkStorage(s3_endpoint.binding_settings(s3_bucket))
    s3.check()
    assert not s3.exists("seg/missing")
    with pytest.raises(ChunkNotFoundError):
        s3.get_info("seg/missing")
    s3.create_with_content("seg/here", b"abc", TAGS)
    assert s3.exists("seg/here") and s3.get_info("seg/here").length == 3


def test_s3_check_unreachable_is_retryable_and_names_the_binding() -> None:
    settings = S3Settings(bucket="b", endpoint_url=f"http://127.0.0.1:{free_port()}", access_key="k",
                          secret_key="s", max_attempts=1, connect_timeout=0.5, read_timeout=0.5)
    with pytest.raises(StorageUnavailableError) as info:
        S3ChunkStorage(settings, name="s3-cold").check()
    assert "s3-cold" in str(info.value) and "'b'" in str(info.value)


def _client_error(operation: str, status: int, code: str, headers: dict[str, str] | None = None) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": ""},
                     "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": headers or {}}}
    return ClientError(response, operation)


class _ScriptedClient:
    """Answers HeadObject and HeadBucket with the given errors and records which were asked."""

    def __init__(self, head_object: ClientError, head_bucket: ClientError | None = None) -> None:
        self._head_object = head_object
        self._head_bucket = head_bucket
        self.calls: list[str] = []

    def head_object(self, **_: Any) -> dict[str, Any]:
        self.calls.append("head_object")
        raise self._head_object

    def head_bucket(self, **_: Any) -> dict[str, Any]:
        self.calls.append("head_bucket")
        if self._head_bucket is not None:
            raise self._head_bucket
        return {}


def test_s3_minio_error_code_header_is_honoured() -> None:
    """MinIO names the code of a HEAD 404 in a header; moto and AWS do not, so a scripted client stands in."""
    key_gone = _ScriptedClient(_client_error("HeadObject", 404, "404", {"x-minio-error-code": "NoSuchKey"}))
    assert not S3ChunkStorage(S3Settings(bucket="b"), client=key_gone).exists("seg/c")
    assert key_gone.calls == ["head_object"], "a NoSuchKey answer needs no HeadBucket"
    bucket_gone = _ScriptedClient(_client_error("HeadObject", 404, "404", {"x-minio-error-code": "NoSuchBucket"}))
    with pytest.raises(StorageMisconfiguredError):
        S3ChunkStorage(S3Settings(bucket="b"), client=bucket_gone).exists("seg/c")
    assert bucket_gone.calls == ["head_object"]


def test_s3_check_denied_is_access_denied() -> None:
    """moto's server grants every request, so a scripted client answers HeadBucket with 403."""
    client = _ScriptedClient(_client_error("HeadObject", 404, "404"), _client_error("HeadBucket", 403, "403"))
    s3 = S3ChunkStorage(S3Settings(bucket="b"), name="s3-tier2", client=client)
    with pytest.raises(AccessDeniedError) as info:
        s3.check()
    assert "s3-tier2" in str(info.value)
    with pytest.raises(AccessDeniedError):
        s3.exists("seg/c")


def test_fs_check_and_verbs_refuse_a_missing_root(tmp_path: Path) -> None:
    fs = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    fs.check()
    fs.create_with_content("seg/c", b"x", TAGS)
    shutil.rmtree(tmp_path / "tier2")
    with pytest.raises(StorageMisconfiguredError) as info:
        fs.check()
    assert "fs-tier2" in str(info.value) and str(tmp_path / "tier2") in str(info.value)
    for call in (fs.exists, fs.get_info, fs.open_read, fs.open_write):
        with pytest.raises(StorageMisconfiguredError):
            call("seg/c")
    with pytest.raises(StorageMisconfiguredError):
        fs.list("seg/")
    result = fs.delete_many(["seg/c"])[0]
    assert result.outcome is DeleteOutcome.FAILED and isinstance(result.error, StorageMisconfiguredError)
    with pytest.raises(StorageMisconfiguredError):
        fs.create_with_content("seg/d", b"x", TAGS)
    assert not (tmp_path / "tier2").exists(), "a create must not rebuild a root that has gone"


def test_fs_with_its_root_a_missing_chunk_is_still_absent(tmp_path: Path) -> None:
    fs = FileSystemChunkStorage(tmp_path / "tier2")
    assert not fs.exists("seg/c")
    with pytest.raises(ChunkNotFoundError):
        fs.get_info("seg/c")
    assert fs.delete_many(["seg/c"])[0].outcome is DeleteOutcome.ALREADY_GONE


@pytest.mark.integration
def test_bindings_check_covers_every_binding(tmp_path: Path, s3_endpoint: S3Endpoint, s3_bucket: str,
                                             no_bucket: S3ChunkStorage) -> None:
    fs = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    StorageBindings([fs, S3ChunkStorage(s3_endpoint.binding_settings(s3_bucket), name="s3-tier2")]).check()
    with pytest.raises(StorageMisconfiguredError):
        StorageBindings([fs, no_bucket]).check()


@pytest.mark.integration
def test_worker_refuses_to_start_on_a_missing_bucket(tmp_path: Path, s3_endpoint: S3Endpoint,
                                                     unique_name: Callable[[str], str]) -> None:
    bucket = unique_name("absent")
    env = {**os.environ, "RECLAIM_STATE_DIR": str(tmp_path / "state"), **s3_endpoint.reclaim_env(bucket),
           "RECLAIM_BOOTSTRAP": f"127.0.0.1:{free_port()}",
           "RECLAIM_FS_CREATE_ROOT": "true"}  # the filesystem binding is fine: only the bucket is missing
    (tmp_path / "state").mkdir()
    SQLiteMetadataStore(tmp_path / "state" / "metadata.db").close()  # the store a writer made
    done = subprocess.run([sys.executable, "-m", "reclaim", "worker"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"reclaim: error: S3 bucket {bucket!r} of storage binding 's3-tier2' does not exist")
