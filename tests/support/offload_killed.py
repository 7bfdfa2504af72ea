"""An offloader process that SIGKILLs itself when it reaches one step of the offload protocol.

Run by ``tests/chaos/test_offload_killed.py`` as ``python -m tests.support.offload_killed`` with its job in
``OFFLOAD_JOB`` (JSON: metadata path, hot root, S3 endpoint and bucket, broker and deletion topic, the
segments, the step to die at and after how many arrivals at it).
"""

from __future__ import annotations

import json
import os
import signal

from reclaim.deletion.mark import LedgerDeletionService
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher
from reclaim.producers.producer import RecordProducer
from reclaim.schemas.codec import build_codec
from reclaim.segments.offload import Offloader
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import Tier
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import open_metadata_store


def main() -> None:
    job = json.loads(os.environ["OFFLOAD_JOB"])
    store = open_metadata_store(job["metadata"])
    hot = FileSystemChunkStorage(job["hot"], name="fs-tier1", tier=Tier.TIER1)
    endpoint = S3Endpoint(job["s3"]["url"], job["s3"]["access_key"], job["s3"]["secret_key"], job["s3"]["region"])
    cold = S3ChunkStorage(endpoint.binding_settings(job["bucket"]), name="s3-tier2")
    producer = RecordProducer(job["bootstrap"], "idempotent-producer")
    service = LedgerDeletionService(store, KafkaPendingDeletePublisher(producer, build_codec(), job["topic"]))
    arrivals = [0]

    def die_at(step: str) -> None:
        if step == job["kill_at"]:
            arrivals[0] += 1
            if arrivals[0] >= job["after"]:
                os.kill(os.getpid(), signal.SIGKILL)

    offloader = Offloader(store, StorageBindings([hot]), cold, service, release_after_s=0.0, crash_hook=die_at)
    offloader.resume()
    for segment in job["segments"]:
        offloader.offload_segment(segment)
    offloader.release_due()
    offloader.reap()
    producer.close()


if __name__ == "__main__":
    main()
