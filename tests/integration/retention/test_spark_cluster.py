"""The retention job on a Spark standalone cluster whose executors lack reclaim, checkpointing on MinIO (s3a)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from devtools.spark_cluster import SparkCluster
from reclaim.exits import ExitCode
from reclaim.localstack.s3_server import S3Endpoint, ensure_bucket, s3_client
from reclaim.producers.config import kafka_config
from reclaim.producers.topics import TopicNames
from reclaim.retention.spark_session import SHIPPED_AS
from reclaim.schemas import StreamCut, TruncationEvent, build_codec
from tests.support.cli import clean_env
from tests.support.kafka_io import consume_from_start
from tests.support.spark_job import CONSUMPTION, at, consumed, produce_records, recorded, stream_with, subscribe

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

RUN_TIMEOUT_S = 240
CHECKPOINT_PREFIX = "retention-checkpoint"


@dataclass(frozen=True)
class ClusterJob:
    """The retention job as an operator runs it on the cluster: its own process, ``--master spark://...``, the
    executors' Python named, the checkpoint an s3a URI on MinIO reached with reclaim's S3 settings."""

    cluster: SparkCluster
    endpoint: S3Endpoint
    bootstrap: str
    names: TopicNames
    bucket: str
    work: Path

    @property
    def checkpoint(self) -> str:
        return f"s3a://{self.bucket}/{CHECKPOINT_PREFIX}"

    def command(self, *extra: str, python: Path | None = None) -> list[str]:
        return [sys.executable, "-m", "reclaim", "retention-job", "--bootstrap", self.bootstrap,
                "--topic-prefix", self.names.truncation.removesuffix("truncation"), "--master", self.cluster.master_url,
                "--executor-python", str(python or self.cluster.python), "--checkpoint", self.checkpoint,
                "--reevaluate-s", "1", *extra]

    def env(self) -> dict[str, str]:
        # The driver tells the executors where to reach it: on loopback, like the cluster.
        return clean_env(self.work, RECLAIM_S3_ENDPOINT=self.endpoint.url, SPARK_LOCAL_IP="127.0.0.1",
                         RECLAIM_RECORD_AUTH="off",  # the cluster under test, not signatures
                         RECLAIM_S3_ACCESS_KEY=self.endpoint.access_key or "",
                         RECLAIM_S3_SECRET_KEY=self.endpoint.secret_key or "")

    def run_once(self) -> str:
        """One ``--once`` run; its output and log (stdout: a line a batch; stderr), after checking it exited 0."""
        done = subprocess.run(self.command("--once"), env=self.env(), capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S, check=False)
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout + done.stderr

    def truncations(self) -> list[StreamCut]:
        """Every truncation event's cut on the truncation topic, in offset order."""
        count = _messages_on(self.bootstrap, self.names.truncation)
        messages = consume_from_start(self.bootstrap, [self.names.truncation], f"check-{time.monotonic_ns()}", count)
        codec = build_codec()
        return [codec.decode(m.value() or b"", self.names.truncation, TruncationEvent).cut
                for m in sorted(messages, key=lambda m: (m.partition() or 0, m.offset() or 0))]

    def checkpoint_keys(self) -> list[str]:
        listed = s3_client(self.endpoint).list_objects_v2(Bucket=self.bucket, Prefix=f"{CHECKPOINT_PREFIX}/")
        return [item["Key"] for item in listed.get("Contents", [])]


def _messages_on(bootstrap: str, topic: str) -> int:
    consumer = Consumer(kafka_config(bootstrap, "consumer", {"group.id": "watermarks"}))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(high - low for low, high in (consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                                                for p in partitions))
    finally:
        consumer.close()


@dataclass(frozen=True)
class PythonWorker:
    """A Python process of the executors' environment: its command line, working directory and parent's."""

    pid: int
    argv: list[str]
    cwd: Path
    parent: int
    parent_argv: list[str]
    grandparent: int

    @property
    def forked_by_executor(self) -> bool:
        return any("CoarseGrainedExecutorBackend" in arg for arg in self.parent_argv)


def executor_pythons(cluster: SparkCluster) -> list[PythonWorker]:
    """The processes now running the cluster's executors' Python with a working directory in a worker's."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().decode().split("\0")
            if argv[0] != str(cluster.python):
                continue
            cwd = Path(os.readlink(proc / "cwd"))
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            parent_argv = Path(f"/proc/{parent}/cmdline").read_bytes().decode().split("\0")
            grandparent = int(Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if any(work in cwd.parents for work in cluster.work_dirs):
            found.append(PythonWorker(int(proc.name), argv, cwd, parent, parent_argv, grandparent))
    return found


@dataclass(frozen=True)
class FirstRun:
    """What the job's first run on the cluster left: its job, its application and the Python processes seen."""

    job: ClusterJob
    app_id: str
    pythons: list[PythonWorker]
    """Every Python process of the executors' environment seen while it ran."""
    log: str


