"""Deletion throughput, measured side by side in one run: reclaim's pipeline against the raw limits.

For S3 (one endpoint, the same object count for every method):
  - pipeline: phase 1 publishes the pending deletes and commits its metadata transaction (timed
    with its producer already connected, and printed on its own); then a phase-2 worker deletes the
    objects and commits its offsets (timer: records produced -> last object gone and offsets committed);
  - raw batched: ``DeleteObjects`` with 1000 keys a request, no pipeline (the limit);
  - naive: one ``delete_object`` call per object (what a user writes by hand; context only);
  - read again: the pipeline when every record is read by a worker that joined after the records were
    written (as after a restart or a rebalance), side by side with first reads: counted by the rows
    their cleanup removes, they cost what first reads cost (target >= 0.8x);
  - signed: the pipeline with each pending delete signed by phase 1 (HMAC-SHA256, the controller's key)
    and verified by the worker before anything else, as ``reclaim/services/runtime.py`` wires them, in the same
    interleaved rounds as the unsigned pipeline (today's: no signer, no verifier), the order of the two
    alternating round by round; the ratios signed / unsigned of the drain and of phase 1 are printed.
    Then, once: what signing and verifying a pending delete costs per record, HMAC-SHA256 against
    Ed25519 (a verifier holding only the Ed25519 public key), the choice of algorithm per record type.
For phase 1: ``LedgerDeletionService.mark`` (build, encode, publish, wait, metadata transaction)
against a plain idempotent confluent-kafka producer sending the same encoded records (same keys, same
bytes, read back from phase 1's topic) to a fresh topic with as many partitions, then ``flush()``.
Building and encoding the records, and the metadata transaction, are also timed on their own.
For the filesystem binding: the pipeline against a raw ``os.unlink`` loop over chunks created through
the binding with their tags, unlinking each chunk's data file and its tag sidecar.
With ``--memory``: the peak RSS of a ``reclaim worker`` draining backlogs (see benchmarks/worker_memory.py).

Each timed method runs ``--rounds`` times, interleaved (pipeline, raw, pipeline, raw, ...), and the
medians are printed with every round; a ratio is the median of the rounds' side-by-side ratios.

Run: ``.venv/bin/python benchmarks/deletion_throughput.py [--objects 5000,50000] [--rounds 3] [--minio]
[--memory]``. It starts its own Kafka broker and S3 endpoint (moto, or MinIO with ``--minio``) unless
RECLAIM_BOOTSTRAP / RECLAIM_S3_ENDPOINT name running ones (with RECLAIM_S3_ACCESS_KEY,
RECLAIM_S3_SECRET_KEY and RECLAIM_S3_REGION for the endpoint's credentials).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run as a file: the sibling modules are imported as ``benchmarks.*``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402

from benchmarks.deletion_setup import (  # noqa: E402
    chunk_files,
    connect,
    counts,
    create_topic,
    filled_bucket,
    fresh_topics,
    new_chunks,
    own_broker,
    read_back,
    release_and_drain,
    stop_workers,
    store_rows,
    wait_for_members,
    write_chunks,
)
from benchmarks.minio import start_minio  # noqa: E402
from benchmarks.results import Figures, record  # noqa: E402
from benchmarks.worker_memory import STALL_S, run_memory  # noqa: E402
from reclaim.consumers.deletion_worker import DeletionWorker, WorkerConfig, tune_interpreter  # noqa: E402
from reclaim.deletion.executor import DeletionExecutor  # noqa: E402
from reclaim.deletion.mark import LedgerDeletionService, new_mark_id  # noqa: E402
from reclaim.deletion.records import pending_deletes_for  # noqa: E402
from reclaim.localstack.procs import stop_pid  # noqa: E402
from reclaim.localstack.s3_server import S3Endpoint, ensure_bucket, s3_client, start_s3  # noqa: E402
from reclaim.localstack.stack import require_s3  # noqa: E402
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher  # noqa: E402
from reclaim.producers.producer import RecordProducer  # noqa: E402
from reclaim.schemas.codec import build_codec  # noqa: E402
from reclaim.schemas.ledger import PendingDeleteLedgerInfo  # noqa: E402
from reclaim.security.keyring import Algorithm, Keyring, new_key  # noqa: E402
from reclaim.security.rules import signers_of  # noqa: E402
from reclaim.security.signing import RecordSigner, RecordVerifier, Signer, signature_headers  # noqa: E402
from reclaim.settings import Settings  # noqa: E402
from reclaim.storage.base import BaseChunkStorage  # noqa: E402
from reclaim.storage.bindings import StorageBindings  # noqa: E402
from reclaim.storage.filesystem import FileSystemChunkStorage  # noqa: E402
from reclaim.storage.s3 import S3ChunkStorage  # noqa: E402
from reclaim.storage.sql_store import SQLiteMetadataStore  # noqa: E402

PARTS = ("s3", "phase1", "fs", "memory")
#: The ratio the pipeline must reach against raw ``DeleteObjects``, by S3 server.
S3_TARGETS = {"moto": 0.8, "MinIO": 0.9}
READ_AGAIN_TARGET = 0.8
"""Records read again (after a restart or a rebalance) drain at least this share of first reads' speed."""


