"""``reclaim offload run | status`` as a user runs them: a stream written to the filesystem tier-1 binding is
offloaded to tier-2, its hot copies released through phase 1 and deleted by a running worker, the audit clean
on both tiers and every byte read back from tier-2. Then ``reclaim offload set-policy`` and two ``reclaim
offloader`` processes sharing four streams by their leases."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.localstack.procs import free_port
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import Tier
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.cli import clean_env, one_line_error, run_reclaim
from tests.support.deployment import metric, wait_for
from tests.support.pipeline import scrape

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


def _bindings_of(store_path: Path, stream: str) -> list[str]:
    store = SQLiteMetadataStore(store_path, create=False)
    try:
        (segment,) = store.segment_names(f"{stream}/")
        return [row.locations[0].binding for row in store.list_chunks(segment)]
    finally:
        store.close()


@pytest.mark.integration
def test_two_offloader_processes_share_the_streams_by_policy_and_let_go_of_their_leases_on_sigterm(
        tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    streams = [f"scope/s{i}" for i in range(4)]
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_TOPIC_PREFIX=unique_name("offloader") + ".",
                    RECLAIM_FS_TIER1_ROOT=str(tmp_path / "tier1"), RECLAIM_STREAM_BINDING="fs-tier1",
                    RECLAIM_OFFLOAD_BINDING="fs-tier2", RECLAIM_POLL_TIMEOUT_S="0.5",
                    RECLAIM_OFFLOAD_EVERY_S="0.5", RECLAIM_OFFLOAD_LEASE_S="5")
    run_reclaim("topics", "create", env=env, check=True, timeout=120)
    for stream in streams:
        run_reclaim("streams", "create", stream, "--chunk-size", "1024", env=env, check=True, timeout=120)
        written = subprocess.run([sys.executable, "-m", "reclaim", "streams", "write", stream], input=os.urandom(5000),
                                 capture_output=True, env=env, timeout=120, check=False)
        assert written.returncode == 0, written.stderr.decode()
    # Refused in one line, before anything is stored.
    refused = run_reclaim("offload", "set-policy", streams[0], env=env, timeout=120)
    assert "--after-bytes, --after or both" in one_line_error(refused, 64)
    refused = run_reclaim("offload", "set-policy", streams[0], "--after", "1h", "--to", "gcs-tier2", env=env,
                          timeout=120)
    assert "no storage binding named 'gcs-tier2'" in one_line_error(refused, 64)
    refused = run_reclaim("offload", "set-policy", "scope/none", "--after", "1h", env=env, timeout=120)
    assert "no stream 'scope/none'" in one_line_error(refused, 64)
    refused = run_reclaim("offload", "set-policy", streams[0], "--after-bytes", "lots", env=env, timeout=120)
    assert refused.returncode == 64 and "512MiB" in refused.stderr
    for stream in streams:
        done = run_reclaim("offload", "set-policy", stream, "--after-bytes", "2KiB", "--release-after", "0",
                           env=env, timeout=120)
        assert done.returncode == 0 and "after 2048 hot bytes" in done.stdout, done.stdout + done.stderr
    status = json.loads(run_reclaim("offload", "status", "--json", env=env, check=True, timeout=120).stdout)
    assert [p["stream"] for p in status["policies"]] == streams

    ports = {"one": free_port(), "two": free_port()}
    spawn = [[sys.executable, "-m", "reclaim", "offloader", "--owner", name, "--metrics-port", str(port)]
             for name, port in ports.items()]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for cmd in spawn]
    worker = subprocess.Popen([sys.executable, "-m", "reclaim", "worker"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    store_path = tmp_path / "state" / "metadata.db"
    try:
        # 5000 bytes: 1024 ×4 + 904. From the newest: 904, 1928, 2952 > 2048: the three oldest go.
        wait_for("every stream's three oldest chunks on tier-2", lambda: all(
            _bindings_of(store_path, stream) == ["fs-tier2"] * 3 + ["fs-tier1"] * 2 for stream in streams))
        wait_for("the released hot copies deleted", lambda: sum(json.loads(run_reclaim(
            "offload", "status", "--json", env=env, check=True, timeout=120).stdout)["states"].values()) == 0)
        for port in ports.values():  # each holds some of the four once both are live
            served = scrape(port)
            assert re.search(r"^reclaim_offload_streams_held [1-9]", served, re.M), served
        # Which process switched which chunk depends on which started first; together, each chunk once.
        assert sum(metric(port, "reclaim_offload_steps_total", step="switched") for port in ports.values()) == 12
        held = SQLiteMetadataStore(store_path, create=False)
        try:
            owners = {lease.owner for lease in held.leases("offloader/stream/")}
            assert owners == {"one", "two"}  # rendezvous hashing gave each of the two some of the four
        finally:
            held.close()
    finally:
        for proc in procs:
            proc.terminate()
        codes = [proc.wait(timeout=60) for proc in procs]
        worker.terminate()
        worker.wait(timeout=60)
    assert codes == [0, 0], [proc.stderr.read() for proc in procs if proc.stderr]
    store = SQLiteMetadataStore(store_path, create=False)
    try:
        assert store.leases("offloader/") == []  # let go on SIGTERM: another process would take them at once
    finally:
        store.close()
    audited = run_reclaim("audit", "--grace", "0", "--json", env=env, timeout=120)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    live = {name: found["live"] for name, found in json.loads(audited.stdout)["bindings"].items()}
    assert live == {"fs-tier2": 12, "fs-tier1": 8}
    cleared = run_reclaim("offload", "clear-policy", streams[0], env=env, check=True, timeout=120)
    assert "offload policy cleared" in cleared.stdout
