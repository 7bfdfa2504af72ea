"""``reclaim audit --repair`` on the real broker: orphans go through phase 1, a real ``reclaim worker``
deletes them after its ownership checks, and the audit comes back clean."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.exits import ExitCode
from reclaim.producers.topics import TopicNames
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.audit import HOUR, TAGS, aged, chunk, env_for, name, one_line_error, put, run_audit

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def pipeline_env(kafka_bootstrap: str, topics: TopicNames, group: str) -> dict[str, str]:
    return {"RECLAIM_BOOTSTRAP": kafka_bootstrap,
            "RECLAIM_TOPIC_PREFIX": topics.deletion.removesuffix("ledger-deletion"),
            "RECLAIM_RETRY_DELAYS": ",".join(str(delay) for delay, _ in topics.retries),
            "RECLAIM_GROUP_ID": group, "RECLAIM_POLL_TIMEOUT_S": "0.5"}


def test_repair_sends_orphans_to_phase_1_and_after_the_worker_the_audit_is_clean(
        tmp_path: Path, fs: FileSystemChunkStorage, store: SQLiteMetadataStore, kafka_bootstrap: str,
        kafka_topics: Callable[..., TopicNames], unique_name: Callable[[str], str]) -> None:
    extra = pipeline_env(kafka_bootstrap, kafka_topics(), unique_name("group"))
    put(store, chunk(fs, name(0)))
    orphans = [name(i) for i in (1, 2, 3)]
    for orphan in orphans:
        fs.create_with_content(orphan, b"x", TAGS)
        aged(fs, orphan, 2 * HOUR)
    untagged = "s/a/0.#epoch.0.E-1-O-9.untagged"
    fs.create_with_content(untagged, b"x", None)
    aged(fs, untagged, 2 * HOUR)
    fs.create_with_content(name(4), b"x", TAGS)  # recent: not an orphan yet, not sent

    repaired = run_audit(tmp_path, "--repair", **extra)
    assert repaired.returncode == ExitCode.FINDINGS, repaired.stderr
    lines = repaired.stdout.splitlines()
    assert sorted(line for line in lines if line.startswith("sent ")) == [f"sent     fs-tier2 {o}" for o in orphans]
    assert f"  left     {untagged}" in lines
    assert ("repair: 3 orphans sent through phase 1, 1 left (no readable reclaim ownership tags), 0 not confirmed "
            "by the broker") in lines
    assert all(fs.exists(o) for o in [*orphans, untagged]), "the audit itself deletes nothing"

    worker = subprocess.Popen([sys.executable, "-m", "reclaim", "worker"], env=env_for(tmp_path, **extra),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while any(fs.exists(o) for o in orphans):
            assert worker.poll() is None, worker.stderr.read().decode() if worker.stderr else ""
            assert time.monotonic() < deadline, "the worker did not delete the orphans sent to it"
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    assert fs.exists(untagged) and fs.exists(name(4)) and fs.exists(name(0))

    again = run_audit(tmp_path, "--repair", "--json", **extra)
    document = json.loads(again.stdout)
    assert document["bindings"]["fs-tier2"]["orphans"] == {"count": 1, "names": [untagged]}
    assert document["repair"] == {"sent": {"count": 0, "names": []}, "failed": {"count": 0, "names": []},
                                  "unattributed": {"count": 1, "names": [untagged]}}
    # What reclaim cannot attribute is the operator's to remove; then nothing is left to find.
    os.unlink(fs.data_path(untagged))
    final = run_audit(tmp_path, **extra)
    assert final.returncode == ExitCode.OK, final.stdout + final.stderr
    assert "fs-tier2: 1 live, 0 pending deletion, 0 orphans, 0 missing, 0 dangling; within the 1h grace: " \
           "1 recent objects, 0 rows in cleanup" in final.stdout


def test_repair_without_a_broker_is_exit_2_before_anything_is_sent(
        tmp_path: Path, fs: FileSystemChunkStorage, store: SQLiteMetadataStore) -> None:
    fs.create_with_content(name(1), b"x", TAGS)
    aged(fs, name(1), 2 * HOUR)
    line = one_line_error(run_audit(tmp_path, "--repair", RECLAIM_BOOTSTRAP="127.0.0.1:1"))
    assert "cannot reach a Kafka broker at 127.0.0.1:1" in line