@pytest.fixture(scope="module")
def first_run(spark_cluster: SparkCluster, minio_s3: S3Endpoint, kafka_bootstrap: str,
              tmp_path_factory: pytest.TempPathFactory) -> FirstRun:
    """The job's first ``--once`` run (two subscribers at 300: it emits the cut at 300), with the executors'
    Python processes looked at every half second while it runs."""
    from reclaim.settings import Settings
    from reclaim.tools.topics import admin_client, create_topics, topic_specs

    unique = uuid.uuid4().hex[:12]
    settings = Settings(topic_prefix=f"cluster-{unique}.", partitions=2)
    create_topics(admin_client(kafka_bootstrap), topic_specs(settings))
    ensure_bucket(minio_s3, f"cluster-{unique}")
    job = ClusterJob(spark_cluster, minio_s3, kafka_bootstrap, TopicNames.for_prefix(settings.topic_prefix),
                     f"cluster-{unique}", tmp_path_factory.mktemp("cluster-job"))
    produce_records(kafka_bootstrap, job.names, [*stream_with(CONSUMPTION, "billing", "audit"),
                                                 consumed("billing", at(300, 300)), consumed("audit", at(300, 300)),
                                                 recorded(at(300, 300))])
    status = spark_cluster.status()
    apps_before = {app["id"] for app in status["activeapps"] + status["completedapps"]}
    log_path = job.work / "job.log"
    seen: dict[int, PythonWorker] = {}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(job.command("--once"), env=job.env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            seen.update({python.pid: python for python in executor_pythons(spark_cluster)})
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = log_path.read_text(errors="replace")
    assert proc.wait() == 0, output[-4000:]
    status = spark_cluster.status()
    [app_id] = [app["id"] for app in status["activeapps"] + status["completedapps"] if app["id"] not in apps_before]
    return FirstRun(job, app_id, list(seen.values()), output)


def test_the_job_runs_its_stateful_step_on_the_cluster_executors_and_checkpoints_on_s3a(first_run: FirstRun) -> None:
    job, cluster = first_run.job, first_run.job.cluster
    assert job.truncations() == [at(300, 300)]
    assert re.search(r"retention batch \d+: input_rows=\d+ streams_decided=1 events=1 rejects=0", first_run.log)

    # The executors' Python has no reclaim: what they ran came with the job, unpacked in each executor's directory.
    # (-I: neither this process's folder, the repository, nor PYTHONPATH on its path.)
    bare = subprocess.run([str(cluster.python), "-I", "-c", "import reclaim"], capture_output=True, text=True,
                          check=False)
    assert "No module named 'reclaim'" in bare.stderr
    executors = cluster.executor_dirs(first_run.app_id)
    assert len(executors) == len(cluster.worker_pids) == 2  # one executor on each worker
    for executor in executors:
        assert (executor / SHIPPED_AS / "reclaim" / "retention" / "spark_state.py").is_file()
        assert (executor / SHIPPED_AS / "reclaim" / "schemas" / "avro" / "reclaim.TruncationEvent.avsc").is_file()

    # The job's Python (the stateful step, and the check of the executors' packages before it) ran on the
    # executors' Python: PySpark's daemon, started in an executor's directory by that executor
    # (CoarseGrainedExecutorBackend of this application), which a worker of the cluster started; and the
    # Python workers the daemon forked. In a standalone cluster the driver runs no task. (The test session's
    # own application shares the cluster: its executors' Python processes are not this job's.)
    ours = [p for p in first_run.pythons if any(e == p.cwd or e in p.cwd.parents for e in executors)]
    daemons = [p for p in ours if p.forked_by_executor]
    assert daemons, f"no PySpark daemon of the executors' Python among {first_run.pythons}"
    for daemon in daemons:
        assert daemon.argv[1:3] == ["-m", "pyspark.daemon"] and daemon.cwd in executors, daemon
        assert daemon.grandparent in cluster.worker_pids and first_run.app_id in daemon.parent_argv, daemon
    assert all(p in daemons or p.parent in {d.pid for d in daemons} for p in ours), ours

    # The checkpoint is on MinIO: the driver's offsets and commits, and the state the executors wrote.
    keys = job.checkpoint_keys()
    assert {f"{CHECKPOINT_PREFIX}/offsets/0", f"{CHECKPOINT_PREFIX}/commits/0"} <= set(keys), keys
    assert any(key.startswith(f"{CHECKPOINT_PREFIX}/state/") for key in keys), keys


def test_a_job_restarted_from_its_s3a_checkpoint_resumes_without_emitting_behind(first_run: FirstRun) -> None:
    job = first_run.job
    # A late subscriber far behind: from scratch the common cut would fall back to 100; the restored
    # state remembers the cut at 300 it emitted and stays quiet. Only the new records are read.
    produce_records(job.bootstrap, job.names, [subscribe("late"), consumed("late", at(100, 100)),
                                               recorded(at(350, 350), 1000)])
    log = job.run_once()
    batches = re.findall(r"retention batch \d+: input_rows=(\d+) streams_decided=\d+ events=(\d+)", log)
    assert batches and sum(int(events) for _, events in batches) == 0, log[-4000:]
    assert sum(int(rows) for rows, _ in batches) <= 4, batches  # the three new records and a wake-up, not all nine
    assert job.truncations() == [at(300, 300)]


def test_executors_whose_python_lacks_what_reclaim_imports_are_refused_in_one_line(first_run: FirstRun,
                                                                                   tmp_path: Path) -> None:
    job = first_run.job
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    done = subprocess.run(job.command("--once", python=bare / "bin" / "python"), env=job.env(), capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == ExitCode.UNAVAILABLE, done.stderr[-4000:]
    [error] = [line for line in done.stderr.splitlines() if line.startswith("reclaim: error: ")]
    assert error.startswith(f"reclaim: error: the executors cannot run the retention job: {bare}/bin/python on ")
    assert error.endswith(" lacks pandas, pyarrow, fastavro, cryptography, prometheus_client"), error
    assert "Traceback" not in done.stderr
    assert job.truncations() == [at(300, 300)]
