"""The Grafana dashboard's queries, asked of a real Prometheus scraping real processes: the worker's panels of a
``reclaim worker``, the retention panels of a ``reclaim retention-job`` and a ``reclaim truncation-applier``, the
offloader's of a ``reclaim offloader``; the
worker's in-flight gauge against ``reclaim deletions inflight``; the no-progress alert firing from a worker whose
group stopped draining, and resolving once it drains."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from prometheus_client.parser import text_string_to_metric_families

from reclaim.consumers.retry import Delivery, reroute_headers
from reclaim.deletion.outcomes import Outcome, Verdict
from reclaim.localstack.procs import free_port
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.producers.config import kafka_config
from reclaim.producers.producer import DeliveryTracker
from reclaim.producers.topics import TopicNames
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import Tier
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import OffloadPolicy
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.cli import clean_env, run_reclaim
from tests.support.kafka_io import Outgoing, produce_confirmed
from tests.support.pipeline import Pipeline
from tests.support.prometheus import DEPLOY, PrometheusServer, wait_for
from tests.support.spark_job import CONSUMPTION, STREAM, at, consumed, produce_records, recorded, stream_with

# The queries read reclaim's own metrics: one S3 server is enough (the S3 suites run on every one).
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.s3_servers("moto")]

DASHBOARD = DEPLOY / "grafana" / "reclaim.json"
#: The scrape jobs, as deploy/prometheus/prometheus.yml names them (the alert rules match on them).
JOB, RETENTION_JOB, APPLIER_JOB = "reclaim-worker", "reclaim-retention-job", "reclaim-truncation-applier"
OFFLOADER_JOB, POLLER_JOB, TOPIC_APPLIER_JOB = "reclaim-offloader", "reclaim-topic-poller", "reclaim-topic-applier"
#: Each section's job variable: a panel's queries filter on its section's only.
WORKER, RETENTION, APPLIER, OFFLOADER = "$job", "$retention_job", "$applier_job", "$offloader_job"
POLLER, TOPIC_APPLIER = "$topic_poller_job", "$topic_applier_job"
SECTIONS = (WORKER, RETENTION, APPLIER, OFFLOADER, POLLER, TOPIC_APPLIER)
#: What Grafana puts in place of the dashboard's variables: the job variables' "All" value, and a rate
#: window of several scrapes (the test Prometheus scrapes every second).
VARIABLES = {**dict.fromkeys(SECTIONS, ".+"), "$__rate_interval": "15s"}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def job_variable(expr: str) -> str | None:
    """The job variable a query filters on (None: none, or more than one)."""
    used = [name for name in SECTIONS if re.search(re.escape(name) + r"\b", expr)]
    return used[0] if len(used) == 1 else None


def expressions(*sections: str) -> list[tuple[str, str]]:
    """The queries of the dashboard's ``sections`` (their job variables; none: every query) as (panel title,
    PromQL), Grafana's variables filled in."""
    found = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            if sections and job_variable(expr) not in sections:
                continue
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            found.append((panel["title"], expr))
    return found


