"""Deletion throughput, measured side by side in one run: reclaim's pipeline against the raw limits.

For S3 (one endpoint, the same object count for every method):
  - pipeline: phase 1 publishes the pending deletes and commits its metadata transaction (timed
    and printed on its own); then a phase-2 worker deletes the objects and commits its offsets
    (timer: records produced -> last object gone and offsets committed);
  - raw batched: ``DeleteObjects`` with 1000 keys a request, no pipeline (the limit);
  - naive: one ``delete_object`` call per object (what a user writes by hand).
For the filesystem binding: the pipeline against a raw ``os.unlink`` loop.

Each timed method runs ``--rounds`` times, interleaved (pipeline, raw, pipeline, raw, ...), and the
medians are printed with every round; a ratio is the median of the rounds' side-by-side ratios.

Run: ``.venv/bin/python benchmarks/deletion_throughput.py [--objects 5000] [--rounds 3]``. It starts
its own Kafka broker and S3 endpoint unless RECLAIM_BOOTSTRAP / RECLAIM_S3_ENDPOINT name running ones.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from consumers.deletion_worker import DeletionWorker, WorkerConfig, tune_interpreter
from consumers.lag import estimated_inflight
from deletion.executor import DeletionExecutor
from deletion.mark import LedgerDeletionService
from ops.kafka_broker import BrokerPorts, start_broker
from ops.procs import free_port, stop_pid
from ops.s3_server import S3Endpoint, ensure_bucket, s3_client, start_s3
from ops.settings import Settings
from ops.topics import admin_client, create_topics, topic_specs
from producers.pending_deletes import KafkaPendingDeletePublisher
from producers.producer import RecordProducer
from producers.topics import TopicNames
from schemas.codec import build_codec
from storage.base import BaseChunkStorage
from storage.bindings import StorageBindings
from storage.chunks import ChunkTags
from storage.filesystem import FileSystemChunkStorage
from storage.metadata import ChunkRecord, SegmentRecord
from storage.s3 import S3ChunkStorage
from storage.sqlite_store import SQLiteMetadataStore

PAYLOAD = b"c" * 64


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def put_objects(endpoint: S3Endpoint, bucket: str, keys: list[str]) -> None:
    client = s3_client(endpoint)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=PAYLOAD), keys))


def filled_bucket(endpoint: S3Endpoint, kind: str, n: int) -> tuple[str, list[str]]:
    """A new bucket holding ``n`` objects (setup, not timed)."""
    bucket = f"{kind}-{uuid.uuid4().hex[:8]}"
    ensure_bucket(endpoint, bucket)
    keys = [f"chunks/{i:06d}" for i in range(n)]
    put_objects(endpoint, bucket, keys)
    return bucket, keys


def raw_batched(endpoint: S3Endpoint, n: int) -> float:
    bucket, keys = filled_bucket(endpoint, "raw", n)
    client = s3_client(endpoint)

    def delete() -> None:
        for start in range(0, n, 1000):
            objects = [{"Key": key} for key in keys[start:start + 1000]]
            client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})

    elapsed = timed(delete)
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    return elapsed


def naive(endpoint: S3Endpoint, n: int) -> float:
    bucket, keys = filled_bucket(endpoint, "naive", n)
    client = s3_client(endpoint)
    elapsed = timed(lambda: [client.delete_object(Bucket=bucket, Key=key) for key in keys])
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    return elapsed


def write_chunks(store: SQLiteMetadataStore, binding: BaseChunkStorage, n: int) -> list[ChunkRecord]:
    """Live chunks with metadata rows, written in parallel (setup, not timed)."""
    segment = f"bench/stream/{uuid.uuid4().hex[:8]}.#epoch.0"
    tags = ChunkTags(component="segment", stream="bench/stream", segment=segment, writer_epoch=1)
    names = [f"{segment}.E-1-O-{i * len(PAYLOAD)}.{uuid.uuid4().hex}" for i in range(n)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: binding.create_with_content(name, PAYLOAD, tags), names))
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord(name=segment, stream="bench/stream"))
        return [txn.put_chunk(ChunkRecord(name=name, segment=segment, start_offset=i * len(PAYLOAD),
                                          length=len(PAYLOAD), tags=tags, locations=(binding.location(name),)))
                for i, name in enumerate(names)]


def pipeline(bootstrap: str, binding: BaseChunkStorage, n: int, work: Path, consumers: int = 1,
             batch_size: int = 1000) -> tuple[float, float]:
    """Seconds of phase 1 (publish + one metadata transaction), and of phase 2: from the records
    produced to every object gone and every offset committed."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    settings = Settings(topic_prefix=prefix, partitions=4)
    create_topics(admin_client(bootstrap), topic_specs(settings))
    topics = TopicNames.for_prefix(prefix)
    store = SQLiteMetadataStore(work / f"{prefix}db")
    chunks = write_chunks(store, binding, n)
    codec = build_codec()
    producer = RecordProducer(bootstrap, "idempotent-producer")
    service = LedgerDeletionService(store, KafkaPendingDeletePublisher(producer, codec, topics.deletion))
    config = WorkerConfig(bootstrap=bootstrap, topics=topics, group_id=f"{prefix}group", batch_size=batch_size,
                          poll_timeout_s=0.2)
    workers = [DeletionWorker(config, DeletionExecutor(store, StorageBindings([binding])), codec)
               for _ in range(consumers)]
    stored = [0] * len(workers)
    hold, go = threading.Event(), threading.Event()
    paused = threading.Barrier(len(workers) + 1)

    def drain(index: int) -> None:
        # Running workers have joined their group long before records arrive; so have these. They
        # stop polling while phase 1 runs, so the clock measures phase 2 alone.
        while not hold.is_set():
            workers[index].run_once()
        paused.wait()
        go.wait()
        while sum(stored) < n:
            stored[index] += workers[index].run_once().stored
        workers[index].commit()

    with ThreadPoolExecutor(len(workers)) as pool:
        drained = pool.map(drain, range(len(workers)))
        deadline = time.monotonic() + 60
        while not all(worker.assigned for worker in workers):
            assert time.monotonic() < deadline, "a worker got no partitions"
            time.sleep(0.1)
        hold.set()
        paused.wait()
        os.sync()  # every chunk durable before any delete, as on a real tier-2
        marking = timed(lambda: service.mark(chunks))
        started = time.perf_counter()
        go.set()
        list(drained)
    elapsed = time.perf_counter() - started
    assert not any(True for _ in binding.iter_names()), "objects left behind"
    for worker in workers:
        worker.close()
    producer.close()
    store.close()
    return marking, elapsed


