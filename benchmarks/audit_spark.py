"""Time and peak memory of ``reclaim audit --spark`` beside the one-process ``reclaim audit``, on MinIO (not a test).

``.venv/bin/python -m benchmarks.audit_spark [--objects 1000000] [--streams 100] [--rounds 2]
[--master local[2]] [--work DIR] [--keep]``

A MinIO server of its own (:func:`devtools.minio_server.start_minio`) gets one bucket per size, holding
``objects`` empty chunk objects spread over ``streams`` streams (``bench/sNNN/0.#epoch.0.E-1-O-<i>.<uuid>``:
the name tree's second level is the stream, so the Spark job lists one stream per task), each key the
S3 binding's own (:meth:`~reclaim.storage.s3.S3ChunkStorage.object_key`), PUT by several processes
with many threads each. A SQLite metadata store holds a live row for every object but one in a hundred
(the orphans), plus ten live rows with no object (missing). S3 cannot date an object back, so both
audits run with ``--grace 0``, where every object without a row counts as an orphan at once.

Then, as separate processes, as an operator runs them, in rounds whose order alternates:
``reclaim audit --json --grace 0`` and ``reclaim audit --json --grace 0 --spark --master <master>``,
beside an empty filesystem tier-2 root (the filesystem binding is always configured). For each run:
its wall time; the peak of the summed RSS of its process tree, sampled from ``/proc`` every 0.2 s (the
Spark run's driver JVM is a child of the Python process and holds most of its memory; Spark's Python
workers are the JVM's children; the sum counts pages that forked workers share once per process, so it
is an upper bound); and the Python process's own ``ru_maxrss`` (``wait4``). Each report is checked
against the layout, and the two modes' reports against each other; any difference fails the run. The
figures are printed as a table and appended to the results file (:mod:`benchmarks.results`).

On a 2-core machine 1,000,000 objects take about 37 minutes with one round, 23 of them PUTs (``--rounds 1``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.deletion_setup import counts
from benchmarks.results import Figures, record
from devtools.minio_server import start_minio
from reclaim.localstack.procs import stop_pid
from reclaim.localstack.s3_server import S3Endpoint, ensure_bucket
from reclaim.settings import Settings
from reclaim.storage.chunks import ChunkTags
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord, SegmentRecord
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore

S3_BINDING = "s3-tier2"
FS_BINDING = "fs-tier2"
ORPHAN_EVERY = 100
MISSING = 10
#: Keys one upload task PUTs; at most ``IN_FLIGHT`` tasks are queued, so the benchmark's memory stays bounded.
PUT_BATCH = 1000
IN_FLIGHT = 32
SAMPLE_S = 0.2
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
MODES = ("one-process", "spark")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@dataclass(frozen=True)
class Layout:
    """What one bucket and its store hold: objects, and what an audit must report of them."""

    objects: int
    live: int
    orphans: int
    missing: int = MISSING


@dataclass(frozen=True)
class AuditRun:
    """One audit process: its mode, wall time, peak tree RSS, the Python process's own peaks, its report."""

    mode: str
    seconds: float
    tree_peak_mb: float
    jvm_peak_mb: float
    python_peak_mb: float
    ru_maxrss_mb: float
    processes: int
    report: dict[str, Any] = field(repr=False)


# --- the layout --------------------------------------------------------------------------------------------


def streams_of(objects: int, streams: int) -> Iterator[tuple[str, int, int]]:
    """(stream, first global index, count) for each stream: ``objects`` spread as evenly as they go."""
    first = 0
    for j in range(streams):
        count = objects // streams + (1 if j < objects % streams else 0)
        yield f"bench/s{j:03d}", first, count
        first += count


def stream_rows(binding: S3ChunkStorage, stream: str, first: int, count: int
                ) -> tuple[SegmentRecord, list[str], list[ChunkRecord]]:
    """One stream's segment, the keys of its objects, and the rows of all but its orphans."""
    segment = f"{stream}/0.#epoch.0"
    tags = ChunkTags(component="segment", stream=stream, segment=segment, writer_epoch=1)
    keys, rows = [], []
    for i in range(count):
        name = f"{segment}.E-1-O-{i}.{uuid.uuid4().hex}"
        keys.append(binding.object_key(name))
        if (first + i) % ORPHAN_EVERY:
            rows.append(row(binding, segment, tags, name))
    return SegmentRecord(name=segment, stream=stream), keys, rows


