"""A stream's retention set (PDP-19): the cuts recorded every retention period, with their time and size."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from reclaim.retention.cuts import is_at_or_after
from reclaim.retention.topology import Topology
from reclaim.schemas.streams import StreamCut, StreamCutRecord


def recording_due(latest: StreamCutRecord | None, now_ms: int, period_ms: int) -> bool:
    """Whether a new cut should be recorded: the set is empty or its newest entry is older than a period."""
    return latest is None or now_ms - latest.recording_time > period_ms


@dataclass(frozen=True)
class RetentionSet:
    """Recorded cuts, oldest first; only ever grows at the newest end and shrinks at the oldest."""

    records: tuple[StreamCutRecord, ...] = ()

    @property
    def latest(self) -> StreamCutRecord | None:
        return self.records[-1] if self.records else None

    def add(self, record: StreamCutRecord) -> RetentionSet:
        """The set with ``record`` appended if it is newer than the newest entry (a replay adds nothing)."""
        latest = self.latest
        if latest is not None and record.recording_time <= latest.recording_time:
            return self
        return RetentionSet((*self.records, record))

    def newest_at_or_before(self, topology: Topology, cut: StreamCut) -> int | None:
        """Index of the newest entry that ``cut`` is at or after, or None."""
        for index in range(len(self.records) - 1, -1, -1):
            if is_at_or_after(topology, cut, self.records[index].cut):
                return index
        return None

    def drop_through(self, topology: Topology, truncated_at: StreamCut) -> RetentionSet:
        """The set without the entries at or before a truncation at ``truncated_at`` (they are gone)."""
        index = self.newest_at_or_before(topology, truncated_at)
        return self if index is None else RetentionSet(self.records[index + 1:])

    @classmethod
    def of(cls, records: Iterable[StreamCutRecord]) -> RetentionSet:
        result = cls()
        for record in sorted(records, key=lambda r: r.recording_time):
            result = result.add(record)
        return result
