"""A real offloader process SIGKILLed at every step of the protocol (after the intent, after reading the hot
copy, after the upload before its commit, after the switch, between the release's publish and its commit,
after the release, between the reaper's publish and its commit) while truncations and a segment deletion run
on the same segments and a reader reads them throughout. At the end both tiers are clean: no orphan, no live
chunk deleted, every byte that was live readable all along."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.localstack.s3_server import S3Endpoint
from reclaim.producers.topics import TopicNames
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.errors import SegmentNotFoundError
from reclaim.segments.offload import Offloader
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import Tier
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import open_metadata_store
from reclaim.tools.audit import audit
from tests.support.paths import REPO
from tests.support.pipeline import Pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS = ("intent", "read", "uploaded", "switched", "release-published", "released", "abandon-published")
SEGMENTS = [f"scope/stream/{i}.#epoch.0" for i in range(4)]
DATA = bytes(range(256)) * 8  # 2048 bytes a segment: 20 chunks of 100 and one of 48


@pytest.mark.s3_servers("moto")
def test_an_offloader_killed_at_every_step_beside_truncations_and_a_deletion_leaves_both_tiers_clean(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], s3_endpoint: S3Endpoint,
        s3_binding: S3ChunkStorage, tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    hot = FileSystemChunkStorage(tmp_path / "tier1", name="fs-tier1", tier=Tier.TIER1)
    bindings = StorageBindings([hot, s3_binding])
    metadata = str(tmp_path / "meta.db")
    pipe = Pipeline(kafka_bootstrap, kafka_topics(), open_metadata_store(metadata), bindings, unique_name("group"))
    segments = ChunkedSegmentStorage(pipe.store, hot, pipe.service, bindings=bindings, max_rolling_length=100)
    for segment in SEGMENTS:
        segments.create(segment, stream="scope/stream")
        segments.write(segments.open_write(segment, epoch=1), 0, DATA)
        segments.seal(segment)
    stop, errors, reads = threading.Event(), [], [0]

    def read() -> None:  # every live byte, read again and again while everything else runs
        while not stop.is_set():
            for segment in SEGMENTS:
                try:
                    start = segments.get_info(segment).start_offset
                    if segments.read(segment, start, len(DATA) - start) != DATA[start:]:
                        errors.append(f"{segment}: wrong bytes from {start}")
                    reads[0] += 1
                except SegmentNotFoundError:
                    pass  # deleted
                except Exception as exc:  # noqa: BLE001 - collected for the test's own assertion
                    if "outside" not in str(exc):  # a truncation moved the start between the two reads
                        errors.append(f"{segment}: {exc!r}")

    job = {"metadata": metadata, "hot": str(hot.root), "bucket": s3_binding.bucket, "bootstrap": kafka_bootstrap,
           "topic": pipe.topics.deletion, "segments": SEGMENTS,
           "s3": {"url": s3_endpoint.url, "access_key": s3_endpoint.access_key,
                  "secret_key": s3_endpoint.secret_key, "region": s3_endpoint.region}}
    reader = threading.Thread(target=read)
    reader.start()
    worker = pipe.worker(mark_timeout_s=5.0)
    killed = 0
    try:
        for i, step in enumerate(STEPS):
            env = {**os.environ, "OFFLOAD_JOB": json.dumps(job | {"kill_at": step, "after": 1 + i % 3})}
            child = subprocess.Popen([sys.executable, "-m", "tests.support.offload_killed"], cwd=REPO, env=env,
                                     stderr=subprocess.PIPE, text=True)
            time.sleep(0.05 * i)
            # Beside it: a truncation of one segment, and once a whole segment deleted.
            segment = SEGMENTS[i % 3]
            start = segments.get_info(segment).start_offset
            segments.truncate(segment, min(start + 250, len(DATA) - 48))
            if step == "switched":
                segments.delete(SEGMENTS[3])
            _, stderr = child.communicate(timeout=120)
            assert child.returncode in (0, -9), stderr[-3000:]
            killed += child.returncode == -9
            pipe.drain(worker, lambda reports: True)  # phase 2 deletes as it goes
        # A last pass finishes what the kills left (the deadlines long past for its clock), then phase 2 drains.
        last = Offloader(pipe.store, bindings, s3_binding, pipe.service, release_after_s=0.0,
                         clock=lambda: time.time() + 3600)
        last.resume()
        last.release_due()
        last.reap()
        pipe.drain(worker, lambda reports: not pipe.store.offloads_after("", 1), timeout_s=120)
    finally:
        stop.set()
        reader.join()
        pipe.close()
    assert errors == [] and reads[0] > 0
    assert killed >= 5, f"only {killed} of {len(STEPS)} children reached their step"
    store = open_metadata_store(metadata)
    try:
        report = audit(store, [hot, s3_binding], grace_s=0)
        assert report.clean, report.to_dict()
        assert report.bindings[1].live > 0  # something was offloaded and is read from tier-2
        for segment in SEGMENTS[:3]:
            live = ChunkedSegmentStorage(store, hot, pipe.service, bindings=bindings)
            start = live.get_info(segment).start_offset
            assert live.read(segment, start, len(DATA) - start) == DATA[start:]
    finally:
        store.close()
