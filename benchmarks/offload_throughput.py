"""Offload throughput, measured side by side in one run: reclaim's offload against a raw copy of the same bytes.

- offload: ``Offloader.offload_segment`` over a sealed segment of ``--chunks`` chunks of ``--size`` bytes on a
  filesystem tier-1 binding: for each chunk the intent (one metadata transaction), the read of the hot
  copy, the upload (one PUT, tagged), the upload's commit and the switch (a compare-and-set on the chunk's
  row). The release of the hot copies is phase 1's publish, measured by ``deletion_throughput.py``.
- raw: boto3's transfer manager (``upload_file``) of the same chunk files, one at a time
  (``max_concurrency=1``, one PUT each: the offloader uploads one chunk at a time), no metadata.

Each method runs ``--rounds`` times, interleaved (offload, raw, raw, offload, ...), each round on a fresh
segment and fresh keys; the medians are printed with every round, and the ratio is the median of the
rounds' side-by-side ratios (goal: offload >= 0.8x raw). The offload's CPU per MB is this process's CPU
time (the S3 server runs in its own process) over the megabytes offloaded.

Run: ``.venv/bin/python benchmarks/offload_throughput.py [--chunks 50] [--size 1048576] [--rounds 3]
[--minio]``. It starts its own S3 endpoint (moto, or MinIO with ``--minio``) unless RECLAIM_S3_ENDPOINT names
a running one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

if not __package__:  # run as a file: the sibling modules are imported as ``benchmarks.*``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from boto3.s3.transfer import TransferConfig  # noqa: E402

from benchmarks.deletion_throughput import start_endpoint  # noqa: E402
from benchmarks.results import Figures, record  # noqa: E402
from reclaim.localstack.procs import stop_pid  # noqa: E402
from reclaim.localstack.s3_server import S3Endpoint, ensure_bucket, s3_client  # noqa: E402
from reclaim.segments.chunked import ChunkedSegmentStorage  # noqa: E402
from reclaim.segments.garbage import RecordingGarbageSink  # noqa: E402
from reclaim.segments.offload import Offloader  # noqa: E402
from reclaim.settings import Settings  # noqa: E402
from reclaim.storage.bindings import StorageBindings  # noqa: E402
from reclaim.storage.chunks import Tier  # noqa: E402
from reclaim.storage.filesystem import FileSystemChunkStorage  # noqa: E402
from reclaim.storage.s3 import S3ChunkStorage  # noqa: E402
from reclaim.storage.sql_store import SQLiteMetadataStore  # noqa: E402

GOAL = 0.8


class Bench:
    """One endpoint and bucket, one metadata store and tier-1 binding, a fresh segment per round."""

    def __init__(self, endpoint: S3Endpoint, work: Path, chunks: int, size: int) -> None:
        self.bucket = f"offload-{uuid.uuid4().hex[:8]}"
        ensure_bucket(endpoint, self.bucket)
        self.client = s3_client(endpoint)
        self.store = SQLiteMetadataStore(work / "meta.db")
        self.hot = FileSystemChunkStorage(work / "tier1", name="fs-tier1", tier=Tier.TIER1)
        self.cold = S3ChunkStorage(endpoint.binding_settings(self.bucket), name="s3-tier2")
        self.bindings = StorageBindings([self.hot, self.cold])
        self.segments = ChunkedSegmentStorage(self.store, self.hot, RecordingGarbageSink(), bindings=self.bindings,
                                              max_rolling_length=size)
        self.chunks, self.size = chunks, size
        self.payload = bytes(range(256)) * (size // 256) + bytes(size % 256)

    def segment(self) -> str:
        """A new sealed segment of ``chunks`` chunks on tier-1."""
        name = f"bench/offload/{uuid.uuid4().hex[:8]}.#epoch.0"
        self.segments.create(name, stream="bench/offload")
        handle = self.segments.open_write(name, epoch=1)
        for i in range(self.chunks):
            self.segments.write(handle, i * self.size, self.payload)
        self.segments.seal(name)
        return name

    def offload(self) -> tuple[float, float]:
        """Seconds and CPU seconds to offload one segment."""
        name = self.segment()
        offloader = Offloader(self.store, self.bindings, self.cold, RecordingGarbageSink())
        started, cpu = time.perf_counter(), time.process_time()
        report = offloader.offload_segment(name)
        elapsed, used = time.perf_counter() - started, time.process_time() - cpu
        assert len(report.switched) == self.chunks, report
        return elapsed, used

    def raw(self) -> tuple[float, float]:
        """Seconds and CPU seconds to upload the same chunk files with boto3's transfer manager."""
        name = self.segment()
        files = [self.hot.data_path(chunk.key) for c in self.segments.layout(name) for chunk in c.locations]
        config = TransferConfig(max_concurrency=1, multipart_threshold=2 * self.size + 1, use_threads=False)
        prefix = uuid.uuid4().hex
        started, cpu = time.perf_counter(), time.process_time()
        for i, path in enumerate(files):
            self.client.upload_file(str(path), self.bucket, f"raw/{prefix}/{i}", Config=config)
        return time.perf_counter() - started, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=50, help="chunks a segment (default 50)")
    parser.add_argument("--size", type=int, default=1024 * 1024, help="bytes a chunk (default 1 MiB)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each method (default 3)")
    parser.add_argument("--minio", action="store_true", help="measure on a MinIO server started for the run")
    args = parser.parse_args()
    begun = time.time()
    settings = Settings.from_env()
    started: list[int] = []
    with tempfile.TemporaryDirectory(prefix="reclaim-offload-bench-") as tmp:
        work = Path(tmp)
        try:
            endpoint, server = start_endpoint(settings, args.minio, work, started)
            bench = Bench(endpoint, work, args.chunks, args.size)
            megabytes = args.chunks * args.size / 1e6
            offloads: list[tuple[float, float]] = []
            raws: list[tuple[float, float]] = []
            for round_ in range(args.rounds):
                first, second = (bench.offload, bench.raw) if round_ % 2 == 0 else (bench.raw, bench.offload)
                a, b = first(), second()
                offloads.append(a if first == bench.offload else b)
                raws.append(b if first == bench.offload else a)
        finally:
            for pid in started:
                stop_pid(pid)
    print(f"offload throughput on {server}: {args.chunks} chunks of {args.size:,} bytes ({megabytes:.1f} MB) a "
          f"round, {args.rounds} rounds")
    figures, name = Figures(), server.lower()
    for method, label, runs in (("offload", "offload (intent, upload, switch)", offloads),
                                ("raw", "raw (boto3 transfer manager, max_concurrency=1)", raws)):
        figures.rate(f"{name}_{method}", label, args.chunks, [t for t, _ in runs], unit="chunks")
        figures.add(f"{name}_{method}_mb_per_s", megabytes / statistics.median(t for t, _ in runs))
    figures.ratio(f"{name}_offload_over_raw", "offload / raw", [t for t, _ in offloads], [t for t, _ in raws],
                  target=GOAL)
    cpu, raw_cpu = (statistics.median(c for _, c in runs) / megabytes * 1000 for runs in (offloads, raws))
    print(f"  CPU per MB offloaded: {cpu:.2f} ms (raw: {raw_cpu:.2f} ms)")
    figures.add(f"{name}_offload_cpu_ms_per_mb", cpu)
    figures.add(f"{name}_raw_cpu_ms_per_mb", raw_cpu)
    record("offload_throughput", vars(args), figures, begun)


if __name__ == "__main__":
    main()