def row(binding: S3ChunkStorage, segment: str, tags: ChunkTags, name: str) -> ChunkRecord:
    return ChunkRecord(name=name, segment=segment, start_offset=0, length=0, tags=tags,
                       locations=(binding.location(name),))


def store_rows(store: SQLiteMetadataStore, segment: SegmentRecord, rows: Sequence[ChunkRecord]) -> None:
    with store.transaction() as txn:
        if txn.get_segment(segment.name) is None:
            txn.put_segment(segment)
        for record in rows:
            txn.put_chunk(record)


class EmptyPut:
    """PUTs of empty objects over one kept-alive connection, signed with AWS Signature Version 4 here.

    boto3 spent about 1.7 ms of CPU on a PUT, MinIO 0.7-0.9 ms serving it: on two cores the client took
    more of them than the server (≈ 400 PUTs/s). Signed by hand over ``http.client`` a PUT costs the
    client ≈ 0.3 ms, and the same machine took 800-1,200 PUTs/s.
    """

    def __init__(self, endpoint: S3Endpoint) -> None:
        parts = urllib.parse.urlsplit(endpoint.url)
        assert parts.hostname is not None and endpoint.access_key and endpoint.secret_key
        assert endpoint.session_token is None, "a session token is not signed here"
        self.host, self.port, self.netloc = parts.hostname, parts.port or 80, parts.netloc
        self.access_key, self.secret_key, self.region = endpoint.access_key, endpoint.secret_key, endpoint.region
        self.connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        self.day, self.day_key = "", b""

    def put(self, bucket: str, key: str) -> None:
        path = urllib.parse.quote(f"/{bucket}/{key}", safe="/~")
        now = time.gmtime()
        stamp, day = time.strftime("%Y%m%dT%H%M%SZ", now), time.strftime("%Y%m%d", now)
        headers = {"host": self.netloc, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
        signed = ";".join(headers)
        canonical = "\n".join(["PUT", path, "", *(f"{k}:{v}" for k, v in headers.items()), "", signed,
                               EMPTY_SHA256])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._key(day), to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                                    f"SignedHeaders={signed}, Signature={signature}")
        for attempt in range(3):
            try:
                self.connection.request("PUT", path, body=b"", headers=headers | {"content-length": "0"})
                response = self.connection.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException):
                self.connection.close()  # reconnects on the next request
                if attempt == 2:
                    raise
                continue
            if response.status != 200:
                raise RuntimeError(f"PUT {path}: HTTP {response.status} {body[:300]!r}")
            return

    def _key(self, day: str) -> bytes:
        """The day's signing key (derived once a day)."""
        if self.day != day:
            key = f"AWS4{self.secret_key}".encode()
            for part in (day, self.region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self.day, self.day_key = day, key
        return self.day_key


_uploader: tuple[threading.local, ThreadPoolExecutor, S3Endpoint] | None = None


def _start_uploader(endpoint: S3Endpoint, threads: int) -> None:
    """An upload process's threads, each with a connection of its own."""
    global _uploader
    _uploader = threading.local(), ThreadPoolExecutor(threads), endpoint


def _put_empty(bucket: str, keys: list[str]) -> int:
    assert _uploader is not None
    local, threads, endpoint = _uploader

    def put(key: str) -> None:
        if not hasattr(local, "client"):
            local.client = EmptyPut(endpoint)
        local.client.put(bucket, key)

    list(threads.map(put, keys))
    return len(keys)


def lay_out(endpoint: S3Endpoint, bucket: str, store: SQLiteMetadataStore, objects: int, streams: int,
            processes: int, threads: int) -> tuple[Layout, float]:
    """Every stream's rows written and its empty objects PUT (by ``processes`` x ``threads`` at once, while
    the next stream's rows are written); returns the layout and the seconds it took."""
    binding = S3ChunkStorage(endpoint.binding_settings(bucket), name=S3_BINDING)
    live = orphans = done = 0
    started = last = time.perf_counter()
    pending: set[Future[int]] = set()
    with ProcessPoolExecutor(processes, initializer=_start_uploader, initargs=(endpoint, threads)) as pool:
        for stream, first, count in streams_of(objects, streams):
            segment, keys, rows = stream_rows(binding, stream, first, count)
            store_rows(store, segment, rows)
            live, orphans = live + len(rows), orphans + count - len(rows)
            for start in range(0, len(keys), PUT_BATCH):
                if len(pending) >= IN_FLIGHT:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    done += sum(f.result() for f in finished)
                pending.add(pool.submit(_put_empty, bucket, keys[start:start + PUT_BATCH]))
            if time.perf_counter() - last >= 30:
                last = time.perf_counter()
                print(f"    {done:,} objects PUT in {last - started:.0f} s ({done / (last - started):.0f}/s)",
                      flush=True)
        done += sum(f.result() for f in pending)
    seconds = time.perf_counter() - started
    assert done == objects, (done, objects)
    segment = SegmentRecord(name="bench/s000/missing.#epoch.0", stream="bench/s000")
    tags = ChunkTags(component="segment", stream=segment.stream, segment=segment.name, writer_epoch=1)
    store_rows(store, segment, [row(binding, segment.name, tags, f"{segment.name}.E-1-O-{i}.gone")
                                for i in range(MISSING)])
    return Layout(objects, live, orphans), seconds


# --- one audit process ---------------------------------------------------------------------------------------


class TreeSampler(threading.Thread):
    """The summed RSS of a process, its process group and all their descendants, every ``SAMPLE_S``: the
    peak of the sum, of its JVMs' part, of the process alone, and the most processes seen at once."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.tree_peak = self.jvm_peak = self.own_peak = self.processes = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while True:
            self.sample()
            if self.stopped.wait(SAMPLE_S):
                return

    def sample(self) -> None:
        table: dict[int, tuple[int, int, int, bool]] = {}  # pid -> (ppid, process group, RSS pages, a JVM)
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    stat = Path(entry.path, "stat").read_text()
                except OSError:
                    continue  # gone since the scan
                fields = stat[stat.rindex(")") + 2:].split()
                jvm = stat[stat.index("(") + 1:stat.rindex(")")] == "java"
                table[int(entry.name)] = int(fields[1]), int(fields[2]), int(fields[21]), jvm
        children: dict[int, list[int]] = {}
        for pid, (ppid, *_) in table.items():
            children.setdefault(ppid, []).append(pid)
        # The group catches a JVM whose Python parent has just exited; PySpark's daemon starts a group of its own.
        tree = {self.pid} | {pid for pid, (_, group, *_) in table.items() if group == self.pid}
        todo = list(tree)
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in tree:
                    tree.add(child)
                    todo.append(child)
        live = [table[pid] for pid in tree if pid in table]
        self.tree_peak = max(self.tree_peak, sum(p[2] for p in live) * PAGE_BYTES)
        self.jvm_peak = max(self.jvm_peak, sum(p[2] for p in live if p[3]) * PAGE_BYTES)
        self.own_peak = max(self.own_peak, table.get(self.pid, (0, 0, 0, False))[2] * PAGE_BYTES)
        self.processes = max(self.processes, len(tree & table.keys()))


def run_audit(mode: str, env: dict[str, str], master: str, log: Path, timeout_s: float) -> AuditRun:
    """``reclaim audit --json --grace 0`` (with ``--spark --master``) as its own process and session."""
    command = [sys.executable, "-m", "reclaim", "audit", "--json", "--grace", "0"]
    if mode == "spark":
        command += ["--spark", "--master", master]
    out: list[bytes] = []
    with log.open("wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        killer = threading.Timer(timeout_s, _kill_group, (proc.pid,))
        killer.start()
        assert proc.stdout is not None
        reader = threading.Thread(target=lambda: out.append(proc.stdout.read()))  # type: ignore[union-attr]
        reader.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        sampler.stopped.set()
        sampler.join()
        reader.join()
        killer.cancel()
    _wait_for_group(proc.pid)
    if proc.returncode != 1:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"{mode} audit exited {proc.returncode} after {seconds:.1f} s (1 expected: findings); "
                         f"the end of {log}:\n{tail}")
    return AuditRun(mode, seconds, sampler.tree_peak / 2**20, sampler.jvm_peak / 2**20, sampler.own_peak / 2**20,
                    usage.ru_maxrss / 1024, sampler.processes, json.loads(b"".join(out)))


def _kill_group(group: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def _wait_for_group(group: int, timeout_s: float = 60.0) -> None:
    """Until no process of the audit's group is left (PySpark's JVM outlives its Python parent briefly), so
    the next run starts on a quiet machine; what is left after ``timeout_s`` is killed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.killpg(group, signal.SIGKILL if time.monotonic() > deadline else 0)
        except ProcessLookupError:
            return
        time.sleep(SAMPLE_S)


