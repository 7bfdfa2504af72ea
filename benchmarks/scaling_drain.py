"""One drain of :mod:`benchmarks.worker_scaling`: the backlog laid out, the workers started, joined, stopped
while phase 1 publishes, woken and watched from outside until every offset is committed."""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from benchmarks.audit_spark import EmptyPut
from benchmarks.deletion_setup import connect, group_lag, new_chunks, store_rows, write_chunks
from benchmarks.deletion_throughput import start_endpoint, unlink_loop
from benchmarks.drain_watch import (
    ACKED,
    DELETE_SECONDS,
    DELETED,
    DELETES,
    OUTCOMES,
    RECEIVED,
    STORAGE_OPERATIONS,
    CommitWatch,
    MetricsWatch,
    Seen,
    counter_sums,
    cpu_seconds,
    machine_busy_s,
    wait_stopped,
)
from reclaim.deletion.mark import LedgerDeletionService
from reclaim.localstack.procs import free_port
from reclaim.localstack.s3_server import S3Endpoint, ensure_bucket, s3_client
from reclaim.producers.kafka_errors import ErrorKind, classify, kafka_error_of
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher
from reclaim.producers.producer import RecordProducer
from reclaim.producers.topics import TopicNames
from reclaim.schemas.codec import build_codec
from reclaim.settings import Settings
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from reclaim.tools.topics import admin_client, create_topics, topic_specs

__all__ = ["MODES", "Drain", "Tier2", "drain", "modes_available", "raw_seconds"]

#: How N worker processes are started: one supervisor with N children, or N separate processes.
MODES = ("supervisor", "separate")
#: A drain fails when its deleted count has not moved for this long.
STALL_S = 120.0
WORKER = [sys.executable, "-m", "reclaim", "worker"]
#: What a worker logs when its session expired and the group took its partitions away.
LOST = re.compile(r"lost \d+ partition")


def modes_available() -> list[str]:
    """The modes this checkout can run, the preferred first: the supervisor once ``--processes`` exists."""
    shown = subprocess.run([*WORKER, "--help"], capture_output=True, text=True, check=True).stdout
    return list(MODES) if "--processes" in shown else ["separate"]


@dataclass(frozen=True)
class Tier2:
    """Where the drained objects are: an S3 endpoint (``name`` says which server) or, without one, the
    filesystem binding."""

    name: str
    endpoint: S3Endpoint | None

    @classmethod
    def start(cls, settings: Settings, kind: str, work: Path, started: list[int]) -> Tier2:
        if kind == "fs":
            return cls("fs", None)
        endpoint, server = start_endpoint(settings, kind == "minio", work, started)
        return cls(server, endpoint)

    @property
    def raw_name(self) -> str:
        return "os.unlink loop, data file + sidecar" if self.endpoint is None else "DeleteObjects, 1000 keys/request"

    def binding(self, place: Path) -> tuple[BaseChunkStorage, dict[str, str]]:
        """A fresh, empty binding (a new bucket, or a new root under ``place``) and the workers' settings for it."""
        if self.endpoint is None:
            fs = FileSystemChunkStorage(place / "tier2", name="fs-tier2", delete_workers=8)
            return fs, {"RECLAIM_FS_ROOT": str(fs.root)}
        bucket = f"scale-{uuid.uuid4().hex[:8]}"
        ensure_bucket(self.endpoint, bucket)
        e = self.endpoint
        return S3ChunkStorage(e.binding_settings(bucket), name="s3-tier2"), {
            "RECLAIM_S3_ENDPOINT": e.url, "RECLAIM_S3_BUCKET": bucket, "RECLAIM_S3_REGION": e.region,
            "RECLAIM_S3_ACCESS_KEY": e.access_key, "RECLAIM_S3_SECRET_KEY": e.secret_key,
            "RECLAIM_FS_CREATE_ROOT": "true"}  # the workers' own filesystem binding, unused, in their state dir


def put_empty(endpoint: S3Endpoint, bucket: str, keys: Sequence[str], threads: int = 4) -> None:
    """Empty objects at ``keys``, each PUT signed by hand (:class:`benchmarks.audit_spark.EmptyPut`: a fifth
    of boto3's client CPU a PUT, which on two cores made laying out 20,000 objects the longest part)."""
    local = threading.local()

    def put(key: str) -> None:
        if not hasattr(local, "client"):
            local.client = EmptyPut(endpoint)
        local.client.put(bucket, key)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, keys))


