"""Phase 2's no-row path on real bindings: an object answers for its own name.

Each test runs on the filesystem binding and on S3 (moto and MinIO). With no chunk row, a record is
checked against what is stored with the object; since the tags named only an owner, an object reached
under another name (an aliasing path, a changed key prefix) or carrying tags copied from a live chunk
passed that check. Every object a binding creates now also records the binding, bucket and chunk name
it was written as, and the no-row path deletes only an object written as the very chunk the record names.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from reclaim.deletion.executor import DeletionExecutor
from reclaim.deletion.facts import Pending, Proceed
from reclaim.deletion.outcomes import Outcome, Verdict
from reclaim.deletion.records import pending_deletes
from reclaim.localstack.azurite import AzuriteEndpoint, ensure_container
from reclaim.localstack.gcs_emulator import GcsEndpoint
from reclaim.localstack.s3_server import S3Endpoint, ensure_bucket, s3_client
from reclaim.schemas.ledger import PendingDeleteLedgerInfo
from reclaim.storage.azure import AzureChunkStorage
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkTags
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.gcs import GcsChunkStorage
from reclaim.storage.metadata import ChunkRecord, SegmentRecord
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from reclaim.tools.audit import orphan_chunk
from tests.support.servers import S3_SERVERS

STREAM = "scope/stream"
SEGMENT = f"{STREAM}/0.#epoch.0"
TAGS = ChunkTags(component="segment", stream=STREAM, segment=SEGMENT, writer_epoch=1)
DATA = b"live bytes" * 4


@dataclass
class Tier2:
    """A binding, and what can be done to its objects behind reclaim's back."""

    binding: BaseChunkStorage
    #: Copy an object, with everything stored beside it, to another chunk name.
    copy: Callable[[str, str], None]
    #: Write an object as reclaim did before bindings stamped what they wrote: owner tags only.
    put_unstamped: Callable[[str], None]
    #: A binding of the same name that reaches the live chunk ``name`` under the name it returns.
    alias: Callable[[str], tuple[BaseChunkStorage, str]]


def _fs(root: Path) -> Tier2:
    fs = FileSystemChunkStorage(root, name="fs-tier2")

    def copy(source: str, target: str) -> None:
        for path in (fs.data_path, fs.tags_path):
            path(target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path(source), path(target))

    def put_unstamped(name: str) -> None:
        fs.create_with_content(name, DATA, TAGS)
        fs.tags_path(name).write_text(json.dumps(TAGS.to_dict()))

    def alias(name: str) -> tuple[BaseChunkStorage, str]:
        # Two names, one file: a directory reached under another case, as a case-folding filesystem does.
        for top in (root / "chunks", root / "tags"):
            os.symlink(top / "scope" / "stream", top / "scope" / "Stream", target_is_directory=True)
        return fs, name.replace("scope/stream/", "scope/Stream/", 1)

    return Tier2(fs, copy, put_unstamped, alias)


def _s3(endpoint: S3Endpoint, bucket: str) -> Tier2:
    s3 = S3ChunkStorage(endpoint.binding_settings(bucket, key_prefix="tier2/"), name="s3-tier2")
    client = s3_client(endpoint)

    def copy(source: str, target: str) -> None:
        client.copy_object(Bucket=bucket, Key=s3.object_key(target), MetadataDirective="COPY",
                           CopySource={"Bucket": bucket, "Key": s3.object_key(source)})

    def put_unstamped(name: str) -> None:
        metadata = {f"reclaim-{key}": quote(value, safe="") for key, value in TAGS.to_dict().items()}
        client.put_object(Bucket=bucket, Key=s3.object_key(name), Body=DATA, Metadata=metadata)

    def alias(name: str) -> tuple[BaseChunkStorage, str]:
        # The binding's key prefix changed between runs: its old prefix is now part of the chunk name.
        return S3ChunkStorage(endpoint.binding_settings(bucket), name="s3-tier2"), "tier2/" + name

    return Tier2(s3, copy, put_unstamped, alias)


def _gcs(endpoint: GcsEndpoint, bucket: str) -> Tier2:
    gcs = GcsChunkStorage(endpoint.binding_settings(bucket, key_prefix="tier2/"))
    remote = gcs.client.bucket(bucket)

    def copy(source: str, target: str) -> None:
        remote.copy_blob(remote.blob(gcs.object_key(source)), remote, gcs.object_key(target))

    def put_unstamped(name: str) -> None:
        blob = remote.blob(gcs.object_key(name))
        blob.metadata = {f"reclaim-{key}": quote(value, safe="") for key, value in TAGS.to_dict().items()}
        blob.upload_from_string(DATA)

    def alias(name: str) -> tuple[BaseChunkStorage, str]:
        return GcsChunkStorage(endpoint.binding_settings(bucket)), "tier2/" + name

    return Tier2(gcs, copy, put_unstamped, alias)


