"""Transactions: in-place commits, rolling commits across scales with duplicate epochs, batching, abort."""

from __future__ import annotations

import threading

import pytest

from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.segments.ids import SegmentId, TxnId
from reclaim.segments.stream_errors import StreamBusyError, TxnStateError
from reclaim.segments.stream_model import TxnRecord, TxnState
from reclaim.segments.streams import StreamController
from reclaim.segments.walkthrough import run_txn_walkthrough
from tests.support.segments import STREAM


def name(controller: StreamController, number: int, epoch: int) -> str:
    return controller.segment_name(STREAM, SegmentId(epoch=epoch, number=number))


def fill(controller: StreamController, txn: TxnRecord, tag: bytes) -> None:
    """Write ``tag`` plus the parent's number to each of ``txn``'s segments, in pieces that roll chunks."""
    for parent in txn.parents:
        for piece in (tag * 3, b"|" + str(parent.number).encode() + b";"):
            controller.append(txn.segment_for(parent.number), piece)


def expected(tag: bytes, number: int) -> bytes:
    return tag * 3 + b"|" + str(number).encode() + b";"


def test_commit_in_the_same_epoch_merges_into_the_parents(controller: StreamController,
                                                         sink: RecordingGarbageSink) -> None:
    controller.create_stream("scope", "orders", 2)
    for n in (0, 1):
        controller.append(name(controller, n, 0), b"base%d." % n)
    txn = controller.create_txn(STREAM)
    assert txn.txn_id == TxnId(0, 1) and txn.parents == (SegmentId(0, 0), SegmentId(0, 1))
    assert txn.segment_names()[0] == f"{STREAM}/0.#epoch.0#transaction.{'0' * 31}1"
    fill(controller, txn, b"T1")
    merged = {c.name for n in txn.segment_names() for c in controller.segments.layout(n)}

    assert controller.commit_txn(txn).state is TxnState.COMMITTED
    for n in (0, 1):
        assert controller.read_all(name(controller, n, 0)) == b"base%d." % n + expected(b"T1", n)
    assert not any(controller.segments.exists(n) for n in txn.segment_names())
    rows = controller.segments.store.get_chunks(merged)
    assert {r.segment for r in rows.values()} == {name(controller, 0, 0), name(controller, 1, 0)}
    assert all(r.active for r in rows.values())
    assert len(controller.history(STREAM).epochs) == 1 and sink.collected == []
    assert controller.commit_txn(txn).state is TxnState.COMMITTED  # harmless again


def test_commits_and_writes_land_in_order(controller: StreamController) -> None:
    controller.create_stream("scope", "orders", 1)
    parent = name(controller, 0, 0)
    first, second = controller.create_txn(STREAM), controller.create_txn(STREAM)
    controller.append(second.segment_for(0), b"<second>")
    controller.append(first.segment_for(0), b"<first>")
    controller.append(parent, b"<head>")
    controller.commit_txn(first)
    controller.append(parent, b"<between>")
    controller.commit_txn(second)
    controller.append(parent, b"<tail>")
    assert controller.read_all(parent) == b"<head><first><between><second><tail>"


def test_commit_after_a_scale_rolls_into_duplicate_epochs(controller: StreamController) -> None:
    controller.create_stream("scope", "orders", 2)
    txn = controller.create_txn(STREAM)
    fill(controller, txn, b"R")
    controller.scale(STREAM, [SegmentId(0, 0)], [(0.0, 0.25), (0.25, 0.5)])

    controller.commit_txn(txn)
    history = controller.history(STREAM)
    assert [(e.epoch, e.reference) for e in history.epochs] == [(0, 0), (1, 1), (2, 0), (3, 1)]
    duplicate_txn_epoch, duplicate_active = history.at(2), history.at(3)
    assert [str(s.id) for s in duplicate_txn_epoch.segments] == ["0.#epoch.2", "1.#epoch.2"]
    assert [str(s.id) for s in duplicate_active.segments] == ["2.#epoch.3", "3.#epoch.3", "1.#epoch.3"]
    assert [s.key_range for s in duplicate_active.segments] == [s.key_range for s in history.at(1).segments]
    for n in (0, 1):
        assert controller.read_all(name(controller, n, 2)) == expected(b"R", n)
        assert controller.segments.get_info(name(controller, n, 2)).sealed
    assert all(controller.segments.get_info(controller.segment_name(STREAM, s.id)).sealed
               for s in history.at(1).segments)
    assert not any(controller.segments.get_info(controller.segment_name(STREAM, s.id)).sealed
                   for s in duplicate_active.segments)
    assert history.active.epoch == 3
    # Readers go old active -> the committed data -> the new active epoch.
    assert [str(s.id) for s in history.successors(SegmentId(1, 3))] == ["0.#epoch.2"]
    assert [str(s.id) for s in history.successors(SegmentId(2, 0))] == ["2.#epoch.3", "3.#epoch.3"]
    assert [str(s.id) for s in history.predecessors(SegmentId(3, 1))] == ["1.#epoch.2"]


