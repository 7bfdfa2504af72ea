"""``ChunkedSegmentStorage``: PDP-34 segment operations over tier-2 chunks and a metadata store."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from reclaim.segments.errors import (
    BadOffsetError,
    FencedError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
)
from reclaim.segments.garbage import GarbageSink, PreparedMark
from reclaim.segments.layout import (
    ReadSlice,
    appended_header,
    check_concat,
    concatenated_header,
    default_stream,
    layout_consistent,
    linked,
    moved_for_concat,
    new_chunk_name,
    plan_read,
    split_for_truncate,
    truncated_header,
    validate_segment_name,
)
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkHandle, ChunkStorage, ChunkTags
from reclaim.storage.errors import (
    ChunkNotFoundError,
    ChunkReadOnlyError,
    InvalidOffsetError,
    MetadataConflictError,
    StorageError,
)
from reclaim.storage.metadata import (
    DEFAULT_MAX_ROLLING_LENGTH,
    ChunkRecord,
    MetadataStore,
    MetadataTransaction,
    SegmentRecord,
    SegmentStatus,
    chunk_chain,
)

logger = logging.getLogger(__name__)

#: How often a read re-takes its layout snapshot when a concurrent update moved it.
_SNAPSHOT_ATTEMPTS = 3
#: How often truncate and delete plan again when the segment changed between their read and commit.
_PLAN_ATTEMPTS = 5


class _StalePlan(Exception):
    """The segment changed after it was read: roll the transaction back and plan again."""


@dataclass(frozen=True)
class SegmentWriteHandle:
    """What ``open_write`` returns: the segment and the writer epoch that opened it."""

    segment: str
    epoch: int


Target = str | SegmentWriteHandle


@dataclass(frozen=True)
class _WritePlan:
    """Chunks a write touched on tier-2 before its metadata commit."""

    appended: ChunkRecord | None
    new: list[ChunkRecord]


def _name_and_epoch(target: Target) -> tuple[str, int | None]:
    if isinstance(target, SegmentWriteHandle):
        return target.segment, target.epoch
    return target, None


def _check_epoch(record: SegmentRecord, epoch: int | None) -> None:
    if epoch is not None and epoch != record.owner_epoch:
        raise FencedError(f"writer epoch {epoch} is fenced by owner epoch {record.owner_epoch}",
                          segment=record.name, epoch=epoch, owner_epoch=record.owner_epoch)


class ChunkedSegmentStorage:
    """Segments as linked lists of chunk records (metadata store) over chunks (a ``ChunkStorage``).

    New chunks go to ``binding``; reads find a chunk's binding by the location's binding name in
    ``bindings`` (which defaults to just ``binding``). Chunks leaving a live layout (truncate,
    delete, a failed write's new chunks) go to ``garbage`` in two steps: ``prepare`` before the
    metadata transaction (phase 1's network step), ``commit`` inside it, which marks them inactive.
    Operations given a :class:`SegmentWriteHandle` are fenced: they fail once a higher epoch has
    opened the segment.
    """

    def __init__(self, store: MetadataStore, binding: ChunkStorage, garbage: GarbageSink, *,
                 bindings: StorageBindings | None = None, component: str = "segmentstore",
                 max_rolling_length: int = DEFAULT_MAX_ROLLING_LENGTH) -> None:
        if max_rolling_length <= 0:
            raise ValueError("max_rolling_length must be positive")
        self.store = store
        self.binding = binding
        self.garbage = garbage
        self.bindings = bindings if bindings is not None else StorageBindings([binding])
        if binding.name not in self.bindings:
            self.bindings.register(binding)
        self.component = component
        self.max_rolling_length = max_rolling_length


    def create(self, segment: str, *, stream: str | None = None,
               max_rolling_length: int | None = None) -> SegmentRecord:
        """Add a segment header; no tier-2 object is created. A deleted segment's name may be reused."""
        validate_segment_name(segment)
        if max_rolling_length is not None and max_rolling_length <= 0:
            # A write splits its bytes into pieces of at most this length: none would ever finish.
            raise ValueError(f"max_rolling_length must be positive, got {max_rolling_length}")
        rolling = max_rolling_length or self.max_rolling_length
        with self.store.transaction() as txn:
            existing = txn.get_segment(segment)
            if existing is not None and not existing.deleted:
                raise SegmentExistsError("segment exists already", segment=segment)
            record = SegmentRecord(segment, stream=stream or default_stream(segment),
                                   max_rolling_length=rolling, version=existing.version if existing else 0)
            stored = txn.put_segment(record)
        logger.info("segment created segment=%s stream=%s", segment, stored.stream)
        return stored

    def exists(self, segment: str) -> bool:
        record = self.store.get_segment(segment)
        return record is not None and not record.deleted

    def get_info(self, segment: str) -> SegmentRecord:
        return self._live(self.store.get_segment(segment), segment)

    def layout(self, segment: str) -> list[ChunkRecord]:
        """The live chunk list of ``segment``, first to last."""
        return self.snapshot(segment)[1]

    def open_write(self, segment: str, epoch: int) -> SegmentWriteHandle:
        """Open for writing at ``epoch``; a higher epoch than the owner's fences every older writer."""
        with self.store.transaction() as txn:
            record = self._require(txn, segment)
            if epoch < record.owner_epoch:
                raise FencedError(f"epoch {epoch} is older than owner epoch {record.owner_epoch}",
                                  segment=segment, epoch=epoch, owner_epoch=record.owner_epoch)
            if epoch > record.owner_epoch:
                txn.put_segment(replace(record, owner_epoch=epoch))
        logger.info("segment opened for write segment=%s epoch=%d", segment, epoch)
        return SegmentWriteHandle(segment, epoch)

    def seal(self, target: Target) -> SegmentRecord:
        return self._set_sealed(target, sealed=True)

    def unseal(self, target: Target) -> SegmentRecord:
        return self._set_sealed(target, sealed=False)

    def _set_sealed(self, target: Target, *, sealed: bool) -> SegmentRecord:
        name, epoch = _name_and_epoch(target)
        with self.store.transaction() as txn:
            record = self._require(txn, name)
            _check_epoch(record, epoch)
            if record.sealed == sealed:
                return record
            status = record.status | SegmentStatus.SEALED if sealed else record.status & ~SegmentStatus.SEALED
            stored = txn.put_segment(replace(record, status=status))
        logger.info("segment %s segment=%s", "sealed" if sealed else "unsealed", name)
        return stored

    def concat(self, target: Target, source: str, *, offset: int | None = None) -> SegmentRecord:
        """Link sealed ``source``'s chunks after ``target``'s (metadata only) and drop the source header."""
        name, epoch = _name_and_epoch(target)
        with self.store.transaction() as txn:
            tgt, src = self._require(txn, name), self._require(txn, source)
            _check_epoch(tgt, epoch)
            check_concat(tgt, src, offset)
            moved = moved_for_concat(self._chain(txn, src), name, shift=tgt.length)
            if moved and tgt.last_chunk is not None:
                tail = self._chunk(txn, tgt.last_chunk)
                txn.put_chunk(replace(tail, next_chunk=moved[0].name))
            for chunk in moved:
                txn.put_chunk(chunk)
            stored = txn.put_segment(concatenated_header(tgt, src, moved))
            txn.delete_segment(source, expected_version=src.version)
        logger.info("segment concat target=%s source=%s chunks=%d", name, source, len(moved))
        return stored

    def truncate(self, target: Target, offset: int) -> SegmentRecord:
        """Move the start offset to ``offset``; chunks wholly below it go to the garbage sink.

        Idempotent: an offset at or below the current start offset changes nothing. The sink's
        network step runs before the metadata transaction (see :meth:`_prepare`).
        """
        name, epoch = _name_and_epoch(target)
        prepared: PreparedMark | None = None
        for _ in range(_PLAN_ATTEMPTS):
            record, chain = self.snapshot(name)
            _check_epoch(record, epoch)
            if offset > record.length:
                raise BadOffsetError(f"truncate offset {offset} beyond length {record.length}", segment=name)
            if offset <= record.start_offset:
                return record
            dropped, kept = split_for_truncate(chain, offset)
            prepared = self._prepare(dropped, prepared)
            stored = self._retire(record, prepared, dropped, truncated_header(record, kept, offset))
            if stored is not None:
                logger.info("segment truncated segment=%s offset=%d dropped=%d", name, offset, len(dropped))
                return stored
        raise self._kept_changing(name, "truncate")

    def delete(self, target: Target) -> None:
        """Mark the segment deleted; all its chunks go to the garbage sink. Deleting twice is harmless."""
        name, epoch = _name_and_epoch(target)
        prepared: PreparedMark | None = None
        for _ in range(_PLAN_ATTEMPTS):
            record = self.store.get_segment(name)
            if record is None:
                raise SegmentNotFoundError("no such segment", segment=name)
            if record.deleted:
                return
            _check_epoch(record, epoch)
            # Every active row of the segment, not only the chain: a stray active row would leak.
            chunks = self.store.list_chunks(name, active_only=True)
            header = replace(record, status=record.status | SegmentStatus.DELETED, first_chunk=None, last_chunk=None)
            prepared = self._prepare(chunks, prepared)
            if self._retire(record, prepared, chunks, header, recheck_rows=True) is not None:
                logger.info("segment deleted segment=%s chunks=%d", name, len(chunks))
                return
        raise self._kept_changing(name, "delete")

    def _prepare(self, chunks: Sequence[ChunkRecord], previous: PreparedMark | None) -> PreparedMark | None:
        """The sink's network step for ``chunks``, outside any metadata transaction.

        A re-plan that retires the same copies again reuses ``previous``: its records are on the
        topic already, so a segment that keeps being appended to does not republish its head (unless
        it is past its commit deadline).
        """
        if not chunks:
            return None
        if previous is not None and previous.covers(chunks) and not previous.expired():
            return previous
        return self.garbage.prepare(chunks)

    def _retire(self, read: SegmentRecord, prepared: PreparedMark | None, chunks: Sequence[ChunkRecord],
                header: SegmentRecord, *, recheck_rows: bool = False) -> SegmentRecord | None:
        """Commit ``prepared`` for ``chunks`` and store ``header``, in one transaction planned from ``read``.

        The transaction only re-reads, checks and writes: the sink's network step ran before it, so
        no write lock is held across the network. Returns None when the segment changed since
        ``read`` (the plan is stale: nothing changed, and the prepared mark's chunks stay live).
        """
        try:
            with self.store.transaction() as txn:
                current = txn.get_segment(read.name)
                if current is None or current.version != read.version:
                    raise _StalePlan
                if recheck_rows and txn.list_chunks(read.name, active_only=True) != list(chunks):
                    raise _StalePlan
                if prepared is not None:
                    self.garbage.commit(txn, prepared, chunks)
                # The header CAS goes last: it is what makes the new layout visible.
                return txn.put_segment(header)
        except _StalePlan:
            logger.info("segment %s changed while its chunks were handed over; planning again", read.name)
            return None

    @staticmethod
    def _kept_changing(name: str, operation: str) -> MetadataConflictError:
        return MetadataConflictError(f"segment kept changing during {operation} ({_PLAN_ATTEMPTS} attempts)",
                                     key=name, expected=0, actual=0)

    def write(self, handle: SegmentWriteHandle, offset: int, data: bytes) -> int:
        """Append ``data`` at ``offset`` (the segment's length); returns the number of bytes written.

        Bytes go to tier-2 first, then one metadata transaction makes them visible. If that fails
        (fenced, sealed, concurrent change) the bytes are never visible and new chunks go to garbage.
        """
        record = self._live(self.store.get_segment(handle.segment), handle.segment)
        self._check_write(record, handle, offset)
        if not data:
            return 0
        last = self._chunk_or_none(record.last_chunk)
        plan = self._put_bytes(record, last, handle.epoch, bytes(data))
        try:
            with self.store.transaction() as txn:
                current = self._require(txn, handle.segment)
                self._check_write(current, handle, offset)
                if current.last_chunk != record.last_chunk:
                    raise MetadataConflictError("segment layout changed during the write",
                                                key=handle.segment, expected=record.version,
                                                actual=current.version)
                self._commit_write(txn, current, plan, len(data))
        except Exception:
            self._abandon(plan.new)
            raise
        return len(data)

    @staticmethod
    def _check_write(record: SegmentRecord, handle: SegmentWriteHandle, offset: int) -> None:
        _check_epoch(record, handle.epoch)
        if record.sealed:
            raise SegmentSealedError("segment is sealed", segment=record.name)
        if offset != record.length:
            raise BadOffsetError(f"write offset {offset} is not length {record.length}", segment=record.name)

    def _appendable(self, record: SegmentRecord, chunk: ChunkRecord | None, epoch: int) -> bool:
        # A writer never appends to a chunk of another epoch or segment (PDP-34 single-writer rule).
        # A chunk with two copies (an offload on its way) is never appended to: its copies would differ.
        return (chunk is not None and self.binding.supports_append and chunk.active
                and chunk.tags.writer_epoch == epoch and chunk.tags.segment == record.name
                and chunk.length < record.max_rolling_length and len(chunk.locations) == 1
                and chunk.locations[0].binding == self.binding.name)

    def _put_bytes(self, record: SegmentRecord, last: ChunkRecord | None, epoch: int,
                   data: bytes) -> _WritePlan:
        appended: ChunkRecord | None = None
        written = 0
        if last is not None and self._appendable(record, last, epoch):
            piece = data[:record.max_rolling_length - last.length]
            key = next(loc.key for loc in last.locations if loc.binding == self.binding.name)
            try:
                self.binding.write(ChunkHandle(key, read_only=False), last.length, piece)
                appended, written = replace(last, length=last.length + len(piece)), len(piece)
            except (InvalidOffsetError, ChunkReadOnlyError, ChunkNotFoundError) as exc:
                # Stray bytes of an earlier failed write (or a moved chunk): roll over instead.
                logger.info("segment %s rolls over from chunk %s: %s", record.name, last.name, exc)
        new: list[ChunkRecord] = []
        try:
            while written < len(data):
                chunk = self._new_chunk(record, epoch, record.length + written,
                                        data[written:written + record.max_rolling_length])
                new.append(chunk)
                written += chunk.length
        except Exception:
            self._abandon(new)
            raise
        return _WritePlan(appended, new)

    def _new_chunk(self, record: SegmentRecord, epoch: int, start: int, piece: bytes) -> ChunkRecord:
        name = new_chunk_name(record.name, epoch, start)
        tags = ChunkTags(component=self.component, stream=record.stream, segment=record.name,
                         writer_epoch=epoch)
        self.binding.create_with_content(name, piece, tags)
        return ChunkRecord(name=name, segment=record.name, start_offset=start, length=len(piece), tags=tags,
                           locations=(self.binding.location(name),))

    def _commit_write(self, txn: MetadataTransaction, current: SegmentRecord, plan: _WritePlan,
                      added: int) -> None:
        new = linked(plan.new)
        first_new = new[0] if new else None
        tail = plan.appended
        if tail is None and first_new is not None and current.last_chunk is not None:
            tail = self._chunk(txn, current.last_chunk)
        if tail is not None:
            txn.put_chunk(replace(tail, next_chunk=first_new.name if first_new else tail.next_chunk))
        for chunk in new:
            txn.put_chunk(chunk, expected_version=0)
        last = new[-1] if new else plan.appended
        assert last is not None, "a non-empty write touches at least one chunk"
        txn.put_segment(appended_header(current, last, first_new, added))

    def _abandon(self, chunks: Sequence[ChunkRecord]) -> None:
        """Hand chunks that never reached a layout to the garbage sink, so none is left orphaned."""
        if not chunks:
            return
        try:
            prepared = self.garbage.prepare(chunks)
            with self.store.transaction() as txn:
                stored = [txn.put_chunk(replace(c, active=False), expected_version=0) for c in chunks]
                self.garbage.commit(txn, prepared, stored)
        except Exception:
            # Best effort: the orphan audit finds what this could not record.
            logger.exception("could not hand %d uncommitted chunks to garbage: %s", len(chunks),
                             [c.name for c in chunks])

    def read(self, segment: str, offset: int, length: int) -> bytes:
        """Segment bytes ``[offset, offset + length)``; below the start offset is an error."""
        record, chain = self.snapshot(segment)
        if length < 0 or offset < record.start_offset or offset + length > record.length:
            raise BadOffsetError(f"read {offset}+{length} outside [{record.start_offset}, {record.length})",
                                 segment=segment)
        return b"".join(self._read_slice(s) for s in plan_read(chain, offset, length))

    def _read_slice(self, piece: ReadSlice) -> bytes:
        """The slice's bytes from the chunk's first copy (the row's order says where reads go: an offload's
        switch puts its copy first), else from its other copy, else from the copies its row lists now.

        A read planned on a layout an offload then moved on (its hot copy released and deleted) finds
        the chunk where the row says it is now: every byte comes from one copy or the other, never a gap."""
        chunk = piece.chunk
        missing: ChunkNotFoundError | None = None
        for _ in range(_SNAPSHOT_ATTEMPTS):
            known = [loc for loc in chunk.locations if loc.binding in self.bindings]
            if not known:
                raise StorageError("no configured binding holds this chunk", chunk=chunk.name)
            for location in known:
                binding = self.bindings.for_location(location)
                try:
                    return binding.read(ChunkHandle(location.key, read_only=True), piece.offset, piece.length)
                except ChunkNotFoundError as exc:
                    missing = exc
            fresh = self.store.get_chunk(chunk.name)
            if fresh is None or not fresh.active or fresh.locations == chunk.locations:
                break  # truncated meanwhile, or truly missing: no other copy to read
            chunk = fresh
        assert missing is not None
        raise missing


    @staticmethod
    def _live(record: SegmentRecord | None, segment: str) -> SegmentRecord:
        if record is None or record.deleted:
            raise SegmentNotFoundError("no such segment", segment=segment)
        return record

    def _require(self, txn: MetadataTransaction, segment: str) -> SegmentRecord:
        return self._live(txn.get_segment(segment), segment)

    @staticmethod
    def _chunk(txn: MetadataTransaction, name: str) -> ChunkRecord:
        chunk = txn.get_chunk(name)
        if chunk is None:
            raise MetadataConflictError(f"chunk record {name!r} is missing", key=name, expected=1, actual=0)
        return chunk

    def _chunk_or_none(self, name: str | None) -> ChunkRecord | None:
        return self.store.get_chunk(name) if name is not None else None

    @staticmethod
    def _chain(txn: MetadataTransaction, record: SegmentRecord) -> list[ChunkRecord]:
        chain = chunk_chain(record.first_chunk, txn.list_chunks(record.name))
        if not layout_consistent(record, chain):
            raise MetadataConflictError("segment chunk list is inconsistent", key=record.name,
                                        expected=record.version, actual=record.version)
        return chain

    def snapshot(self, segment: str) -> tuple[SegmentRecord, list[ChunkRecord]]:
        """A consistent pair of the segment header and its live chunk list."""
        # Header and chunk rows are read separately; retry if a concurrent update moved them apart.
        for _ in range(_SNAPSHOT_ATTEMPTS):
            record = self._live(self.store.get_segment(segment), segment)
            chain = chunk_chain(record.first_chunk, self.store.list_chunks(segment))
            if layout_consistent(record, chain):
                return record, chain
        raise MetadataConflictError("segment layout kept changing while being read", key=segment,
                                    expected=0, actual=0)