@dataclass(frozen=True)
class Signing:
    """Phase 1's signer and the worker's verifier, as ``reclaim/services/runtime.py`` wires them for pending deletes."""

    signer: RecordSigner
    verifier: RecordVerifier


def signing_with(algorithm: Algorithm) -> Signing:
    """A controller key of ``algorithm``; the verifier holds only the public half of an Ed25519 key."""
    key = new_key(f"controller-bench-{algorithm.value}", "controller", algorithm)
    verifying = key if algorithm is Algorithm.HMAC_SHA256 else key.public_only()
    return Signing(RecordSigner(Keyring([key]), "controller", prefer=algorithm), RecordVerifier(Keyring([verifying])))


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


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


def pipeline(bootstrap: str, binding: BaseChunkStorage, n: int, work: Path,
             batch_size: int = 1000, rejoin: bool = False, signing: Signing | None = None,
             cpu_s: list[float] | None = None) -> tuple[float, float]:
    """Seconds of phase 1 (publish + one metadata transaction), and of phase 2: from the records
    produced to every object gone and every offset committed (one in-process consumer).

    ``rejoin``: the worker that was waiting leaves and a new one joins once the records are written,
    as after a restart or a rebalance: every record is then one an earlier owner may have handled (and
    deleted, before dying uncommitted). The clock starts once the new worker has its partitions: the
    rebalance itself is the group protocol's time, whatever the records.

    ``signing``: phase 1 signs each record and the worker verifies each one before anything else (a
    record refused would be dead-lettered and its object left, which the end check catches).
    ``cpu_s``: the CPU seconds this process (the worker; not the broker, not the S3 server) spent in
    phase 2 are appended to it: less moved by what else runs on the machine than the clock.
    """
    prefix, topics = fresh_topics(bootstrap)
    store = SQLiteMetadataStore(work / f"{prefix}db")
    chunks = write_chunks(store, binding, n)
    codec = build_codec()
    producer = RecordProducer(bootstrap, "idempotent-producer")
    signer, verifier = (signing.signer, signing.verifier) if signing else (None, None)
    service = LedgerDeletionService(store, KafkaPendingDeletePublisher(producer, codec, topics.deletion,
                                                                       signer=signer))
    config = WorkerConfig(bootstrap=bootstrap, topics=topics, group_id=f"{prefix}group", batch_size=batch_size,
                          poll_timeout_s=0.2)
    worker = DeletionWorker(config, DeletionExecutor(store, StorageBindings([binding])), codec, verifier=verifier)
    connect(producer, bootstrap, prefix)
    # A running worker has joined its group long before records arrive; so has this one. It stops
    # polling while phase 1 runs, so the clock measures phase 2 alone.
    deadline = time.monotonic() + 60
    while not worker.assigned:
        assert time.monotonic() < deadline, "the worker got no partitions"
        worker.run_once()
    os.sync()  # every chunk durable before any delete, as on a real tier-2
    marking = timed(lambda: service.mark(chunks))
    stored = 0
    if rejoin:
        worker.close()
        worker = DeletionWorker(config, DeletionExecutor(store, StorageBindings([binding])), codec,
                                verifier=verifier)
        while not worker.assigned:
            assert time.monotonic() < deadline + 60, "the new worker got no partitions"
            stored += worker.run_once().stored
    started, cpu_started = time.perf_counter(), time.process_time()
    moved = time.monotonic()
    while stored < n:
        assert time.monotonic() - moved < STALL_S, f"phase 2 stalled at {stored} of {n} records"
        done = worker.run_once().stored
        stored, moved = stored + done, time.monotonic() if done else moved
    worker.commit()
    elapsed = time.perf_counter() - started
    if cpu_s is not None:
        cpu_s.append(time.process_time() - cpu_started)
    assert not any(True for _ in binding.iter_names()), "objects left behind"
    worker.close()
    producer.close()
    store.close()
    return marking, elapsed