def test_commit_after_several_scales(controller: StreamController) -> None:
    controller.create_stream("scope", "orders", 2)
    txn = controller.create_txn(STREAM)
    fill(controller, txn, b"S")
    controller.scale(STREAM, [SegmentId(0, 0)], [(0.0, 0.25), (0.25, 0.5)])
    controller.scale(STREAM, [SegmentId(0, 1), SegmentId(1, 3)], [(0.25, 1.0)])
    controller.commit_txn(txn)
    history = controller.history(STREAM)
    assert [(e.epoch, e.reference) for e in history.epochs] == [(0, 0), (1, 1), (2, 2), (3, 0), (4, 2)]
    assert [str(s.id) for s in history.at(4).segments] == ["2.#epoch.4", "4.#epoch.4"]
    assert controller.read_all(name(controller, 1, 3)) == expected(b"S", 1)


def test_transactions_of_a_duplicate_epoch_use_its_reference(controller: StreamController) -> None:
    controller.create_stream("scope", "orders", 2)
    early, late = controller.create_txn(STREAM), controller.create_txn(STREAM)
    fill(controller, early, b"E")
    fill(controller, late, b"L")
    controller.scale(STREAM, [SegmentId(0, 1)], [(0.5, 0.75), (0.75, 1.0)])
    controller.commit_txn(early)  # rolls: epochs 2 (of 0) and 3 (of 1, active)

    fresh = controller.create_txn(STREAM)
    assert fresh.epoch == 1 and fresh.parents == controller.history(STREAM).at(1).segment_ids
    controller.append(fresh.segment_for(2), b"F")
    controller.commit_txn(fresh)  # epoch 3 refers to 1: merged in place into the duplicate
    assert len(controller.history(STREAM).epochs) == 4
    assert controller.read_all(name(controller, 2, 3)) == b"F"

    controller.commit_txn(late)  # still of epoch 0: rolls again, duplicating a duplicate
    history = controller.history(STREAM)
    assert [(e.epoch, e.reference) for e in history.epochs[4:]] == [(4, 0), (5, 1)]
    assert controller.read_all(name(controller, 0, 4)) == expected(b"L", 0)


def test_committing_transactions_of_one_epoch_roll_together(controller: StreamController) -> None:
    controller.create_stream("scope", "orders", 2)
    t1, t2, t3 = (controller.create_txn(STREAM) for _ in range(3))
    for txn, tag in ((t1, b"A"), (t2, b"B"), (t3, b"C")):
        fill(controller, txn, tag)
    controller.scale(STREAM, [SegmentId(0, 0)], [(0.0, 0.25), (0.25, 0.5)])
    assert controller.request_commit(t2).state is TxnState.COMMITTING
    controller.commit_txn(t1)

    history = controller.history(STREAM)
    assert len(history.epochs) == 4  # one duplicate pair for both transactions
    for n in (0, 1):  # in the order the commits were requested
        assert controller.read_all(name(controller, n, 2)) == expected(b"B", n) + expected(b"A", n)
    states = {t.txn_id: t.state for t in controller.list_txns(STREAM)}
    assert states == {t1.txn_id: TxnState.COMMITTED, t2.txn_id: TxnState.COMMITTED, t3.txn_id: TxnState.OPEN}


def test_abort_deletes_the_transaction_segments(controller: StreamController, sink: RecordingGarbageSink) -> None:
    controller.create_stream("scope", "orders", 2)
    controller.append(name(controller, 0, 0), b"keep")
    txn = controller.create_txn(STREAM)
    fill(controller, txn, b"XXXX")
    chunks = {c.name for n in txn.segment_names() for c in controller.segments.layout(n)}
    assert len(chunks) >= 4

    assert controller.abort_txn(txn).state is TxnState.ABORTED
    assert set(sink.names()) == chunks
    assert not any(controller.segments.exists(n) for n in txn.segment_names())
    assert controller.read_all(name(controller, 0, 0)) == b"keep"
    assert controller.abort_txn(txn).state is TxnState.ABORTED and len(sink.names()) == len(chunks)
    with pytest.raises(TxnStateError, match="ABORTED"):
        controller.commit_txn(txn)


