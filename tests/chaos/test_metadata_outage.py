"""The PostgreSQL metadata store crashes (SIGKILL of the server and its backends) while a real
``reclaim worker`` drains a backlog, and comes back from its data directory: the worker retries
through the outage, never crashes, loses nothing and deletes nothing twice; the audit is clean."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from producers.topics import TopicNames
from storage.bindings import StorageBindings
from storage.filesystem import FileSystemChunkStorage
from storage.sql_store import open_metadata_store
from tests.cli import run_reclaim
from tests.deletion.conftest import Pipeline
from tests.deletion.test_crash import inflight, wait_drained
from tests.deletion.test_faults import read_all

from .conftest import RestartablePostgres

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LIVE, SEGMENTS, PER_SEGMENT = 30, 8, 100


def test_postgres_killed_and_restarted_mid_drain(own_postgres: RestartablePostgres, kafka_bootstrap: str,
                                                 kafka_topics: Callable[..., TopicNames], tmp_path: Path,
                                                 unique_name: Callable[[str], str]) -> None:
    fs_root = tmp_path / "tier2"
    binding = FileSystemChunkStorage(fs_root, name="fs-tier2")
    pipe = Pipeline(kafka_bootstrap, kafka_topics(), open_metadata_store(own_postgres.url()),
                    StorageBindings([binding]), unique_name("group"))
    try:
        live = pipe.write_chunks(binding, "scope/stream/0.#epoch.0", LIVE)
        doomed = []
        for segment in range(SEGMENTS):
            batch = pipe.write_chunks(binding, f"scope/stream/{segment + 1}.#epoch.0", PER_SEGMENT)
            pipe.service.mark(batch)
            doomed += batch
        log = tmp_path / "worker.log"  # a file, not a pipe nobody reads: a chatty outage must not block it
        with open(log, "wb") as out:
            worker = subprocess.Popen([sys.executable, "-m", "ops.cli", "worker"], stdout=out, stderr=out,
                                      env={**os.environ, **pipe.worker_env(fs_root, RECLAIM_BATCH_SIZE="20")})
        try:
            deadline = time.monotonic() + 120
            while sum(binding.exists(c.name) for c in doomed) > len(doomed) * 3 // 4:
                assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-3000:]
                time.sleep(0.1)
            own_postgres.kill()
            time.sleep(3)  # longer than the first retry tier (1 s): records go round the tiers meanwhile
            assert worker.poll() is None, f"a metadata outage stopped the worker: {log.read_text()[-3000:]}"
            own_postgres.restart()
            try:
                wait_drained(pipe, timeout_s=180)
            except AssertionError as exc:
                raise AssertionError(f"{exc}; the worker's log ends:\n{log.read_text()[-5000:]}") from exc
            assert worker.poll() is None, f"the worker died: {log.read_text()[-3000:]}"
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
        assert worker.returncode == 0, log.read_text()[-3000:]

        assert set(binding.iter_names()) == {c.name for c in live}, "orphans or deleted live chunks"
        assert set(pipe.store.get_chunks(c.name for c in live + doomed)) == {c.name for c in live}
        assert inflight(pipe) == 0
        assert read_all(pipe, pipe.topics.dlq, 1, timeout_s=2) == [], "an outage shorter than the tiers DLQs nothing"
        audit = run_reclaim("audit", env={**os.environ, **pipe.worker_env(fs_root)}, timeout=60)
        assert audit.returncode == 0, audit.stdout + audit.stderr
        assert f"fs-tier2: {LIVE} live, 0 pending deletion, 0 orphans, 0 missing" in audit.stdout
    finally:
        pipe.close()
