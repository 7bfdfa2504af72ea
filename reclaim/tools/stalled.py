"""``reclaim deletions stalled``: chunks retired long ago whose objects are still there.

Phase 1 retires a chunk (its row inactive, under a committed mark) once its pending delete is on the
deletion topic; phase 2 deletes the object, then the row. A retired row whose object is still there long
after its mark was committed lost its pending delete on the way: dead-lettered and purged, acked as in use
by a worker whose mark timeout was shorter than phase 1's commit deadline, or past the deletion topic's
retention before a worker read it. Nothing else would delete that object, and the audit counts it as
pending (phase 2 has it).

:func:`find_stalled` walks the chunk rows a page at a time (memory stays bounded) and yields those, each
confirmed: its object there (one batched existence check per page and binding), its row read again and
still retired under the same mark. :class:`Resend` hands them to phase 1 again: their pending deletes are
published under a new mark id (the rows are retired already, so nothing in the store changes), and the
worker deletes them after its usual checks; it never deletes anything itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reclaim.segments.garbage import PreparedMark
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.chunks import ChunkStorage
from reclaim.storage.metadata import ChunkRecord, MarkRecord, MetadataStore
from reclaim.tools.audit import PAGE, Sample, unconfirmed, unreachable

STALLED_AFTER_S = 86_400.0
"""How long after its mark a retired chunk's object may still be there before it counts as stalled: a
day, well past phase 2's retry tiers and an ordinary backlog."""


def stalled(row: ChunkRecord, mark: MarkRecord | None, now: float, older_than_s: float) -> bool:
    """Whether a retired ``row`` (its object still there) has waited too long: its mark older than
    ``older_than_s``, or not on record at all (phase 1 records it in the transaction that retires the row,
    so such a row was not retired by phase 1's usual path and nothing is coming for it)."""
    if row.active:
        return False
    return mark is None or now - mark.created_at >= older_than_s


def find_stalled(store: MetadataStore, bindings: Mapping[str, BaseChunkStorage], *,
                 older_than_s: float = STALLED_AFTER_S, clock: Callable[[], float] = time.time,
                 walked: Callable[[int], None] | None = None
                 ) -> Iterator[dict[str, list[ChunkRecord]]]:
    """The stalled rows of each page of rows, by binding name, confirmed (see the module's docstring); pages
    without one are skipped.

    A copy on a binding not in ``bindings`` (or whose bucket or tier it no longer has) is left out: the
    audit reports such rows."""
    known: Mapping[str, ChunkStorage] = bindings
    after = ""
    while rows := store.chunks_after(after, PAGE):
        after = rows[-1].name
        retired = [row for row in rows if not row.active]
        if retired:
            mark_ids = {row.mark_id for row in retired if row.mark_id}
            marks = store.get_marks(mark_ids) if mark_ids else {}
            now = clock()
            old = [row for row in retired if stalled(row, marks.get(row.mark_id) if row.mark_id else None, now,
                                                      older_than_s)]
            by_binding: dict[str, list[ChunkRecord]] = {}
            for row in old:
                for location in row.locations:
                    if unreachable(location, known) is None:
                        by_binding.setdefault(location.binding, []).append(row)
            found = {name: confirmed for name, candidates in by_binding.items()
                     if (confirmed := _confirmed(store, bindings[name], candidates))}
            if found:
                yield found
        if walked is not None:
            walked(len(rows))


def _confirmed(store: MetadataStore, binding: BaseChunkStorage, rows: list[ChunkRecord]) -> list[ChunkRecord]:
    """The ``rows`` whose object is there, read again after it was found: a row phase 2 cleaned up (or that
    changed) meanwhile is no finding."""
    present = binding.exists_many([row.name for row in rows])
    there = [row for row in rows if row.name in present]
    if not there:
        return []
    current = store.get_chunks(row.name for row in there)
    return [current[row.name] for row in there
            if row.name in current and not current[row.name].active and current[row.name].mark_id == row.mark_id]


@dataclass
class StalledReport:
    """What was found, per binding, and (resending) what was sent through phase 1 again or not confirmed."""

    older_than_s: float
    limit: int = 20
    rows: int = 0
    found: dict[str, Sample] = field(default_factory=dict)
    resent: Sample = field(init=False)
    failed: Sample = field(init=False)

    def __post_init__(self) -> None:
        self.resent, self.failed = Sample(self.limit), Sample(self.limit)

    def add(self, binding: str, rows: Sequence[ChunkRecord]) -> None:
        sample = self.found.setdefault(binding, Sample(self.limit))
        for row in rows:
            sample.add(row.name)

    @property
    def count(self) -> int:
        return sum(sample.count for sample in self.found.values())

    def to_dict(self) -> dict[str, Any]:
        return {"older_than_s": self.older_than_s, "rows_checked": self.rows, "stalled": self.count,
                "bindings": {name: sample.to_dict() for name, sample in self.found.items()},
                "resent": self.resent.to_dict(), "failed": self.failed.to_dict()}


class Resend:
    """Publishes stalled chunks' pending deletes again (phase 1's ``prepare``: one new mark per call, the
    records confirmed by the broker or a :class:`MarkError` naming those that were not)."""

    def __init__(self, prepare: Callable[[Sequence[ChunkRecord]], PreparedMark], report: StalledReport) -> None:
        self._prepare = prepare
        self._report = report

    def __call__(self, rows: Sequence[ChunkRecord]) -> None:
        failed = unconfirmed(self._prepare, rows)
        for row in rows:
            (self._report.failed if row.name in failed else self._report.resent).add(row.name)


def survey(store: MetadataStore, bindings: Mapping[str, BaseChunkStorage], report: StalledReport, *,
           resend: Resend | None = None, clock: Callable[[], float] = time.time,
           walked: Callable[[int], None] | None = None) -> StalledReport:
    """Fill ``report`` with the stalled rows of ``bindings`` (and resend each once, when asked)."""

    def count(rows: int) -> None:
        report.rows += rows
        if walked is not None:
            walked(rows)

    for found in find_stalled(store, bindings, older_than_s=report.older_than_s, clock=clock, walked=count):
        for name, rows in found.items():
            report.add(name, rows)
        if resend is not None:
            # Once a row, whatever number of its copies are there: its pending deletes name every copy.
            resend(list({row.name: row for rows in found.values() for row in rows}.values()))
    return report