def test_a_committed_transaction_cannot_be_aborted(controller: StreamController,
                                                   sink: RecordingGarbageSink) -> None:
    controller.create_stream("scope", "orders", 1)
    txn = controller.create_txn(STREAM)
    fill(controller, txn, b"K")
    controller.commit_txn(txn)
    with pytest.raises(TxnStateError, match="COMMITTED"):
        controller.abort_txn(txn)
    assert sink.collected == []
    assert controller.read_all(name(controller, 0, 0)) == expected(b"K", 0)


def test_commit_refuses_a_transaction_with_a_lost_or_truncated_segment(controller: StreamController,
                                                                     segments: ChunkedSegmentStorage) -> None:
    controller.create_stream("scope", "orders", 2)
    truncated, lost = controller.create_txn(STREAM), controller.create_txn(STREAM)
    controller.append(truncated.segment_for(0), b"0123456789")
    segments.truncate(truncated.segment_for(0), 9)
    segments.delete(lost.segment_for(1))
    with pytest.raises(TxnStateError, match="truncated"):
        controller.commit_txn(truncated)
    with pytest.raises(TxnStateError, match="lost segment"):
        controller.commit_txn(lost)
    assert {t.state for t in controller.list_txns(STREAM)} == {TxnState.OPEN}
    controller.abort_txn(lost)


def test_scale_and_commit_are_linearised(segments: ChunkedSegmentStorage, controller: StreamController) -> None:
    controller.create_stream("scope", "orders", 2)
    txn = controller.create_txn(STREAM)
    fill(controller, txn, b"Q")
    reached, release = threading.Event(), threading.Event()

    def hold(step: str) -> None:
        if step == "scale:seal":
            reached.set()
            assert release.wait(10)

    scaler = StreamController(segments, controller.store, crash_hook=hold)
    thread = threading.Thread(target=scaler.scale, args=(STREAM, [SegmentId(0, 0)], [(0.0, 0.5)]))
    thread.start()
    try:
        assert reached.wait(10)
        with pytest.raises(StreamBusyError, match="scale to epoch 1") as busy:
            controller.commit_txn(txn)
        assert busy.value.retryable
        with pytest.raises(StreamBusyError):
            controller.scale(STREAM, [SegmentId(0, 1)], [(0.5, 1.0)])
        late = controller.create_txn(STREAM)  # creating transactions does not wait for a scale
    finally:
        release.set()
        thread.join(10)
    assert controller.commit_txn(txn).state is TxnState.COMMITTED  # marked before: now it rolls
    assert [(e.epoch, e.reference) for e in controller.history(STREAM).epochs] == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert late.epoch == 0


def test_routing_keys_pick_segments_and_transaction_segments(controller: StreamController) -> None:
    controller.create_stream("scope", "orders", 2)
    txn = controller.create_txn(STREAM)
    controller.scale(STREAM, [SegmentId(0, 0)], [(0.0, 0.25), (0.25, 0.5)])
    assert str(controller.segment_for_key(STREAM, 0.3).id) == "3.#epoch.1"
    assert str(controller.segment_for_key(STREAM, 0.5).id) == "1.#epoch.0"
    # The transaction routes by its own (reference) epoch's ranges.
    assert controller.txn_segment_for_key(txn, 0.3) == txn.segment_for(0)
    with pytest.raises(ValueError):
        controller.segment_for_key(STREAM, 1.0)


def test_walkthrough_commits_across_a_scale_and_aborts(controller: StreamController,
                                                       sink: RecordingGarbageSink) -> None:
    walk = run_txn_walkthrough(controller, "scope", "orders", payload=b"e;")
    assert walk.stream == STREAM and walk.scaled_to.epoch == 1
    assert walk.committed.state is TxnState.COMMITTED and walk.aborted.state is TxnState.ABORTED
    assert walk.committed_segments == (f"{STREAM}/0.#epoch.2", f"{STREAM}/1.#epoch.2")
    assert walk.committed_bytes == (b"committed:" + b"e;" * 8,) * 2
    assert set(sink.names()) == {c.name for c in walk.aborted_chunks}


def test_seal_waits_for_requested_commits_and_aborts_open_transactions(controller: StreamController,
                                                                       sink: RecordingGarbageSink) -> None:
    controller.create_stream("scope", "orders", 1)
    pending, open_txn = controller.create_txn(STREAM), controller.create_txn(STREAM)
    fill(controller, open_txn, b"OOOO")
    controller.request_commit(pending)
    with pytest.raises(StreamBusyError, match="requested commit"):
        controller.seal_stream(STREAM)
    controller.commit_txn(pending)
    controller.seal_stream(STREAM)
    assert controller.get_txn(STREAM, open_txn.txn_id).state is TxnState.ABORTED
    assert sink.names() and not controller.segments.exists(open_txn.segment_for(0))
