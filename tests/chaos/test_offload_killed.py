"""Real offloader service processes SIGKILLed at every step of the protocol (after the intent, after reading
the hot copy, after the upload before its commit, after the switch, between the release's publish and its
commit, after the release, between the reaper's publish and its commit), each process taking over the
streams of the one killed before it, while retention truncations (size and time), manual truncations and a
stream deletion run on the same streams and a reader reads them throughout. At the end both tiers are clean:
no orphan, no live chunk deleted, every byte that was live readable all along."""

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
from reclaim.schemas.streams import StreamCut, TruncationReason
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.errors import SegmentNotFoundError
from reclaim.segments.offload_policy import StreamLeases
from reclaim.segments.streams import StreamController
from reclaim.services.offloader import OffloaderService
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import Tier
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import OffloadPolicy
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import open_metadata_store
from reclaim.tools.audit import audit
from tests.support.paths import REPO
from tests.support.pipeline import Pipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS = ("intent", "read", "uploaded", "switched", "release-published", "released", "abandon-published")
STREAMS = [f"scope/s{i}" for i in range(4)]
DATA = bytes(range(256)) * 8  # 2048 bytes a segment: 20 chunks of 100 and one of 48 (still growing)
REASONS = (TruncationReason.SIZE, TruncationReason.TIME, TruncationReason.MANUAL)


@pytest.mark.s3_servers("moto")
def test_offloaders_killed_at_every_step_beside_retention_truncations_and_a_stream_deletion_leave_both_tiers_clean(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], s3_endpoint: S3Endpoint,
        s3_binding: S3ChunkStorage, tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    hot = FileSystemChunkStorage(tmp_path / "tier1", name="fs-tier1", tier=Tier.TIER1)
    bindings = StorageBindings([hot, s3_binding])
    metadata = str(tmp_path / "meta.db")
    pipe = Pipeline(kafka_bootstrap, kafka_topics(), open_metadata_store(metadata), bindings, unique_name("group"))
    segments = ChunkedSegmentStorage(pipe.store, hot, pipe.service, bindings=bindings, max_rolling_length=100)
    controller = StreamController.beside(segments, metadata)
    names: dict[str, list[str]] = {}
    for stream in STREAMS:
        scope, _, name = stream.partition("/")
        controller.create_stream(scope, name, 2)
        names[stream] = [controller.segment_name(stream, s.id) for s in controller.active_segments(stream)]
        for segment in names[stream]:
            controller.append(segment, DATA)
        with pipe.store.transaction() as txn:
            txn.put_offload_policy(OffloadPolicy(stream, "s3-tier2", after_bytes=0, release_after_s=0))
    stop, errors, reads, deleted = threading.Event(), [], [0], set()

    def read() -> None:  # every live byte, read again and again while everything else runs
        while not stop.is_set():
            for stream in STREAMS:
                for segment in names[stream]:
                    try:
                        start = segments.get_info(segment).start_offset
                        if segments.read(segment, start, len(DATA) - start) != DATA[start:]:
                            errors.append(f"{segment}: wrong bytes from {start}")
                        reads[0] += 1
                    except SegmentNotFoundError:
                        if stream not in deleted:
                            errors.append(f"{segment}: gone, but its stream was not deleted")
                    except Exception as exc:  # noqa: BLE001 - collected for the test's own assertion
                        if "outside" not in str(exc):  # a truncation moved the start between the two reads
                            errors.append(f"{segment}: {exc!r}")

    job = {"metadata": metadata, "hot": str(hot.root), "bucket": s3_binding.bucket, "bootstrap": kafka_bootstrap,
           "topic": pipe.topics.deletion, "passes": 6,
           "s3": {"url": s3_endpoint.url, "access_key": s3_endpoint.access_key,
                  "secret_key": s3_endpoint.secret_key, "region": s3_endpoint.region}}
    reader = threading.Thread(target=read)
    reader.start()
    worker = pipe.worker(mark_timeout_s=5.0)
    killed = 0
    try:
        for i, step in enumerate(STEPS):
            env = {**os.environ, "OFFLOAD_JOB": json.dumps(job | {"kill_at": step, "after": 1 + i % 3})}
            child = subprocess.Popen([sys.executable, "-m", "tests.support.offloader_killed"], cwd=REPO, env=env,
                                     stderr=subprocess.PIPE, text=True)
            time.sleep(0.3 * i)
            # Beside it: a retention (or manual) truncation of one stream, and once a whole stream deleted.
            stream = STREAMS[i % 3]
            head = controller.head(stream).as_dict()
            cut = {s.id.value: min(head.get(s.id.value, 0) + 250, len(DATA) - 48)
                   for s in controller.active_segments(stream)}
            controller.truncate_journaled(stream, StreamCut.from_mapping(cut), source=f"chaos-{i}",
                                          reason=REASONS[i % 3].value, signer="controller")
            if step == "switched":
                deleted.add(STREAMS[3])
                controller.seal_stream(STREAMS[3])
                controller.delete_stream(STREAMS[3])
            _, stderr = child.communicate(timeout=120)
            assert child.returncode in (0, -9), stderr[-3000:]
            killed += child.returncode == -9
            pipe.drain(worker, lambda reports: True)  # phase 2 deletes as it goes
        # A last process finishes what the kills left (the deadlines long past for its clock), then phase 2 drains.
        def late() -> float:
            return time.time() + 3600

        last = OffloaderService(pipe.store, bindings, pipe.service, StreamLeases(pipe.store, "last", clock=late),
                                default_release_after_s=0.0, clock=late)
        last.tick()
        last.tick()
        pipe.drain(worker, lambda reports: not pipe.store.offloads_after("", 1), timeout_s=120)
    finally:
        stop.set()
        reader.join()
        controller.close()
        pipe.close()
    assert errors == [] and reads[0] > 0
    assert killed >= 5, f"only {killed} of {len(STEPS)} children reached their step"
    store = open_metadata_store(metadata)
    try:
        report = audit(store, [hot, s3_binding], grace_s=0)
        assert report.clean, report.to_dict()
        assert report.bindings[1].live > 0  # something was offloaded and is read from tier-2
        gone = [store.get_segment(name) for name in names[STREAMS[3]]]
        assert all(segment is None or segment.deleted for segment in gone)  # the deleted stream, and its policy
        assert [policy.stream for policy in store.offload_policies()] == STREAMS[:3]
        live = ChunkedSegmentStorage(store, hot, pipe.service, bindings=bindings)
        for stream in STREAMS[:3]:
            for segment in names[stream]:
                start = live.get_info(segment).start_offset
                assert start > 0 and live.read(segment, start, len(DATA) - start) == DATA[start:]
                hot_chunks = [c for c in live.layout(segment) if c.locations[0].binding == "fs-tier1"]
                assert len(hot_chunks) == 1  # only the growing last chunk is left on tier-1
    finally:
        store.close()
