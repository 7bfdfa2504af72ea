"""The controller publishes each stream's topology (epochs, sealed lengths, state) and cuts the stream at its tail."""

from __future__ import annotations

import dataclasses

import pytest

from reclaim.schemas import SealedSegment, StreamCut, StreamTopology, TopologyState
from reclaim.segments.controller_store import ControllerStore
from reclaim.segments.ids import SegmentId
from reclaim.segments.stream_errors import StreamBusyError, StreamError, StreamNotFoundError
from reclaim.segments.stream_model import StreamHistory, StreamState, initial_epoch
from reclaim.segments.streams import StreamController
from reclaim.segments.topology import RecordingTopologySink, build_topology
from tests.support.segments import STREAM


def name(segment: SegmentId | int) -> str:
    value = segment if isinstance(segment, SegmentId) else SegmentId.from_value(segment)
    return f"{STREAM}/{value}"


def write(controller: StreamController, data: dict[SegmentId, bytes]) -> None:
    for segment, payload in data.items():
        controller.append(name(segment), payload)


def shape(topology: StreamTopology | None) -> tuple[object, ...]:
    """A topology without its timestamp: epochs as (epoch, reference, [(id, start, end)]), lengths, state."""
    assert topology is not None
    return ([(e.epoch, e.reference, [(s.segment_id, s.key_start, s.key_end) for s in e.segments])
             for e in topology.epochs], topology.sealed_length_map(), topology.state)


S0, S1 = SegmentId(0, 0), SegmentId(0, 1)


@pytest.fixture
def two_segments(controller: StreamController) -> StreamController:
    controller.create_stream("scope", "orders", 2)
    write(controller, {S0: b"a" * 10, S1: b"b" * 3})
    return controller


def test_create_publishes_epoch_zero_and_a_retried_create_publishes_it_again(
        controller: StreamController, topology_sink: RecordingTopologySink) -> None:
    controller.create_stream("scope", "orders", 2)
    controller.create_stream("scope", "orders", 2)
    first, second = topology_sink.of(STREAM)
    assert shape(first) == shape(second) == ([(0, 0, [(0, 0.0, 0.5), (1, 0.5, 1.0)])], {}, TopologyState.ACTIVE)
    assert first.published_at > 0 and first.stream == STREAM


def test_scale_publishes_the_new_epoch_and_the_final_length_of_what_it_sealed(
        two_segments: StreamController, topology_sink: RecordingTopologySink) -> None:
    two_segments.scale(STREAM, [S0], [(0.0, 0.25), (0.25, 0.5)])
    e1 = (1 << 32) | 2, (1 << 32) | 3
    assert shape(topology_sink.latest(STREAM)) == (
        [(0, 0, [(0, 0.0, 0.5), (1, 0.5, 1.0)]), (1, 1, [(e1[0], 0.0, 0.25), (e1[1], 0.25, 0.5), (1, 0.5, 1.0)])],
        {S0.value: 10}, TopologyState.ACTIVE)
    assert two_segments.store.get_sealed_lengths(STREAM) == {S0.value: 10}
    assert len(topology_sink.of(STREAM)) == 2
    # A retried, completed scale changes nothing and publishes nothing.
    two_segments.scale(STREAM, [S0], [(0.0, 0.25), (0.25, 0.5)])
    assert len(topology_sink.of(STREAM)) == 2


def test_rolling_commit_publishes_both_duplicate_epochs_and_every_segment_it_sealed(
        two_segments: StreamController, topology_sink: RecordingTopologySink) -> None:
    txn = two_segments.create_txn(STREAM)
    write(two_segments, {S0: b"aa"})  # 12 bytes in segment 0 when the scale seals it
    for segment in txn.segment_names():
        two_segments.append(segment, b"txn!")
    two_segments.scale(STREAM, [S0], [(0.0, 0.25), (0.25, 0.5)])
    two_segments.commit_txn(txn)
    latest = topology_sink.latest(STREAM)
    assert latest is not None
    assert [(e.epoch, e.reference) for e in latest.epochs] == [(0, 0), (1, 1), (2, 0), (3, 1)]
    # Epoch 2 (the transactions' epoch duplicated) holds the merged bytes; epoch 1 was sealed as it stood.
    assert latest.sealed_length_map() == {
        S0.value: 12, S1.value: 3, (1 << 32) | 2: 0, (1 << 32) | 3: 0, (2 << 32) | 0: 4, (2 << 32) | 1: 4}
    assert latest.active_epoch.segments == tuple(
        dataclasses.replace(s, segment_id=SegmentId.from_value(s.segment_id).duplicate(3).value)
        for s in latest.epochs[1].segments)
    assert two_segments.store.get_sealed_lengths(STREAM) == latest.sealed_length_map()


