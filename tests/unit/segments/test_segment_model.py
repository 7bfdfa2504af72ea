"""Property test: random write/read/truncate/concat/seal/delete sequences against a plain in-memory model."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from reclaim.segments.chunked import ChunkedSegmentStorage, SegmentWriteHandle
from reclaim.segments.errors import (
    BadOffsetError,
    SegmentError,
    SegmentNotFoundError,
    SegmentNotSealedError,
    SegmentSealedError,
)
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore

ROLLING = 7
NAMES = st.sampled_from(["s/a", "s/b", "s/c"])


@dataclass
class Model:
    """What a segment must look like: all bytes ever written, the start offset, seal flag, writer."""

    handle: SegmentWriteHandle
    data: bytearray = field(default_factory=bytearray)
    start: int = 0
    sealed: bool = False


class SegmentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="reclaim-model-"))
        self.store = SQLiteMetadataStore(self.dir / "metadata.db")
        self.binding = FileSystemChunkStorage(self.dir / "tier2")
        self.sink = RecordingGarbageSink()
        self.css = ChunkedSegmentStorage(self.store, self.binding, self.sink, max_rolling_length=ROLLING)
        self.model: dict[str, Model] = {}
        for name in ("s/a", "s/b", "s/c"):
            self.create(name)

    def _expect(self, error: type[SegmentError] | None, call: object) -> bool:
        """Run ``call``; True if it succeeded, after checking it raised ``error`` when one is expected."""
        assert callable(call)
        if error is None:
            call()
            return True
        with pytest.raises(error):
            call()
        return False

    @rule(name=NAMES)
    def create(self, name: str) -> None:
        if name in self.model:
            return
        self.css.create(name)
        self.model[name] = Model(self.css.open_write(name, epoch=1))

    @rule(name=NAMES, data=st.binary(min_size=1, max_size=18))
    def write(self, name: str, data: bytes) -> None:
        m = self.model.get(name)
        if m is None:
            handle = SegmentWriteHandle(name, 1)
            self._expect(SegmentNotFoundError, lambda: self.css.write(handle, 0, data))
            return
        error = SegmentSealedError if m.sealed else None
        if self._expect(error, lambda: self.css.write(m.handle, len(m.data), data)):
            m.data += data

    @rule(name=NAMES, data=st.binary(min_size=1, max_size=9))
    def write_more(self, name: str, data: bytes) -> None:
        # Writes drive everything else; a second rule makes them twice as likely.
        self.write(name, data)

    @rule(name=NAMES, a=st.integers(0, 60), b=st.integers(0, 60))
    def read(self, name: str, a: int, b: int) -> None:
        m = self.model.get(name)
        if m is None:
            return
        lo, hi = sorted((a, b))
        if lo < m.start or hi > len(m.data):
            self._expect(BadOffsetError, lambda: self.css.read(name, lo, hi - lo))
        else:
            assert self.css.read(name, lo, hi - lo) == bytes(m.data[lo:hi])

    @rule(name=NAMES, percent=st.integers(0, 110))
    def truncate(self, name: str, percent: int) -> None:
        m = self.model.get(name)
        if m is None:
            return
        # Percent of the length, and past 100 that many bytes beyond the end (an invalid offset).
        offset = len(m.data) * percent // 100 if percent <= 100 else len(m.data) + percent - 100
        error = BadOffsetError if offset > len(m.data) else None
        if self._expect(error, lambda: self.css.truncate(name, offset)):
            m.start = max(m.start, offset)

    @rule(name=NAMES, sealed=st.booleans())
    def seal(self, name: str, sealed: bool) -> None:
        if name in self.model:
            (self.css.seal if sealed else self.css.unseal)(name)
            self.model[name].sealed = sealed

    @rule(name=NAMES)
    def failover(self, name: str) -> None:
        m = self.model.get(name)
        if m is not None:
            m.handle = self.css.open_write(name, epoch=m.handle.epoch + 1)

    @rule(dst=NAMES, src_name=NAMES)
    def concat(self, dst: str, src_name: str) -> None:
        tgt, src = self.model.get(dst), self.model.get(src_name)
        if tgt is None or src is None:
            self._expect(SegmentNotFoundError, lambda: self.css.concat(dst, src_name))
            return
        error: type[SegmentError] | None = None
        if dst == src_name:
            error = BadOffsetError
        elif tgt.sealed:
            error = SegmentSealedError
        elif not src.sealed:
            error = SegmentNotSealedError
        elif src.start:
            error = BadOffsetError
        if self._expect(error, lambda: self.css.concat(dst, src_name, offset=len(tgt.data))):
            tgt.data += src.data
            del self.model[src_name]

    @rule(name=NAMES)
    def delete(self, name: str) -> None:
        if self.model.pop(name, None) is not None:
            self.css.delete(name)

    @invariant()
    def matches_model(self) -> None:
        live: set[str] = set()
        for name, m in self.model.items():
            info = self.css.get_info(name)
            assert (info.length, info.start_offset, info.sealed) == (len(m.data), m.start, m.sealed)
            assert self.css.read(name, m.start, len(m.data) - m.start) == bytes(m.data[m.start:])
            chain = self.css.layout(name)
            assert all(0 < c.length <= ROLLING and c.active and c.segment == name for c in chain)
            if m.start == len(m.data):
                assert chain == []
            else:
                assert chain[0].start_offset <= m.start < chain[0].end_offset
            own = [c.tags.writer_epoch for c in chain if c.tags.segment == name]
            assert own == sorted(own), "a chunk of an older epoch never follows a newer one"
            live.update(c.name for c in chain)
        collected = set(self.sink.names())
        assert len(collected) == len(self.sink.collected), "a chunk is collected once"
        assert not live & collected, "no live chunk is handed to garbage"
        assert set(self.binding.iter_names()) == live | collected, "no orphan, nothing missing"
        assert not any(row.active for row in self.store.get_chunks(collected).values())

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


SegmentMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])
test_segments_match_model = SegmentMachine.TestCase