# --- checks --------------------------------------------------------------------------------------------------


def check(run: AuditRun, layout: Layout) -> None:
    """The report says what the layout holds: live, orphans and missing on S3, nothing else, nothing on
    the empty filesystem root."""
    bindings = run.report["bindings"]
    s3, fs = bindings[S3_BINDING], bindings[FS_BINDING]
    expected = {"live": layout.live, "pending": 0, "recent": 0, "cleaning": 0, "orphans": layout.orphans,
                "missing": layout.missing, "dangling": 0}
    got = {key: s3[key]["count"] if isinstance(s3[key], dict) else s3[key] for key in expected}
    empty = {key: value for key, value in fs.items() if value not in (0, True) and
             not (isinstance(value, dict) and value["count"] == 0)}
    if got != expected or empty or run.report["unconfigured"]:
        raise SystemExit(f"the {run.mode} audit of {layout.objects:,} objects reported {got} on {S3_BINDING} "
                         f"(expected {expected}), {empty or 'nothing'} on {FS_BINDING} and "
                         f"{run.report['unconfigured'] or 'no'} unconfigured bindings")


def agree(first: AuditRun, other: AuditRun) -> None:
    """Both reports are the same document (names compared as sets: a sample's order is each mode's)."""
    def normalised(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: sorted(v) if k == "names" else normalised(v) for k, v in value.items()}
        return value

    if normalised(first.report) != normalised(other.report):
        raise SystemExit(f"the {first.mode} and {other.mode} reports differ:\n"
                         f"{json.dumps(first.report, indent=1)}\n{json.dumps(other.report, indent=1)}")