def laid_out(tier2: Tier2, binding: BaseChunkStorage, store: SQLiteMetadataStore, n: int) -> list[ChunkRecord]:
    """``n`` live chunks of one segment, their objects in ``binding`` and their rows in ``store``."""
    if tier2.endpoint is None or not isinstance(binding, S3ChunkStorage):
        return write_chunks(store, binding, n)
    chunks, bucket = new_chunks(binding, n), binding.bucket
    assert bucket is not None
    put_empty(tier2.endpoint, bucket, [chunk.name for chunk in chunks])  # no key prefix: the key is the name
    return store_rows(store, chunks)


def raw_seconds(tier2: Tier2, n: int, work: Path) -> float:
    """Raw deletes of ``n`` fresh objects: ``DeleteObjects`` (1000 keys a request, as
    :func:`benchmarks.deletion_throughput.raw_batched` times it), or an unlink loop."""
    if tier2.endpoint is None:
        return unlink_loop(FileSystemChunkStorage(work / f"unlink-{uuid.uuid4().hex[:8]}", name="fs-raw"), n)
    bucket, keys = f"raw-{uuid.uuid4().hex[:8]}", [f"chunks/{i:06d}" for i in range(n)]
    ensure_bucket(tier2.endpoint, bucket)
    put_empty(tier2.endpoint, bucket, keys)
    client = s3_client(tier2.endpoint)
    started = time.perf_counter()
    for start in range(0, n, 1000):
        objects = [{"Key": key} for key in keys[start:start + 1000]]
        client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
    elapsed = time.perf_counter() - started
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    return elapsed


@dataclass(frozen=True)
class Drain:
    """One watched drain (see :mod:`benchmarks.worker_scaling` for what each span is), in seconds."""

    processes: int
    objects: int
    layout_s: float
    join_s: float
    stopped_s: float
    wake_s: float
    start_s: float
    steady_per_s: float
    stop_s: float
    drain_s: float
    resolution_s: float
    delete_request_s: float
    worker_cpu_s: float
    server_cpu_s: float
    machine_cores: float
    sweep_ms: float
    watcher_cpu_s: float
    supervisor_cpu_s: float
    not_deleted: int
    listings: int
    rebalanced: bool


class Fleet:
    """The worker processes of one drain, each the leader of its own process group (so that a signal to the
    group reaches a supervisor's children too), each with its own log."""

    def __init__(self, mode: str, processes: int, env: dict[str, str], state: Path) -> None:
        state.mkdir(parents=True, exist_ok=True)
        self.processes = processes
        self.supervised = mode == "supervisor" and processes > 1
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ports: list[int] = []
        self.logs: list[Path] = []
        # Every worker process keeps its counters in prometheus-client's multiprocess files, under files/: an
        # unsupervised one told so, a supervisor's children in the directory it makes in its TMPDIR.
        self.files = state / "metrics"
        self.files.mkdir()
        key = "TMPDIR" if self.supervised else "PROMETHEUS_MULTIPROC_DIR"
        env = {**env, key: str(self.files)}
        for i in range(processes if mode == "separate" else 1):
            port, log = free_port(), state / f"worker-{i}.log"
            # One process each, or the supervisor's N: a worker's own default is one per usable core.
            each = 1 if mode == "separate" else processes
            argv = [*WORKER, "--processes", str(each)]
            own = {"RECLAIM_METRICS_PORT": str(port)}
            self.procs.append(subprocess.Popen(argv, env={**env, **own},
                                               stdout=subprocess.DEVNULL, stderr=log.open("wb"),
                                               start_new_session=True))
            self.ports.append(port)
            self.logs.append(log)

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def send(self, sig: signal.Signals) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass

    def pause(self) -> None:
        """SIGSTOP every process, and wait until the kernel shows each one stopped."""
        self.send(signal.SIGSTOP)
        wait_stopped(self.pids)

    def check_alive(self) -> None:
        dead = [proc for proc in self.procs if proc.poll() is not None]
        assert not dead, f"a worker exited with code {dead[0].returncode}; the workers said:\n{self.tails()}"

    def tails(self) -> str:
        return "\n".join(log.read_text(errors="replace")[-2000:] for log in self.logs)

    def lost_partitions(self) -> bool:
        """Whether a worker logged losing its partitions (its session expired)."""
        return any(LOST.search(log.read_text(errors="replace")) for log in self.logs)

    def stop(self) -> None:
        """SIGTERM (after SIGCONT) and wait; what is left of a process group after 30 s is killed."""
        self.send(signal.SIGCONT)
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.send(signal.SIGKILL)  # a supervisor's child that outlived it


