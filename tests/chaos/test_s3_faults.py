"""S3 faults under a real ``reclaim worker``: throttling and 5xx answers on a fifth of its requests, made
by a fault-injecting proxy (:mod:`devtools.s3_fault_proxy`) in front of MinIO; and an S3 endpoint down for
longer than a worker's attempts last, whose dead letters an operator replays once it is back."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from itertools import takewhile
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from devtools.s3_fault_proxy import S3_FAULTS, S3FaultProxy
from reclaim.deletion.outcomes import Outcome
from reclaim.localstack.s3_server import S3Endpoint, ensure_bucket, s3_client
from reclaim.producers.topics import TopicNames
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.errors import StorageUnavailableError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage, map_s3_error
from reclaim.storage.sql_store import open_metadata_store
from reclaim.tools.dlq.reader import Reader, watermarks
from tests.support.chaos import Backlog, RestartableMinio, spawn_worker, stopped
from tests.support.cli import run_reclaim
from tests.support.pipeline import Pipeline, inflight, wait_drained

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: The proxy's seed: its first draw is a fault, so the worker's first request (HeadBucket, at start) is
#: refused, as it may be when a worker starts while the endpoint throttles; botocore's retry of it passes.
SEED = 1
FAULT_RATE = 0.2


@dataclass
class S3Chaos:
    """A pipeline whose S3 binding (``s3-tier2``) is a fresh bucket on ``minio``; the test reads and
    writes MinIO directly, only the workers it starts may go through a proxy."""

    minio: RestartableMinio
    bucket: str
    pipe: Pipeline
    fs_root: Path
    log: Path

    def env(self, endpoint: S3Endpoint | None = None) -> dict[str, str]:
        """The ``RECLAIM_S3_*`` variables of this bucket on ``endpoint`` (MinIO itself unless given)."""
        return (endpoint or self.minio.endpoint).reclaim_env(self.bucket)


@pytest.fixture
def s3_chaos(own_minio: RestartableMinio, kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames],
             tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[S3Chaos]:
    bucket = unique_name("chaos")
    ensure_bucket(own_minio.endpoint, bucket)
    s3 = S3ChunkStorage(own_minio.endpoint.binding_settings(bucket), name="s3-tier2")
    pipe = Pipeline(kafka_bootstrap, kafka_topics(), open_metadata_store(str(tmp_path / "meta.db")),
                    StorageBindings([FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2", create=True), s3]),
                    unique_name("group"))
    yield S3Chaos(own_minio, bucket, pipe, tmp_path / "tier2", tmp_path / "worker.log")
    pipe.close()


def through(proxy: S3FaultProxy, endpoint: S3Endpoint) -> S3Endpoint:
    """``endpoint``'s credentials at the proxy's address: what a client of the proxy signs for."""
    return replace(endpoint, url=proxy.url)


def test_the_proxy_forwards_signed_requests_and_answers_faults_as_s3(own_minio: RestartableMinio,
                                                                     unique_name: Callable[[str], str]) -> None:
    """The fault-injecting proxy itself: at rate 0 MinIO accepts every signature made for the proxy's
    address (a PUT with ``Expect: 100-continue``, HEAD, ranged GET, a paged LIST, DeleteObjects, on one
    kept-alive connection); at rate 1 each fault reaches botocore as S3's own error code, which reclaim
    classifies as retryable, and an ``InternalError`` comes after the server did the work."""
    bucket = unique_name("proxy")
    ensure_bucket(own_minio.endpoint, bucket)
    with S3FaultProxy(own_minio.endpoint.url, rate=0.0) as proxy:
        client = s3_client(through(proxy, own_minio.endpoint))
        body = bytes(range(256)) * 300
        for i in range(3):
            client.put_object(Bucket=bucket, Key=f"k/{i}", Body=body, Metadata={"reclaim-stream": "s"})
        assert client.head_object(Bucket=bucket, Key="k/1")["Metadata"] == {"reclaim-stream": "s"}
        assert client.get_object(Bucket=bucket, Key="k/2", Range="bytes=10-19")["Body"].read() == body[10:20]
        page = client.list_objects_v2(Bucket=bucket, Prefix="k/", MaxKeys=2)
        rest = client.list_objects_v2(Bucket=bucket, Prefix="k/", ContinuationToken=page["NextContinuationToken"])
        assert [o["Key"] for o in page["Contents"] + rest["Contents"]] == ["k/0", "k/1", "k/2"]
        deleted = client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k/0"}], "Quiet": True})
        assert "Errors" not in deleted
        assert (proxy.plan.requests, proxy.plan.injected(), proxy.upstream_failures) == \
               (8, {f.code: 0 for f in S3_FAULTS}, 0)
    for fault in S3_FAULTS:
        with S3FaultProxy(own_minio.endpoint.url, rate=1.0, faults=[fault]) as proxy:
            client = s3_client(through(proxy, own_minio.endpoint))
            key = f"fault/{fault.code}"
            with pytest.raises(ClientError) as raised:
                client.put_object(Bucket=bucket, Key=key, Body=b"x")
            error = raised.value.response
            assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == (fault.code, fault.status)
            assert isinstance(map_s3_error(raised.value, key), StorageUnavailableError)
            assert proxy.plan.injected()[fault.code] == proxy.plan.requests > 1  # botocore retried each
            assert _exists(own_minio.endpoint, bucket, key) is fault.after


def _exists(endpoint: S3Endpoint, bucket: str, key: str) -> bool:
    try:
        s3_client(endpoint).head_object(Bucket=bucket, Key=key)
    except ClientError:
        return False
    return True


def test_s3_throttling_and_5xx_on_a_fifth_of_requests(s3_chaos: S3Chaos) -> None:
    """A real worker drains a backlog of S3 chunks while a fault-injecting proxy between it and MinIO
    answers a seeded 20% of its requests with ``503 SlowDown``, ``500 InternalError`` (after MinIO did
    the work) or ``503 ServiceUnavailable``, from the worker's first request on: botocore's retries and
    reclaim's own absorb them; nothing is dead-lettered, nothing live deleted, the audit is clean."""
    chaos, pipe = s3_chaos, s3_chaos.pipe
    backlog = Backlog.marked(pipe, segments=3, binding_name="s3-tier2")
    with S3FaultProxy(chaos.minio.endpoint.url, rate=FAULT_RATE, seed=SEED) as proxy:
        worker = spawn_worker(pipe, chaos.fs_root, chaos.log, RECLAIM_BATCH_SIZE="10",
                              **chaos.env(through(proxy, chaos.minio.endpoint)))
        try:
            with contextlib.suppress(AssertionError):  # assert_clean fails it, with the log and the table's row
                wait_drained(pipe, timeout_s=180)
            backlog.assert_clean(f"S3 faults on {FAULT_RATE:.0%} of requests (proxy)", proxy.plan.describe(),
                                 chaos.fs_root, worker, chaos.log, env=chaos.env())
        finally:
            stopped(worker, chaos.log)
    starting = list(takewhile(lambda d: (d.method, d.path) == ("HEAD", f"/{chaos.bucket}"), proxy.plan.seen()))
    assert starting[0].fault is not None and starting[-1].fault is None, \
        f"the worker's HeadBucket at start was meant to be refused, then retried until it passed: {starting}"
    assert all(n > 0 for n in proxy.plan.injected().values()), proxy.plan.describe()
    assert proxy.upstream_failures == 0