def test_an_in_place_commit_changes_no_topology_and_publishes_none(
        two_segments: StreamController, topology_sink: RecordingTopologySink) -> None:
    txn = two_segments.create_txn(STREAM)
    for segment in txn.segment_names():
        two_segments.append(segment, b"txn!")
    two_segments.commit_txn(txn)
    assert len(topology_sink.of(STREAM)) == 1
    assert two_segments.store.get_sealed_lengths(STREAM) == {}
    assert two_segments.tail_cut(STREAM) == (StreamCut.from_mapping({0: 14, 1: 7}), 21)


def test_seal_publishes_sealed_with_the_active_segments_lengths(
        two_segments: StreamController, topology_sink: RecordingTopologySink) -> None:
    two_segments.seal_stream(STREAM)
    assert shape(topology_sink.latest(STREAM)) == (
        [(0, 0, [(0, 0.0, 0.5), (1, 0.5, 1.0)])], {0: 10, 1: 3}, TopologyState.SEALED)
    assert two_segments.tail_cut(STREAM) == (StreamCut.from_mapping({0: 10, 1: 3}), 13)


def test_delete_publishes_deleted_without_epochs_and_forgets_the_sealed_lengths(
        two_segments: StreamController, topology_sink: RecordingTopologySink) -> None:
    incarnation = two_segments.incarnation(STREAM)
    two_segments.seal_stream(STREAM)
    two_segments.delete_stream(STREAM)
    # The deleted stream's topology names the incarnation that ended.
    assert topology_sink.latest(STREAM) == StreamTopology(STREAM, (), (), TopologyState.DELETED,
                                                          topology_sink.of(STREAM)[-1].published_at, incarnation)
    assert two_segments.store.get_sealed_lengths(STREAM) == {}
    assert two_segments.topology(STREAM).state is TopologyState.DELETED
    # The name is reused: a fresh epoch 0 and no sealed lengths of the old stream.
    two_segments.create_stream("scope", "orders", 1)
    assert shape(topology_sink.latest(STREAM)) == ([(0, 0, [(0, 0.0, 1.0)])], {}, TopologyState.ACTIVE)
    assert topology_sink.latest(STREAM).incarnation not in (None, incarnation)  # another stream


def test_truncation_keeps_a_sealed_segments_final_length(
        two_segments: StreamController, topology_sink: RecordingTopologySink) -> None:
    two_segments.scale(STREAM, [S0], [(0.0, 0.5)])
    cut_before = two_segments.tail_cut(STREAM)
    two_segments.segments.truncate(name(S0), 10)  # the whole sealed segment
    assert two_segments.segments.get_info(name(S0)).start_offset == 10
    assert two_segments.store.get_sealed_lengths(STREAM) == {S0.value: 10}
    assert two_segments.topology(STREAM).sealed_length_map() == {S0.value: 10}
    assert two_segments.tail_cut(STREAM) == cut_before


def test_tail_cut_follows_writes_and_scales_with_the_size_since_the_stream_began(
        two_segments: StreamController) -> None:
    assert two_segments.tail_cut(STREAM) == (StreamCut.from_mapping({0: 10, 1: 3}), 13)
    write(two_segments, {S1: b"c" * 20})
    assert two_segments.tail_cut(STREAM) == (StreamCut.from_mapping({0: 10, 1: 23}), 33)
    [low, high] = [SegmentId(1, 2), SegmentId(1, 3)]
    two_segments.scale(STREAM, [S0], [(0.0, 0.25), (0.25, 0.5)])
    assert two_segments.tail_cut(STREAM) == (StreamCut.from_mapping({low.value: 0, high.value: 0, 1: 23}), 33)
    write(two_segments, {low: b"x" * 5, high: b"y"})
    two_segments.scale(STREAM, [S1, high], [(0.25, 1.0)])
    merged = SegmentId(2, 4)
    write(two_segments, {merged: b"z" * 7})
    cut, size = two_segments.tail_cut(STREAM)
    assert cut == StreamCut.from_mapping({low.value: 5, merged.value: 7})
    assert size == 10 + 23 + 5 + 1 + 7 == sum(two_segments.topology(STREAM).sealed_length_map().values()) + 12


