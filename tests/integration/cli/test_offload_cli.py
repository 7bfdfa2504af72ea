"""``reclaim offload run | status`` as a user runs them: a stream written to the filesystem tier-1 binding is
offloaded to tier-2, its hot copies released through phase 1 and deleted by a running worker, the audit clean
on both tiers and every byte read back from tier-2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import Tier
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.cli import clean_env, one_line_error, run_reclaim

STREAM = "scope/orders"


@pytest.mark.integration
def test_a_stream_on_tier1_is_offloaded_its_hot_copies_deleted_and_both_tiers_audit_clean(
        tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    hot_root = tmp_path / "tier1"
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_TOPIC_PREFIX=unique_name("offload") + ".",
                    RECLAIM_FS_TIER1_ROOT=str(hot_root), RECLAIM_STREAM_BINDING="fs-tier1",
                    RECLAIM_OFFLOAD_BINDING="fs-tier2", RECLAIM_POLL_TIMEOUT_S="0.5")
    run_reclaim("topics", "create", env=env, check=True, timeout=120)
    run_reclaim("streams", "create", STREAM, "--chunk-size", "1024", env=env, check=True, timeout=120)
    data = os.urandom(5000)
    written = subprocess.run([sys.executable, "-m", "reclaim", "streams", "write", STREAM], input=data,
                             capture_output=True, env=env, timeout=120, check=False)
    assert written.returncode == 0, written.stderr.decode()

    done = run_reclaim("offload", "run", STREAM, "--release-after", "0", "--json", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # Five chunks: four of 1024 bytes switched and released; the last (904 bytes) may still grow and stays.
    assert (len(report["switched"]), len(report["released"]), report["to"]) == (4, 4, "fs-tier2")
    assert [item["reason"] for item in report["skipped"]] == ["may still grow (the last chunk of an unsealed segment)"]
    status = json.loads(run_reclaim("offload", "status", "--json", env=env, check=True, timeout=120).stdout)
    assert status["states"]["RELEASED"] == 4

    worker = subprocess.Popen([sys.executable, "-m", "reclaim", "worker"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        waited = run_reclaim("deletions", "inflight", "--wait", "90s", env=env, timeout=150)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        status = json.loads(run_reclaim("offload", "status", "--json", env=env, check=True, timeout=120).stdout)
        assert sum(status["states"].values()) == 0  # each offload ended with its hot copy's delete
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    audited = run_reclaim("audit", "--grace", "0", "--json", env=env, timeout=120)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    live = {name: found["live"] for name, found in json.loads(audited.stdout)["bindings"].items()}
    assert live == {"fs-tier2": 4, "fs-tier1": 1}

    state = tmp_path / "state"
    store = SQLiteMetadataStore(state / "metadata.db", create=False)
    try:
        hot = FileSystemChunkStorage(hot_root, name="fs-tier1", tier=Tier.TIER1)
        cold = FileSystemChunkStorage(state / "tier2", name="fs-tier2")
        segments = ChunkedSegmentStorage(store, hot, RecordingGarbageSink(), bindings=StorageBindings([hot, cold]))
        (segment,) = store.segment_names(f"{STREAM}/")
        assert segments.read(segment, 0, len(data)) == data
    finally:
        store.close()


@pytest.mark.integration
def test_offload_run_refuses_a_binding_that_is_not_configured_in_one_line(
        tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_TOPIC_PREFIX=unique_name("offload") + ".")
    run_reclaim("topics", "create", env=env, check=True, timeout=120)
    run_reclaim("streams", "create", STREAM, env=env, check=True, timeout=120)
    refused = run_reclaim("offload", "run", STREAM, "--to", "gcs-tier2", env=env, timeout=120)
    assert "no storage binding named 'gcs-tier2'" in one_line_error(refused, 64)
    refused = run_reclaim("offload", "run", "no-slash", env=env, timeout=120)
    assert "'scope/name'" in one_line_error(refused, 64)
