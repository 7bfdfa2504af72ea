"""What a batched delete answers for a key that is already missing: S3 says deleted, the filesystem
binding already-gone. Phase 2 counts a copy ``deleted`` by its row, not by this answer
(:mod:`reclaim.deletion.executor`), so both bindings count alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from reclaim.localstack.s3_server import S3Endpoint
from reclaim.storage.chunks import ChunkTags, DeleteOutcome
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage

TAGS = ChunkTags(component="c", stream="s", segment="s/0", writer_epoch=1)


@pytest.mark.integration
def test_s3_reports_a_missing_key_deleted(s3_endpoint: S3Endpoint, s3_bucket: str) -> None:
    s3 = S3ChunkStorage(s3_endpoint.binding_settings(s3_bucket))
    s3.create_with_content("d/a", b"x", TAGS)
    results = s3.delete_many(["d/a", "d/b"])
    assert [r.outcome for r in results] == [DeleteOutcome.DELETED, DeleteOutcome.DELETED]
    assert s3.exists_many(["d/a", "d/b"]) == set()


def test_fs_delete_many_tells_already_gone(tmp_path: Path) -> None:
    fs = FileSystemChunkStorage(tmp_path)
    for name in ("d/a", "d/b"):
        fs.create_with_content(name, b"x", TAGS)
    fs.data_path("d/b").unlink()  # a crash between the data file's unlink and its sidecar's
    results = {r.name: r.outcome for r in fs.delete_many(["d/a", "d/b", "d/missing"])}
    assert results == {"d/a": DeleteOutcome.DELETED, "d/b": DeleteOutcome.ALREADY_GONE,
                       "d/missing": DeleteOutcome.ALREADY_GONE}
    assert not fs.tags_path("d/b").exists() and not (tmp_path / "tags" / "d").exists()