def test_s3_endpoint_down_past_the_last_attempt_then_dead_letters_replayed(s3_chaos: S3Chaos) -> None:
    """A worker allowed two attempts a record (one retry tier of 1 s) deletes a first backlog; MinIO is
    SIGKILLed and a second backlog marked: every record of it fails both attempts and is dead-lettered as
    the S3 endpoint being unavailable. MinIO restarts on its data; the operator lists the DLQ and
    ``reclaim dlq replay``s it; the worker deletes every replayed record. The dead letters stay in the
    DLQ, nothing live is deleted, nothing is orphaned."""
    chaos, pipe = s3_chaos, s3_chaos.pipe
    s3 = pipe.bindings.get("s3-tier2")
    assert isinstance(s3, S3ChunkStorage)
    live = pipe.write_chunks(s3, "scope/stream/0.#epoch.0", 30)
    early, late = (pipe.write_chunks(s3, f"scope/stream/{n}.#epoch.0", 40) for n in (1, 2))
    backlog = Backlog(pipe, s3, live, early + late)
    pipe.service.mark(early)
    operator = {**os.environ, **pipe.worker_env(chaos.fs_root, **chaos.env())}
    worker = spawn_worker(pipe, chaos.fs_root, chaos.log, RECLAIM_BATCH_SIZE="20", RECLAIM_MAX_ATTEMPTS="2",
                          **chaos.env())
    try:
        wait_drained(pipe)
        assert backlog.left() == len(late), "the first backlog was not deleted while MinIO was up"
        chaos.minio.kill()
        pipe.service.mark(late)
        wait_for(lambda: dlq_size(pipe) == len(late) and inflight(pipe) == 0, 180, worker, chaos.log,
                 f"all {len(late)} records of the second backlog dead-lettered")
        assert worker.poll() is None, f"an S3 outage stopped the worker: {chaos.log.read_text()[-3000:]}"
        chaos.minio.restart()
        assert backlog.left() == len(late)

        listed = json.loads(run_reclaim("dlq", "list", "--json", "--limit", "1000", env=operator, timeout=120,
                                        check=True).stdout)
        letters = listed["records"]
        assert sorted(r["chunk"] for r in letters) == sorted(c.name for c in late)
        assert {(r["outcome"], r["error_class"], r["attempt"]) for r in letters} == \
               {(Outcome.RETRYABLE.value, StorageUnavailableError.__name__, 2)}, letters[:3]
        assert all("S3 endpoint unreachable" in r["error"] for r in letters), letters[:3]
        replayed = json.loads(run_reclaim("dlq", "replay", "--error-class", StorageUnavailableError.__name__, "--json",
                                          "--rate", "1000", env=operator, timeout=120, check=True).stdout)
        assert (replayed["sent"], replayed["already_replayed"]) == (len(late), 0)
        backlog.assert_clean("S3 endpoint down past max attempts, DLQ replayed",
                             f"SIGKILL of MinIO until {len(late)} records were dead-lettered (2 attempts), "
                             "restart, dlq replay", chaos.fs_root, worker, chaos.log, env=chaos.env(),
                             dead_lettered=len(late))
    finally:
        stopped(worker, chaos.log)


def dlq_size(pipe: Pipeline) -> int:
    """Records in the DLQ, by its watermarks (read without joining a group)."""
    reading = Reader(pipe.bootstrap)
    try:
        return sum(high - low for low, high in watermarks(reading.consumer, pipe.topics.dlq).values())
    finally:
        reading.close()


def wait_for(check: Callable[[], bool], timeout_s: float, worker: subprocess.Popen[bytes], log: Path,
             what: str) -> None:
    """Wait until ``check()`` holds, the worker alive throughout."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert worker.poll() is None, f"the worker died: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"not {what} in {timeout_s:.0f} s: {log.read_text()[-3000:]}"
        time.sleep(0.5)
