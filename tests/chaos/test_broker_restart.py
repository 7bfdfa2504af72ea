"""The Kafka broker is SIGKILLed twice while a real ``reclaim worker`` drains a backlog, and restarted
from its data directory each time: the worker rides through (librdkafka reconnects), commits only
final offsets, loses nothing and deletes nothing twice; the audit is clean."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.producers.topics import TopicNames
from reclaim.settings import Settings
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import open_metadata_store
from reclaim.tools.topics import admin_client, create_topics, topic_specs
from tests.support.chaos import Backlog, RestartableBroker, spawn_worker, stopped
from tests.support.pipeline import Pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_broker_killed_and_restarted_twice_mid_drain(own_broker: RestartableBroker, tmp_path: Path,
                                                     unique_name: Callable[[str], str]) -> None:
    prefix = unique_name("t") + "."
    settings = Settings(topic_prefix=prefix, retry_delays=(1, 2, 4), partitions=2)
    create_topics(admin_client(own_broker.bootstrap), topic_specs(settings))
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    pipe = Pipeline(own_broker.bootstrap, TopicNames.for_prefix(prefix, (1, 2, 4)),
                    open_metadata_store(str(tmp_path / "meta.db")),
                    StorageBindings([FileSystemChunkStorage(fs_root, name="fs-tier2")]), unique_name("group"))
    try:
        backlog = Backlog.marked(pipe)
        worker = spawn_worker(pipe, fs_root, log, RECLAIM_BATCH_SIZE="20")
        try:
            for fraction in (3 / 4, 1 / 2):
                backlog.wait_left(fraction, worker, log)
                own_broker.kill()
                time.sleep(2)
                assert worker.poll() is None, f"a broker outage stopped the worker: {log.read_text()[-3000:]}"
                own_broker.restart()
            backlog.assert_clean("broker crash mid-drain, twice", "2 × SIGKILL of the broker, restart from its data",
                                 fs_root, worker, log)
        finally:
            stopped(worker, log)
    finally:
        pipe.close()
