"""Two filesystem tiers over one SQLite store for the offloader's tests that need no server: a hot binding
(``fs-tier1``), a tier-2 stand-in (``fs-cold``), segments written to the hot one with chunks of 100 bytes,
phase 1 recorded rather than published, and a clock the test moves."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import Tier
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore


@dataclass
class Tiers:
    store: SQLiteMetadataStore
    hot: FileSystemChunkStorage
    cold: FileSystemChunkStorage
    segments: ChunkedSegmentStorage
    sink: RecordingGarbageSink
    now: list[float]

    def clock(self) -> float:
        return self.now[0]

    def write(self, segment: str, stream: str, data: bytes) -> None:
        """Create ``segment`` of ``stream`` on the hot binding and write ``data`` to it (left unsealed)."""
        self.segments.create(segment, stream=stream)
        self.segments.write(self.segments.open_write(segment, epoch=1), 0, data)


def open_tiers(tmp_path: Path, now: float) -> Tiers:
    """The tiers under ``tmp_path``, the clock at ``now``; close ``store`` at the end."""
    store = SQLiteMetadataStore(tmp_path / "meta.db")
    hot = FileSystemChunkStorage(tmp_path / "hot", name="fs-tier1", tier=Tier.TIER1)
    cold = FileSystemChunkStorage(tmp_path / "cold", name="fs-cold", tier=Tier.TIER2)
    sink = RecordingGarbageSink()
    segments = ChunkedSegmentStorage(store, hot, sink, bindings=StorageBindings([hot, cold]), max_rolling_length=100)
    return Tiers(store, hot, cold, segments, sink, [now])
