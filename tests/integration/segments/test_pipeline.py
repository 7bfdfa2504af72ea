"""Streams' garbage through the real broker: aborted transactions are deleted, merged ones never are."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reclaim.deletion.records import pending_deletes_for
from reclaim.schemas import millis_now
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.controller_store import StreamMetadataStore
from reclaim.segments.errors import SegmentNotFoundError
from reclaim.segments.ids import SegmentId
from reclaim.segments.stream_errors import TxnStateError
from reclaim.segments.stream_model import TxnState
from reclaim.segments.streams import StreamController
from reclaim.segments.walkthrough import run_txn_walkthrough
from reclaim.storage.metadata import ChunkRecord
from tests.support.pipeline import Pipeline, outcomes

pytestmark = pytest.mark.integration

STREAM = "scope/orders"


@pytest.fixture
def controller(pipeline: Pipeline) -> Iterator[StreamController]:
    storage = ChunkedSegmentStorage(pipeline.store, pipeline.bindings.get("fs-tier2"), pipeline.service,
                                    max_rolling_length=16)
    streams = StreamMetadataStore(pipeline.store.location)
    yield StreamController(storage, streams)
    streams.close()


def layouts(controller: StreamController, names: list[str]) -> list[ChunkRecord]:
    return [chunk for name in names for chunk in controller.segments.layout(name)]


def test_an_aborted_transactions_chunks_are_deleted_from_tier2(pipeline: Pipeline,
                                                              controller: StreamController) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    controller.create_stream("scope", "orders", 2)
    parents = [f"{STREAM}/0.#epoch.0", f"{STREAM}/1.#epoch.0"]
    for parent in parents:
        controller.append(parent, b"p" * 40)
    txn = controller.create_txn(STREAM)
    for name in txn.segment_names():
        controller.append(name, b"t" * 40)
    doomed = {c.name for c in layouts(controller, txn.segment_names())}
    kept = {c.name for c in layouts(controller, parents)}
    assert len(doomed) == 6 and doomed <= set(binding.iter_names())

    controller.abort_txn(txn)
    worker = pipeline.worker()
    reports = pipeline.drain(worker, lambda rs: outcomes(rs).get("deleted", 0) >= len(doomed))
    assert outcomes(reports) == {"deleted": len(doomed)}
    assert doomed.isdisjoint(binding.iter_names())
    assert pipeline.store.get_chunks(doomed) == {}
    assert kept <= set(binding.iter_names())
    assert [controller.read_all(p) for p in parents] == [b"p" * 40] * 2


@pytest.mark.parametrize("rolling", [False, True], ids=["in-place", "rolling"])
def test_a_committed_transactions_chunks_survive_forgeries_and_late_deletes(
        pipeline: Pipeline, controller: StreamController, rolling: bool) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    controller.create_stream("scope", "orders", 2)
    txn = controller.create_txn(STREAM)
    for name in txn.segment_names():
        controller.append(name, b"c" * 40)
    before_merge = layouts(controller, txn.segment_names())
    if rolling:
        controller.scale(STREAM, [SegmentId(0, 0)], [(0.0, 0.25), (0.25, 0.5)])
    controller.commit_txn(txn)
    owners = [f"{STREAM}/{n}.#epoch.{2 if rolling else 0}" for n in (0, 1)]
    merged = {c.name for c in layouts(controller, owners)}
    assert merged == {c.name for c in before_merge}  # the same chunks, now in the owners' layouts

    # Late attempts to delete the merged transaction.
    with pytest.raises(TxnStateError):
        controller.abort_txn(txn)
    with pytest.raises(TxnStateError):
        controller.ops.discard_txn(STREAM, txn.txn_id, force=True)
    for name in txn.segment_names():
        with pytest.raises(SegmentNotFoundError):
            controller.segments.delete(name)
        controller.segments.create(name, stream=STREAM)  # a reused name owns none of the merged chunks
        controller.segments.delete(name)

    # Forged pending deletes naming the transaction segment: as written before the merge, and
    # with the rows' current locations but the old owner.
    forged = pending_deletes_for(before_merge, "forged-mark", millis_now())
    current = pipeline.store.get_chunks(merged)
    assert {row.segment for row in current.values()} == set(owners)
    assert all(record.segment_name in txn.segment_names() for record in forged)
    assert pipeline.publisher.publish(forged) == []
    worker = pipeline.worker()
    reports = pipeline.drain(worker, lambda rs: outcomes(rs).get("ownership-mismatch", 0) >= len(forged))
    assert outcomes(reports) == {"ownership-mismatch": len(forged)}
    assert merged <= set(binding.iter_names())
    assert all(row.active for row in pipeline.store.get_chunks(merged).values())
    assert [controller.read_all(owner) for owner in owners] == [b"c" * 40] * 2


def test_demo_walkthrough_then_delete_the_stream(pipeline: Pipeline, controller: StreamController) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    walk = run_txn_walkthrough(controller, "scope", "orders")
    doomed = {c.name for c in walk.aborted_chunks}
    assert doomed and walk.committed.state is TxnState.COMMITTED and walk.aborted.state is TxnState.ABORTED

    worker = pipeline.worker()
    reports = pipeline.drain(worker, lambda rs: outcomes(rs).get("deleted", 0) >= len(doomed))
    assert outcomes(reports) == {"deleted": len(doomed)}
    assert doomed.isdisjoint(binding.iter_names())
    assert [controller.read_all(s) for s in walk.committed_segments] == list(walk.committed_bytes)

    live = set(binding.iter_names())
    controller.seal_stream(STREAM)
    controller.delete_stream(STREAM)
    reports = pipeline.drain(worker, lambda rs: outcomes(rs).get("deleted", 0) >= len(live))
    assert outcomes(reports) == {"deleted": len(live)}
    assert set(binding.iter_names()) == set()
