"""Transactions over a stream (PDP-24): create against the reference epoch, commit in place or rolling, abort."""

from __future__ import annotations

import logging
from dataclasses import replace

from reclaim.segments.controller_store import StreamTransaction
from reclaim.segments.ids import TxnId
from reclaim.segments.operations import StreamOperations
from reclaim.segments.stream_errors import (
    StreamError,
    StreamNotFoundError,
    StreamSealedError,
    TxnNotFoundError,
    TxnStateError,
)
from reclaim.segments.stream_model import StreamHistory, StreamRecord, StreamState, TxnRecord, TxnState, duplicate_epoch
from reclaim.segments.stream_plans import CommitPlan, DeletePlan, Plan, SealPlan

logger = logging.getLogger(__name__)


def plan_commit(txn: StreamTransaction, stream: str, now: float) -> CommitPlan | None:
    """The next commit: every committing transaction of the epoch of the earliest commit request.

    In place when the active epoch shares that reference epoch; otherwise rolling, with the
    transactions' epoch duplicated at active+1 and the active epoch duplicated at active+2.
    """
    committing = txn.list_txns(stream, [TxnState.COMMITTING])
    if not committing:
        return None
    first = min(committing, key=lambda t: (t.commit_order or 0, t.txn_id))
    group = sorted((t for t in committing if t.epoch == first.epoch), key=lambda t: (t.commit_order or 0, t.txn_id))
    ids = tuple(t.txn_id for t in group)
    history = StreamHistory(txn.get_epochs(stream))
    active = history.active
    if active.reference == first.epoch:
        return CommitPlan(first.epoch, ids, active.epoch)
    rolled = (duplicate_epoch(history.at(first.epoch), active.epoch + 1, now),
              duplicate_epoch(active, active.epoch + 2, now))
    return CommitPlan(first.epoch, ids, active.epoch, rolled)


def _open_stream(txn: StreamTransaction, stream: str) -> StreamRecord:
    """The stream's row if it takes new transactions and commits: active, with no seal or delete pending."""
    record = txn.get_stream(stream)
    if record is None or record.state is StreamState.DELETED:
        raise StreamNotFoundError(f"no stream {stream!r}")
    pending = txn.get_operation(stream)
    if record.state is not StreamState.ACTIVE or isinstance(pending.plan if pending else None, SealPlan | DeletePlan):
        raise StreamSealedError(f"stream {stream!r} is sealed or being sealed")
    return record


class TransactionCoordinator:
    """Creates, commits and aborts a stream's transactions through :class:`StreamOperations`."""

    def __init__(self, ops: StreamOperations) -> None:
        self.ops = ops

    def create_txn(self, stream: str) -> TxnRecord:
        """A new transaction against the active epoch's reference epoch, with one segment per parent."""
        with self.ops.store.transaction() as txn:
            record = _open_stream(txn, stream)
            history = StreamHistory(txn.get_epochs(stream))
            reference = history.at(history.active.reference)
            counter = record.txn_counter + 1
            txn.put_stream(replace(record, txn_counter=counter))
            created = txn.put_txn(TxnRecord(stream, TxnId(reference.epoch, counter), reference.segment_ids,
                                            created_at=self.ops.clock()))
        # The row comes first: segments left by a crash here belong to a known transaction one can abort.
        for name in created.segment_names():
            self.ops.create_segment(stream, name)
        logger.info("transaction created stream=%s txn=%s epoch=%d", stream, created.txn_id, created.epoch)
        return created

    def get_txn(self, stream: str, txn_id: TxnId) -> TxnRecord:
        record = self.ops.store.get_txn(stream, txn_id)
        if record is None:
            raise TxnNotFoundError(f"no transaction {txn_id} in stream {stream!r}")
        return record

    def commit_txn(self, txn: TxnRecord) -> TxnRecord:
        """Commit ``txn`` (only its stream and id are read); committing twice is harmless.

        Marks it committing, then runs commits until it is committed: other committing transactions
        of its epoch are merged or rolled in the same operation, in the order commits were requested.
        """
        record = self.request_commit(txn)
        for _ in range(len(self.ops.store.list_txns(txn.stream, [TxnState.COMMITTING])) + 1):
            if record.state is TxnState.COMMITTED:
                return record
            self.ops.run(txn.stream, lambda t: plan_commit(t, txn.stream, self.ops.clock()),
                         lambda plan: _commits(plan, txn.txn_id))
            record = self.get_txn(txn.stream, txn.txn_id)
        if record.state is not TxnState.COMMITTED:
            raise StreamError(f"transaction {txn.txn_id} did not commit; it is {record.state.value}")
        return record

    def request_commit(self, txn: TxnRecord) -> TxnRecord:
        """Mark ``txn`` committing without running the commit (PDP-24: mark first, then commit in batches).

        Transactions of one epoch marked this way are merged or rolled together by the next commit.
        """
        stream, txn_id = txn.stream, txn.txn_id
        record = self.get_txn(stream, txn_id)
        if record.state is TxnState.OPEN:
            self._check_segments(record)
        with self.ops.store.transaction() as meta:
            record = meta.get_txn(stream, txn_id) or record
            if record.state in (TxnState.COMMITTING, TxnState.COMMITTED):
                return record
            if record.state is not TxnState.OPEN:
                raise TxnStateError(f"transaction {txn_id} is {record.state.value}; it cannot be committed")
            # Still OPEN here means no abort has started deleting its segments since they were checked.
            stream_record = _open_stream(meta, stream)
            meta.put_stream(replace(stream_record, commit_counter=stream_record.commit_counter + 1))
            marked = meta.put_txn(replace(record, state=TxnState.COMMITTING,
                                          commit_order=stream_record.commit_counter))
        logger.info("transaction commit requested stream=%s txn=%s", stream, txn_id)
        return marked

    def _check_segments(self, record: TxnRecord) -> None:
        # A merge treats an absent transaction segment as merged, so every one must exist now; and
        # PDP-24 merges only segments never truncated.
        for name in record.segment_names():
            if not self.ops.segments.exists(name):
                raise TxnStateError(f"transaction {record.txn_id} lost segment {name!r}; abort it")
            if self.ops.segments.get_info(name).start_offset != 0:
                raise TxnStateError(f"transaction segment {name!r} was truncated and cannot be merged; abort it")

    def abort_txn(self, txn: TxnRecord) -> TxnRecord:
        """Seal and delete the transaction's segments (their chunks go to phase 1); aborting twice is harmless."""
        return self.ops.discard_txn(txn.stream, txn.txn_id)


def _commits(plan: Plan, txn_id: TxnId) -> bool:
    return isinstance(plan, CommitPlan) and txn_id in plan.txns
