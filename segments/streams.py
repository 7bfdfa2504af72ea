"""The stream controller (PDP-24): streams over segments, scaling by epochs, transactions, seal and delete."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from reclaim.errors import ReclaimError
from reclaim.retention.errors import CutProblem, InvalidCutError
from reclaim.schemas.base import new_incarnation
from reclaim.schemas.streams import RetentionPolicy, RetentionType, StreamCut, StreamCutRecord
from reclaim.schemas.topology import StreamTopology
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.controller_store import ControllerStore, StreamTransaction, open_controller_store
from reclaim.segments.ids import SegmentId, TxnId, qualified_stream, segment_name
from reclaim.segments.operations import TAKEOVER_AFTER_S, CrashHook, StreamOperations
from reclaim.segments.stream_errors import (
    IncarnationMismatchError,
    StreamBusyError,
    StreamError,
    StreamExistsError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
)
from reclaim.segments.stream_model import (
    EpochRecord,
    JournalEntry,
    JournalState,
    KeyRange,
    StreamHistory,
    StreamRecord,
    StreamSegment,
    StreamState,
    TxnRecord,
    TxnState,
    initial_epoch,
    plan_scale,
    scaled_epoch,
)
from reclaim.segments.stream_plans import DeletePlan, Operation, Plan, ScalePlan, SealPlan, TruncatePlan
from reclaim.segments.topology import TopologySink
from reclaim.segments.transactions import TransactionCoordinator
from reclaim.segments.truncation import plan_truncation, topology_of_history

logger = logging.getLogger(__name__)

NO_RETENTION = RetentionPolicy(RetentionType.NONE)


class StreamController:
    """Streams, scaling and transactions over a :class:`ChunkedSegmentStorage`.

    Segment bytes and layouts live in the segment storage (and its metadata store); streams,
    the history table, transactions and pending operations in a
    :class:`~reclaim.segments.controller_store.ControllerStore`,
    normally the same SQLite file. Scale, commit, seal and delete of one stream are linearised and
    crash-idempotent (see :class:`~reclaim.segments.operations.StreamOperations`); a conflicting request
    while another is in progress gets :class:`~reclaim.segments.stream_errors.StreamBusyError`.
    Stream arguments are qualified names ``scope/stream``.

    With a ``topology_sink``, the stream's topology (epochs, sealed lengths, state) is published on
    create and by every scale, rolling commit, seal and delete, before the operation finishes.

    A program gets one wired to its deployment from :func:`reclaim.open_streams`.

    Examples
    --------
    >>> with reclaim.open_streams(reclaim.load_settings("reclaim.toml")) as controller:  # doctest: +SKIP
    ...     controller.create_stream("scope", "orders", 2)
    ...     first, second = controller.active_segments("scope/orders")
    ...     controller.scale("scope/orders", [first.id], [(0.0, 0.25), (0.25, 0.5)])
    """

    def __init__(self, segments: ChunkedSegmentStorage, store: ControllerStore, *,
                 crash_hook: CrashHook | None = None, clock: Callable[[], float] = time.time,
                 takeover_after_s: float = TAKEOVER_AFTER_S, topology_sink: TopologySink | None = None) -> None:
        self.segments = segments
        self.store = store
        self.ops = StreamOperations(segments, store, crash_hook=crash_hook, clock=clock,
                                    takeover_after_s=takeover_after_s, topology_sink=topology_sink)
        self.txns = TransactionCoordinator(self.ops)

    @classmethod
    def beside(cls, segments: ChunkedSegmentStorage, location: str | os.PathLike[str], *,
               crash_hook: CrashHook | None = None, topology_sink: TopologySink | None = None) -> StreamController:
        """A controller whose tables live at ``location`` (normally the segment store's): a SQLite file's
        path or a ``postgresql://`` URL."""
        return cls(segments, open_controller_store(location), crash_hook=crash_hook, topology_sink=topology_sink)

    def close(self) -> None:
        """Close the controller store (the segment storage and its metadata store are the caller's)."""
        self.store.close()

    def create_stream(self, scope: str, stream: str, initial_segments: int,
                      policy: RetentionPolicy = NO_RETENTION) -> StreamRecord:
        """A stream whose epoch 0 splits the key space evenly over ``initial_segments`` segments.

        Creating it again with the same segment count is harmless (a retry); a deleted stream's
        name may be reused. The topology is published each time, unless an operation is pending
        (it publishes a newer one when it finishes).
        """
        name = qualified_stream(scope, stream)
        epoch = initial_epoch(initial_segments, self.ops.clock())
        existing = self.store.get_stream(name)
        if existing is None or existing.state is StreamState.DELETED:
            self._forget_offload_policy(name)  # a new incarnation: nothing of an earlier one's
        with self.store.transaction() as txn:
            existing = txn.get_stream(name)
            if existing is not None and existing.state is not StreamState.DELETED:
                if len(txn.get_epochs(name)[0].segments) != initial_segments:
                    raise StreamExistsError(f"stream {name!r} exists with another segment count")
                record = existing
            else:
                record = txn.put_stream(StreamRecord(scope, stream, policy, created_at=self.ops.clock(),
                                                     version=existing.version if existing else 0,
                                                     incarnation=new_incarnation()))
                txn.put_epoch(name, epoch)
        # Rows first: a crash before every segment exists is finished by the retry.
        for segment in epoch.segments:
            self.ops.create_segment(name, segment.id)
        if self.ops.topology_sink is not None and self.store.get_operation(name) is None:
            self.ops.topology_sink.publish(self.ops.topology(name))
        logger.info("stream created stream=%s segments=%d", name, initial_segments)
        return record

    def scale(self, stream: str, seal: Sequence[SegmentId | int],
              new_ranges: Sequence[tuple[float, float]]) -> EpochRecord:
        """Seal ``seal`` and create successors over ``new_ranges`` in a new epoch; returns that epoch.

        The new ranges must exactly cover the sealed segments' ranges. Open transactions do not
        hold a scale up (they roll on commit). Retrying a scale that completed returns its epoch.
        """
        ids = tuple(s if isinstance(s, SegmentId) else SegmentId.from_value(s) for s in seal)
        ranges = tuple((float(start), float(end)) for start, end in new_ranges)

        def planner(txn: StreamTransaction) -> Plan | None:
            _writable(txn, stream)
            history = StreamHistory(txn.get_epochs(stream))
            if scaled_epoch(history, ids, ranges) is not None:
                return None
            return ScalePlan(ids, ranges, plan_scale(history, ids, ranges, self.ops.clock()))

        def matches(plan: Plan) -> bool:
            return isinstance(plan, ScalePlan) and (set(plan.seal), sorted(plan.new_ranges)) == (
                set(ids), sorted(ranges))

        op = self.ops.run(stream, planner, matches)
        if op is not None and isinstance(op.plan, ScalePlan):
            return op.plan.epoch
        done = scaled_epoch(self.history(stream), ids, ranges)
        assert done is not None, "a scale without an operation has completed before"
        return done

    def seal_stream(self, stream: str) -> StreamRecord:
        """Abort open transactions and seal every active segment; refused while commits are requested."""

        def planner(txn: StreamTransaction) -> Plan | None:
            record = _existing(txn, stream)
            if record.state is StreamState.SEALED:
                return None
            committing = txn.list_txns(stream, [TxnState.COMMITTING])
            if committing:
                # They would be stranded: a sealed stream takes no commits. Commit them, then seal.
                raise StreamBusyError(stream, f"{len(committing)} requested commit(s)")
            return SealPlan()

        self.ops.run(stream, planner, lambda plan: isinstance(plan, SealPlan))
        return self.get_stream(stream)

    def delete_stream(self, stream: str) -> None:
        """Delete every segment of a sealed stream (chunks go to the garbage sink) and forget its history."""

        def planner(txn: StreamTransaction) -> Plan | None:
            record = txn.get_stream(stream)
            if record is None or record.state is StreamState.DELETED:
                return None
            if record.state is not StreamState.SEALED:
                raise StreamNotSealedError(f"stream {stream!r} must be sealed before it is deleted")
            return DeletePlan()

        self.ops.run(stream, planner, lambda plan: isinstance(plan, DeletePlan))
        self._forget_offload_policy(stream)
        logger.info("stream deleted stream=%s", stream)

    def _forget_offload_policy(self, stream: str) -> None:
        """A stream's offload policy ends with it: a stream created again under its name starts without one
        (also done at that creation, for a delete that stopped before this)."""
        with self.segments.store.transaction() as txn:
            txn.delete_offload_policy(stream)

    def topology(self, stream: str) -> StreamTopology:
        """The stream's topology as the store holds it (DELETED, without epochs, for a deleted stream)."""
        return self.ops.topology(stream)

    def incarnation(self, stream: str) -> str | None:
        """The stream's incarnation (None for a stream made before incarnations existed and not migrated)."""
        return self.get_stream(stream).incarnation or None

    def recorded_cut(self, stream: str, at_ms: int) -> StreamCutRecord | None:
        """The newest cut the retention recorder took of ``stream`` at or before ``at_ms``."""
        return self.store.recorded_at_or_before(stream, at_ms)

    def publish_topology(self, stream: str) -> StreamTopology:
        """Publish the stream's topology again and return it: for an operator, or after a lost topic.

        Raises
        ------
        StreamBusyError
            While an operation is pending: its topology is not stored yet; ``recover`` it (which
            publishes it) or retry later.
        StreamError
            If the controller has no topology sink.
        """
        sink = self.ops.topology_sink
        if sink is None:
            raise StreamError("this controller has no topology sink to publish to")
        pending = self.store.get_operation(stream)
        if pending is not None:
            raise StreamBusyError(stream, pending.plan.describe())
        topology = self.ops.topology(stream)
        sink.publish(topology)
        logger.info("stream topology republished stream=%s epochs=%d state=%s", stream, len(topology.epochs),
                    topology.state.name)
        return topology

    def set_policy(self, stream: str, policy: RetentionPolicy) -> StreamRecord:
        """Store ``stream``'s retention policy (what the retention recorder records cuts for)."""
        with self.store.transaction() as txn:
            record = _existing(txn, stream)
            stored = txn.put_stream(replace(record, policy=policy))
        logger.info("stream policy set stream=%s type=%s", stream, policy.retention_type.name)
        return stored

    def truncate(self, stream: str, cut: StreamCut) -> bool:
        """Truncate ``stream`` at ``cut`` (PDP-19's ``truncateStream``); False when its head is at or past it.

        Segments wholly before the cut are deleted and the segments of the cut truncated at their
        offsets; their chunks go to the garbage sink (phase 1 of deletion). Linearised with scale,
        commits, seal and delete, and crash-idempotent like them; truncating again at the same or an
        earlier cut changes nothing, so a re-delivered truncation event is harmless.

        Raises
        ------
        StreamNotFoundError
            No such stream.
        InvalidCutError
            ``cut`` is not a position of this stream (see :func:`reclaim.retention.cuts.validate`).
        StreamBusyError
            Another operation of the stream is in progress (retryable).
        """
        self.get_stream(stream)
        lengths = {}
        for segment in cut.as_dict():
            if segment < 0:
                raise InvalidCutError(CutProblem.UNKNOWN_SEGMENT, f"segment {segment}")
            name = segment_name(stream, SegmentId.from_value(segment))
            if self.segments.exists(name):
                lengths[segment] = self.segments.get_info(name).length

        def planner(txn: StreamTransaction) -> Plan | None:
            _existing(txn, stream)
            topology = topology_of_history(StreamHistory(txn.get_epochs(stream)), txn.get_sealed_lengths(stream))
            head = txn.get_head(stream)
            return plan_truncation(topology, None if head is None else StreamCut.from_mapping(head), cut, lengths)

        op = self.ops.run(stream, planner, lambda plan: isinstance(plan, TruncatePlan) and plan.cut == tuple(
            sorted(cut.as_dict().items())))
        if op is None:
            logger.info("stream truncation is a no-op stream=%s: the head is at or past the cut", stream)
        return op is not None

    def truncate_journaled(self, stream: str, cut: StreamCut, *, source: str, reason: str, signer: str,
                           incarnation: str | None = None) -> bool:
        """:meth:`truncate`, kept in the stream's truncation journal with where it came from (``source``,
        one entry per source), its reason and its signer. Only a truncation that happened is kept.
        With ``incarnation``, only that incarnation of the stream is truncated
        (:class:`IncarnationMismatchError` for another: the one named was deleted).

        The entry is written (applying) before the truncation and marked applied after it, so a crash
        in between leaves it applying; the same source read again finds the head at its cut and marks
        it applied. A source applied already changes nothing.
        """
        with self.store.transaction() as txn:
            current = _existing(txn, stream).incarnation
            if incarnation is not None and incarnation != current:
                raise IncarnationMismatchError(f"stream {stream!r} is incarnation {current or '(none)'}, not "
                                               f"{incarnation}: that one was deleted")
            entry = JournalEntry(stream, source, tuple(sorted(cut.as_dict().items())), reason, signer,
                                 JournalState.APPLYING, time.time(), current)
            earlier = next((e for e in txn.get_journal(stream) if e.source == source), None)
            if earlier is None or earlier.state is JournalState.APPLYING:
                txn.put_journal(entry if earlier is None else earlier)
        if earlier is not None and earlier.state is JournalState.APPLIED:
            return self.truncate(stream, cut)
        try:
            done = self.truncate(stream, cut)
        except ReclaimError as exc:
            if not exc.retryable:  # never applicable: nothing to keep (a retryable one comes again)
                with self.store.transaction() as txn:
                    txn.drop_journal(stream, source)
            raise
        applied = done or (earlier is not None and self.head(stream) == cut)
        with self.store.transaction() as txn:
            if applied:
                txn.put_journal(replace(earlier or entry, state=JournalState.APPLIED))
            else:
                txn.drop_journal(stream, source)
        return done

    def journal(self, stream: str, *, every_incarnation: bool = False) -> list[JournalEntry]:
        """The truncation journal of the stream as it is now (every stream of that name, deleted ones included,
        with ``every_incarnation``), oldest first (see :meth:`truncate_journaled`)."""
        record = self.get_stream(stream)
        return self.store.get_journal(stream, None if every_incarnation else record.incarnation)

    def head(self, stream: str) -> StreamCut:
        """The cut the stream was last truncated at; the empty cut (its very start) if never truncated."""
        self.get_stream(stream)
        head = self.store.get_head(stream)
        return StreamCut() if head is None else StreamCut.from_mapping(head)

    def tail_cut(self, stream: str) -> tuple[StreamCut, int]:
        """The cut at the tail of every active segment, and the bytes written to the stream since it began.

        PDP-19's "generate a stream cut and obtain the total size of the stream", what the retention
        recorder stores: the size is the sum of the final lengths of the sealed segments (truncation
        does not lower them) and of the active segments' lengths, each segment counted once, so it
        is the size of the stream up to the returned cut.
        """
        with self.store.transaction() as txn:  # history and sealed lengths from one snapshot
            _existing(txn, stream)
            active = StreamHistory(txn.get_epochs(stream)).active
            sealed = txn.get_sealed_lengths(stream)
        tails = {s.id.value: self.segments.get_info(segment_name(stream, s.id)).length for s in active.segments}
        size = sum(tails.values()) + sum(length for segment, length in sealed.items() if segment not in tails)
        return StreamCut.from_mapping(tails), size

    def recover(self, stream: str) -> Operation | None:
        """Finish the stream's pending operation, if any; what a restarted controller runs first."""
        return self.ops.recover(stream)

    def create_txn(self, stream: str) -> TxnRecord:
        """A transaction against the active epoch's reference epoch: one segment per parent."""
        return self.txns.create_txn(stream)

    def commit_txn(self, txn: TxnRecord) -> TxnRecord:
        """Commit ``txn``: merged into the active segments, or rolled into duplicate epochs (PDP-24)."""
        return self.txns.commit_txn(txn)

    def request_commit(self, txn: TxnRecord) -> TxnRecord:
        """Mark ``txn`` committing only; the next commit of its epoch takes it along."""
        return self.txns.request_commit(txn)

    def abort_txn(self, txn: TxnRecord) -> TxnRecord:
        """Seal and delete ``txn``'s segments; their chunks go to the garbage sink (phase 1)."""
        return self.txns.abort_txn(txn)

    def get_txn(self, stream: str, txn_id: TxnId) -> TxnRecord:
        return self.txns.get_txn(stream, txn_id)

    def list_txns(self, stream: str, states: Sequence[TxnState] | None = None) -> list[TxnRecord]:
        return self.store.list_txns(stream, states)

    def get_stream(self, stream: str) -> StreamRecord:
        record = self.store.get_stream(stream)
        if record is None or record.state is StreamState.DELETED:
            raise StreamNotFoundError(f"no stream {stream!r}")
        return record

    def history(self, stream: str) -> StreamHistory:
        """The history table: every epoch, fresh or duplicate, the last one active."""
        self.get_stream(stream)
        return self.ops.history(stream)

    def active_segments(self, stream: str) -> list[StreamSegment]:
        return list(self.history(stream).active.segments)

    def segments_at(self, stream: str, epoch: int) -> list[StreamSegment]:
        return list(self.history(stream).at(epoch).segments)

    def successors(self, stream: str, segment: SegmentId) -> list[StreamSegment]:
        return self.history(stream).successors(segment)

    def predecessors(self, stream: str, segment: SegmentId) -> list[StreamSegment]:
        return self.history(stream).predecessors(segment)

    def key_range(self, stream: str, segment: SegmentId) -> KeyRange:
        return self.history(stream).key_range(segment)

    def segment_for_key(self, stream: str, key: float) -> StreamSegment:
        """The active segment whose key range holds routing key ``key`` in [0, 1)."""
        for segment in self.active_segments(stream):
            if segment.key_range.contains(key):
                return segment
        raise ValueError(f"routing key {key} is outside [0, 1)")

    def txn_segment_for_key(self, txn: TxnRecord, key: float) -> str:
        """The name of ``txn``'s segment that takes routing key ``key``."""
        reference = self.history(txn.stream).at(txn.epoch)
        for segment in reference.segments:
            if segment.key_range.contains(key):
                return txn.segment_for(segment.id.number)
        raise ValueError(f"routing key {key} is outside [0, 1)")

    def segment_name(self, stream: str, segment: SegmentId) -> str:
        return segment_name(stream, segment)

    def append(self, segment: str, data: bytes) -> int:
        """Append ``data`` at the end of ``segment`` as its current owner (a convenience for writers and demos)."""
        record = self.segments.get_info(segment)
        handle = self.segments.open_write(segment, record.owner_epoch)
        return self.segments.write(handle, record.length, data)

    def read_all(self, segment: str) -> bytes:
        """Every readable byte of ``segment``, from its start offset."""
        record = self.segments.get_info(segment)
        return self.segments.read(segment, record.start_offset, record.length - record.start_offset)


def _existing(txn: StreamTransaction, stream: str) -> StreamRecord:
    record = txn.get_stream(stream)
    if record is None or record.state is StreamState.DELETED:
        raise StreamNotFoundError(f"no stream {stream!r}")
    return record


def _writable(txn: StreamTransaction, stream: str) -> StreamRecord:
    record = _existing(txn, stream)
    if record.state is not StreamState.ACTIVE:
        raise StreamSealedError(f"stream {stream!r} is sealed")
    return record