def settled_members(bootstrap: str, group: str, count: int, timeout_s: float = 90.0) -> frozenset[str]:
    """The member ids of ``group`` once it is stable with ``count`` members, each holding partitions."""
    admin = admin_client(bootstrap)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            description = admin.describe_consumer_groups([group])[group].result(timeout=10)
        except KafkaException as exc:  # a coordinator still loading, say: asked again
            error = kafka_error_of(exc)
            if error is None or classify(error) is not ErrorKind.RETRIABLE:
                raise
            time.sleep(0.2)
            continue
        assigned = [m for m in description.members if m.assignment and m.assignment.topic_partitions]
        if len(assigned) == count and str(description.state).endswith("STABLE"):
            return frozenset(m.member_id for m in assigned)
        time.sleep(0.05)
    raise AssertionError(f"group {group} did not settle with {count} members")


def worker_env(tier2_env: dict[str, str], bootstrap: str, prefix: str, group: str, metadata: Path, state: Path,
               commit_interval_ms: int | None) -> dict[str, str]:
    """The workers' environment: this one's, less its S3 settings, plus the drain's."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RECLAIM_S3_")}
    env |= {**tier2_env, "RECLAIM_BOOTSTRAP": bootstrap, "RECLAIM_TOPIC_PREFIX": prefix, "RECLAIM_GROUP_ID": group,
            "RECLAIM_METADATA_PATH": str(metadata), "RECLAIM_STATE_DIR": str(state)}
    if commit_interval_ms is not None:
        env["RECLAIM_COMMIT_INTERVAL_MS"] = str(commit_interval_ms)
    return env


def drain(bootstrap: str, tier2: Tier2, mode: str, processes: int, n: int, work: Path, args: argparse.Namespace,
          servers: Sequence[int]) -> Drain:
    """Lay out ``n`` objects with their rows, start the workers, and watch them drain (the module's steps)."""
    prefix = f"scale-{uuid.uuid4().hex[:8]}."
    create_topics(admin_client(bootstrap), topic_specs(Settings(topic_prefix=prefix, partitions=args.partitions)))
    topics = TopicNames.for_prefix(prefix)
    binding, tier2_env = tier2.binding(work / prefix)
    store = SQLiteMetadataStore(work / f"{prefix}db")
    started = time.perf_counter()
    chunks = laid_out(tier2, binding, store, n)
    layout_s = time.perf_counter() - started
    producer = RecordProducer(bootstrap, "idempotent-producer")
    service = LedgerDeletionService(store, KafkaPendingDeletePublisher(producer, build_codec(), topics.deletion))
    connect(producer, bootstrap, prefix)
    group = f"{prefix}group"
    env = worker_env(tier2_env, bootstrap, prefix, group, Path(store.path), work / prefix / "state",
                     args.commit_interval_ms)
    commits = CommitWatch(bootstrap, group, topics.deletion)
    launched = time.perf_counter()
    fleet = Fleet(mode, processes, env, work / prefix / "logs")
    try:
        try:
            members = settled_members(bootstrap, group, processes)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the workers said:\n{fleet.tails()}") from exc
        join_s = time.perf_counter() - launched
        # The group is stable once the broker has handed out the partitions; each worker learns it at its next
        # poll and then reads every partition's end (its horizon: records past it are read for the first time).
        # Stopped before that, it would read the ends after phase 1 and take every record for one read again
        # (each listed before its delete). A drain that listed anything is reported.
        time.sleep(args.settle_s)
        watched = watch(fleet, service, chunks, commits, n, args.scrape_ms / 1000, servers)
        rebalanced = settled_members(bootstrap, group, processes) != members or fleet.lost_partitions()
    finally:
        fleet.stop()
        commits.close()
        producer.close()
        store.close()
    assert not any(True for _ in binding.iter_names()), "objects left behind"
    assert group_lag(bootstrap, group, topics.deletion_inputs) == 0, "records left on the deletion topics"
    return Drain(processes, n, layout_s, join_s, rebalanced=rebalanced, **watched)


def watch(fleet: Fleet, service: LedgerDeletionService, chunks: Sequence[ChunkRecord], commits: CommitWatch, n: int,
          interval_s: float, servers: Sequence[int]) -> dict[str, Any]:
    """Stop the joined workers, run phase 1, wake them and time the drain from outside (the module's steps
    3 and 4); the spans of :class:`Drain` after ``join_s``."""
    metrics = MetricsWatch(fleet.files, fleet.ports, interval_s)
    metrics.check(fleet.processes)
    ends, stopped_s = phase1_stopped(fleet, service, chunks, commits, n)
    before = (cpu_seconds(fleet.pids), cpu_seconds(servers), machine_busy_s(), time.process_time(),
              cpu_seconds(fleet.pids, descendants=False))
    woke = time.perf_counter()
    fleet.send(signal.SIGCONT)
    metrics.start(woke)
    try:
        last = all_deleted(metrics, fleet, n)
        committed = commits.reached(ends, last.at - last.within, interval_s, time.perf_counter() + STALL_S)
        watcher_cpu_s = time.process_time() - before[3]
        after = (cpu_seconds(fleet.pids), cpu_seconds(servers), machine_busy_s(), 0.0,
                 cpu_seconds(fleet.pids, descendants=False))
    except BaseException:
        metrics.stop(check=False)
        raise
    metrics.stop()
    polled, first = metrics.first(RECEIVED, 1), metrics.first(DELETED, 1)
    assert polled is not None and first is not None
    steady = (n - first.value) / (last.at - first.at) if last.at > first.at else n / (last.at - polled.at)
    return {"stopped_s": stopped_s, "wake_s": polled.at - woke, "start_s": first.at - polled.at,
            "steady_per_s": steady, "stop_s": committed.at - last.at, "drain_s": committed.at - polled.at,
            "resolution_s": max(seen.within for seen in (polled, first, last, committed)),
            "worker_cpu_s": after[0] - before[0], "server_cpu_s": after[1] - before[1],
            "machine_cores": (after[2] - before[2]) / (committed.at - woke), "watcher_cpu_s": watcher_cpu_s,
            "supervisor_cpu_s": after[4] - before[4] if fleet.supervised else 0.0,
            "sweep_ms": statistics.median(metrics.periods() or [0.0]) * 1000, **final_reading(metrics)}


def phase1_stopped(fleet: Fleet, service: LedgerDeletionService, chunks: Sequence[ChunkRecord], commits: CommitWatch,
                   n: int) -> tuple[dict[int, int], float]:
    """Phase 1 while the workers are stopped: the deletion topic's end offsets after it, and how long they were."""
    fleet.pause()
    paused = time.perf_counter()
    os.sync()  # every object durable before any delete, as on a real tier-2
    assert not service.mark(chunks).failed, "phase 1 could not publish every pending delete"
    ends = commits.ends()
    assert sum(ends.values()) == n, f"the deletion topic holds {sum(ends.values())} records, not {n}"
    return ends, time.perf_counter() - paused


def final_reading(metrics: MetricsWatch) -> dict[str, Any]:
    """From the workers' whole metrics pages, once the drain is over: the mean batched delete, the records
    with another outcome than deleted, and the existence listings (records taken for read again)."""
    page = metrics.page()
    deletes = counter_sums(page, (DELETE_SECONDS, DELETES))
    outcomes = metrics.by_label(OUTCOMES, "outcome", page)
    listings = metrics.by_label(STORAGE_OPERATIONS, "operation", page).get("present", 0.0)
    if set(outcomes) != {"deleted"} or listings:
        print(f"    outcomes: {outcomes}; existence listings: {listings:.0f}")
    return {"delete_request_s": deletes.get(DELETE_SECONDS, 0.0) / max(1.0, deletes.get(DELETES, 0.0)),
            "not_deleted": int(sum(v for k, v in outcomes.items() if k != "deleted")), "listings": int(listings)}


def all_deleted(metrics: MetricsWatch, fleet: Fleet, n: int) -> Seen:
    """Wait until every record is concluded (``n`` deleted, or ``n`` acked when some had another outcome);
    when the deleted count was first seen at its final value."""
    seen, moved = -1.0, time.monotonic()
    while True:
        counters = metrics.sweeps[-1].counters if metrics.sweeps else {}
        deleted = metrics.latest(DELETED)
        if deleted >= n or counters.get(ACKED, 0.0) >= n:
            break
        if deleted != seen:
            seen, moved = deleted, time.monotonic()
        fleet.check_alive()
        if time.monotonic() - moved > STALL_S:
            outcomes = metrics.by_label(OUTCOMES, "outcome")
            raise AssertionError(f"the drain stalled at {deleted:.0f} of {n} deleted ({metrics.latest(ACKED):.0f} "
                                 f"acked; outcomes {outcomes}); the workers said:\n{fleet.tails()}")
        time.sleep(0.005)
    last = metrics.first(DELETED, counters.get(DELETED, 0.0))
    assert last is not None
    return last