# --- the run ------------------------------------------------------------------------------------------------


def audit_env(endpoint: S3Endpoint, bucket: str, state: Path) -> dict[str, str]:
    """An audit process's environment: no other RECLAIM_* variable, this size's store, an empty
    filesystem root and the bucket."""
    root = state / "tier2"
    FileSystemChunkStorage(root, name=FS_BINDING)  # creates chunks/, tags/ and tmp/: an empty binding
    env = {key: value for key, value in os.environ.items() if not key.startswith("RECLAIM_")}
    return env | {"RECLAIM_STATE_DIR": str(state), "RECLAIM_METADATA_PATH": str(state / "metadata.db"),
                  "RECLAIM_FS_ROOT": str(root), **endpoint.reclaim_env(bucket)}


def measure(endpoint: S3Endpoint, size: int, args: argparse.Namespace, work: Path, figures: Figures
            ) -> dict[str, list[AuditRun]]:
    """Lay out ``size`` objects, audit them ``args.rounds`` times in each mode, check and record."""
    state = work / f"audit-{size}"
    state.mkdir(parents=True)
    bucket = f"audit-{size}-{uuid.uuid4().hex[:6]}"
    ensure_bucket(endpoint, bucket)
    store = SQLiteMetadataStore(state / "metadata.db")
    try:
        layout, put_s = lay_out(endpoint, bucket, store, size, args.streams, args.put_processes, args.put_threads)
    finally:
        store.close()
    print(f"  {size:,} objects on {args.streams} streams PUT in {put_s:.1f} s ({size / put_s:.0f} objects/s, "
          f"{args.put_processes} processes x {args.put_threads} threads, rows written alongside); "
          f"{layout.live:,} live, {layout.orphans:,} orphans, {layout.missing} missing", flush=True)
    figures.add(f"audit_spark_{size}_upload_s", put_s)
    figures.add(f"audit_spark_{size}_upload_objects_per_s", size / put_s)
    env = audit_env(endpoint, bucket, state)
    runs: dict[str, list[AuditRun]] = {mode: [] for mode in MODES}
    for r in range(args.rounds):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            run = run_audit(mode, env, args.master, state / f"{mode}-{r + 1}.log", args.timeout)
            check(run, layout)
            runs[mode].append(run)
            print(f"    round {r + 1} {mode:11} {run.seconds:7.1f} s  peak tree RSS {run.tree_peak_mb:7.1f} MB "
                  f"({run.processes} processes; JVM {run.jvm_peak_mb:.1f} MB)  Python RSS {run.python_peak_mb:.1f} MB, "
                  f"ru_maxrss {run.ru_maxrss_mb:.1f} MB", flush=True)
    agree(runs[MODES[0]][0], runs[MODES[1]][0])
    return runs


