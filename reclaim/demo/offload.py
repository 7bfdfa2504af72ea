"""The demo's offload part: a stream on the filesystem tier-1 offloaded to S3 by its policy, truncated while a
chunk's upload is in flight, then both tiers audited clean (docs/concepts/offload.md)."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import replace
from typing import Any

from reclaim.demo.output import demo_settings, drain, say
from reclaim.localstack import stack
from reclaim.localstack.s3_server import ensure_bucket
from reclaim.producers.producer import RecordProducer
from reclaim.schemas.streams import StreamCut
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.offload import Offloader, every_offload
from reclaim.segments.offload_policy import StreamLeases
from reclaim.segments.streams import StreamController
from reclaim.services import runtime
from reclaim.services.offloader import OffloaderService
from reclaim.settings import Settings
from reclaim.storage.metadata import OffloadPolicy, OffloadState
from reclaim.tools.audit import audit_binding

CHUNK = 1024
WRITTEN = 8 * CHUNK - 200  # seven sealed chunks and a growing eighth
TRUNCATE_AT = 3 * CHUNK  # while the third chunk (2048..3072) uploads


def show_offload(settings: Settings, bootstrap: str) -> None:
    """Offload a stream by its policy, truncate it mid-offload, release, reap, delete, audit both tiers."""
    demo = demo_settings(settings, bootstrap, "demo-offload")
    # A bucket of its own: the audit of tier-2 below sees this part's objects only.
    demo = replace(demo, fs_tier1_root=demo.fs_tier2_root.parent / "tier1", s3_bucket=f"{demo.s3_bucket}-offload")
    ensure_bucket(stack.require_s3(demo), demo.s3_bucket)
    store, bindings = runtime.metadata_store(demo), runtime.storage_bindings(demo, writer=True)
    producer = RecordProducer(bootstrap, "idempotent-producer")
    deletions = runtime.deletion_service(demo, store, producer)
    segments = ChunkedSegmentStorage(store, bindings.get("fs-tier1"), deletions, bindings=bindings,
                                     max_rolling_length=CHUNK)
    controller = StreamController.beside(segments, demo.metadata_location)
    try:
        stream = f"demo/clicks-{uuid.uuid4().hex[:6]}"
        controller.create_stream("demo", stream.partition("/")[2], 1)
        (segment,) = [controller.segment_name(stream, s.id) for s in controller.active_segments(stream)]
        data = bytes(i % 251 for i in range(WRITTEN))
        controller.append(segment, data)
        say(f"  stream {stream}: {WRITTEN} bytes in {len(segments.layout(segment))} chunks on fs-tier1")
        policy = OffloadPolicy(stream, "s3-tier2", after_bytes=0, release_after_s=0)
        with store.transaction() as txn:
            txn.put_offload_policy(policy)
        say(f"  policy: {policy.describe()}")
        truncated: list[str] = []

        def truncate_mid_upload(step: str) -> None:
            """After the third chunk's bytes reached S3, before its offload commits: the stream is truncated."""
            if step != "uploaded" or truncated:
                return
            uploading = [o for o in every_offload(store) if o.state is OffloadState.INTENT]
            if uploading and _starts_at(segments, uploading[0].chunk) == 2 * CHUNK:
                controller.truncate(stream, StreamCut.from_mapping({_segment_id(controller, stream): TRUNCATE_AT}))
                truncated.append(uploading[0].chunk)

        def offloader(*args: Any, **options: Any) -> Offloader:
            return Offloader(*args, crash_hook=truncate_mid_upload, **options)

        service = OffloaderService(store, bindings, deletions, StreamLeases(store, "demo"),
                                   default_release_after_s=0, offloader=offloader)
        service.tick()
        states = Counter(o.state.value.lower() for o in every_offload(store))
        say(f"  offloader pass: the stream truncated at {TRUNCATE_AT} while the chunk at {2 * CHUNK} uploaded; "
            f"offloads now: {dict(sorted(states.items()))}")
        say("  the truncation cancelled that chunk's offload: its switch (a compare-and-set on the chunk's row) "
            "never happens")
        report = service.tick()
        say(f"  next pass: {len(report.released)} hot copies released, {len(report.reaped)} cancelled copy reaped: "
            "both to phase 1")
        service.leases.close()
        drain(demo, store, bindings)
        layout = segments.layout(segment)
        where = Counter(chunk.locations[0].binding for chunk in layout)
        say(f"  live layout: {where['s3-tier2']} chunks read from s3-tier2, {where['fs-tier1']} (the growing "
            f"last) from fs-tier1; bytes {TRUNCATE_AT}..{WRITTEN} read back: "
            f"{'ok' if controller.read_all(segment) == data[TRUNCATE_AT:] else 'WRONG'}")
        for name in ("fs-tier1", "s3-tier2"):
            result = audit_binding(store, bindings, name)
            say(f"  audit {name}: {result.live} live chunks, {result.pending} pending, {len(result.orphans)} "
                f"orphans, {len(result.missing)} missing")
            if not result.clean:
                raise AssertionError(f"audit of {name} not clean: {result}")
        if controller.read_all(segment) != data[TRUNCATE_AT:] or every_offload(store):
            raise AssertionError("the offloaded stream does not read back, or an offload was left unsettled")
    finally:
        controller.close()
        producer.close()
        bindings.close()
        store.close()


def _starts_at(segments: ChunkedSegmentStorage, chunk: str) -> int | None:
    row = segments.store.get_chunk(chunk)
    return None if row is None else row.start_offset


def _segment_id(controller: StreamController, stream: str) -> int:
    (only,) = controller.active_segments(stream)
    return only.id.value
