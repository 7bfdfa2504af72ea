"""Stream topologies for retention tests: hand-made scaling histories and random ones with readers' cuts."""

from __future__ import annotations

import random
from collections.abc import Sequence

from reclaim.retention.topology import SegmentRange, Topology
from reclaim.schemas.streams import StreamCut
from reclaim.schemas.topology import SealedSegment, StreamTopology, TopologyEpoch, TopologySegment, TopologyState
from reclaim.segments.ids import SegmentId
from reclaim.segments.stream_model import StreamHistory, initial_epoch, plan_scale


def sid(epoch: int, number: int) -> int:
    """A PDP-24 segment id."""
    return SegmentId(epoch=epoch, number=number).value


def topology_of_history(history: StreamHistory, sealed: dict[int, int] | None = None) -> Topology:
    epochs = [[(s.id.value, s.key_range.start, s.key_range.end) for s in epoch.segments] for epoch in history.epochs]
    return Topology.of(epochs, sealed)


def scaled(initial: int, scales: Sequence[tuple[Sequence[int], Sequence[tuple[float, float]]]],
           sealed: dict[int, int] | None = None) -> Topology:
    """A topology from ``initial`` segments and scales given as (segment ids to seal, new ranges)."""
    history = StreamHistory([initial_epoch(initial)])
    for seal, ranges in scales:
        epoch = plan_scale(history, [SegmentId.from_value(s) for s in seal], ranges)
        history = StreamHistory([*history.epochs, epoch])
    return topology_of_history(history, sealed)


# Five epochs that split and merge:
#   epoch 0: s0 [0, .5)             s1 [.5, 1)
#   epoch 1: s0 [0, .5)             s2 [.5, .75)  s3 [.75, 1)       (s1 split)
#   epoch 2: s4 [0, .75)                          s3 [.75, 1)       (s0 + s2 merged)
#   epoch 3: s5 [0, .25)  s6 [.25, .75)           s3 [.75, 1)       (s4 split)
#   epoch 4: s5 [0, .25)  s7 [.25, 1)                               (s6 + s3 merged)
S0, S1, S2, S3, S4, S5, S6, S7 = 0, 1, sid(1, 2), sid(1, 3), sid(2, 4), sid(3, 5), sid(3, 6), sid(4, 7)
SEALED = {S0: 100, S1: 100, S2: 50, S4: 80, S3: 60, S6: 40}


def five_epochs() -> Topology:
    return scaled(2, [([S1], [(0.5, 0.75), (0.75, 1.0)]), ([S0, S2], [(0.0, 0.75)]),
                      ([S4], [(0.0, 0.25), (0.25, 0.75)]), ([S6, S3], [(0.25, 1.0)])], SEALED)


def cut(**offsets: int) -> StreamCut:
    """``cut(S0=5, S2=-1)`` by the module's segment names."""
    return StreamCut.from_mapping({globals()[name]: offset for name, offset in offsets.items()})


def random_topology(rng: random.Random, scales: int) -> Topology:
    """Random splits (at the middle of a segment) and merges (of two neighbours), with sealed lengths."""
    history = StreamHistory([initial_epoch(rng.randint(1, 3))])
    for _ in range(scales):
        active = list(history.active.segments)
        if len(active) > 1 and rng.random() < 0.5:
            i = rng.randrange(len(active) - 1)
            pair = active[i:i + 2]
            epoch = plan_scale(history, [s.id for s in pair], [(pair[0].key_range.start, pair[1].key_range.end)])
        else:
            one = rng.choice(active)
            middle = (one.key_range.start + one.key_range.end) / 2
            epoch = plan_scale(history, [one.id], [(one.key_range.start, middle), (middle, one.key_range.end)])
        history = StreamHistory([*history.epochs, epoch])
    topology = topology_of_history(history)
    lengths = {s.segment_id: rng.randint(1, 100) for e in topology.epochs for s in e
               if not topology.is_active(s.segment_id)}
    return Topology(topology.epochs, lengths)


def predecessors(topology: Topology, segment: SegmentRange) -> list[SegmentRange]:
    if segment.epoch == 0:
        return []
    return [s for s in topology.epochs[segment.epoch - 1] if s.overlaps(segment)]


class Reader:
    """A reader group reading a stream in order: a segment's successors start once all its predecessors end."""

    def __init__(self, topology: Topology, rng: random.Random) -> None:
        self.topology, self.rng = topology, rng
        self.reading: dict[SegmentRange, int] = {s: 0 for s in topology.epochs[0]}
        self.done: set[SegmentRange] = set()
        self.waiting: set[SegmentRange] = set()

    def step(self) -> None:
        segment = self.rng.choice(sorted(self.reading, key=lambda s: s.segment_id))
        length = self.topology.sealed_lengths.get(segment.segment_id)
        if length is None or self.reading[segment] < length and self.rng.random() < 0.5:
            self.reading[segment] += self.rng.randint(1, 10) if length is None else \
                self.rng.randint(1, length - self.reading[segment])
            return
        del self.reading[segment]
        self.done.add(segment)
        for successor in self.topology.successors(segment.segment_id):
            if all(p in self.done for p in predecessors(self.topology, successor)):
                self.waiting.discard(successor)
                self.reading[successor] = 0
            else:
                self.waiting.add(successor)

    def cut(self) -> StreamCut:
        offsets = {s.segment_id: o for s, o in self.reading.items()}
        offsets.update({s.segment_id: -1 for s in self.waiting})
        return StreamCut.from_mapping(offsets)


def topology_record(stream: str, topology: Topology, published_at: int = 1, deleted: bool = False) -> StreamTopology:
    """The record a controller would publish for ``topology``."""
    epochs = tuple(TopologyEpoch(i, i, tuple(TopologySegment(s.segment_id, s.start, s.end) for s in epoch))
                   for i, epoch in enumerate(topology.epochs))
    sealed = tuple(SealedSegment(k, v) for k, v in sorted(topology.sealed_lengths.items()))
    state = TopologyState.DELETED if deleted else TopologyState.ACTIVE
    return StreamTopology(stream, epochs, sealed, state, published_at)
