"""Peak memory of ``reclaim audit`` over large filesystem tier-2 listings (not a test; run by hand).

``.venv/bin/python -m benchmarks.audit_memory [--sizes 10000,100000,1000000] [--work DIR]``

For each size, a fresh filesystem tier-2 root holds ``size`` chunk files, all in one directory (every
segment of one stream: the directory an audit's walk must never read whole), written without fsync and
without tag sidecars (neither is what is measured). Their metadata store holds a live row for every
chunk but one in a hundred, whose files are dated two hours back: those are the orphans; ten more live
rows have no file: those are missing. Then ``reclaim audit --json`` runs as its own process, as an
operator runs it, and its report is checked against that layout. The peak RSS is the kernel's
high-water mark of that process (``ru_maxrss`` from ``wait4``), which includes the interpreter and
every library ``reclaim`` imports.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.deletion_setup import counts
from benchmarks.results import Figures, record
from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord, SegmentRecord
from reclaim.storage.sql_store import SQLiteMetadataStore

STREAM = "bench/stream"
#: Chunks laid out and stored at a time, so the benchmark's own memory stays bounded.
SLICE = 10_000
ORPHAN_EVERY = 100
MISSING = 10
TWO_HOURS = 7200.0


@dataclass(frozen=True)
class AuditRun:
    """One audit: how many objects it listed, how long it took, the process's peak RSS."""

    objects: int
    seconds: float
    peak_mb: float


def lay_out(binding: FileSystemChunkStorage, store: SQLiteMetadataStore, size: int) -> tuple[int, int]:
    """``size`` chunk files with their rows, one in ``ORPHAN_EVERY`` without a row and dated back, and
    ``MISSING`` rows without a file; returns (live, orphans)."""
    live = orphans = 0
    old = time.time() - TWO_HOURS
    for start in range(0, size, SLICE):
        segment = f"{STREAM}/{uuid.uuid4().hex[:8]}.#epoch.0"
        tags = ChunkTags(component="segment", stream=STREAM, segment=segment, writer_epoch=1)
        rows = []
        for i in range(start, min(size, start + SLICE)):
            name = f"{segment}.E-1-O-{i}.{uuid.uuid4().hex}"
            path = binding.data_path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            if i % ORPHAN_EVERY == 0:
                os.utime(path, (old, old))
                orphans += 1
                continue
            rows.append(row(binding, segment, tags, name))
        live += len(rows)
        store_rows(store, segment, rows)
    segment = f"{STREAM}/missing.#epoch.0"
    tags = ChunkTags(component="segment", stream=STREAM, segment=segment, writer_epoch=1)
    store_rows(store, segment, [row(binding, segment, tags, f"{segment}.E-1-O-{i}.gone") for i in range(MISSING)])
    return live, orphans


def row(binding: FileSystemChunkStorage, segment: str, tags: ChunkTags, name: str) -> ChunkRecord:
    return ChunkRecord(name=name, segment=segment, start_offset=0, length=0, tags=tags,
                       locations=(ChunkLocation(binding.name, Tier.TIER2, None, name),))


def store_rows(store: SQLiteMetadataStore, segment: str, rows: Sequence[ChunkRecord]) -> None:
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord(name=segment, stream=STREAM))
        for record in rows:
            txn.put_chunk(record)


def audit_once(size: int, work: Path) -> AuditRun:
    """Lay out ``size`` objects, run ``reclaim audit --json`` on them and check what it reports."""
    state = work / f"audit-{uuid.uuid4().hex[:8]}"
    state.mkdir(parents=True)
    binding = FileSystemChunkStorage(state / "tier2", name="fs-tier2")
    store = SQLiteMetadataStore(state / "metadata.db")
    try:
        live, orphans = lay_out(binding, store, size)
    finally:
        store.close()
    env = {key: value for key, value in os.environ.items() if not key.startswith("RECLAIM_")}
    env |= {"RECLAIM_STATE_DIR": str(state), "RECLAIM_FS_ROOT": str(binding.root)}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "reclaim", "audit", "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = _drain(proc)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    assert code == 1, f"audit exited {code}, expected 1 (findings): {err.decode()[-500:]}"
    report = json.loads(out)["bindings"]["fs-tier2"]
    assert report["live"] == live, (report["live"], live)
    assert report["orphans"]["count"] == orphans, (report["orphans"]["count"], orphans)
    assert report["missing"]["count"] == MISSING, report["missing"]
    shutil.rmtree(state)
    return AuditRun(size, seconds, usage.ru_maxrss / 1024)


def _drain(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """Both pipes read to their end without reaping the child (``communicate`` would reap it, and
    ``wait4`` must, to read the child's own peak RSS)."""
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None
    err: list[bytes] = []
    reader = threading.Thread(target=lambda: err.append(stderr.read()))
    reader.start()
    out = stdout.read()
    reader.join()
    return out, b"".join(err)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=counts, default=[10_000, 100_000, 1_000_000],
                        help="objects per audit (default 10000,100000,1000000)")
    parser.add_argument("--work", type=Path, help="where the roots and stores go (default a temporary directory)")
    args = parser.parse_args()
    begun, figures = time.time(), Figures()
    work = args.work or Path(tempfile.mkdtemp(prefix="reclaim-audit-memory-"))
    print("reclaim audit --json over a filesystem tier-2 root (one directory; 1% orphans, 10 missing):")
    peaks = []
    for size in args.sizes:
        run = audit_once(size, work)
        peaks.append(run.peak_mb)
        figures.add(f"audit_{size}_s", run.seconds)
        figures.add(f"audit_{size}_objects_per_s", run.objects / run.seconds)
        figures.add(f"audit_{size}_peak_rss_mb", run.peak_mb)
        print(f"  {run.objects:>9,} objects  {run.seconds:7.1f} s  ({run.objects / run.seconds:7.0f} objects/s)  "
              f"peak RSS {run.peak_mb:6.1f} MB", flush=True)
    low, high, growth = figures.spread("audit_peak_rss", peaks, "mb")
    print(f"  peak RSS {low:.1f} .. {high:.1f} MB ({growth:+.1f} MB from the smallest listing to the largest)")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    record("audit_memory", vars(args), figures, begun)


if __name__ == "__main__":
    main()
