"""The S3 endpoint (MinIO, real credentials) is SIGKILLed for longer than the first retry tier while a
real ``reclaim worker`` drains a backlog of S3 chunks, then restarted on its data: the records go
through the retry tiers and end deleted; none is dead-lettered, no live object is touched."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.localstack.s3_server import ensure_bucket
from reclaim.producers.topics import TopicNames
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import open_metadata_store
from tests.support.chaos import Backlog, RestartableMinio, spawn_worker, stopped
from tests.support.pipeline import Pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_s3_endpoint_killed_past_the_first_retry_tier_then_restarted(
        own_minio: RestartableMinio, kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], tmp_path: Path,
        unique_name: Callable[[str], str]) -> None:
    bucket = unique_name("chaos")
    ensure_bucket(own_minio.endpoint, bucket)
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    s3 = S3ChunkStorage(own_minio.endpoint.binding_settings(bucket), name="s3-tier2")
    pipe = Pipeline(kafka_bootstrap, kafka_topics(), open_metadata_store(str(tmp_path / "meta.db")),
                    StorageBindings([FileSystemChunkStorage(fs_root, name="fs-tier2", create=True), s3]),
                    unique_name("group"))
    try:
        backlog = Backlog.marked(pipe, segments=4, binding_name="s3-tier2")
        worker = spawn_worker(pipe, fs_root, log, RECLAIM_BATCH_SIZE="20", **own_minio.endpoint.reclaim_env(bucket))
        try:
            backlog.wait_left(3 / 4, worker, log)
            own_minio.kill()
            time.sleep(4)  # past the first retry tier (1 s): the records go round the tiers meanwhile
            assert worker.poll() is None, f"an S3 outage stopped the worker: {log.read_text()[-3000:]}"
            own_minio.restart()
            backlog.assert_clean("S3 endpoint crash mid-drain", "SIGKILL of MinIO for 4 s, restart", fs_root,
                                 worker, log, env=own_minio.endpoint.reclaim_env(bucket))
        finally:
            stopped(worker, log)
    finally:
        pipe.close()
