"""A small stream on a fresh SQLite store for tests that need one without a server: "scope/orders",
two segments of 40 bytes each, written through a controller with a recording garbage sink."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.segments.streams import StreamController
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore

STREAM = "scope/orders"
SEGMENTS = (f"{STREAM}/0.#epoch.0", f"{STREAM}/1.#epoch.0")


@contextmanager
def orders_stream(directory: Path) -> Iterator[StreamController]:
    """The controller of "scope/orders" (two segments, 40 bytes in each), closed with its store."""
    store = SQLiteMetadataStore(directory / "metadata.db")
    segments = ChunkedSegmentStorage(store, FileSystemChunkStorage(directory / "tier2", name="fs-tier2"),
                                     RecordingGarbageSink(), max_rolling_length=8)
    controller = StreamController.beside(segments, store.path)
    try:
        controller.create_stream("scope", "orders", 2)
        for segment in SEGMENTS:
            controller.append(segment, b"x" * 40)
        yield controller
    finally:
        controller.close()
        store.close()