@pytest.fixture
def pipeline(kafka_bootstrap: str, kafka_topics: Callable[..., Any], s3_endpoint: S3Endpoint, s3_bucket: str,
             tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[Pipeline]:
    """A deletion pipeline over both tier-2 bindings a worker serves: the filesystem and the S3 endpoint.

    Its longest retry tier waits an hour: no record is held longer than its tier's delay."""
    fs = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    s3 = S3ChunkStorage(s3_endpoint.binding_settings(s3_bucket), name="s3-tier2")
    pipe = Pipeline(kafka_bootstrap, kafka_topics(retry_delays=(1, 2, 3600)), SQLiteMetadataStore(tmp_path / "meta.db"),
                    StorageBindings([fs, s3]), unique_name("group"))
    yield pipe
    pipe.close()
    s3.close()


@pytest.fixture
def worker_env(pipeline: Pipeline, s3_endpoint: S3Endpoint, s3_bucket: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, **pipeline.worker_env(tmp_path / "tier2", **s3_endpoint.reclaim_env(s3_bucket))}


StartReclaim = Callable[..., int]


@pytest.fixture
def start_reclaim(tmp_path: Path) -> Iterator[StartReclaim]:
    """Start ``reclaim <command> <args> --metrics-port`` as a process with ``env``: ``start(env, command, *args)``
    returns its metrics port once it serves; each is stopped by SIGTERM at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(env: dict[str, str], command: str, *args: str) -> int:
        port, log = free_port(), tmp_path / f"{command}-{len(procs)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "reclaim", command, *args, "--metrics-port", str(port)],
                                    env=env, stdout=out, stderr=subprocess.STDOUT)
        procs.append(proc)

        def serving() -> bool:
            assert proc.poll() is None, f"reclaim {command} exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            return scrape(port) is not None

        wait_for(serving, f"the metrics endpoint of reclaim {command}")
        return port

    yield start
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def start_worker(worker_env: dict[str, str], start_reclaim: StartReclaim) -> Callable[[], int]:
    """Start ``reclaim worker --metrics-port`` as a process; returns its metrics port."""
    return lambda: start_reclaim(worker_env, "worker")


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    """A process's samples by (name, sorted labels); None while nothing answers."""
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


def metric_names(section: str) -> set[str]:
    return {m for _, expr in expressions(section) for m in re.findall(r"\breclaim_[a-z_]+", expr)}


def test_the_dashboard_is_a_grafana_dashboard_over_reclaims_metrics() -> None:
    """Server-free: well-formed panels, a data-source variable and a job variable per process, each query
    filtering on its section's job variable, metric names reclaim exports."""
    data = dashboard()
    variables = {v["name"]: v for v in data["templating"]["list"]}
    jobs = ["job", "retention_job", "applier_job", "offloader_job", "topic_poller_job", "topic_applier_job"]
    assert list(variables) == ["datasource", *jobs]
    assert [variables[name]["query"]["query"] for name in jobs] \
        == ["label_values(reclaim_dependency_up, job)", "label_values(reclaim_retention_input_rows_total, job)",
            "label_values(reclaim_truncation_applier_last_poll_timestamp_seconds, job)",
            "label_values(reclaim_offload_last_progress_timestamp_seconds, job)",
            "label_values(reclaim_topic_retention_polls_total, job)",
            "label_values(reclaim_topic_truncations_total, job)"]
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    queried = [p for p in data["panels"] if p["type"] != "row"]
    assert all(p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for p in queried)
    assert all(t["refId"] and t["expr"] for p in queried for t in p["targets"])
    assert all(job_variable(t["expr"]) for p in queried for t in p["targets"])
    # The rows in order, and no panel of one section placed under another's row.
    rows = [(p["title"], p["gridPos"]["y"]) for p in data["panels"] if p["type"] == "row"]
    assert [title for title, _ in rows] == ["Overview", "Deletions", "Retries and dead letters", "Latency",
                                            "Retention job", "Truncation applier", "Offloader", "Kafka topics"]
    retention_y, applier_y, offloader_y, topics_y = rows[4][1], rows[5][1], rows[6][1], rows[7][1]
    for panel in queried:
        section = {job_variable(t["expr"]) for t in panel["targets"]}
        y = panel["gridPos"]["y"]
        expected = ({WORKER} if y < retention_y else {RETENTION} if y < applier_y else {APPLIER} if y < offloader_y
                    else {OFFLOADER} if y < topics_y else {POLLER, TOPIC_APPLIER})
        assert len(section) == 1 and section <= expected, panel["title"]
    assert metric_names(WORKER) == {
        "reclaim_estimated_inflight_deletions", "reclaim_ledgers_deleted_total", "reclaim_deletion_dlq_sent_total",
        "reclaim_dependency_up", "reclaim_deletion_messages_received_total", "reclaim_deletion_messages_acked_total",
        "reclaim_deletion_outcomes_total", "reclaim_deletion_retries_sent_total",
        "reclaim_deletion_max_retries_reached_total", "reclaim_ledger_delete_failures_total",
        "reclaim_storage_operations_total", "reclaim_deletion_batch_delete_seconds_bucket",
        "reclaim_storage_operation_seconds_bucket", "reclaim_metadata_transactions_total",
        "reclaim_deletion_last_progress_timestamp_seconds", "reclaim_deletion_stall_after_seconds",
        "reclaim_deletion_retry_held_partitions"}
    assert metric_names(RETENTION) == {
        "reclaim_retention_last_progress_timestamp_seconds", "reclaim_retention_truncations_emitted_total",
        "reclaim_retention_rejects_total", "reclaim_retention_state_memory_bytes", "reclaim_retention_state_rows",
        "reclaim_retention_batch_duration_seconds_bucket", "reclaim_retention_batch_duration_seconds_count",
        "reclaim_retention_input_rows_total", "reclaim_retention_streams_decided_total",
        "reclaim_retention_input_offsets_behind_latest"}
    assert metric_names(APPLIER) == {
        "reclaim_truncations_total", "reclaim_truncation_consumer_lag",
        "reclaim_truncation_applier_last_poll_timestamp_seconds", "reclaim_truncation_apply_delay_seconds_bucket"}
    assert metric_names(OFFLOADER) == {
        "reclaim_offload_last_progress_timestamp_seconds", "reclaim_offload_steps_total", "reclaim_offload_due_bytes",
        "reclaim_offload_streams_held", "reclaim_offload_bytes_total", "reclaim_offload_pass_failures_total"}
    assert metric_names(POLLER) == {
        "reclaim_topic_retention_stale_groups", "reclaim_topic_retention_held_records",
        "reclaim_topic_retention_held_bytes", "reclaim_topic_retention_stalest_group_seconds"}
    assert metric_names(TOPIC_APPLIER) == {"reclaim_topic_records_deleted_total", "reclaim_topic_truncations_total"}


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
    every_query_answers(prometheus, WORKER)

    def scraped(expr: str) -> dict[str, float]:
        return answers(prometheus, expr)

    assert scraped(f'sum(reclaim_ledgers_deleted_total{{job="{JOB}"}})') == {"{}": 12.0}
    wait_for(lambda: scraped("min(reclaim_dependency_up)") == {"{}": 1.0}, "every dependency up")
    assert set(json.loads(k)["dependency"] for k in scraped("reclaim_dependency_up")) == {
        "broker", "metadata_store", "binding:fs-tier2", "binding:s3-tier2"}
    assert variable_jobs(prometheus, "job") == [JOB]

    assert rules_evaluated(prometheus) == [("reclaim", {"ok"}), ("reclaim-retention", {"ok"})]


def every_query_answers(prometheus: PrometheusServer, section: str) -> None:
    """Every query of the section is valid PromQL and returns series."""
    for title, expr in expressions(section):
        answer = prometheus.query(expr)
        assert answer["status"] == "success", f"{title}: {expr}: {answer}"
        wait_for(lambda expr=expr: prometheus.query(expr)["data"]["result"], f"{title}: {expr} has a result")


def variable_jobs(prometheus: PrometheusServer, name: str) -> list[str]:
    """The jobs the dashboard's variable ``name`` (a ``label_values(<metric>, job)`` query) offers."""
    (variable,) = [v for v in dashboard()["templating"]["list"] if v["name"] == name]
    found = re.fullmatch(r"label_values\((\w+), job\)", variable["query"]["query"])
    assert found, variable
    jobs: list[str] = prometheus.api("label/job/values", **{"match[]": found[1]})["data"]
    return jobs


def answers(prometheus: PrometheusServer, expr: str) -> dict[str, float]:
    """The instant vector of ``expr``: each series' labels (as JSON) to its value."""
    return {json.dumps(r["metric"], sort_keys=True): float(r["value"][1])
            for r in prometheus.query(expr)["data"]["result"]}


def rules_evaluated(prometheus: PrometheusServer) -> list[tuple[str, set[str]]]:
    """Each rule group with the health of its rules, once all have been evaluated."""
    def health() -> list[tuple[str, set[str]]]:
        return [(g["name"], {r["health"] for r in g["rules"]}) for g in prometheus.api("rules")["data"]["groups"]]

    found: list[tuple[str, set[str]]] = wait_for(lambda: "unknown" not in str(health()) and health(),
                                                 "the alert rules evaluated")
    return found


def hold_on_retry_tier(pipeline: Pipeline, count: int) -> None:
    """``count`` records on the longest retry tier (an hour), not due for an hour: a backlog that stays."""
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


@contextmanager
def member_that_stops_polling(pipeline: Pipeline) -> Iterator[None]:
    """A member of the pipeline's group that takes every partition and then stops polling, as a worker whose
    consumer thread hangs does. librdkafka keeps heartbeating for it, so the group does not drop it: the
    rebalance that the next member's join starts waits for it to rejoin, up to its max.poll.interval.ms, and
    meanwhile no member of the group holds a partition. The ``with`` block's end closes it."""
    consumer = Consumer(kafka_config(pipeline.bootstrap, "consumer", {
        "group.id": pipeline.group_id, "enable.auto.commit": False, "max.poll.interval.ms": 300_000}))
    consumer.subscribe(list(pipeline.topics.deletion_inputs))

    def assigned() -> bool:
        consumer.poll(0.2)  # a record it reads is never stored nor committed
        return bool(consumer.assignment())

    try:
        wait_for(assigned, "the member that stops polling assigned the group's partitions")
        yield
    finally:
        consumer.close()


def test_a_group_whose_lag_stops_falling_fires_the_no_progress_alert(
        pipeline: Pipeline, worker_env: dict[str, str], start_reclaim: StartReclaim,
        start_prometheus: Callable[[dict[str, list[str]]], PrometheusServer]) -> None:
    """A real stall: the worker has lag, holds no retry tier and finishes nothing, because its group waits on a
    member that stopped polling. With stall_after_s at 2 s the alert fires after its ``for`` minute, and goes once
    the member is gone and the worker drains."""
    fs = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(fs, "scope/fs/0.#epoch.0", 6)
    pipeline.service.mark(chunks)
    with member_that_stops_polling(pipeline):
        port = start_reclaim(worker_env, "worker", "--stall-after-s", "2")
        assert value(port, "reclaim_deletion_stall_after_seconds") == 2
        prometheus = start_prometheus({JOB: [f"127.0.0.1:{port}"]})
        firing = wait_for(lambda: answers(prometheus, 'ALERTS{alertstate="firing"}'),
                          "ReclaimDeletionNoProgress firing", timeout_s=150)
        assert [(a["alertname"], a["job"], a["severity"]) for a in map(json.loads, firing)] == [
            ("ReclaimDeletionNoProgress", JOB, "warning")]
        assert value(port, "reclaim_ledgers_deleted_total", ledger_type="offload_ledger") == 0
        assert answers(prometheus, f'sum(reclaim_deletion_retry_held_partitions{{job="{JOB}"}})') == {"{}": 0.0}
    wait_for(lambda: value(port, "reclaim_ledgers_deleted_total", ledger_type="offload_ledger") == 6,
             "the 6 chunk copies deleted once the member is gone")
    assert not any(fs.exists(c.name) for c in chunks)
    # The lag is 0 at the in-flight gauge's next refresh (every 15 s); the alert is no longer firing by then.
    wait_for(lambda: not answers(prometheus, 'ALERTS{alertstate="firing"}'), "the alert resolved", timeout_s=60)


@pytest.mark.spark
def test_every_retention_query_answers_from_a_real_job_and_applier(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], start_reclaim: StartReclaim,
        start_prometheus: Callable[[dict[str, list[str]]], PrometheusServer], tmp_path: Path,
        unique_name: Callable[[str], str]) -> None:
    names = kafka_topics()
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_RECORD_AUTH="off",
                    RECLAIM_TOPIC_PREFIX=names.truncation.removesuffix("truncation"))
    # A stream the job decides a truncation for (the applier's controller has no such stream: unknown_stream),
    # and a config that is no record: an undecodable reject.
    produce_records(kafka_bootstrap, names,
                    [*stream_with(CONSUMPTION, "billing"), consumed("billing", at(70, 80)), recorded(at(90, 90))])
    produce_confirmed(kafka_bootstrap, [Outgoing(names.stream_config, b"not avro", STREAM.encode())])
    applier = start_reclaim(env, "truncation-applier", "--record-every-s", "0",
                            "--truncation-group-id", unique_name("truncation"))
    job = start_reclaim(env, "retention-job", "--checkpoint", str(tmp_path / "checkpoint"), "--master", "local[2]",
                        "--trigger-interval-s", "1", "--reevaluate-s", "1")
    # Scraped from before the job's first batch: every counter's first sample is 0, as in production.
    prometheus = start_prometheus({RETENTION_JOB: [f"127.0.0.1:{job}"], APPLIER_JOB: [f"127.0.0.1:{applier}"]})

    def one(expr: str) -> float | None:
        found = answers(prometheus, expr)
        return next(iter(found.values())) if len(found) == 1 else None

    # The Spark job starts in 20-40 s on two cores, then decides in its first batch; its listener counts the
    # batch once it has ended, which may be after the applier has read the event.
    wait_for(lambda: one('sum(reclaim_truncations_total{outcome="unknown_stream"})') == 1,
             "the job's truncation event skipped by the applier, as Prometheus sees it", 240)
    wait_for(lambda: one(f'sum(reclaim_retention_truncations_emitted_total{{job="{RETENTION_JOB}"}})') == 1,
             "the job's batch counted, as Prometheus sees it")
    every_query_answers(prometheus, RETENTION)
    every_query_answers(prometheus, APPLIER)

    assert one('sum(reclaim_retention_rejects_total{kind="undecodable"})') == 1
    assert (one("sum(reclaim_retention_input_rows_total)") or 0) >= 6  # and the job's own wake-up record, if any
    assert (one("sum(reclaim_retention_state_rows)") or 0) >= 1  # the stream's state bucket
    assert (one("sum(reclaim_retention_state_memory_bytes)") or 0) > 0
    assert (one("time() - max(reclaim_retention_last_progress_timestamp_seconds)") or 1e9) < 30
    assert one("sum(reclaim_truncation_apply_delay_seconds_count)") == 1
    assert (one("sum(reclaim_truncation_apply_delay_seconds_sum)") or 1e9) < 60
    wait_for(lambda: one("sum(reclaim_truncation_consumer_lag)") == 0, "no truncation event left to apply")
    assert (one("time() - max(reclaim_truncation_applier_last_poll_timestamp_seconds)") or 1e9) < 30
    # Each job variable lists its own processes only (every reclaim command exports some metrics of the others).
    assert (variable_jobs(prometheus, "retention_job"), variable_jobs(prometheus, "applier_job")) == (
        [RETENTION_JOB], [APPLIER_JOB])
    assert variable_jobs(prometheus, "job") == []

    # The rules evaluate on the real series: the reject fires its alert, by kind; nothing else of retention does.
    assert rules_evaluated(prometheus) == [("reclaim", {"ok"}), ("reclaim-retention", {"ok"})]
    firing = wait_for(lambda: answers(prometheus, 'ALERTS{alertstate="firing"}'), "the reject's alert firing")
    assert [(a["alertname"], a.get("kind")) for a in map(json.loads, firing)] == [
        ("ReclaimRetentionRejects", "undecodable")]


