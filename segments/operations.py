"""Linearised, crash-idempotent execution of a stream's scale, commit, seal and delete operations."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from reclaim.schemas.topology import StreamTopology
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.controller_store import ControllerStore, StreamTransaction
from reclaim.segments.errors import SegmentExistsError, SegmentNotFoundError
from reclaim.segments.ids import SegmentId, TxnId, segment_name
from reclaim.segments.stream_errors import StreamBusyError, StreamNotFoundError, TxnNotFoundError, TxnStateError
from reclaim.segments.stream_model import EpochRecord, StreamHistory, StreamRecord, StreamState, TxnRecord, TxnState
from reclaim.segments.stream_plans import CommitPlan, Operation, Plan, ScalePlan, SealPlan, TruncatePlan
from reclaim.segments.topology import TopologySink, build_topology

logger = logging.getLogger(__name__)

#: Called with a step's name before the step runs; tests crash the process from it.
CrashHook = Callable[[str], None]
Planner = Callable[[StreamTransaction], Plan | None]
#: How many stale operations one request helps to finish before giving up.
_MAX_HELPS = 3
#: How long an operation's executor may go unheard of before another request finishes the operation.
TAKEOVER_AFTER_S = 30.0


class _Superseded(Exception):
    """Another executor finished this operation; a lagging one stops instead of redoing steps."""


class StreamOperations:
    """Runs a stream's one pending operation to completion, for the request that made it or a retry.

    Linearisation: a request plans its operation and records it as the stream's pending operation
    in one controller transaction; a stream has at most one. A second request meanwhile is rejected
    with :class:`StreamBusyError` unless it is the same request retried (it resumes the pending
    operation) or the pending one's executor has not been heard of for ``takeover_after_s`` (it is
    presumed dead: the request finishes the operation first, then plans its own).

    Liveness: an executor renews its operation's ``started_at`` as it goes from step to step (at most
    every ``takeover_after_s / 6``), so only a dead or stalled one is taken over, and a request
    behind a dead one (a killed truncation applier, say) waits ``takeover_after_s`` at most. A
    takeover of an executor that was only slow is still safe: see crash idempotence.

    Crash idempotence: the persisted plan fixes every name and epoch up front; each step is
    idempotent (create skips what exists, seal is a no-op when sealed, a merge whose source is gone
    is done, delete of a deleted segment is harmless); the last step, one controller transaction,
    drops the pending operation and applies the plan's metadata. Executing a plan again, even
    concurrently, converges on the same state.

    Topology: with a ``topology_sink``, an operation that changes the stream's epochs, sealed
    lengths or state publishes the topology it leads to as its last step before the finish, so an
    interrupted or failed publish is redone by the retry or recovery (a duplicate is harmless).
    """

    def __init__(self, segments: ChunkedSegmentStorage, store: ControllerStore, *,
                 crash_hook: CrashHook | None = None, clock: Callable[[], float] = time.time,
                 takeover_after_s: float = TAKEOVER_AFTER_S, topology_sink: TopologySink | None = None) -> None:
        self.segments = segments
        self.store = store
        self.crash_hook = crash_hook
        self.clock = clock
        self.takeover_after_s = takeover_after_s
        self.topology_sink = topology_sink
        self._renewed: dict[str, float] = {}  # op id -> when this executor last renewed it

    def run(self, stream: str, planner: Planner, matches: Callable[[Plan], bool]) -> Operation | None:
        """Plan and execute an operation, or resume a pending one ``matches`` accepts; None if nothing to do."""
        for _ in range(_MAX_HELPS):
            op: Operation | None = None
            with self.store.transaction() as txn:
                pending = txn.get_operation(stream)
                if pending is None:
                    plan = planner(txn)
                    if plan is None:
                        return None
                    op = txn.put_operation(Operation(stream, uuid.uuid4().hex, plan, self.clock()))
            if op is not None:
                self.execute(op)
                return op
            assert pending is not None
            if matches(pending.plan):
                self.execute(pending)
                return pending
            if self.clock() - pending.started_at < self.takeover_after_s:
                raise StreamBusyError(stream, pending.plan.describe())
            logger.warning("stream %s: finishing stale operation %s first", stream, pending.op_id)
            self.execute(pending)
        raise StreamBusyError(stream, "a sequence of stale operations")

    def recover(self, stream: str) -> Operation | None:
        """Finish the stream's pending operation, if any (what a restarted controller runs)."""
        pending = self.store.get_operation(stream)
        if pending is not None:
            self.execute(pending)
        return pending

    def execute(self, op: Operation) -> None:
        """Drive ``op`` to completion; safe to call again after a crash, or while another executor runs it."""
        plan = op.plan
        logger.info("stream operation executing stream=%s op=%s: %s", op.stream, op.op_id, plan.describe())
        try:
            if isinstance(plan, ScalePlan):
                self._scale(op, plan)
            elif isinstance(plan, CommitPlan):
                self._commit(op, plan)
            elif isinstance(plan, SealPlan):
                self._seal(op)
            elif isinstance(plan, TruncatePlan):
                self._truncate(op, plan)
            else:
                self._delete(op)
        except _Superseded:
            self._renewed.pop(op.op_id, None)
            logger.info("stream operation finished elsewhere stream=%s op=%s", op.stream, op.op_id)

    def step(self, op: Operation, name: str) -> None:
        """A point between steps: the crash hook runs here, a lagging executor stops here, and a live one
        renews its operation now and then."""
        if self.crash_hook is not None:
            self.crash_hook(name)
        now = self.clock()
        if now - self._renewed.get(op.op_id, op.started_at) >= self.takeover_after_s / 6:
            with self.store.transaction() as txn:
                pending = txn.renew_operation(op.stream, op.op_id, now)
            self._renewed[op.op_id] = now
        else:
            current = self.store.get_operation(op.stream)
            pending = current is not None and current.op_id == op.op_id
        if not pending:
            raise _Superseded(op.op_id)

    def _finish(self, op: Operation, update: Callable[[StreamTransaction], None]) -> None:
        self.step(op, "finish")
        with self.store.transaction() as txn:
            if not txn.delete_operation(op.stream, op.op_id):
                raise _Superseded(op.op_id)
            update(txn)
        self._renewed.pop(op.op_id, None)
        logger.info("stream operation finished stream=%s op=%s: %s", op.stream, op.op_id, op.plan.describe())

    def history(self, stream: str) -> StreamHistory:
        epochs = self.store.get_epochs(stream)
        if not epochs:
            raise StreamNotFoundError(f"no stream {stream!r}")
        return StreamHistory(epochs)

    def topology(self, stream: str, planned: Sequence[EpochRecord] = (), sealed: Mapping[int, int] | None = None,
                 state: StreamState | None = None) -> StreamTopology:
        """The stream's topology as stored, or as it will be once an operation adds ``planned`` epochs,
        ``sealed`` lengths and moves to ``state``."""
        with self.store.transaction() as txn:  # one consistent read of the three tables
            record = txn.get_stream(stream)
            epochs = {e.epoch: e for e in txn.get_epochs(stream)}
            lengths = txn.get_sealed_lengths(stream)
        if record is None:
            raise StreamNotFoundError(f"no stream {stream!r}")
        epochs.update((e.epoch, e) for e in planned)
        # Stored lengths win, as in put_sealed_lengths: the first record of a seal stands.
        lengths = {**(sealed or {}), **lengths}
        history = StreamHistory(epochs.values()) if epochs else None
        return build_topology(stream, history, lengths, state or record.state, int(self.clock() * 1000),
                              record.incarnation or None)

    def sealed_lengths(self, stream: str, segments: Iterable[SegmentId]) -> dict[int, int]:
        """The final lengths of sealed ``segments``, read back from the segment store after sealing."""
        return {s.value: self.segments.get_info(segment_name(stream, s)).length for s in segments}

    def _publish(self, op: Operation, kind: str, planned: Sequence[EpochRecord] = (),
                 sealed: Mapping[int, int] | None = None, state: StreamState | None = None) -> None:
        if self.topology_sink is None:
            return
        self.step(op, f"{kind}:publish")
        topology = self.topology(op.stream, planned, sealed, state)
        self.topology_sink.publish(topology)
        logger.info("stream topology published stream=%s op=%s epochs=%d sealed=%d state=%s", op.stream,
                    op.op_id, len(topology.epochs), len(topology.sealed_lengths), topology.state.name)

    def _scale(self, op: Operation, plan: ScalePlan) -> None:
        before = self.history(op.stream).at(plan.epoch.epoch - 1)
        for segment in plan.epoch.segments:
            if segment.id not in before.segment_ids:
                self.step(op, "scale:create")
                self.create_segment(op.stream, segment.id)
        for sealed in plan.seal:
            self.step(op, "scale:seal")
            self.segments.seal(segment_name(op.stream, sealed))
        lengths = self.sealed_lengths(op.stream, plan.seal)
        self._publish(op, "scale", [plan.epoch], lengths)

        def update(txn: StreamTransaction) -> None:
            _activate(txn, op.stream, plan.epoch)
            txn.put_sealed_lengths(op.stream, lengths)

        self._finish(op, update)

    def _commit(self, op: Operation, plan: CommitPlan) -> None:
        txns = [self._txn(op.stream, txn_id) for txn_id in plan.txns]
        lengths: dict[int, int] = {}
        if plan.rolled is None:
            # Merged into the active segments: no epoch, seal or state changes, nothing to publish.
            active = self.history(op.stream).at(plan.active)
            self._merge_all(op, txns, active)
        else:
            duplicate_txn_epoch, duplicate_active = plan.rolled
            old_active = self.history(op.stream).at(plan.active)
            self._create_epoch(op, duplicate_txn_epoch)
            self._merge_all(op, txns, duplicate_txn_epoch)
            self._seal_epoch(op, duplicate_txn_epoch)
            self._create_epoch(op, duplicate_active)
            self._seal_epoch(op, old_active)
            lengths = self.sealed_lengths(op.stream, [*duplicate_txn_epoch.segment_ids, *old_active.segment_ids])
            self._publish(op, "commit", plan.rolled, lengths)

        def update(txn: StreamTransaction) -> None:
            txn.put_sealed_lengths(op.stream, lengths)
            if plan.rolled is not None:
                txn.put_epoch(op.stream, plan.rolled[0])
                _activate(txn, op.stream, plan.rolled[1])
            for txn_id in plan.txns:
                record = txn.get_txn(op.stream, txn_id)
                if record is not None:
                    txn.put_txn(replace(record, state=TxnState.COMMITTED))

        self._finish(op, update)

    def _merge_all(self, op: Operation, txns: list[TxnRecord], into: EpochRecord) -> None:
        # Transactions in commit order, so their bytes land in the parents in that order.
        for record in txns:
            for parent in record.parents:
                self.step(op, "commit:merge")
                target = segment_name(op.stream, into.by_number(parent.number).id)
                self.merge(target, record.segment_for(parent.number))

    def _create_epoch(self, op: Operation, epoch: EpochRecord) -> None:
        for segment in epoch.segments:
            self.step(op, "commit:create")
            self.create_segment(op.stream, segment.id)

    def _seal_epoch(self, op: Operation, epoch: EpochRecord) -> None:
        for segment in epoch.segments:
            self.step(op, "commit:seal")
            self.segments.seal(segment_name(op.stream, segment.id))

    def _seal(self, op: Operation) -> None:
        for record in self.store.list_txns(op.stream, [TxnState.OPEN, TxnState.ABORTING]):
            self.step(op, "seal:abort")
            self.discard_txn(op.stream, record.txn_id)
        active = self.history(op.stream).active
        self._seal_epoch(op, active)
        lengths = self.sealed_lengths(op.stream, active.segment_ids)
        self._publish(op, "seal", sealed=lengths, state=StreamState.SEALED)

        def update(txn: StreamTransaction) -> None:
            stream = _stream(txn, op.stream)
            txn.put_sealed_lengths(op.stream, lengths)
            txn.put_stream(replace(stream, state=StreamState.SEALED))

        self._finish(op, update)

    def _delete(self, op: Operation) -> None:
        for record in self.store.list_txns(op.stream):
            if record.state not in (TxnState.COMMITTED, TxnState.ABORTED):
                self.step(op, "delete:abort")
                self.discard_txn(op.stream, record.txn_id, force=True)
        for segment in self.history(op.stream).all_segments():
            self.step(op, "delete:segment")
            self.delete_segment(segment_name(op.stream, segment.id))
        self._publish(op, "delete", state=StreamState.DELETED)

        def update(txn: StreamTransaction) -> None:
            stream = _stream(txn, op.stream)
            txn.forget_history(op.stream)
            txn.put_stream(replace(stream, state=StreamState.DELETED))

        self._finish(op, update)

    def _truncate(self, op: Operation, plan: TruncatePlan) -> None:
        # Deletes first, then the segments in the cut: every step is idempotent, and the head moves
        # only in the finishing transaction, so a crash anywhere is finished by the retry or recovery.
        for value in plan.delete:
            self.step(op, "truncate:delete")
            self.delete_segment(segment_name(op.stream, SegmentId.from_value(value)))
        for value, offset in plan.truncate:
            self.step(op, "truncate:segment")
            self.truncate_segment(segment_name(op.stream, SegmentId.from_value(value)), offset)
        self._finish(op, lambda txn: txn.put_head(op.stream, dict(plan.cut)))

    def truncate_segment(self, name: str, offset: int) -> None:
        """Truncate a segment at ``offset`` as its current owner; at or below its start already is fine."""
        try:
            record = self.segments.get_info(name)
            if offset > record.start_offset:
                self.segments.truncate(name, offset)
        except SegmentNotFoundError:
            logger.info("segment %s is gone already", name)

    def _txn(self, stream: str, txn_id: TxnId) -> TxnRecord:
        record = self.store.get_txn(stream, txn_id)
        if record is None:
            raise TxnNotFoundError(f"no transaction {txn_id} in stream {stream!r}")
        return record

    def create_segment(self, stream: str, segment: SegmentId | str) -> None:
        """Create a segment unless it exists (a retried or concurrent executor may have created it)."""
        name = segment if isinstance(segment, str) else segment_name(stream, segment)
        if self.segments.exists(name):
            return
        try:
            self.segments.create(name, stream=stream)
        except SegmentExistsError:
            logger.info("segment %s was created concurrently", name)

    def merge(self, target: str, source: str) -> None:
        """Seal ``source`` and concat it onto ``target``; an absent source was merged already.

        Only transaction segments are sources, and a commit is accepted only while all of them exist,
        so absence means an earlier (or concurrent) attempt merged it.
        """
        if not self.segments.exists(source):
            return
        try:
            self.segments.seal(source)
            self.segments.concat(target, source)
        except SegmentNotFoundError as exc:
            if exc.segment != source:
                raise
            logger.info("segment %s was merged concurrently", source)

    def delete_segment(self, name: str) -> None:
        """Delete a segment (its chunks go to the garbage sink); absent or deleted already is fine."""
        try:
            self.segments.delete(name)
        except SegmentNotFoundError:
            logger.info("segment %s is gone already", name)

    def discard_txn(self, stream: str, txn_id: TxnId, *, force: bool = False) -> TxnRecord:
        """Abort: seal and delete the transaction's segments, idempotently. ``force`` also takes COMMITTING ones.

        A merged transaction segment has no header any more (concat dropped it) and its chunk rows
        name the parent, so deleting the transaction's segment names can never reach merged chunks.
        """
        with self.store.transaction() as txn:
            record = txn.get_txn(stream, txn_id)
            if record is None:
                raise TxnNotFoundError(f"no transaction {txn_id} in stream {stream!r}")
            allowed = {TxnState.OPEN, TxnState.ABORTING} | ({TxnState.COMMITTING} if force else set())
            if record.state is TxnState.ABORTED:
                return record
            if record.state not in allowed:
                raise TxnStateError(f"transaction {txn_id} is {record.state.value}; it cannot be aborted")
            if record.state is not TxnState.ABORTING:
                record = txn.put_txn(replace(record, state=TxnState.ABORTING))
        for name in record.segment_names():
            if self.crash_hook is not None:
                self.crash_hook("abort:segment")
            try:
                self.segments.seal(name)
            except SegmentNotFoundError:
                continue  # never created, deleted by an earlier attempt, or (forced) merged already
            self.delete_segment(name)
        with self.store.transaction() as txn:
            current = txn.get_txn(stream, txn_id)
            if current is not None and current.state is TxnState.ABORTING:
                current = txn.put_txn(replace(current, state=TxnState.ABORTED))
        logger.info("transaction aborted stream=%s txn=%s", stream, txn_id)
        return current or record


def _stream(txn: StreamTransaction, stream: str) -> StreamRecord:
    record = txn.get_stream(stream)
    if record is None:
        raise StreamNotFoundError(f"no stream {stream!r}")
    return record


def _activate(txn: StreamTransaction, stream: str, epoch: EpochRecord) -> None:
    """Add ``epoch`` to the history and make it the active one."""
    txn.put_epoch(stream, epoch)
    record = _stream(txn, stream)
    txn.put_stream(replace(record, active_epoch=epoch.epoch))
