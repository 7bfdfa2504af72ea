"""CPU time per record of one ``reclaim worker`` process draining pending deletes, in all and by stage.

CPU time, not wall time: the process's own clock (user + system, every thread, from ``/proc/<pid>/stat``)
does not depend on what else runs on the machine, where a drain's wall time does. For each binding (moto,
MinIO, the filesystem) and each size, one drain: ``size`` chunks created through the binding with their
tags, their rows retired under a committed mark as phase 1 leaves them; one ``reclaim worker`` started
(settings as deployed) and, once it holds its partitions, stopped (SIGSTOP) while one pending delete a
chunk (phase 1's records, encoded by its codec) is produced, then woken and timed until its group's lag
is 0: the benchmark's own producer does not share the cores with the drain.
Every record thus takes the normal path: read for the first time, row found retired, ownership checked
against it, object deleted in a 1000-key batch, row removed. The run checks afterwards that no object and
no row is left.

Printed per binding: the *marginal* CPU per record between two drains, ``(cpu_big - cpu_small) /
(n_big - n_small)``, each drain's CPU taken from the moment the stopped worker is woken to lag 0 (the process's
start and join are outside it, and what a drain costs whatever its size, its first poll and wake-up,
cancels out), for each pair of ``--pairs``; the CPU per record of each drain with the process's start
included; and the same marginal split by stage, from the worker's stage clocks
(:mod:`reclaim.stage_clock`, enabled by ``RECLAIM_STAGE_CPU`` for these processes only): each stage's
thread CPU time around the code of that stage, once per batch. ``other`` is the rest of the process:
librdkafka's threads and the consume call, the interpreter's garbage collector between stages, the S3
client's connection pool.

With ``--before-commit REV`` each drain is also run, just before this tree's, by the worker of commit REV
(a git worktree of it, run with ``PYTHONPATH`` pointing at it), and its figures are printed first: before
and after measured in the same conditions, on a machine whose load moves every figure. ``--before-tree DIR``
does the same from a tree of REV unpacked beforehand (``git archive REV | tar -x -C DIR``), where the
checkout has no history (a copy of the work tree on another machine).

With ``--rounds N`` every drain is run N times (round after round, before and after side by side in
each, which of the two goes first alternating from round to round, so neither always runs right after the
other's drain) and each pair's marginal is taken within a round; the median of the rounds is printed, with
their range: one round's figure moves by 10-20% on a shared machine, the whole process slowed at once.

Run: ``.venv/bin/python -m benchmarks.worker_cpu [--bindings moto,minio,fs] [--pairs 2000/10000,5000/20000]
[--before-commit REV | --before-tree DIR] [--rounds N]``. It starts its own Kafka broker, moto and MinIO
(built from its Go module on first use) unless RECLAIM_BOOTSTRAP names a running broker.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from statistics import median

if not __package__:  # run as a file: the sibling modules are imported as ``benchmarks.*``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import KafkaException, Producer  # noqa: E402

from benchmarks.deletion_setup import (  # noqa: E402
    PAYLOAD,
    fresh_topics,
    group_lag,
    new_chunks,
    own_broker,
    stop_workers,
    store_rows,
    wait_for_members,
)
from benchmarks.drain_watch import wait_stopped  # noqa: E402
from benchmarks.minio import start_minio  # noqa: E402
from benchmarks.offline_bundle import link_design_folders  # noqa: E402
from benchmarks.results import Figures, record  # noqa: E402
from benchmarks.worker_memory import STALL_S  # noqa: E402
from reclaim.deletion.mark import new_mark_id  # noqa: E402
from reclaim.deletion.records import pending_deletes_for  # noqa: E402
from reclaim.localstack.procs import stop_pid  # noqa: E402
from reclaim.localstack.s3_server import S3Endpoint, ensure_bucket, start_s3  # noqa: E402
from reclaim.schemas.codec import build_codec  # noqa: E402
from reclaim.settings import Settings  # noqa: E402
from reclaim.stage_clock import CALLS as STAGE_CALLS  # noqa: E402
from reclaim.stage_clock import ENV as STAGE_ENV  # noqa: E402
from reclaim.stage_clock import STAGES  # noqa: E402
from reclaim.storage.base import BaseChunkStorage  # noqa: E402
from reclaim.storage.filesystem import FileSystemChunkStorage  # noqa: E402
from reclaim.storage.metadata import MarkRecord, MarkState  # noqa: E402
from reclaim.storage.s3 import S3ChunkStorage  # noqa: E402
from reclaim.storage.sql_base import SCHEMA_TABLE  # noqa: E402
from reclaim.storage.sql_store import STORE, SQLiteMetadataStore  # noqa: E402

BINDINGS = ("moto", "minio", "fs")
#: The target of the S3 path (moto): the marginal CPU per record, at most half of 82-101 µs.
TARGET_US = 45.0
#: Stages printed as their own line; ``facts`` is part of ``prepare`` and printed under it.
SHOWN = (*STAGES, "other")
TICKS = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Drain:
    """One drained backlog: its size, the worker's CPU seconds in all (start included) and from phase 1's
    start to lag 0, the drain's wall seconds (phase 1 included), the CPU seconds per stage, and how many
    batches the worker polled (a batch's fixed costs, one query, one request, one commit, are spread over
    fewer records in smaller batches)."""

    records: int
    cpu_s: float
    drain_cpu_s: float
    wall_s: float
    stages: Mapping[str, float]
    batches: int = 0


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid``, every thread (children not included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass(frozen=True)
class Target:
    """Where a drain's chunks live: the binding to create them through and the worker's environment for it."""

    binding: BaseChunkStorage
    env: Mapping[str, str]


def s3_target(endpoint: S3Endpoint, state: Path) -> Target:
    bucket = f"cpu-{uuid.uuid4().hex[:8]}"  # a new bucket each drain: moto slows down with every key a bucket holds
    ensure_bucket(endpoint, bucket)
    env = {"RECLAIM_S3_ENDPOINT": endpoint.url, "RECLAIM_S3_BUCKET": bucket, "RECLAIM_S3_REGION": endpoint.region,
           "RECLAIM_S3_ACCESS_KEY": endpoint.access_key, "RECLAIM_S3_SECRET_KEY": endpoint.secret_key,
           "RECLAIM_FS_CREATE_ROOT": "true"}  # the worker's own filesystem binding, unused, in its state dir
    return Target(S3ChunkStorage(endpoint.binding_settings(bucket), name="s3-tier2"), env)


def fs_target(state: Path) -> Target:
    binding = FileSystemChunkStorage(state / "tier2", name="fs-tier2", create=True)
    return Target(binding, {"RECLAIM_FS_ROOT": str(binding.root)})


def joined(bootstrap: str, group: str, timeout_s: float = 60.0) -> None:
    """Until the worker holds its partitions; a broker just started may not answer the first questions."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return wait_for_members(bootstrap, group, 1, timeout_s)
        except (TimeoutError, KafkaException):  # the group's coordinator not settled yet, say
            assert time.monotonic() < deadline, f"no answer about group {group}"
            time.sleep(0.2)


