"""Offset bookkeeping, pure: which offsets a completed batch may store and where partitions re-read.

A partition's stored offset moves past its records in offset order only while each one is final
(acked, or its reroute confirmed); at the first record that is not, the partition is sought back to
it, so it is read again. The stored offset therefore never passes a record whose outcome is not final.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from reclaim.consumers.batches import Partition


@dataclass(frozen=True)
class Position:
    """One record of a batch: where it was read and whether its outcome is final."""

    source: Partition
    offset: int
    final: bool


@dataclass(frozen=True)
class OffsetPlan:
    """``store``: the next offset to read per partition (Kafka's committed-offset convention);
    ``seek``: where to re-read partitions from; ``acked``: records the stored offsets cover."""

    store: Mapping[Partition, int] = field(default_factory=dict)
    seek: Mapping[Partition, int] = field(default_factory=dict)
    acked: int = 0


def plan_offsets(positions: Iterable[Position], dropped: AbstractSet[Partition] = frozenset()) -> OffsetPlan:
    """The offsets to store and the seeks for one completed batch.

    Records of ``dropped`` partitions (sought back already, to an earlier record that is not final)
    are neither stored nor sought again: they come again from that earlier seek.
    """
    by_partition: dict[Partition, list[Position]] = defaultdict(list)
    for position in positions:
        if position.source not in dropped:
            by_partition[position.source].append(position)
    store: dict[Partition, int] = {}
    seek: dict[Partition, int] = {}
    acked = 0
    for source, group in by_partition.items():
        group.sort(key=lambda p: p.offset)
        final = 0
        while final < len(group) and group[final].final:
            final += 1
        if final:
            store[source] = group[final - 1].offset + 1
        if final < len(group):
            seek[source] = group[final].offset
        acked += final
    return OffsetPlan(store, seek, acked)


def all_final(read: Iterable[tuple[Partition, int]]) -> OffsetPlan:
    """The plan of a batch whose records are all final, from where each was read: what
    :func:`plan_offsets` gives for it (each partition stored past its last record, nothing sought),
    without a :class:`Position` per record."""
    store: dict[Partition, int] = {}
    acked = 0
    for source, offset in read:
        acked += 1
        if offset >= store.get(source, 0):
            store[source] = offset + 1
    return OffsetPlan(store, {}, acked)
