"""The topology sink: where the controller publishes a stream's epochs and sealed lengths, free of Kafka."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Protocol

from reclaim.schemas.topology import SealedSegment, StreamTopology, TopologyEpoch, TopologySegment, TopologyState
from reclaim.segments.stream_model import EpochRecord, StreamHistory, StreamState


class TopologySink(Protocol):
    """Receives a stream's whole topology each time it changes (and on demand).

    ``publish`` returns only once the topology is durably delivered; it raises a
    :class:`~reclaim.errors.ReclaimError` (retryable) otherwise. The controller publishes as a step
    of an operation, before the operation finishes, so a failed or interrupted publish leaves the
    operation pending and its retry or recovery publishes again. Publishing the same topology twice
    must be harmless (the Kafka topic is compacted by stream: the latest value wins).
    """

    def publish(self, topology: StreamTopology) -> None: ...


class RecordingTopologySink:
    """Keeps every topology published, in order; for tests and the demo."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._published: list[StreamTopology] = []

    def publish(self, topology: StreamTopology) -> None:
        with self._lock:
            self._published.append(topology)

    @property
    def published(self) -> list[StreamTopology]:
        """Every topology published, oldest first."""
        with self._lock:
            return list(self._published)

    def of(self, stream: str) -> list[StreamTopology]:
        """The topologies published for ``stream``, oldest first."""
        return [topology for topology in self.published if topology.stream == stream]

    def latest(self, stream: str) -> StreamTopology | None:
        """What a compacted topic would keep for ``stream``: its last topology, if any."""
        published = self.of(stream)
        return published[-1] if published else None


def topology_epoch(record: EpochRecord) -> TopologyEpoch:
    """One history row as the bus carries it."""
    segments = tuple(TopologySegment(s.id.value, s.key_range.start, s.key_range.end) for s in record.segments)
    return TopologyEpoch(record.epoch, record.reference, segments)


def build_topology(stream: str, history: StreamHistory | None, sealed_lengths: Mapping[int, int],
                   state: StreamState, published_at: int, incarnation: str | None = None) -> StreamTopology:
    """The topology of ``stream`` from its history, the lengths of its sealed segments and its state.

    A DELETED stream's topology carries neither epochs nor sealed lengths: its history is forgotten,
    and the record only tells readers to drop what they hold for the stream. ``published_at`` is in
    epoch millis.

    Raises
    ------
    ValueError
        If a non-deleted stream has no history, or a sealed length names a segment of no epoch.
    """
    if state is StreamState.DELETED:
        return StreamTopology(stream, (), (), TopologyState.DELETED, published_at, incarnation)
    if history is None:
        raise ValueError(f"stream {stream!r} is {state.value} but has no history")
    return StreamTopology(
        stream=stream,
        epochs=tuple(topology_epoch(record) for record in history.epochs),
        sealed_lengths=tuple(SealedSegment(segment, length) for segment, length in sorted(sealed_lengths.items())),
        state=TopologyState[state.name],
        published_at=published_at,
        incarnation=incarnation,
    )
