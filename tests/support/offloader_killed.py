"""An offloader service process that SIGKILLs itself when it reaches one step of the offload protocol.

Run by ``tests/chaos/test_offload_killed.py`` as ``python -m tests.support.offloader_killed`` with its job in
``OFFLOAD_JOB`` (JSON: metadata path, hot root, S3 endpoint and bucket, broker and deletion topic, the step to
die at and after how many arrivals at it, the passes to run). Its leases last one second, so the next process
takes the streams of one that was killed at once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from reclaim.deletion.mark import LedgerDeletionService
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher
from reclaim.producers.producer import RecordProducer
from reclaim.schemas.codec import build_codec
from reclaim.segments.offload import Offloader
from reclaim.segments.offload_policy import StreamLeases
from reclaim.services.offloader import OffloaderService
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import Tier
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import open_metadata_store

LEASE_S = 1.0


def main() -> None:
    job = json.loads(os.environ["OFFLOAD_JOB"])
    store = open_metadata_store(job["metadata"])
    hot = FileSystemChunkStorage(job["hot"], name="fs-tier1", tier=Tier.TIER1)
    endpoint = S3Endpoint(job["s3"]["url"], job["s3"]["access_key"], job["s3"]["secret_key"], job["s3"]["region"])
    cold = S3ChunkStorage(endpoint.binding_settings(job["bucket"]), name="s3-tier2")
    producer = RecordProducer(job["bootstrap"], "idempotent-producer")
    deletions = LedgerDeletionService(store, KafkaPendingDeletePublisher(producer, build_codec(), job["topic"]))
    arrivals = [0]

    def die_at(step: str) -> None:
        if step == job["kill_at"]:
            arrivals[0] += 1
            if arrivals[0] >= job["after"]:
                os.kill(os.getpid(), signal.SIGKILL)

    def offloader(*args: Any, **options: Any) -> Offloader:
        return Offloader(*args, crash_hook=die_at, **options)

    leases = StreamLeases(store, f"chaos-{os.getpid()}", ttl_s=LEASE_S)
    service = OffloaderService(store, StorageBindings([hot, cold]), deletions, leases, default_release_after_s=0.0,
                               offloader=offloader)
    for _ in range(job["passes"]):
        service.tick()
        time.sleep(LEASE_S / 4)
    leases.close()
    producer.close()


if __name__ == "__main__":
    main()