def _azure(endpoint: AzuriteEndpoint, container: str) -> Tier2:
    azure = AzureChunkStorage(endpoint.binding_settings(container, key_prefix="tier2/"))
    remote = azure.client

    def copy(source: str, target: str) -> None:
        blob = remote.get_blob_client(azure.object_key(source))
        remote.get_blob_client(azure.object_key(target)).upload_blob(
            blob.download_blob().readall(), metadata=blob.get_blob_properties().metadata)

    def put_unstamped(name: str) -> None:
        metadata = {f"reclaim_{key.replace('-', '_')}": quote(value, safe="") for key, value in TAGS.to_dict().items()}
        remote.get_blob_client(azure.object_key(name)).upload_blob(DATA, metadata=metadata)

    def alias(name: str) -> tuple[BaseChunkStorage, str]:
        return AzureChunkStorage(endpoint.binding_settings(container)), "tier2/" + name

    return Tier2(azure, copy, put_unstamped, alias)


@pytest.fixture(params=["fs", *(pytest.param(store, marks=pytest.mark.integration)
                                for store in (*S3_SERVERS, "gcs", "azure"))])
def tier2(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tier2]:
    if request.param == "fs":
        made = _fs(tmp_path / "tier2")
    elif request.param == "gcs":
        gcs_endpoint: GcsEndpoint = request.getfixturevalue("fake_gcs")
        made = _gcs(gcs_endpoint, request.getfixturevalue("gcs_bucket"))
    elif request.param == "azure":
        azurite: AzuriteEndpoint = request.getfixturevalue("azurite")
        container = f"container-{uuid.uuid4().hex[:12]}"
        ensure_container(azurite, container)
        made = _azure(azurite, container)
    else:
        endpoint: S3Endpoint = request.getfixturevalue(f"{request.param}_s3")
        bucket = f"bucket-{uuid.uuid4().hex[:12]}"
        ensure_bucket(endpoint, bucket)
        made = _s3(endpoint, bucket)
    yield made
    made.binding.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteMetadataStore]:
    opened = SQLiteMetadataStore(tmp_path / "metadata.db")
    yield opened
    opened.close()


def chunk_name() -> str:
    return f"{SEGMENT}.E-1-O-0.{uuid.uuid4().hex}"


def live_chunk(store: SQLiteMetadataStore, binding: BaseChunkStorage) -> ChunkRecord:
    """A chunk in the live layout: its object, written through the binding, and its active row."""
    name = chunk_name()
    binding.create_with_content(name, DATA, TAGS)
    with store.transaction() as txn:
        if txn.get_segment(SEGMENT) is None:
            txn.put_segment(SegmentRecord(name=SEGMENT, stream=STREAM))
        return txn.put_chunk(ChunkRecord(name=name, segment=SEGMENT, start_offset=0, length=len(DATA), tags=TAGS,
                                         locations=(binding.location(name),)))


def naming(chunk: ChunkRecord, name: str) -> PendingDeleteLedgerInfo:
    """``chunk``'s genuine record, its owner fields copied, made to name the chunk ``name`` instead."""
    (record,) = pending_deletes(chunk, "forged", int(time.time() * 1000))
    return dataclasses.replace(record, chunk_name=name, location=dataclasses.replace(record.location, key=name))


def run(store: SQLiteMetadataStore, binding: BaseChunkStorage, record: PendingDeleteLedgerInfo) -> Verdict:
    executor = DeletionExecutor(store, StorageBindings([binding]), mark_timeout_s=30)
    try:
        (verdict,) = executor.execute([record])
    finally:
        executor.close()
    return verdict


def test_every_created_object_names_the_chunk_binding_and_bucket(tier2: Tier2) -> None:
    binding = tier2.binding
    name = chunk_name()
    binding.create_with_content(name, DATA, TAGS)
    binding.create(name + "-empty", TAGS)
    for created in (name, name + "-empty"):
        info = binding.get_info(created)
        assert info.tags == TAGS
        assert info.written_as == binding.written_as(created)
        assert info.written_as is not None and info.written_as.binding == binding.name
        assert info.written_as.bucket == binding.bucket
        assert info.written_as.mismatch(binding.name, binding.bucket, created) == ""