def worker_processes(bootstrap: str, binding: BaseChunkStorage, env: dict[str, str], n: int, work: Path,
                     processes: int = 2) -> float:
    """Phase 2 as deployed: ``processes`` ``reclaim worker`` processes of one group. They are stopped
    (SIGSTOP) while phase 1 runs, so the clock measures phase 2 alone: produced -> gone + committed."""
    prefix, topics = fresh_topics(bootstrap)
    db = work / f"{prefix}db"
    store = SQLiteMetadataStore(db)
    chunks = write_chunks(store, binding, n)
    producer = RecordProducer(bootstrap, "idempotent-producer")
    service = LedgerDeletionService(store, KafkaPendingDeletePublisher(producer, build_codec(), topics.deletion))
    group = f"{prefix}group"
    env = {**os.environ, **env, "RECLAIM_BOOTSTRAP": bootstrap, "RECLAIM_TOPIC_PREFIX": prefix,
           "RECLAIM_METADATA_PATH": str(db), "RECLAIM_GROUP_ID": group, "RECLAIM_STATE_DIR": str(work / prefix),
           "RECLAIM_POLL_TIMEOUT_S": "0.05", "RECLAIM_COMMIT_INTERVAL_MS": "20",
           # the workers' own (unused) filesystem binding, in their state dir; n unsupervised processes
           "RECLAIM_FS_CREATE_ROOT": "true", "RECLAIM_PROCESSES": "1"}
    logs = [work / f"{prefix}worker-{i}.log" for i in range(processes)]
    procs = [subprocess.Popen([sys.executable, "-m", "reclaim", "worker"], env=env, stdout=subprocess.DEVNULL,
                              stderr=log.open("wb")) for log in logs]
    try:
        try:
            wait_for_members(bootstrap, group, processes)
        except AssertionError as exc:
            tails = "\n".join(log.read_text(errors="replace")[-2000:] for log in logs)
            raise AssertionError(f"{exc}; the workers said:\n{tails}") from exc
        for proc in procs:
            proc.send_signal(signal.SIGSTOP)
        os.sync()
        service.mark(chunks)
        elapsed = release_and_drain(procs, bootstrap, group, topics.deletion_inputs, n, "the worker processes")
    finally:
        stop_workers(procs)
        producer.close()
        store.close()
    assert not any(True for _ in binding.iter_names()), "objects left behind"
    return elapsed


def unlink_loop(binding: FileSystemChunkStorage, n: int) -> float:
    """Unlink, one by one, the data file and the tag sidecar of ``n`` chunks the binding created."""
    paths = chunk_files(binding, n)
    os.sync()

    def unlink_all() -> None:
        for path in paths:
            os.unlink(path)

    return timed(unlink_all)