def table(results: dict[int, dict[str, list[AuditRun]]], figures: Figures) -> None:
    print(f"\n  {'objects':>9}  {'mode':11}  {'seconds per round':20}  {'mean s':>7}  {'tree MB':>7}  "
          f"{'JVM MB':>7}  {'Python MB':>9}  {'one-process/Spark time':>22}")
    for size, runs in results.items():
        means = {mode: statistics.mean(r.seconds for r in runs[mode]) for mode in MODES}
        for mode in MODES:
            key = f"audit_spark_{size}_{mode.replace('-', '_')}"
            seconds = [r.seconds for r in runs[mode]]
            tree, jvm = max(r.tree_peak_mb for r in runs[mode]), max(r.jvm_peak_mb for r in runs[mode])
            own = max(r.ru_maxrss_mb for r in runs[mode])
            ratio = f"{means['one-process'] / means['spark']:.2f}x" if mode == "spark" else ""
            print(f"  {size:>9,}  {mode:11}  {', '.join(f'{s:.1f}' for s in seconds):20}  {means[mode]:7.1f}  "
                  f"{tree:7.1f}  {jvm:7.1f}  {own:9.1f}  {ratio:>22}")
            figures.add(f"{key}_rounds_s", ", ".join(f"{s:.2f}" for s in seconds))
            figures.add(f"{key}_mean_s", means[mode])
            figures.add(f"{key}_peak_tree_rss_mb", tree)
            figures.add(f"{key}_peak_jvm_rss_mb", jvm)
            figures.add(f"{key}_ru_maxrss_mb", own)
        figures.add(f"audit_spark_{size}_one_process_over_spark_time_ratio", means["one-process"] / means["spark"])
    print("  (tree MB: the peak of the summed RSS of the audit's process tree, sampled every 0.2 s; JVM MB: its "
          "JVMs' part; Python MB: ru_maxrss of the process started)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=counts, default=[1_000_000],
                        help="objects per bucket, a comma list for several sizes (default 1000000)")
    parser.add_argument("--streams", type=int, default=100, help="streams the objects are spread over (default 100)")
    parser.add_argument("--rounds", type=int, default=2, help="audits of each mode per size, alternating (default 2)")
    parser.add_argument("--master", default="local[2]", help="the Spark run's --master (default local[2])")
    parser.add_argument("--put-processes", type=int, default=2, help="upload processes (default 2)")
    parser.add_argument("--put-threads", type=int, default=8, help="PUTs in flight per upload process (default 8)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds an audit may run (default 3600)")
    parser.add_argument("--work", type=Path, help="where MinIO's data and the stores go (default a temporary "
                        "directory)")
    parser.add_argument("--keep", action="store_true", help="keep MinIO's data, the stores and the audits' logs")
    args = parser.parse_args()
    begun, figures = time.time(), Figures()
    base = args.work or Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="reclaim-audit-spark-", dir=base))
    print(f"reclaim audit against reclaim audit --spark --master {args.master}, on MinIO ({args.streams} streams; "
          f"1% orphans, {MISSING} missing; --grace 0), {args.rounds} rounds; work in {work}:", flush=True)
    (work / "minio").mkdir()
    pid, endpoint = start_minio(work / "minio", Settings.from_env().cache_dir)
    try:
        results = {size: measure(endpoint, size, args, work, figures) for size in args.objects}
    finally:
        stop_pid(pid)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    table(results, figures)
    record("audit_spark", vars(args), figures, begun)


if __name__ == "__main__":
    main()
