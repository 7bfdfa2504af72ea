"""The Grafana dashboard's queries, asked of a real Prometheus scraping a real ``reclaim worker``; the
worker's in-flight gauge against ``reclaim deletions inflight``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reclaim.consumers.retry import Delivery, reroute_headers
from reclaim.deletion.outcomes import Outcome, Verdict
from reclaim.localstack.procs import free_port
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.producers.producer import DeliveryTracker
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.cli import run_reclaim
from tests.support.pipeline import Pipeline
from tests.support.prometheus import DEPLOY, PrometheusServer, wait_for

# The queries read reclaim's own metrics: one S3 server is enough (the S3 suites run on every one).
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.s3_servers("moto")]

DASHBOARD = DEPLOY / "grafana" / "reclaim.json"
JOB = "reclaim-worker"
#: What Grafana puts in place of the dashboard's variables: the job variable's "All" value, and a rate
#: window of several scrapes (the test Prometheus scrapes every second).
VARIABLES = {"$job": ".+", "$__rate_interval": "15s"}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def expressions() -> list[tuple[str, str]]:
    """Every query of the dashboard as (panel title, PromQL), Grafana's variables filled in."""
    found = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            found.append((panel["title"], expr))
    return found


@pytest.fixture
def pipeline(kafka_bootstrap: str, kafka_topics: Callable[..., Any], s3_endpoint: S3Endpoint, s3_bucket: str,
             tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[Pipeline]:
    """A deletion pipeline over both tier-2 bindings a worker serves: the filesystem and the S3 endpoint."""
    fs = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    s3 = S3ChunkStorage(s3_endpoint.binding_settings(s3_bucket), name="s3-tier2")
    pipe = Pipeline(kafka_bootstrap, kafka_topics(), SQLiteMetadataStore(tmp_path / "meta.db"),
                    StorageBindings([fs, s3]), unique_name("group"))
    yield pipe
    pipe.close()
    s3.close()


@pytest.fixture
def worker_env(pipeline: Pipeline, s3_endpoint: S3Endpoint, s3_bucket: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, **pipeline.worker_env(tmp_path / "tier2", **s3_endpoint.reclaim_env(s3_bucket))}


@pytest.fixture
def start_worker(worker_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[[], int]]:
    """Start ``reclaim worker --metrics-port`` as a process; returns its metrics port."""
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> int:
        port, log = free_port(), tmp_path / f"worker-{len(procs)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "reclaim", "worker", "--metrics-port", str(port)],
                                    env=worker_env, stdout=out, stderr=subprocess.STDOUT)
        procs.append(proc)

        def serving() -> bool:
            assert proc.poll() is None, f"the worker exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            return scrape(port) is not None

        wait_for(serving, "the worker's metrics endpoint")
        return port

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=60)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    """The worker's samples by (name, sorted labels); None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(port: int, name: str, **labels: str) -> float | None:
    samples = scrape(port) or {}
    return samples.get((name, tuple(sorted(labels.items()))))


def test_the_dashboard_is_a_grafana_dashboard_over_reclaims_metrics() -> None:
    """Server-free: well-formed panels, one data-source variable, metric names reclaim exports."""
    data = dashboard()
    assert [v["name"] for v in data["templating"]["list"]] == ["datasource", "job"]
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    queried = [p for p in data["panels"] if p["type"] != "row"]
    assert all(p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for p in queried)
    assert all(t["refId"] and t["expr"] for p in queried for t in p["targets"])
    names = {m for _, expr in expressions() for m in re.findall(r"\breclaim_[a-z_]+", expr)}
    assert names == {
        "reclaim_estimated_inflight_deletions", "reclaim_ledgers_deleted_total", "reclaim_deletion_dlq_sent_total",
        "reclaim_dependency_up", "reclaim_deletion_messages_received_total", "reclaim_deletion_messages_acked_total",
        "reclaim_deletion_outcomes_total", "reclaim_deletion_retries_sent_total",
        "reclaim_deletion_max_retries_reached_total", "reclaim_ledger_delete_failures_total",
        "reclaim_storage_operations_total", "reclaim_deletion_batch_delete_seconds_bucket",
        "reclaim_storage_operation_seconds_bucket", "reclaim_metadata_transactions_total"}


def test_every_dashboard_query_answers_from_a_real_worker(
        pipeline: Pipeline, start_worker: Callable[[], int],
        start_prometheus: Callable[[dict[str, list[str]]], PrometheusServer]) -> None:
    s3, fs = pipeline.bindings.get("s3-tier2"), pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(s3, "scope/s3/0.#epoch.0", 8) + pipeline.write_chunks(fs, "scope/fs/0.#epoch.0", 4)
    pipeline.service.mark(chunks)
    port = start_worker()
    wait_for(lambda: value(port, "reclaim_ledgers_deleted_total", ledger_type="offload_ledger") == 12,
             "12 chunk copies deleted")
    assert not any(s3.exists(c.name) for c in chunks[:8]) and not any(fs.exists(c.name) for c in chunks[8:])
    samples = scrape(port) or {}
    assert not any(name.endswith("_created") for name, _ in samples)

    prometheus = start_prometheus({JOB: [f"127.0.0.1:{port}"]})
    for title, expr in expressions():
        answer = prometheus.query(expr)
        assert answer["status"] == "success", f"{title}: {expr}: {answer}"
        wait_for(lambda expr=expr: prometheus.query(expr)["data"]["result"], f"{title}: {expr} has a result")

    def scraped(expr: str) -> dict[str, float]:
        return {json.dumps(r["metric"], sort_keys=True): float(r["value"][1])
                for r in prometheus.query(expr)["data"]["result"]}

    assert scraped(f'sum(reclaim_ledgers_deleted_total{{job="{JOB}"}})') == {"{}": 12.0}
    wait_for(lambda: scraped("min(reclaim_dependency_up)") == {"{}": 1.0}, "every dependency up")
    assert set(json.loads(k)["dependency"] for k in scraped("reclaim_dependency_up")) == {
        "broker", "metadata_store", "binding:fs-tier2", "binding:s3-tier2"}
    jobs = prometheus.api("label/job/values", **{"match[]": "reclaim_deletion_outcomes_total"})
    assert jobs["data"] == [JOB]  # the dashboard's job variable

    def rule_health() -> list[tuple[str, set[str]]]:
        return [(g["name"], {r["health"] for r in g["rules"]}) for g in prometheus.api("rules")["data"]["groups"]]

    assert wait_for(lambda: "unknown" not in str(rule_health()) and rule_health(), "the alert rules evaluated") \
        == [("reclaim", {"ok"})]


def hold_on_retry_tier(pipeline: Pipeline, count: int) -> None:
    """``count`` records on the longest retry tier, not due for an hour: a backlog that stays."""
    delay, topic = pipeline.topics.retries[-1]
    due_in_an_hour = int(time.time() * 1000) + 3_600_000
    tracker = DeliveryTracker()
    for i in range(count):
        headers = reroute_headers(Delivery.of(pipeline.topics.deletion, 0, i, None),
                                  Verdict(Outcome.RETRYABLE, "held for the test"), due_in_an_hour, 2, delay)
        pipeline.producer.send(topic, b"held", key=f"held-{i}".encode(), headers=headers,
                               on_delivery=tracker.callback(i))
    assert pipeline.producer.wait(tracker, 30) == set()


def test_the_worker_gauge_and_the_inflight_command_agree(
        pipeline: Pipeline, start_worker: Callable[[], int], worker_env: dict[str, str]) -> None:
    hold_on_retry_tier(pipeline, 7)
    fs = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(fs, "scope/fs/0.#epoch.0", 5)
    pipeline.service.mark(chunks)
    port = start_worker()
    wait_for(lambda: value(port, "reclaim_ledgers_deleted_total", ledger_type="offload_ledger") == 5,
             "the 5 fresh records deleted")

    def command() -> int:
        done = run_reclaim("deletions", "inflight", "--json", env=worker_env, check=True)
        return int(json.loads(done.stdout)["estimated_inflight"])

    # The gauge refreshes every 15 s: it agrees with the command once it has caught up with the deletes.
    wait_for(lambda: value(port, "reclaim_estimated_inflight_deletions") == 7, "the gauge at the held backlog")
    assert command() == 7