def worker_processes(bootstrap: str, binding: BaseChunkStorage, env: dict[str, str], n: int, work: Path,
                     processes: int = 2) -> float:
    """Phase 2 as deployed: ``processes`` ``reclaim worker`` processes of one group. They are stopped
    (SIGSTOP) while phase 1 runs, so the clock measures phase 2 alone: produced -> gone + committed."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    create_topics(admin_client(bootstrap), topic_specs(Settings(topic_prefix=prefix, partitions=4)))
    topics = TopicNames.for_prefix(prefix)
    db = work / f"{prefix}db"
    store = SQLiteMetadataStore(db)
    chunks = write_chunks(store, binding, n)
    producer = RecordProducer(bootstrap, "idempotent-producer")
    service = LedgerDeletionService(store, KafkaPendingDeletePublisher(producer, build_codec(), topics.deletion))
    group = f"{prefix}group"
    env = {**os.environ, **env, "RECLAIM_BOOTSTRAP": bootstrap, "RECLAIM_TOPIC_PREFIX": prefix,
           "RECLAIM_METADATA_PATH": str(db), "RECLAIM_GROUP_ID": group, "RECLAIM_STATE_DIR": str(work / prefix),
           "RECLAIM_POLL_TIMEOUT_S": "0.05", "RECLAIM_COMMIT_INTERVAL_MS": "20"}
    procs = [subprocess.Popen([sys.executable, "-m", "ops.cli", "worker"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(processes)]
    try:
        wait_for_members(bootstrap, group, processes)
        for proc in procs:
            proc.send_signal(signal.SIGSTOP)
        os.sync()
        service.mark(chunks)
        started = time.perf_counter()
        for proc in procs:
            proc.send_signal(signal.SIGCONT)
        while estimated_inflight(bootstrap, group, topics.deletion_inputs) > 0:
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            proc.wait(30)
        producer.close()
        store.close()
    assert not any(True for _ in binding.iter_names()), "objects left behind"
    return elapsed


def wait_for_members(bootstrap: str, group: str, members: int, timeout_s: float = 60.0) -> None:
    """Until ``group`` is stable with ``members`` members, each holding partitions."""
    admin = admin_client(bootstrap)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        description = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assigned = [m for m in description.members if m.assignment and m.assignment.topic_partitions]
        if len(assigned) == members and str(description.state).endswith("STABLE"):
            return
        time.sleep(0.2)
    raise AssertionError(f"group {group} did not settle with {members} members")


def unlink_loop(root: Path, n: int) -> float:
    """Unlink ``n`` durable files one by one (created and fsynced like the binding's chunks)."""
    root.mkdir(parents=True)
    paths = [root / f"{i:06d}" for i in range(n)]
    for path in paths:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, PAYLOAD)
        os.fsync(fd)
        os.close(fd)
    os.sync()
    return timed(lambda: [os.unlink(path) for path in paths])


