"""The supervised worker's one endpoint without a server: children's files written by real processes in
prometheus-client's multiprocess mode, read back summed, the supervisor's own families beside them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from reclaim.services import health, host_metrics, supervised
from reclaim.settings import Settings

CHILD = """
from prometheus_client import Counter, Gauge, Histogram
Counter("reclaim_test_deleted", "d", ["ledger_type"]).labels("ledger").inc({n})
Histogram("reclaim_test_seconds", "s", buckets=(1.0,)).observe(0.5)
Gauge("reclaim_test_inflight", "an estimate the supervisor owns").set(7)
Gauge("reclaim_test_per_process", "a gauge in the default mode: one series a pid")
Gauge("reclaim_test_busy", "summed over the live children", multiprocess_mode="livesum").set({n})
"""


def child(path: Path, n: int) -> int:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(path)}
    subprocess.run([sys.executable, "-c", CHILD.format(n=n)], env=env, check=True)
    return n


def served(path: Path, own: list[Gauge]) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(host_metrics.HostCollector(path, own))
    return generate_latest(registry).decode()


def test_counters_and_histograms_are_summed_and_the_supervisor_keeps_its_gauges(tmp_path: Path) -> None:
    child(tmp_path, 2)
    child(tmp_path, 3)  # both exited: their counts stay, as a restarted child's must
    own_registry = CollectorRegistry()
    inflight = Gauge("reclaim_test_inflight", "the supervisor's", registry=own_registry)
    inflight.set(42)
    text = served(tmp_path, [inflight])
    assert 'reclaim_test_deleted_total{ledger_type="ledger"} 5.0' in text
    assert 'reclaim_test_seconds_bucket{le="1.0"} 2.0' in text
    assert "reclaim_test_inflight 42.0" in text and text.count("# TYPE reclaim_test_inflight gauge") == 1
    assert "reclaim_test_per_process" not in text and 'pid="' not in text
    assert "reclaim_test_busy" in text  # a gauge that declares how to merge is served


def test_a_dead_childs_live_gauges_go_and_its_counters_stay(tmp_path: Path) -> None:
    pid_files = {p.name for p in tmp_path.iterdir()}
    child(tmp_path, 4)
    written = {p.name for p in tmp_path.iterdir()} - pid_files
    pid = int(next(name for name in written if name.startswith("counter_")).split("_")[1].split(".")[0])
    host_metrics.child_exited(tmp_path, pid)
    text = served(tmp_path, [])
    assert 'reclaim_test_deleted_total{ledger_type="ledger"} 4.0' in text
    assert "reclaim_test_busy" not in text  # a live-mode gauge of a dead process is no longer there


def test_each_run_gets_a_fresh_directory_and_those_of_dead_supervisors_are_swept(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    abandoned = tmp_path / f"{host_metrics.DIR_PREFIX}{gone.stdout.strip()}-x1"
    abandoned.mkdir()
    (abandoned / "counter_1.db").write_bytes(b"stale")
    living = tmp_path / f"{host_metrics.DIR_PREFIX}{os.getpid()}-x2"
    living.mkdir()
    with host_metrics.metrics_dir(tmp_path) as path:
        assert path.is_dir() and not list(path.iterdir())
        assert not abandoned.exists() and living.exists()
    assert not path.exists()


PROGRESS_CHILD = """
from reclaim.deletion import metrics
metrics.RETRY_HELD.set({n})
metrics.LAST_PROGRESS.set({n} * 1000)
metrics.STALL_AFTER.set(600)  # a child's copy; the supervisor's own is served
"""


def test_the_host_serves_what_the_no_progress_alert_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Retry-tier partitions held summed over the children, their latest progress, and the supervisor's
    stall_after_s: one series each, as ReclaimDeletionNoProgress aggregates them by job."""
    for n in (2, 3):
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
        subprocess.run([sys.executable, "-c", PROGRESS_CHILD.format(n=n)], env=env, check=True)
    monkeypatch.setattr(health, "worker_probes", lambda settings: ([], []))
    monkeypatch.setattr(supervised, "_watch", lambda settings, probes, stop: None)
    endpoint = host_metrics.Endpoint()
    supervisor = SimpleNamespace(alive=lambda: 2)
    supervised._serve(Settings(stall_after_s=120), endpoint, tmp_path, supervisor, threading.Event())  # type: ignore[arg-type]
    text = generate_latest(endpoint.registry).decode()
    served = sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                    for family in text_string_to_metric_families(text) for s in family.samples
                    if family.type == "gauge" and s.name.startswith("reclaim_deletion_"))
    assert served == [("reclaim_deletion_last_progress_timestamp_seconds", (), 3000.0),
                      ("reclaim_deletion_retry_held_partitions", (), 5.0),
                      ("reclaim_deletion_stall_after_seconds", (), 120.0)]