def test_tail_cut_of_an_unknown_or_deleted_stream_is_not_found(two_segments: StreamController) -> None:
    with pytest.raises(StreamNotFoundError):
        two_segments.tail_cut("scope/nothing")
    two_segments.seal_stream(STREAM)
    two_segments.delete_stream(STREAM)
    with pytest.raises(StreamNotFoundError):
        two_segments.tail_cut(STREAM)


def test_publish_topology_republishes_what_the_store_holds(
        two_segments: StreamController, topology_sink: RecordingTopologySink) -> None:
    two_segments.scale(STREAM, [S0], [(0.0, 0.5)])
    republished = two_segments.publish_topology(STREAM)
    assert topology_sink.latest(STREAM) == republished
    assert shape(republished) == shape(topology_sink.of(STREAM)[-2])
    with pytest.raises(StreamNotFoundError):
        two_segments.publish_topology("scope/nothing")


def test_publish_topology_waits_for_a_pending_operation_and_needs_a_sink(
        two_segments: StreamController, streams_store: ControllerStore) -> None:
    def crash(step: str) -> None:
        if step == "scale:publish":
            raise KeyboardInterrupt  # stands in for the process dying at this step

    crashing = StreamController(two_segments.segments, streams_store, crash_hook=crash,
                                topology_sink=RecordingTopologySink())
    with pytest.raises(KeyboardInterrupt):
        crashing.scale(STREAM, [S0], [(0.0, 0.5)])
    with pytest.raises(StreamBusyError, match="scale to epoch 1"):
        two_segments.publish_topology(STREAM)
    two_segments.recover(STREAM)
    assert two_segments.publish_topology(STREAM).sealed_length_map() == {0: 10}
    with pytest.raises(StreamError, match="no topology sink"):
        StreamController(two_segments.segments, streams_store).publish_topology(STREAM)


class FailingOnceSink(RecordingTopologySink):
    """A sink whose first send is not confirmed (the Kafka publisher's failure is tested on the broker)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def publish(self, topology: StreamTopology) -> None:
        if not self.failed:
            self.failed = True
            raise StreamError("not confirmed")
        super().publish(topology)


def test_an_unconfirmed_publish_leaves_the_operation_pending_until_its_retry_publishes(
        two_segments: StreamController, streams_store: ControllerStore) -> None:
    sink = FailingOnceSink()
    controller = StreamController(two_segments.segments, streams_store, topology_sink=sink)
    with pytest.raises(StreamError, match="not confirmed"):
        controller.seal_stream(STREAM)
    assert streams_store.get_operation(STREAM) is not None
    assert streams_store.get_sealed_lengths(STREAM) == {}
    assert controller.seal_stream(STREAM).state is StreamState.SEALED
    assert shape(sink.latest(STREAM)) == ([(0, 0, [(0, 0.0, 0.5), (1, 0.5, 1.0)])], {0: 10, 1: 3},
                                          TopologyState.SEALED)


def test_build_topology_is_a_pure_function_of_history_lengths_and_state() -> None:
    history = StreamHistory([initial_epoch(2)])
    topology = build_topology(STREAM, history, {1: 7}, StreamState.SEALED, 5)
    assert topology.sealed_lengths == (SealedSegment(1, 7),)
    assert (topology.state, topology.published_at, len(topology.epochs)) == (TopologyState.SEALED, 5, 1)
    assert build_topology(STREAM, history, {1: 7}, StreamState.DELETED, 5).epochs == ()
    with pytest.raises(ValueError, match="no history"):
        build_topology(STREAM, None, {}, StreamState.ACTIVE, 5)
    with pytest.raises(ValueError, match="in no epoch"):
        build_topology(STREAM, history, {99: 1}, StreamState.ACTIVE, 5)