def test_every_offloader_query_answers_from_a_real_offloader(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], start_reclaim: StartReclaim,
        start_prometheus: Callable[[dict[str, list[str]]], PrometheusServer], tmp_path: Path) -> None:
    names = kafka_topics()
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_TOPIC_PREFIX=names.deletion.removesuffix(
        "ledger-deletion"), RECLAIM_FS_TIER1_ROOT=str(tmp_path / "tier1"), RECLAIM_OFFLOAD_EVERY_S="1",
        RECLAIM_OFFLOAD_LEASE_S="10")
    (tmp_path / "state").mkdir()
    store = SQLiteMetadataStore(tmp_path / "state" / "metadata.db")
    try:
        hot = FileSystemChunkStorage(tmp_path / "tier1", name="fs-tier1", tier=Tier.TIER1)
        segments = ChunkedSegmentStorage(store, hot, RecordingGarbageSink(), max_rolling_length=100)
        segments.create("scope/orders/0.#epoch.0", stream="scope/orders")
        segments.write(segments.open_write("scope/orders/0.#epoch.0", epoch=1), 0, bytes(450))
        with store.transaction() as txn:
            txn.put_offload_policy(OffloadPolicy("scope/orders", "fs-tier2", after_bytes=0, release_after_s=3600))
    finally:
        store.close()
    offloader = start_reclaim(env, "offloader")
    prometheus = start_prometheus({OFFLOADER_JOB: [f"127.0.0.1:{offloader}"]})

    def one(expr: str) -> float | None:
        found = answers(prometheus, expr)
        return next(iter(found.values())) if len(found) == 1 else None

    wait_for(lambda: one('sum(reclaim_offload_steps_total{step="switched"})') == 4,
             "the four sealed chunks switched, as Prometheus sees it")
    every_query_answers(prometheus, OFFLOADER)
    assert one("sum(reclaim_offload_bytes_total)") == 400 and one("sum(reclaim_offload_streams_held)") == 1
    assert one("sum(reclaim_offload_due_bytes)") == 0
    assert (one("time() - max(reclaim_offload_last_progress_timestamp_seconds)") or 1e9) < 30
    assert variable_jobs(prometheus, "offloader_job") == [OFFLOADER_JOB]
    assert variable_jobs(prometheus, "job") == [] and variable_jobs(prometheus, "applier_job") == []
    assert rules_evaluated(prometheus) == [("reclaim", {"ok"}), ("reclaim-retention", {"ok"})]


