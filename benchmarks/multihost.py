"""Drain throughput across hosts on one machine: one worker host against two, side by side in one run.

The topology of the multi-host chaos test (:mod:`devtools.multihost`): the broker on one host, PostgreSQL
(the metadata) and MinIO (tier-2) on another, a ``reclaim worker`` process on each worker host, every
host a network namespace on one bridge. For each round and each worker count: fresh topics (6
partitions) and a fresh bucket holding the marked chunks' objects; the workers join their group,
are stopped (SIGSTOP) while phase 1 publishes the pending deletes and commits the marks, and the
clock runs from their SIGCONT to the group's lag reaching 0 (every record final, every offset
committed); the bucket is then checked empty. Worker counts alternate within a round (1, 2, 1, 2, ...).
How long the workers were stopped is printed too: past their session timeout they leave the group and
the drain includes a rebalance.

On one machine the hosts share its cores: a second worker host adds a process, not a CPU, so the
ratio says what a consumer group gains when its members compete for the same cores as the broker,
PostgreSQL and MinIO — on 2 cores, little or nothing.

Run (as root: the hosts are network namespaces): ``.venv/bin/python benchmarks/multihost.py
[--objects 20000] [--rounds 1]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

if not __package__:  # run as a file: the sibling modules are imported as ``benchmarks.*``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.deletion_setup import release_and_drain, stop_workers  # noqa: E402
from benchmarks.results import Figures, record  # noqa: E402
from devtools.multihost import CHUNK_BYTES, MultiHostStack, object_count, wait_members, write_chunks  # noqa: E402
from reclaim.consumers.deletion_worker import WorkerConfig  # noqa: E402
from reclaim.deletion.mark import LedgerDeletionService  # noqa: E402
from reclaim.localstack.s3_server import ensure_bucket  # noqa: E402
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher  # noqa: E402
from reclaim.producers.producer import RecordProducer  # noqa: E402
from reclaim.producers.topics import TopicNames  # noqa: E402
from reclaim.schemas.codec import build_codec  # noqa: E402
from reclaim.settings import Settings  # noqa: E402
from reclaim.storage.metadata import ChunkRecord  # noqa: E402
from reclaim.storage.s3 import S3ChunkStorage  # noqa: E402
from reclaim.storage.sql_store import open_metadata_store  # noqa: E402
from reclaim.tools.topics import admin_client, create_topics, topic_specs  # noqa: E402

WORKER_HOSTS = ("worker-a", "worker-b")
PARTITIONS = 6
PER_SEGMENT = 1000
STALL_S = 120.0
#: reclaim's consumer session timeout: workers stopped longer than this leave their group.
SESSION_TIMEOUT_S = WorkerConfig(bootstrap="", topics=TopicNames.for_prefix("")).consumer_config()[
    "session.timeout.ms"] / 1000


def drain(stack: MultiHostStack, hosts: tuple[str, ...], n: int, work: Path) -> tuple[float, float]:
    """Seconds for ``reclaim worker`` processes on ``hosts`` to drain ``n`` marked chunks (see the module), and
    the seconds they were stopped while phase 1 ran."""
    run = uuid.uuid4().hex[:8]
    prefix, group, bucket = f"bench-{run}.", f"bench-{run}-group", f"bench-{run}"
    admin = admin_client(stack.bootstrap)
    create_topics(admin, topic_specs(Settings(topic_prefix=prefix, partitions=PARTITIONS)))
    topics = TopicNames.for_prefix(prefix)
    ensure_bucket(stack.endpoint, bucket)
    binding = S3ChunkStorage(stack.endpoint.binding_settings(bucket), name="s3-tier2")
    store = open_metadata_store(stack.metadata_url)
    segments: list[list[ChunkRecord]] = [
        write_chunks(store, binding, f"bench/stream/{run}-{i}.#epoch.0", min(PER_SEGMENT, n - start),
                     stream="bench/stream") for i, start in enumerate(range(0, n, PER_SEGMENT))]
    producer = RecordProducer(stack.bootstrap, "idempotent-producer")
    service = LedgerDeletionService(store, KafkaPendingDeletePublisher(producer, build_codec(), topics.deletion))
    env = {**stack.reclaim_env(bucket), "RECLAIM_TOPIC_PREFIX": prefix, "RECLAIM_GROUP_ID": group,
           "RECLAIM_POLL_TIMEOUT_S": "0.05", "RECLAIM_COMMIT_INTERVAL_MS": "20"}
    procs = [stack.spawn_worker(host, env, work / run / host, metrics=False) for host in hosts]
    try:
        wait_members(admin, group, [stack.host(host) for host in hosts])
        for proc in procs:
            proc.send_signal(signal.SIGSTOP)
        stopped = time.perf_counter()
        for segment in segments:
            assert not service.mark(segment).failed, "phase 1 could not publish every pending delete"
        started = time.perf_counter()
        elapsed = release_and_drain(procs, stack.bootstrap, group, topics.deletion_inputs, n,
                                    f"the workers on {', '.join(hosts)}")
    finally:
        stop_workers(procs)
        producer.close()
        store.close()
    assert object_count(stack.endpoint, bucket) == 0, "objects left behind"
    return elapsed, started - stopped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=20_000, help="marked chunks per drain (default 20000)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, each draining with 1 and 2 hosts (default 1)")
    parser.add_argument("--warmup", type=int, default=2000, help="chunks of an untimed drain per worker count first "
                        "(default 2000; 0: none)")
    args = parser.parse_args()
    if args.rounds < 1 or args.objects < 1:
        parser.error("--rounds and --objects must be at least 1")
    one, two = WORKER_HOSTS[:1], WORKER_HOSTS
    begun, figures = time.time(), Figures()
    with tempfile.TemporaryDirectory(prefix="reclaim-bench-") as tmp:
        work = Path(tmp)
        stack = MultiHostStack(work / "servers", Settings.from_env().cache_dir, WORKER_HOSTS)
        try:
            print(f"drain throughput across hosts on one machine ({os.cpu_count()} cores): broker | PostgreSQL + "
                  f"MinIO | worker hosts, {args.objects} marked chunks of {CHUNK_BYTES} bytes, "
                  f"{PARTITIONS} partitions, batches of {Settings().batch_size}; median of {args.rounds} round(s)")
            if args.warmup:
                for hosts in (one, two):
                    drain(stack, hosts, args.warmup, work)
            alone: list[float] = []
            paired: list[float] = []
            held: list[float] = []
            for _ in range(args.rounds):
                for hosts, times in ((one, alone), (two, paired)):
                    elapsed, stopped = drain(stack, hosts, args.objects, work)
                    times.append(elapsed)
                    held.append(stopped)
            key = f"multihost_{args.objects}"
            figures.rate(f"{key}_one_host", "1 worker host: SIGCONT -> lag 0", args.objects, alone)
            figures.rate(f"{key}_two_hosts", "2 worker hosts: SIGCONT -> lag 0", args.objects, paired)
            figures.ratio(f"{key}_two_hosts_over_one", "2 worker hosts / 1:", paired, alone)
            figures.add(f"{key}_workers_stopped_max_s", max(held))
            note = (f" (over the workers' {SESSION_TIMEOUT_S} s session timeout: a drain may include a rebalance)"
                    if max(held) >= SESSION_TIMEOUT_S else "")
            print(f"  workers stopped while phase 1 ran: at most {max(held):.1f} s{note}")
        finally:
            stack.close()
    record("multihost", vars(args), figures, begun)


if __name__ == "__main__":
    main()
