"""The PostgreSQL metadata store crashes (SIGKILL of the server and its backends) while a real
``reclaim worker`` drains a backlog, and comes back from its data directory: the worker retries
through the outage, never crashes, loses nothing and deletes nothing twice; the audit is clean."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.producers.topics import TopicNames
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import open_metadata_store
from tests.support.chaos import Backlog, RestartablePostgres, spawn_worker, stopped
from tests.support.pipeline import Pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_postgres_killed_and_restarted_mid_drain(own_postgres: RestartablePostgres, kafka_bootstrap: str,
                                                 kafka_topics: Callable[..., TopicNames], tmp_path: Path,
                                                 unique_name: Callable[[str], str]) -> None:
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    pipe = Pipeline(kafka_bootstrap, kafka_topics(), open_metadata_store(own_postgres.url()),
                    StorageBindings([FileSystemChunkStorage(fs_root, name="fs-tier2")]), unique_name("group"))
    try:
        backlog = Backlog.marked(pipe)
        worker = spawn_worker(pipe, fs_root, log, RECLAIM_BATCH_SIZE="20")
        try:
            backlog.wait_left(3 / 4, worker, log)
            own_postgres.kill()
            time.sleep(3)  # longer than the first retry tier (1 s): records go round the tiers meanwhile
            assert worker.poll() is None, f"a metadata outage stopped the worker: {log.read_text()[-3000:]}"
            own_postgres.restart()
            backlog.assert_clean("PostgreSQL crash mid-drain", "SIGKILL of PostgreSQL for 3 s, restart",
                                 fs_root, worker, log)
        finally:
            stopped(worker, log)
    finally:
        pipe.close()