def report(label: str, n: int, seconds: float | list[float]) -> float:
    """Print the rate of ``n`` objects in ``seconds`` (the median of rounds, listed too); return it."""
    runs = seconds if isinstance(seconds, list) else [seconds]
    middle = statistics.median(runs)
    rounds = f"  (rounds: {', '.join(f'{s:.3f}' for s in runs)})" if len(runs) > 1 else ""
    print(f"  {label:44} {middle:8.3f} s  {n / middle:10.0f} objects/s{rounds}")
    return n / middle


def ratio(label: str, fast: list[float], slow: list[float], target: str = "") -> None:
    """Print the median of per-round ratios of rates (``slow`` seconds over ``fast`` seconds)."""
    per_round = [b / a for a, b in zip(fast, slow, strict=True)]
    rounds = f"  (rounds: {', '.join(f'{r:.2f}' for r in per_round)})" if len(per_round) > 1 else ""
    print(f"  ratio {label:28} {statistics.median(per_round):6.2f}x{target}{rounds}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=5000, help="objects per method (default 5000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the side-by-side methods (default 3)")
    args = parser.parse_args()
    n = args.objects
    tune_interpreter()  # as ``reclaim worker`` does: the in-process pipeline below runs as one would
    with tempfile.TemporaryDirectory(prefix="reclaim-bench-") as tmp:
        work = Path(tmp)
        started: list[int] = []
        bootstrap = os.environ.get("RECLAIM_BOOTSTRAP")
        if not bootstrap:
            ports = BrokerPorts(free_port(), free_port())
            started.append(start_broker(work / "kafka", Settings.from_env().cache_dir, ports).pid)
            bootstrap = ports.bootstrap
        endpoint_url = os.environ.get("RECLAIM_S3_ENDPOINT")
        if endpoint_url:
            endpoint = S3Endpoint(endpoint_url)
        else:
            proc, endpoint = start_s3(work / "s3.log")
            started.append(proc.pid)
        try:
            run(bootstrap, endpoint, n, work, args.rounds)
        finally:
            for pid in started:
                stop_pid(pid)


def run(bootstrap: str, endpoint: S3Endpoint, n: int, work: Path, rounds: int) -> None:
    print(f"deletion throughput, {n} objects per method, 64-byte objects, {os.cpu_count()} cores, "
          f"one phase-2 consumer, batches of 1000; median of {rounds} rounds, each method side by side")
    bucket = f"pipe-{uuid.uuid4().hex[:8]}"
    ensure_bucket(endpoint, bucket)
    s3 = S3ChunkStorage(endpoint.binding_settings(bucket), name="s3-tier2")
    print(f"S3 endpoint {endpoint.url}:")
    # Warm both paths (connections, caches, the broker's new-topic work) before anything is timed.
    pipeline(bootstrap, s3, min(n, 1000), work)
    raw_batched(endpoint, min(n, 1000))
    marking, deleting, raw = [], [], []
    for _ in range(rounds):
        phase1, phase2 = pipeline(bootstrap, s3, n, work)
        marking.append(phase1)
        deleting.append(phase2)
        raw.append(raw_batched(endpoint, n))
    report("phase 1: publish + one metadata transaction", n, marking)
    report("pipeline: produced -> gone + committed", n, deleting)
    s3_env = {"RECLAIM_S3_ENDPOINT": endpoint.url, "RECLAIM_S3_BUCKET": bucket,
              "RECLAIM_S3_ACCESS_KEY": endpoint.access_key, "RECLAIM_S3_SECRET_KEY": endpoint.secret_key}
    procs = worker_processes(bootstrap, s3, s3_env, n, work)
    report("pipeline, 2 worker processes (one round)", n, procs)
    report("raw DeleteObjects, 1000 keys/request", n, raw)
    hand = naive(endpoint, n)
    report("naive delete_object loop (one round)", n, hand)
    ratio("pipeline / raw batched:", deleting, raw, "   (target >= 0.5x)")
    ratio("2 processes / raw:", [procs], [statistics.median(raw)])
    ratio("pipeline / naive loop:", [statistics.median(deleting)], [hand], "   (target >= 10x)")
    fs = FileSystemChunkStorage(work / "fs-tier2", name="fs-tier2", delete_workers=8)
    print("filesystem:")
    pipeline(bootstrap, fs, min(n, 1000), work)
    marking, deleting, unlink = [], [], []
    for i in range(rounds):
        phase1, phase2 = pipeline(bootstrap, fs, n, work)
        marking.append(phase1)
        deleting.append(phase2)
        unlink.append(unlink_loop(work / f"unlink-{i}", n))
    report("phase 1: publish + one metadata transaction", n, marking)
    report("pipeline: produced -> gone + committed", n, deleting)
    report("raw os.unlink loop (durable files)", n, unlink)
    ratio("pipeline / raw unlink:", deleting, unlink)


if __name__ == "__main__":
    main()
