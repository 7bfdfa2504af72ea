"""Peak memory of a ``reclaim worker`` process draining a backlog of pending deletes.

The backlog: ``size`` real filesystem chunks, each a data file and its tag sidecar where the
filesystem binding keeps them (written without fsync, since durability is not what is measured
here, and checked through the binding's ``get_info``), each with a metadata row already marked
inactive under a committed mark, as phase 1 leaves it; and one ``PendingDeleteLedgerInfo`` per chunk,
built by phase 1's record builder, encoded by reclaim's codec and produced with a plain
confluent-kafka producer, all before the worker starts. Every record therefore takes the normal delete
path (row found inactive, ownership checked against it, file and sidecar deleted, row removed); the
run checks afterwards that no file and no row is left. The worker's peak RSS is the kernel's
high-water mark (``VmHWM`` in ``/proc/<pid>/status``), read until the group's lag is 0.

Run: ``.venv/bin/python -m benchmarks.worker_memory [--sizes 10000,100000,1000000]`` (or as the memory
part of ``benchmarks.deletion_throughput``). It starts its own Kafka broker unless RECLAIM_BOOTSTRAP
names a running one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from benchmarks.deletion_setup import PAYLOAD, counts, fresh_topics, group_lag, new_chunks, own_broker, store_rows
from benchmarks.results import Figures, record, verdict
from reclaim.deletion.mark import new_mark_id
from reclaim.deletion.records import pending_deletes_for
from reclaim.localstack.procs import stop_pid
from reclaim.schemas.codec import build_codec
from reclaim.settings import Settings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord, MarkRecord, MarkState
from reclaim.storage.sql_store import SQLiteMetadataStore

#: Chunks laid out, stored and produced at a time, so the benchmark's own memory stays bounded.
SLICE = 10_000
#: A drain fails when it has made no progress for this long.
STALL_S = 120.0
#: The worker's peak RSS must stay under the ceiling, and within FLAT_MB of the first backlog's peak.
CEILING_MB = 200
FLAT_MB = 20


@dataclass(frozen=True)
class MemoryRun:
    """One drained backlog: its size, how long the drain took, the worker's peak and final RSS."""

    records: int
    seconds: float
    peak_mb: float
    final_mb: float


def lay_out(binding: FileSystemChunkStorage, chunks: Sequence[ChunkRecord]) -> None:
    """Each chunk's data file and tag sidecar, where and as the binding keeps them."""
    for chunk in chunks:
        data, sidecar = binding.data_path(chunk.name), binding.tags_path(chunk.name)
        data.parent.mkdir(parents=True, exist_ok=True)
        sidecar.parent.mkdir(parents=True, exist_ok=True)
        data.write_bytes(PAYLOAD)
        sidecar.write_text(json.dumps(chunk.tags.to_dict(), sort_keys=True))
    info = binding.get_info(chunks[-1].name)
    assert info.length == len(PAYLOAD) and info.tags == chunks[-1].tags, "chunk not laid out as the binding reads it"


