"""The controller tables: compare-and-set, idempotent history rows, one pending operation, plans as JSON."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reclaim.schemas.streams import RetentionPolicy, RetentionType
from reclaim.segments.controller_store import ControllerStore
from reclaim.segments.ids import SegmentId, TxnId
from reclaim.segments.stream_model import (
    StreamHistory,
    StreamRecord,
    TxnRecord,
    TxnState,
    duplicate_epoch,
    initial_epoch,
)
from reclaim.segments.stream_plans import (
    CommitPlan,
    DeletePlan,
    Operation,
    Plan,
    ScalePlan,
    SealPlan,
    plan_from_json,
    plan_to_json,
)
from reclaim.storage.errors import MetadataConflictError
from tests.support.segments import STREAM


def test_stream_and_txn_rows_are_compare_and_set(streams_store: ControllerStore) -> None:
    record = StreamRecord("scope", "orders", RetentionPolicy(RetentionType.NONE))
    with streams_store.transaction() as txn:
        stored = txn.put_stream(record)
    assert stored.version == 1
    with pytest.raises(MetadataConflictError), streams_store.transaction() as txn:
        txn.put_stream(record)  # read at version 0: stale
    big = TxnRecord(STREAM, TxnId(3, 2**95), (SegmentId(3, 0),))
    with streams_store.transaction() as txn:
        txn.put_stream(replace(stored, txn_counter=2**95))
        txn.put_txn(big)
    assert streams_store.get_stream(STREAM) == replace(stored, txn_counter=2**95, version=2)
    assert streams_store.get_txn(STREAM, big.txn_id) == replace(big, version=1)
    with pytest.raises(MetadataConflictError), streams_store.transaction() as txn:
        txn.put_txn(replace(big, state=TxnState.ABORTED))
    assert streams_store.list_txns(STREAM, [TxnState.OPEN]) == [replace(big, version=1)]


def test_history_rows_are_idempotent_and_never_rewritten(streams_store: ControllerStore) -> None:
    epoch = initial_epoch(3)
    with streams_store.transaction() as txn:
        txn.put_epoch(STREAM, epoch)
        txn.put_epoch(STREAM, epoch)
    with pytest.raises(MetadataConflictError), streams_store.transaction() as txn:
        txn.put_epoch(STREAM, initial_epoch(2))
    assert streams_store.get_epochs(STREAM) == [epoch]


def test_a_stream_has_one_pending_operation(streams_store: ControllerStore) -> None:
    op = Operation(STREAM, "op-1", SealPlan(), 1.0)
    with streams_store.transaction() as txn:
        txn.put_operation(op)
    with pytest.raises(MetadataConflictError), streams_store.transaction() as txn:
        txn.put_operation(replace(op, op_id="op-2"))
    assert streams_store.get_operation(STREAM) == replace(op, version=1)
    with streams_store.transaction() as txn:
        assert not txn.delete_operation(STREAM, "op-2")
        assert txn.delete_operation(STREAM, "op-1")
    assert streams_store.get_operation(STREAM) is None


def _plans() -> list[Plan]:
    history = StreamHistory([initial_epoch(2)])
    dup = duplicate_epoch(history.active, 1, 5.0)
    return [
        ScalePlan((SegmentId(0, 1),), ((0.5, 0.75), (0.75, 1.0)), dup),
        CommitPlan(0, (TxnId(0, 1), TxnId(0, 9)), 4),
        CommitPlan(0, (TxnId(0, 1),), 1, (dup, duplicate_epoch(dup, 2))),
        SealPlan(),
        DeletePlan(),
    ]


@pytest.mark.parametrize("plan", _plans(), ids=lambda p: type(p).__name__)
def test_plans_round_trip_through_json(plan: Plan) -> None:
    assert plan_from_json(plan_to_json(plan)) == plan


def test_sealed_lengths_keep_the_first_record_and_go_only_with_the_history(
        streams_store: ControllerStore) -> None:
    with streams_store.transaction() as txn:
        txn.put_epoch(STREAM, initial_epoch(2))
        txn.put_sealed_lengths(STREAM, {0: 10, 1: 3})
        txn.put_sealed_lengths("scope/other", {0: 99})
    with streams_store.transaction() as txn:
        txn.put_sealed_lengths(STREAM, {1: 4, 1 << 32: 0})  # a retried seal cannot change a final length
    assert streams_store.get_sealed_lengths(STREAM) == {0: 10, 1: 3, 1 << 32: 0}
    with pytest.raises(RuntimeError), streams_store.transaction() as txn:
        txn.put_sealed_lengths(STREAM, {2: 1})
        raise RuntimeError("the finish transaction fails")
    assert 2 not in streams_store.get_sealed_lengths(STREAM)
    with streams_store.transaction() as txn:
        txn.forget_history(STREAM)
    assert streams_store.get_sealed_lengths(STREAM) == {}
    assert streams_store.get_sealed_lengths("scope/other") == {0: 99}