def backlog(store: SQLiteMetadataStore, binding: BaseChunkStorage, n: int) -> list[tuple[bytes, bytes]]:
    """``n`` chunks created through ``binding`` with their tags, their rows retired under a committed mark
    (as phase 1 leaves them), and their pending deletes as phase 1 encodes them: (key, value)."""
    mark_id = new_mark_id()
    chunks = new_chunks(binding, n, active=False, mark_id=mark_id)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda c: binding.create_with_content(c.name, PAYLOAD, c.tags), chunks))
    with store.transaction() as txn:
        txn.put_mark(MarkRecord(mark_id, MarkState.COMMITTED, time.time()))
    store_rows(store, chunks)
    codec = build_codec()
    return [(info.chunk_name.encode(), codec.encode(info, "")) for info in
            pending_deletes_for(chunks, mark_id, int(time.time() * 1000))]


def produce(bootstrap: str, topic: str, records: Sequence[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0 and not failures, f"backlog not fully produced: {failures[:1]}"


def schema_known_by(tree: Path, db: Path) -> None:
    """Mark the store's schema at the last version the earlier ``tree`` knows, so its worker opens it: the
    tables added since (offloads, policies, leases) are not read by a worker that predates them, and the
    rows of the tables it reads have the shape it wrote."""
    known = subprocess.run([sys.executable, "-c", "from reclaim.storage.sql_store import MIGRATIONS; "
                            "print(MIGRATIONS[-1].version)"], cwd=tree, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": str(tree)})
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE {SCHEMA_TABLE} SET version = ? WHERE store = ?", (int(known.stdout), STORE))


def drain(bootstrap: str, target: Target, n: int, state: Path, tree: Path | None = None) -> Drain:
    """A backlog of retired chunks; a worker joined, then stopped while their pending deletes are
    produced; the worker woken and timed until its group's lag is 0.

    The rows are retired before the records exist and the records arrive after the worker holds its
    partitions (above its partitions' horizon), so each record is read once, for the first time, and cleared
    for deletion (a record read before its mark commits would be retried, and a retried record's key listed
    first). ``tree``: a checkout of another commit to run the worker from (:func:`before_tree`).
    """
    prefix, topics = fresh_topics(bootstrap)
    db = state / "metadata.db"
    store = SQLiteMetadataStore(db)
    records = backlog(store, target.binding, n)
    if tree is not None:
        schema_known_by(tree, db)
    group, stages_file = f"{prefix}group", state / "stages.json"
    env = {key: value for key, value in os.environ.items() if not key.startswith("RECLAIM_")}
    env |= {"RECLAIM_BOOTSTRAP": bootstrap, "RECLAIM_TOPIC_PREFIX": prefix, "RECLAIM_METADATA_PATH": str(db),
            "RECLAIM_GROUP_ID": group, "RECLAIM_STATE_DIR": str(state), "RECLAIM_PROCESSES": "1",
            STAGE_ENV: str(stages_file), **target.env}
    if tree is not None:  # the earlier tree first, whatever else the path holds (its dependencies) after it
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    log_path = state / "worker.log"
    proc = subprocess.Popen([sys.executable, "-m", "reclaim", "worker"], env=env, stdout=subprocess.DEVNULL,
                            stderr=log_path.open("wb"), cwd=tree)
    try:
        try:
            joined(bootstrap, group)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the worker said:\n{log_path.read_text(errors='replace')[-2000:]}") from exc
        # Stopped while its backlog is produced: the drain then shares the cores with the broker and the
        # object store only, not with this process's producer as well.
        proc.send_signal(signal.SIGSTOP)
        wait_stopped([proc.pid])
        produce(bootstrap, topics.deletion, records)
        os.sync()
        joined_cpu, started = process_cpu_s(proc.pid), time.perf_counter()
        proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + STALL_S + n / 100
        while group_lag(bootstrap, group, topics.deletion_inputs) != 0:
            assert proc.poll() is None, f"the worker exited: {log_path.read_text(errors='replace')[-2000:]}"
            assert time.monotonic() < deadline, "the worker did not drain the deletion topic"
            time.sleep(0.02)
        wall = time.perf_counter() - started
        cpu = process_cpu_s(proc.pid)
    finally:
        stop_workers([proc])
    clocks = json.loads(stages_file.read_text()) if stages_file.exists() else {}
    stages = {name: seconds for name, seconds in clocks.items() if not name.startswith(STAGE_CALLS)}
    batches = int(clocks.get(f"{STAGE_CALLS}decode", 0))  # 0: a worker from before the stages were counted
    left = next(iter(target.binding.iter_names()), None)
    rows = sum(len(store.list_chunks(segment, active_only=False)) for segment in store.segment_names())
    store.close()
    assert left is None, f"chunk {left} left behind"
    assert not rows, f"{rows} chunk rows left behind"
    others = sum(seconds for name, seconds in stages.items() if name != "facts")
    return Drain(n, cpu, cpu - joined_cpu, wall, {**stages, "other": max(0.0, cpu - joined_cpu - others)}, batches)


def pairs(text: str) -> list[tuple[int, int]]:
    """``2000/10000,5000/20000``: the sizes of each pair of drains, smaller first."""
    try:
        found = [tuple(int(size) for size in pair.split("/")) for pair in text.split(",") if pair.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of SMALL/BIG: {text!r}") from None
    if not found or any(len(p) != 2 or not 0 < p[0] < p[1] for p in found):
        raise argparse.ArgumentTypeError(f"each pair must be SMALL/BIG with 0 < SMALL < BIG: {text!r}")
    return [(p[0], p[1]) for p in found]


def bindings(text: str) -> list[str]:
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(chosen) - set(BINDINGS))
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"bindings are {', '.join(BINDINGS)}; got {text!r}")
    return chosen


def report(name: str, rounds: Mapping[int, Sequence[Drain]], size_pairs: Sequence[tuple[int, int]],
           figures: Figures) -> None:
    """Print and record one binding's figures: per drain size, then the marginal per pair, in all and by stage.

    With several rounds, a pair's marginal is computed within each round (its two drains ran minutes apart
    at most) and the median of the rounds is printed and recorded, with the rounds' range beside it."""
    for n, runs in sorted(rounds.items()):
        key = f"{name}_{n}"
        cpu, drain_cpu = median(r.cpu_s for r in runs), median(r.drain_cpu_s for r in runs)
        figures.add(f"{key}_cpu_s", cpu)
        figures.add(f"{key}_with_start_us_per_record", cpu / n * 1e6)
        figures.add(f"{key}_drain_us_per_record", drain_cpu / n * 1e6)
        figures.add(f"{key}_wall_s", median(r.wall_s for r in runs))
        batches = median(r.batches for r in runs)
        if batches:
            figures.add(f"{key}_batches", batches)
        print(f"  {n:>6} records: CPU {cpu:6.2f} s, {cpu / n * 1e6:6.1f} µs/record with the start, "
              f"{drain_cpu / n * 1e6:6.1f} µs/record from the first record to lag 0 "
              f"({median(r.wall_s for r in runs):5.1f} s wall"
              f"{f', {batches:.0f} batches of {n / batches:.0f} records' if batches else ''}){_median_of(runs)}")
    header = "".join(f"{stage:>9}" for stage in SHOWN)
    print(f"  marginal µs/record     total |{header}")
    for small, big in size_pairs:
        key = f"{name}_{small}_{big}_marginal"
        pairs = list(zip(rounds[small], rounds[big], strict=True))
        totals = [(b.drain_cpu_s - a.drain_cpu_s) / (big - small) * 1e6 for a, b in pairs]
        total = median(totals)
        figures.add(f"{key}_us_per_record", total)
        if len(totals) > 1:
            figures.add(f"{key}_min_us_per_record", min(totals))
            figures.add(f"{key}_max_us_per_record", max(totals))
        by_stage = {stage: median((b.stages.get(stage, 0.0) - a.stages.get(stage, 0.0)) / (big - small) * 1e6
                                  for a, b in pairs) for stage in SHOWN}
        for stage, value in by_stage.items():
            figures.add(f"{key}_{stage}_us_per_record", value)
        cells = "".join(f"{by_stage[stage]:9.1f}" for stage in SHOWN)
        spread = f"   rounds {min(totals):.1f}-{max(totals):.1f}" if len(totals) > 1 else ""
        goal = f"   (target <= {TARGET_US:g} on moto: {'met' if total <= TARGET_US else 'not met'})" \
            if name == "moto" else ""
        print(f"  {small:>6} -> {big:<6}   {total:8.1f} |{cells}{spread}{goal}")


def _median_of(runs: Sequence[Drain]) -> str:
    return f", median of {len(runs)} rounds" if len(runs) > 1 else ""


def before_tree(commit: str, work: Path) -> Path:
    """A checkout of ``commit`` that ``python -m reclaim`` runs from with ``PYTHONPATH`` set to it: its design
    folders linked into its ``reclaim`` package, as the install maps them (``consumers/`` is ``reclaim.consumers``)."""
    tree = work / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--quiet", "--detach", str(tree), commit], check=True)
    return link_design_folders(tree)


def drop_tree(tree: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bindings", type=bindings, default=list(BINDINGS),
                        help=f"a comma list of {', '.join(BINDINGS)} (default all)")
    parser.add_argument("--pairs", type=pairs, default=[(2000, 10_000), (5000, 20_000)],
                        help="sizes of the drains whose difference is measured (default 2000/10000,5000/20000)")
    parser.add_argument("--before-commit", metavar="REV", help="also run, drain for drain before this tree's, the "
                        "worker of an earlier commit (a git worktree of it), and print its figures first")
    parser.add_argument("--before-tree", metavar="DIR", type=Path, help="the same from an unpacked tree of the "
                        "earlier commit (git archive REV | tar -x -C DIR), where this checkout has no history; its "
                        "design folders are linked into its reclaim package there")
    parser.add_argument("--rounds", type=int, default=1, help="drains of each size, the marginal's median printed "
                        "(default 1; this machine's noise moves one round's figure by 10-20%%)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.before_commit and args.before_tree:
        parser.error("--before-commit and --before-tree are one or the other")
    if args.before_tree and not (args.before_tree / "pyproject.toml").is_file():
        parser.error(f"--before-tree {args.before_tree}: no pyproject.toml there (not an unpacked tree of reclaim)")
    before_label = f"at {args.before_commit}" if args.before_commit else f"from {args.before_tree}"
    settings = Settings.from_env()
    sizes = sorted({n for pair in args.pairs for n in pair})
    begun, figures = time.time(), Figures()
    print(f"one reclaim worker process's CPU (user + system, all threads), {os.cpu_count()} cores:")
    with tempfile.TemporaryDirectory(prefix="reclaim-bench-") as tmp:
        work = Path(tmp)
        started: list[int] = []
        try:
            bootstrap = own_broker(settings, work, started)
            versions: dict[str, Path | None] = {"now": None}
            if args.before_commit:
                versions = {"before": before_tree(args.before_commit, work), **versions}
            elif args.before_tree:
                versions = {"before": link_design_folders(args.before_tree.resolve()), **versions}
            for name in args.bindings:
                endpoint = None
                if name == "moto":
                    proc, endpoint = start_s3(work / "s3.log")
                    started.append(proc.pid)
                elif name == "minio":
                    pid, endpoint = start_minio(work / "minio", settings.cache_dir)
                    started.append(pid)
                drains: dict[str, dict[int, list[Drain]]] = {version: {n: [] for n in sizes} for version in versions}
                for round_no in range(args.rounds):
                    for n in sizes:
                        # The same conditions for both, one after the other; which goes first alternates (ABBA).
                        order = list(versions.items())[::-1 if round_no % 2 else 1]
                        for version, tree in order:
                            state = work / f"{version}-{name}-{n}-{round_no}"
                            state.mkdir()
                            target = fs_target(state) if endpoint is None else s3_target(endpoint, state)
                            done = drain(bootstrap, target, n, state, tree)
                            drains[version][n].append(done)
                            # one line a drain as it ends: a run cut short still shows what it measured
                            print(f"  round {round_no + 1}, {name}, {n} records, {version}: "
                                  f"{done.drain_cpu_s:.3f} s CPU woken -> lag 0, {done.cpu_s:.3f} s with the start",
                                  flush=True)
                for version in versions:
                    label = before_label if version == "before" else "this tree"
                    print(f"{name}, {label}:")
                    report(f"before_{name}" if version == "before" else name, drains[version], args.pairs, figures)
        finally:
            for pid in started:
                stop_pid(pid)
            if args.before_commit:
                drop_tree(work / "before")
    record("worker_cpu", vars(args), figures, begun)


if __name__ == "__main__":
    main()
