"""Phase 2 with a metadata store that cannot answer: the batch is decided by nobody, retried by all."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import pg_server
from reclaim.deletion.executor import DeletionExecutor, RetryPolicy
from reclaim.deletion.outcomes import Outcome
from reclaim.deletion.records import pending_deletes_for
from reclaim.schemas import millis_now
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkTags
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord
from reclaim.storage.sql_store import PostgresMetadataStore


@pytest.mark.integration
def test_a_batch_checked_while_postgresql_is_down_is_retried_and_deletes_nothing(tmp_path: Path) -> None:
    server = pg_server.start()
    try:
        store = PostgresMetadataStore(server.url(), pool_timeout=2.0)
        binding = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2", create=True)
        tags = ChunkTags(component="segment", stream="s", segment="s/0", writer_epoch=1)
        binding.create_with_content("s/0.chunk", b"x", tags)
        row = ChunkRecord(name="s/0.chunk", segment="s/0", start_offset=0, length=1, tags=tags,
                          locations=(binding.location("s/0.chunk"),), active=False, mark_id="m")
        with store.transaction() as txn:
            txn.put_chunk(row)
        executor = DeletionExecutor(store, StorageBindings([binding]),
                                    retry=RetryPolicy(attempts=2, initial_wait=0.01, max_wait=0.05))
        server.stop()  # a real outage: the server is gone, the pool's connections with it
        infos = pending_deletes_for([row], "m", millis_now())
        verdicts = executor.execute(infos)
        assert [v.outcome for v in verdicts] == [Outcome.RETRYABLE] * len(infos)
        assert {v.error_class for v in verdicts} == {"MetadataUnavailableError"}
        assert binding.exists("s/0.chunk"), "nothing is deleted unchecked"
        store.close()
    finally:
        server.stop(remove=True)