def build_backlog(bootstrap: str, topic: str, store: SQLiteMetadataStore, binding: FileSystemChunkStorage,
                  size: int) -> None:
    """``size`` inactive chunks with rows and files, and their pending deletes on ``topic``."""
    codec = build_codec()
    mark_id = new_mark_id()
    with store.transaction() as txn:
        txn.put_mark(MarkRecord(mark_id, MarkState.COMMITTED, time.time()))
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 50})
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for start in range(0, size, SLICE):
        chunks = new_chunks(binding, min(SLICE, size - start), active=False, mark_id=mark_id)
        lay_out(binding, chunks)
        store_rows(store, chunks)
        for pending in pending_deletes_for(chunks, mark_id, int(time.time() * 1000)):
            value = codec.encode(pending, topic)
            while True:
                try:
                    producer.produce(topic, value, pending.chunk_name.encode(), on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
    assert producer.flush(120) == 0 and not failures, f"backlog not fully produced: {failures[:1]}"


def rss_mb(pid: int) -> tuple[float, float]:
    """``(VmHWM, VmRSS)`` of process ``pid`` in MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if line.startswith(("VmHWM", "VmRSS")))
    return int(fields["VmHWM"].split()[0]) / 1024, int(fields["VmRSS"].split()[0]) / 1024


def drain(bootstrap: str, size: int, work: Path) -> MemoryRun:
    """Build a backlog of ``size`` records, then run one ``reclaim worker`` until the lag is 0."""
    prefix, topics = fresh_topics(bootstrap)
    state = work / f"memory-{uuid.uuid4().hex[:8]}"
    binding = FileSystemChunkStorage(state / "tier2", name="fs-tier2")
    store = SQLiteMetadataStore(state / "metadata.db")
    build_backlog(bootstrap, topics.deletion, store, binding, size)
    group = f"{prefix}group"
    env = {key: value for key, value in os.environ.items() if not key.startswith("RECLAIM_S3_")}
    env |= {"RECLAIM_BOOTSTRAP": bootstrap, "RECLAIM_TOPIC_PREFIX": prefix,
            "RECLAIM_STATE_DIR": str(state), "RECLAIM_FS_ROOT": str(binding.root),
            "RECLAIM_METADATA_PATH": str(state / "metadata.db"), "RECLAIM_GROUP_ID": group,
            "RECLAIM_PROCESSES": "1"}  # one process: its own peak RSS is the figure
    proc = subprocess.Popen([sys.executable, "-m", "reclaim", "worker"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    started = time.perf_counter()
    try:
        peak = final = 0.0
        lag, moved = size, time.monotonic()
        while lag > 0:
            assert proc.poll() is None, f"the worker exited with code {proc.returncode}"
            assert time.monotonic() - moved < STALL_S, f"the group's lag stayed at {lag} for {STALL_S:.0f} s"
            time.sleep(0.5)
            peak, final = rss_mb(proc.pid)
            now = group_lag(bootstrap, group, topics.deletion_inputs)
            if now is not None:
                lag, moved = now, time.monotonic() if now < lag else moved
        elapsed = time.perf_counter() - started
        peak, final = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    left = next(iter(binding.iter_names()), None)
    rows = sum(len(store.list_chunks(segment, active_only=False)) for segment in store.segment_names())
    store.close()
    assert left is None, f"chunk {left} left behind"
    assert not rows, f"{rows} chunk rows left behind"
    shutil.rmtree(state)
    return MemoryRun(size, elapsed, peak, final)


def run_memory(bootstrap: str, sizes: Sequence[int], work: Path, figures: Figures) -> None:
    print("reclaim worker draining a backlog (filesystem chunks, one process, settings as deployed):")
    peaks = []
    for size in sizes:
        run = drain(bootstrap, size, work)
        peaks.append(run.peak_mb)
        key = f"worker_{size}"
        figures.add(f"{key}_drain_s", run.seconds)
        figures.add(f"{key}_records_per_s", run.records / run.seconds)
        figures.add(f"{key}_peak_rss_mb", run.peak_mb)
        figures.add(f"{key}_final_rss_mb", run.final_mb)
        print(f"  backlog {run.records:>9,} records  worker start -> lag 0 {run.seconds:8.1f} s  "
              f"({run.records / run.seconds:7.0f} records/s)  peak RSS {run.peak_mb:6.1f} MB  "
              f"RSS at the end {run.final_mb:6.1f} MB")
    low, high, growth = figures.spread("worker_peak_rss", peaks, "mb")
    figures.add("worker_peak_rss_ceiling_mb", CEILING_MB)
    figures.add("worker_peak_rss_flat_within_mb", FLAT_MB)
    print(f"  peak RSS {low:.1f} .. {high:.1f} MB over {len(peaks)} backlog(s)   "
          f"(target <= {CEILING_MB} MB: {verdict(high <= CEILING_MB)}; flat, within "
          f"{FLAT_MB} MB of the first backlog's peak: {verdict(growth <= FLAT_MB)}, {growth:+.1f} MB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=counts, default=[10_000, 100_000, 1_000_000],
                        help="backlogs to drain, a comma list (default 10000,100000,1000000)")
    args = parser.parse_args()
    begun, figures, settings = time.time(), Figures(), Settings.from_env()
    with tempfile.TemporaryDirectory(prefix="reclaim-bench-") as tmp:
        work = Path(tmp)
        started: list[int] = []
        try:
            run_memory(own_broker(settings, work, started), args.sizes, work, figures)
        finally:
            for pid in started:
                stop_pid(pid)
    record("worker_memory", vars(args), figures, begun)


if __name__ == "__main__":
    main()