def test_the_genuine_no_row_case_is_still_deleted(tier2: Tier2, store: SQLiteMetadataStore) -> None:
    binding = tier2.binding
    chunk = live_chunk(store, binding)
    with store.transaction() as txn:  # retired by a mark, then its row removed: an earlier attempt's cleanup
        txn.put_chunk(dataclasses.replace(chunk, active=False, mark_id="m"))
    assert store.remove_chunks([chunk.name]) == [chunk.name]
    (record,) = pending_deletes(chunk, "m", int(time.time() * 1000))
    verdict = run(store, binding, record)
    assert verdict.outcome is Outcome.DELETED, verdict.reason
    assert not binding.exists(chunk.name)


def test_copied_tags_do_not_let_another_object_be_deleted(tier2: Tier2, store: SQLiteMetadataStore) -> None:
    binding = tier2.binding
    live = live_chunk(store, binding)
    copy = chunk_name()
    tier2.copy(live.name, copy)  # no row names the copy: only what is stored with it speaks for it
    assert binding.get_info(copy).tags == TAGS, "the copy carries the live chunk's owner tags"
    verdict = run(store, binding, naming(live, copy))
    assert verdict.outcome is Outcome.OWNERSHIP_MISMATCH
    assert "written under another chunk name" in verdict.reason
    assert binding.exists(copy) and binding.read(binding.open_read(live.name), 0, len(DATA)) == DATA


def test_an_aliasing_name_never_reaches_a_live_chunk(tier2: Tier2, store: SQLiteMetadataStore) -> None:
    live = live_chunk(store, tier2.binding)
    worker_binding, alias = tier2.alias(live.name)
    assert worker_binding.get_info(alias).tags == TAGS, "the alias reaches the live chunk's object"
    verdict = run(store, worker_binding, naming(live, alias))
    assert verdict.outcome is Outcome.OWNERSHIP_MISMATCH
    assert "written under another chunk name" in verdict.reason
    assert tier2.binding.read(tier2.binding.open_read(live.name), 0, len(DATA)) == DATA
    assert store.get_chunks([live.name])[live.name].active
    worker_binding.close()


def test_an_object_written_before_the_stamp_is_kept_for_the_audit(tier2: Tier2,
                                                                  store: SQLiteMetadataStore) -> None:
    binding = tier2.binding
    name = chunk_name()
    tier2.put_unstamped(name)
    info = binding.get_info(name)
    assert info.tags == TAGS and info.written_as is None
    orphan = ChunkRecord(name=name, segment=SEGMENT, start_offset=0, length=len(DATA), tags=TAGS,
                         locations=(binding.location(name),))
    (record,) = pending_deletes(orphan, "m", int(time.time() * 1000))
    verdict = run(store, binding, record)
    assert verdict.outcome is Outcome.OWNERSHIP_MISMATCH
    assert "written before chunk names were tagged" in verdict.reason
    assert binding.exists(name)
    # The audit's repair leaves it unattributed rather than send a record phase 2 would refuse.
    assert orphan_chunk(binding.location(name), len(DATA), info.tags, info.written_as) is None
    stamped = binding.get_info(live_chunk(store, binding).name)
    assert orphan_chunk(binding.location(stamped.name), len(DATA), stamped.tags, stamped.written_as) is not None


def test_an_object_written_again_after_its_check_is_kept(tier2: Tier2, store: SQLiteMetadataStore) -> None:
    """The name is written again between a record's check and its delete: a binding with conditional deletes
    keeps the new object (the record is done: the object it checked is gone); one without them deletes it."""
    binding = tier2.binding
    chunk = live_chunk(store, binding)
    with store.transaction() as txn:
        txn.put_chunk(dataclasses.replace(chunk, active=False, mark_id="m"))
    assert store.remove_chunks([chunk.name]) == [chunk.name]
    (record,) = pending_deletes(chunk, "m", int(time.time() * 1000))
    executor = DeletionExecutor(store, StorageBindings([binding]), mark_timeout_s=30)
    try:
        plan = executor.prepare([Pending(record)])
        assert plan.decisions == (Proceed.DELETE,)
        binding.delete(binding.open_write(chunk.name))
        binding.create_with_content(chunk.name, b"written again", TAGS)
        (verdict,) = executor.finish(plan, executor.delete(plan))
    finally:
        executor.close()
    if binding.supports_conditional_delete:
        assert verdict.outcome is Outcome.ALREADY_GONE and "conditional delete kept" in verdict.reason, verdict
        assert binding.read(binding.open_read(chunk.name), 0, 13) == b"written again"
    else:
        assert verdict.outcome is Outcome.DELETED and not binding.exists(chunk.name)