def plain_produce(producer: Producer, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """Produce ``records`` as confluent-kafka's examples do (``poll(0)`` after each), then ``flush()``."""
    failed: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, f"plain produce not confirmed: {failed[:1]}"


def phase1_round(bootstrap: str, n: int, work: Path) -> tuple[float, float, float, float]:
    """Seconds of ``mark`` on ``n`` chunks, of a plain idempotent produce of the same records, and, on
    their own, of building + encoding ``n`` records and of the metadata transaction of a mark."""
    prefix, topics = fresh_topics(bootstrap, only_deletion=True)
    plain_topic = f"{prefix}plain"
    create_topic(bootstrap, plain_topic)
    store = SQLiteMetadataStore(work / f"{prefix}db")
    place = FileSystemChunkStorage(work / "phase1-tier2", name="fs-tier2")  # locations only, no files
    chunks, others = store_rows(store, new_chunks(place, n)), store_rows(store, new_chunks(place, n))
    codec = build_codec()
    producer = RecordProducer(bootstrap, "idempotent-producer")
    service = LedgerDeletionService(store, KafkaPendingDeletePublisher(producer, codec, topics.deletion))
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    # Both producers connected, with their producer ids, and the codec's compiled encoder built (once
    # per process), before anything is timed.
    plain_produce(plain, connect(producer, bootstrap, prefix), [(b"warm", b"warm")])
    codec.encode(pending_deletes_for(others[:1], new_mark_id(), int(time.time() * 1000))[0], topics.deletion)
    # The WAL checkpointed before each timed part, so none of them shares the machine with the
    # store's background checkpoint of what came before.
    store.checkpoint()
    marked = []
    marking = timed(lambda: marked.append(service.mark(chunks)))
    assert not marked[0].failed, f"{len(marked[0].failed)} chunks not confirmed by phase 1"
    store.checkpoint()
    records = read_back(bootstrap, topics.deletion, n)
    producing = timed(lambda: plain_produce(plain, plain_topic, records))
    created_at = int(time.time() * 1000)
    building = timed(lambda: [codec.encode(record, topics.deletion)
                              for record in pending_deletes_for(others, new_mark_id(), created_at)])

    def commit() -> None:
        with store.transaction() as txn:
            service.commit_mark(txn, others, new_mark_id())

    store.checkpoint()
    committing = timed(commit)
    producer.close()
    store.close()
    return marking, producing, building, committing


def s3_part(bootstrap: str, endpoint: S3Endpoint, server: str, n: int, work: Path, rounds: int, figures: Figures,
            skip_naive_above: int | None) -> float:
    """The S3 pipeline with records read for the first time, and with every record read again (a worker
    joining after the records were written, as after a restart or a rebalance), each side by side with
    raw ``DeleteObjects`` and with each other; and the pipeline with its records signed and verified
    (HMAC-SHA256) side by side with it unsigned. Returns the unsigned pipeline's median seconds per record."""
    key = f"s3_{server.lower()}_{n}"
    bucket = f"pipe-{n}-{os.urandom(4).hex()}"
    ensure_bucket(endpoint, bucket)
    counting = S3ChunkStorage(endpoint.binding_settings(bucket), name="s3-tier2")
    print(f"S3 endpoint {endpoint.url} ({server}), {n} objects:")
    # Warm both paths (connections, caches, the broker's new-topic work) before anything is timed.
    pipeline(bootstrap, counting, min(n, 1000), work)
    raw_batched(endpoint, min(n, 1000))
    hmac_signing = signing_with(Algorithm.HMAC_SHA256)
    marking: list[float] = []
    deleting: list[float] = []
    read_again: list[float] = []
    raw: list[float] = []
    signed_marking: list[float] = []
    signed: list[float] = []
    cpu: list[float] = []
    signed_cpu: list[float] = []
    for i in range(rounds):
        for sign in (False, True) if i % 2 == 0 else (True, False):  # neither always runs first
            phase1, phase2 = pipeline(bootstrap, counting, n, work, signing=hmac_signing if sign else None,
                                      cpu_s=signed_cpu if sign else cpu)
            (signed_marking if sign else marking).append(phase1)
            (signed if sign else deleting).append(phase2)
        raw.append(raw_batched(endpoint, n))
        read_again.append(pipeline(bootstrap, counting, n, work, rejoin=True)[1])
    figures.rate(f"{key}_phase1", "phase 1: publish + one metadata transaction", n, marking)
    figures.rate(f"{key}_pipeline", "pipeline: produced -> gone + committed", n, deleting)
    figures.rate(f"{key}_phase1_signed", "phase 1 signed (HMAC-SHA256), same rounds", n, signed_marking)
    figures.rate(f"{key}_pipeline_signed", "pipeline signed + verified (HMAC-SHA256)", n, signed)
    figures.rate(f"{key}_worker_cpu", "  the worker's CPU in phase 2, unsigned", n, cpu)
    figures.rate(f"{key}_worker_cpu_signed", "  the worker's CPU in phase 2, signed + verified", n, signed_cpu)
    figures.rate(f"{key}_read_again", "pipeline, every record read again", n, read_again)
    s3_env = {"RECLAIM_S3_ENDPOINT": endpoint.url, "RECLAIM_S3_BUCKET": bucket, "RECLAIM_S3_REGION": endpoint.region,
              "RECLAIM_S3_ACCESS_KEY": endpoint.access_key, "RECLAIM_S3_SECRET_KEY": endpoint.secret_key}
    procs = worker_processes(bootstrap, counting, s3_env, n, work)
    figures.rate(f"{key}_two_processes", "pipeline, 2 worker processes (one round)", n, procs)
    figures.rate(f"{key}_raw", "raw DeleteObjects, 1000 keys/request", n, raw)
    hand = None if skip_naive_above is not None and n > skip_naive_above else naive(endpoint, n)
    if hand is None:
        print(f"  {'naive delete_object loop':48} skipped (--skip-naive-above {skip_naive_above})")
    else:
        figures.rate(f"{key}_naive", "naive delete_object loop (one round)", n, hand)
    target = S3_TARGETS.get(server)
    note = "" if target else "   (target >= 0.8x on moto, >= 0.9x on MinIO)"
    figures.ratio(f"{key}_pipeline_over_raw", "pipeline / raw DeleteObjects:", deleting, raw, target, note)
    figures.ratio(f"{key}_read_again_over_raw", "every record read again / raw:", read_again, raw)
    figures.ratio(f"{key}_read_again_over_first_read", "read again / read first (same rounds):", read_again,
                  deleting, READ_AGAIN_TARGET)
    figures.ratio(f"{key}_two_processes_over_raw", "2 processes / raw:", [procs], [statistics.median(raw)])
    if hand is not None:
        figures.ratio(f"{key}_pipeline_over_naive", "pipeline / naive loop:", [statistics.median(deleting)], [hand], 10)
    figures.ratio(f"{key}_signed_over_unsigned", "signed / unsigned pipeline:", signed, deleting, 0.95)
    figures.ratio(f"{key}_signed_over_unsigned_worker_cpu", "signed / unsigned, worker CPU:", signed_cpu, cpu)
    figures.ratio(f"{key}_phase1_signed_over_unsigned", "signed / unsigned phase 1:", signed_marking, marking)
    return statistics.median(deleting) / n


def signature_costs(endpoint: S3Endpoint, drain_s: float | None, figures: Figures, n: int = 5000,
                    repeats: int = 5) -> None:
    """Microseconds per record to sign a pending delete (phase 1) and to verify it as the worker does
    (pick the signature headers, then verify), HMAC-SHA256 against Ed25519 (the verifier holding only the
    public key); the median of ``repeats`` passes over ``n`` encoded records. ``drain_s``: the unsigned
    S3 pipeline's seconds per record, to put the verify cost beside."""
    codec = build_codec()
    topic = "reclaim.ledger-deletion"
    place = S3ChunkStorage(endpoint.binding_settings("sizing"), name="s3-tier2")  # locations only
    infos = pending_deletes_for(new_chunks(place, n), new_mark_id(), int(time.time() * 1000))
    records = [(info.chunk_name.encode(), codec.encode(info, topic)) for info in infos]
    roles = signers_of(PendingDeleteLedgerInfo)
    size = statistics.median(len(value) for _, value in records)
    print(f"record signatures, {n} pending deletes (values of {size:.0f} bytes), median of {repeats} passes:")
    for algorithm in Algorithm:
        signing = signing_with(algorithm)
        signer, verifier = signing.signer, signing.verifier
        signs, verifies = [], []
        for _ in range(repeats):
            started = time.perf_counter()
            headers = [signer.headers(topic, key, value) for key, value in records]
            signs.append((time.perf_counter() - started) / n)
            started = time.perf_counter()
            who = [verifier.verify(topic, key, value, tuple(signature_headers(header)), roles)
                   for (key, value), header in zip(records, headers, strict=True)]
            verifies.append((time.perf_counter() - started) / n)
            assert all(isinstance(signed, Signer) for signed in who), f"{algorithm.value}: a record did not verify"
        sign_us, verify_us = statistics.median(signs) * 1e6, statistics.median(verifies) * 1e6
        name = f"signature_{algorithm.value.lower().replace('-', '_')}"
        figures.add(f"{name}_sign_us_per_record", sign_us)
        figures.add(f"{name}_verify_us_per_record", verify_us)
        if drain_s:
            figures.add(f"{name}_verify_over_s3_drain_ratio", verify_us / (drain_s * 1e6))
        share = f"; verify = {verify_us / (drain_s * 1e6):.1%} of the unsigned S3 drain's " \
                f"{drain_s * 1e6:.0f} µs/record" if drain_s else ""
        print(f"  {algorithm.value:12} sign {sign_us:7.1f} µs/record   verify {verify_us:7.1f} µs/record{share}")


def phase1_part(bootstrap: str, n: int, work: Path, rounds: int, figures: Figures) -> None:
    print(f"phase 1, {n} chunks (one pending delete each), 4 partitions:")
    phase1_round(bootstrap, min(n, 1000), work)  # warm-up
    runs = [phase1_round(bootstrap, n, work) for _ in range(rounds)]
    marking, producing, building, committing = ([run[i] for run in runs] for i in range(4))
    key = f"phase1_{n}"
    figures.rate(f"{key}_mark", "phase 1: LedgerDeletionService.mark", n, marking)
    figures.rate(f"{key}_plain_produce", "plain idempotent produce + flush, same records", n, producing)
    figures.rate(f"{key}_build_encode", "  of phase 1: build + encode the records", n, building)
    figures.rate(f"{key}_metadata_transaction", "  of phase 1: the metadata transaction alone", n, committing)
    figures.ratio(f"{key}_mark_over_plain_produce", "phase 1 / plain produce:", marking, producing, 0.3)


def fs_part(bootstrap: str, n: int, work: Path, rounds: int, figures: Figures) -> None:
    print(f"filesystem, {n} chunks (each a data file and a tag sidecar):")
    fs = FileSystemChunkStorage(work / "fs-tier2", name="fs-tier2", delete_workers=8)
    pipeline(bootstrap, fs, min(n, 1000), work)
    marking, deleting, unlink = [], [], []
    for i in range(rounds):
        phase1, phase2 = pipeline(bootstrap, fs, n, work)
        marking.append(phase1)
        deleting.append(phase2)
        unlink.append(unlink_loop(FileSystemChunkStorage(work / f"unlink-{n}-{i}", name="fs-raw"), n))
    key = f"fs_{n}"
    figures.rate(f"{key}_phase1", "phase 1: publish + one metadata transaction", n, marking)
    figures.rate(f"{key}_pipeline", "pipeline: produced -> gone + committed", n, deleting)
    figures.rate(f"{key}_raw_unlink", "raw os.unlink loop, data file + sidecar", n, unlink)
    figures.ratio(f"{key}_pipeline_over_raw_unlink", "pipeline / raw unlink:", deleting, unlink, 0.6)


def parts(text: str) -> list[str]:
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(chosen) - set(PARTS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown part {unknown[0]!r}; parts are {', '.join(PARTS)}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=counts, default=[5000], help="objects per method, a comma list "
                        "(default 5000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the side-by-side methods (default 3)")
    parser.add_argument("--parts", type=parts, default=["s3", "phase1", "fs"],
                        help=f"what to measure, a comma list of {', '.join(PARTS)} (default s3,phase1,fs)")
    parser.add_argument("--skip-naive-above", type=int, metavar="N", help="skip the naive loop above N objects")
    parser.add_argument("--minio", action="store_true", help="run the S3 part against a MinIO server started "
                        "here (built from its Go module on first use)")
    parser.add_argument("--memory", action="store_true", help="add the memory part (a worker draining backlogs)")
    parser.add_argument("--memory-sizes", type=counts, default=[10_000, 100_000, 1_000_000],
                        help="backlogs of the memory part (default 10000,100000,1000000)")
    args = parser.parse_args()
    settings = Settings.from_env()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.minio and settings.s3_endpoint:
        parser.error("--minio starts an S3 endpoint, but RECLAIM_S3_ENDPOINT names one already; choose one")
    chosen = args.parts + (["memory"] if args.memory and "memory" not in args.parts else [])
    begun, figures = time.time(), Figures()
    tune_interpreter()  # as ``reclaim worker`` does: the in-process pipeline below runs as one would
    with tempfile.TemporaryDirectory(prefix="reclaim-bench-") as tmp:
        work = Path(tmp)
        started: list[int] = []
        try:
            bootstrap = own_broker(settings, work, started)
            endpoint, server = None, ""
            if "s3" in chosen:
                endpoint, server = start_endpoint(settings, args.minio, work, started)
            if set(chosen) - {"memory"}:
                print(f"deletion throughput, 64-byte objects, {os.cpu_count()} cores, one phase-2 consumer, "
                      f"batches of 1000; median of {args.rounds} rounds, each method side by side")
            drain_s = None
            for n in args.objects:
                if endpoint is not None:
                    drain_s = s3_part(bootstrap, endpoint, server, n, work, args.rounds, figures,
                                      args.skip_naive_above)
                if "phase1" in chosen:
                    phase1_part(bootstrap, n, work, args.rounds, figures)
                if "fs" in chosen:
                    fs_part(bootstrap, n, work, args.rounds, figures)
            if endpoint is not None:
                signature_costs(endpoint, drain_s, figures)
            if "memory" in chosen:
                run_memory(bootstrap, args.memory_sizes, work, figures)
        finally:
            for pid in started:
                stop_pid(pid)
    record("deletion_throughput", {**vars(args), "parts": chosen}, figures, begun)


def start_endpoint(settings: Settings, minio: bool, work: Path, started: list[int]) -> tuple[S3Endpoint, str]:
    """The S3 endpoint to measure and what serves it: MinIO started here, the configured one, or moto."""
    if minio:
        pid, endpoint = start_minio(work, settings.cache_dir)
        started.append(pid)
        return endpoint, "MinIO"
    if settings.s3_endpoint:
        return require_s3(settings), "external"
    proc, endpoint = start_s3(work / "s3.log")
    started.append(proc.pid)
    return endpoint, "moto"


if __name__ == "__main__":
    main()