def test_every_kafka_topic_query_answers_from_a_real_poller_and_applier(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], start_reclaim: StartReclaim,
        start_prometheus: Callable[[dict[str, list[str]]], PrometheusServer], tmp_path: Path,
        unique_name: Callable[[str], str]) -> None:
    from reclaim.producers.producer import RecordProducer
    from reclaim.producers.publisher import ConfirmedPublisher
    from reclaim.schemas import build_codec, millis_now
    from reclaim.schemas.streams import StreamCut
    from reclaim.schemas.topic_retention import TopicTruncation
    from reclaim.tools.topic_retention import describe_topic
    from reclaim.tools.topics import admin_client
    from tests.support.cli import run_reclaim
    from tests.support.kafka_topics import HOUR_MS, commit, create_topic, produce, start_offset

    names = kafka_topics()
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_RECORD_AUTH="off",
                    RECLAIM_TOPIC_PREFIX=names.deletion.removesuffix("ledger-deletion"))
    admin = admin_client(kafka_bootstrap)
    topic, group = unique_name("orders"), unique_name("billing")
    create_topic(admin, topic, 1)
    produce(kafka_bootstrap, topic, 0, [millis_now() - 2 * HOUR_MS + i for i in range(10)])
    commit(kafka_bootstrap, group, topic, {0: 6})
    run_reclaim("topics", "retain", topic, "--groups", group, "--min", "1h", "--stale-after", "1s", env=env,
                check=True, timeout=120)
    poller = start_reclaim(env, "topic-poller", "--every", "0.5")
    applier = start_reclaim(env, "topic-applier")
    # The job's decision, as it would write it (record authentication is off here: no signature).
    policy_at = max(json.loads(run_reclaim("topics", "retention", "list", "--json", env=env, check=True,
                                           timeout=120).stdout)[0]["updated_at"], 0)
    topic_id, _ = describe_topic(admin, topic)
    publisher = ConfirmedPublisher(RecordProducer(kafka_bootstrap, "idempotent-producer"), build_codec())
    try:
        publisher.publish(names.topic_truncation, TopicTruncation(topic, topic_id, StreamCut.from_mapping({0: 6}),
                                                                  millis_now(), policy_at), topic)
    finally:
        publisher.close()
    wait_for(lambda: start_offset(admin, topic, 0) == 6, "the decision applied")
    # The topic grows under the poller: it reckons bytes per record, and the held-back bytes answer.
    produce(kafka_bootstrap, topic, 0, [millis_now() - 2 * HOUR_MS + i for i in range(10)])
    prometheus = start_prometheus({POLLER_JOB: [f"127.0.0.1:{poller}"], TOPIC_APPLIER_JOB: [f"127.0.0.1:{applier}"]})

    def one(expr: str) -> float | None:
        found = answers(prometheus, expr)
        return next(iter(found.values())) if len(found) == 1 else None

    every_query_answers(prometheus, POLLER)
    every_query_answers(prometheus, TOPIC_APPLIER)
    wait_for(lambda: one("sum(reclaim_topic_retention_stale_groups)") == 1, "the Empty group stale")
    assert one(f'sum(reclaim_topic_records_deleted_total{{topic="{topic}"}})') == 6
    assert one('sum(reclaim_topic_truncations_total{outcome="deleted"})') == 1
    assert variable_jobs(prometheus, "topic_poller_job") == [POLLER_JOB]
    assert variable_jobs(prometheus, "topic_applier_job") == [TOPIC_APPLIER_JOB]
    firing = wait_for(lambda: answers(prometheus, 'ALERTS{alertstate="firing"}'), "the stale group's alert firing")
    assert [(a["alertname"], a.get("topic")) for a in map(json.loads, firing)] == [("ReclaimTopicGroupStale", topic)]
