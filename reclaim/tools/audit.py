"""``reclaim audit``: tier-2 listed against the metadata store, to prove no orphan chunk survives.

Two walks, each a page at a time, so memory stays bounded whatever the number of objects and rows:

1. every object of each binding (its listing), looked up in the metadata store one page of names per
   query: *live* (an active row holds this copy), *pending* (its row is inactive: phase 2 has it),
   *orphan* (no row claims it and it is older than the grace) or *recent* (no row claims it yet, but a
   writer may still be about to commit one: not a finding);
2. every chunk row in name order, the copies it names checked with one batched existence check per
   page and binding: an active row whose copy is gone is *missing*; an inactive row whose copy is gone
   and whose mark is older than the grace is *dangling* (phase 2 deletes the copy, then drops it from
   the row in the same batch, so such a row is a cleanup that was lost); a row naming a binding that is
   not configured (or a bucket or tier its binding no longer has) is dangling too.

Every finding is confirmed before it counts: an orphan's object is checked again after its row was
found absent, a missing or dangling row is read again after its object was found gone, so a worker
deleting while the audit runs produces no false finding.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from reclaim.deletion.mark import MarkError
from reclaim.exits import Unavailable
from reclaim.segments.backup import LAYOUT_PREFIX
from reclaim.segments.garbage import PreparedMark
from reclaim.segments.offload import REAP_MARGIN_S, abandon
from reclaim.storage.base import BaseChunkStorage, StoredObject
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import (
    APPLICATION,
    ChunkLocation,
    ChunkStorage,
    ChunkTags,
    WrittenAs,
    object_name,
    offloaded_copy_of,
)
from reclaim.storage.errors import ChunkNotFoundError, InvalidChunkNameError, MetadataError, StorageError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import OPEN_STATES, ChunkRecord, MarkRecord, MetadataStore
from reclaim.storage.s3 import S3ChunkStorage

log = logging.getLogger(__name__)

#: Rows read, and names looked up, per query.
PAGE = 1000
#: Default grace: an object younger than this with no row may be a write whose row is not committed yet.
GRACE_S = 3600.0


@dataclass
class Sample:
    """How many of something were found, and the first ``limit`` names."""

    limit: int = 20
    count: int = 0
    names: list[str] = field(default_factory=list)

    def add(self, name: str) -> None:
        self.count += 1
        if len(self.names) < self.limit:
            self.names.append(name)

    def __len__(self) -> int:
        return self.count

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "names": list(self.names)}


class ObjectState(enum.Enum):
    """What the metadata store says of one listed object."""

    LIVE = "live"
    PENDING = "pending"
    ORPHAN = "orphan"
    RECENT = "recent"


class GoneCopy(enum.Enum):
    """What a row whose copy on a binding has no object is."""

    MISSING = "missing"
    DANGLING = "dangling"
    CLEANING = "cleaning"


def object_state(row: ChunkRecord | None, binding: str, modified: float, now: float, grace_s: float,
                 copy: str | None = None) -> ObjectState:
    """Classify an object of ``binding`` last modified at ``modified`` by the chunk row of its name (for an
    offloaded copy's object, ``_offload/<copy>/<chunk>``: the row of its chunk, listing that very copy)."""
    if row is not None and any(loc.binding == binding and loc.copy == copy for loc in row.locations):
        return ObjectState.LIVE if row.active else ObjectState.PENDING
    return ObjectState.ORPHAN if now - modified >= grace_s else ObjectState.RECENT


def held_by_offloads(store: MetadataStore, binding: str, objects: Sequence[StoredObject],
                     now: float) -> tuple[list[StoredObject], list[StoredObject]]:
    """Of objects no row claims, the offloaded copies an offload still holds (on its way, or handed to phase 1:
    pending), and the rest. An unswitched offload past its deadline and the reap margin holds nothing: its
    copy is an orphan, which ``--repair`` hands to phase 1 as the reaper does."""
    parsed = {obj.name: offloaded_copy_of(obj.name) for obj in objects}
    chunks = {found[1] for found in parsed.values() if found is not None}
    if not chunks:
        return [], list(objects)
    offloads = {o.copy: o for o in store.offloads_of(chunks) if o.target.binding == binding}
    held: list[StoredObject] = []
    rest: list[StoredObject] = []
    for obj in objects:
        found = parsed[obj.name]
        offload = offloads.get(found[0]) if found is not None else None
        expired = offload is not None and offload.state in OPEN_STATES and now >= offload.deadline + REAP_MARGIN_S
        (held if offload is not None and not expired else rest).append(obj)
    return held, rest


def gone_copy(row: ChunkRecord, mark: MarkRecord | None, now: float, grace_s: float) -> GoneCopy:
    """Classify a row whose copy is gone: active is missing; inactive is dangling once its mark (when it has
    one on record) is older than the grace, and a cleanup phase 2 may still be finishing before that."""
    if row.active:
        return GoneCopy.MISSING
    if mark is not None and now - mark.created_at < grace_s:
        return GoneCopy.CLEANING
    return GoneCopy.DANGLING


def unreachable(location: ChunkLocation, bindings: Mapping[str, ChunkStorage]) -> str | None:
    """Why no configured binding holds ``location`` (a name for the report), or None when one does."""
    binding = bindings.get(location.binding)
    if binding is None:
        return location.binding
    if binding.bucket != location.bucket or binding.tier is not location.tier:
        return f"{location.binding} (bucket {location.bucket}, {location.tier.value})"
    return None


@dataclass
class BindingAudit:
    """One binding's objects and rows, by what the metadata store and the binding say of them."""

    binding: str
    limit: int = 20
    live: int = 0
    pending: int = 0
    recent: int = 0
    cleaning: int = 0
    orphans: Sample = field(init=False)
    missing: Sample = field(init=False)
    dangling: Sample = field(init=False)

    def __post_init__(self) -> None:
        self.orphans, self.missing, self.dangling = Sample(self.limit), Sample(self.limit), Sample(self.limit)

    @property
    def clean(self) -> bool:
        return not (self.orphans.count or self.missing.count or self.dangling.count)

    def count(self, state: ObjectState | GoneCopy, name: str) -> None:
        if state is ObjectState.LIVE:
            self.live += 1
        elif state is ObjectState.PENDING:
            self.pending += 1
        elif state is ObjectState.RECENT:
            self.recent += 1
        elif state is GoneCopy.CLEANING:
            self.cleaning += 1
        else:
            {ObjectState.ORPHAN: self.orphans, GoneCopy.MISSING: self.missing,
             GoneCopy.DANGLING: self.dangling}[state].add(name)

    def to_dict(self) -> dict[str, Any]:
        return {"live": self.live, "pending": self.pending, "recent": self.recent, "cleaning": self.cleaning,
                "orphans": self.orphans.to_dict(), "missing": self.missing.to_dict(),
                "dangling": self.dangling.to_dict(), "clean": self.clean}


@dataclass
class AuditReport:
    """Every audited binding, the rows naming a binding that is not configured (dangling), and the bindings
    the settings leave out (``not_configured``: each with what would configure it; not audited, no finding)."""

    grace_s: float
    bindings: list[BindingAudit]
    unconfigured: dict[str, Sample] = field(default_factory=dict)
    not_configured: dict[str, str] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return all(b.clean for b in self.bindings) and not self.unconfigured

    def totals(self) -> dict[str, int]:
        totals = {key: sum(getattr(b, key) for b in self.bindings) for key in ("live", "pending", "recent",
                                                                              "cleaning")}
        totals |= {key: sum(getattr(b, key).count for b in self.bindings) for key in ("orphans", "missing")}
        totals["dangling"] = sum(b.dangling.count for b in self.bindings) + sum(
            s.count for s in self.unconfigured.values())
        return totals

    def to_dict(self) -> dict[str, Any]:
        return {"clean": self.clean, "grace_s": self.grace_s,
                "bindings": {b.binding: b.to_dict() for b in self.bindings},
                "unconfigured": {name: s.to_dict() for name, s in self.unconfigured.items()},
                "not_configured": dict(self.not_configured), "totals": self.totals()}


@dataclass(frozen=True)
class AuditHooks:
    """What an audit tells its caller as it goes: pages listed, rows walked, orphans confirmed."""

    listed: Callable[[str, int], None] | None = None
    rows: Callable[[int], None] | None = None
    orphans: Callable[[BaseChunkStorage, Sequence[StoredObject]], None] | None = None


def auditable(bindings: StorageBindings, names: Iterable[str] | None = None) -> list[BaseChunkStorage]:
    """The bindings called ``names`` (default: all), each one that lists objects with their times."""
    chosen = []
    for name in bindings.names() if names is None else names:
        binding = bindings.get(name)
        if not isinstance(binding, BaseChunkStorage):
            raise Unavailable(f"storage binding {name!r} cannot be audited: it does not list its objects' times")
        chosen.append(binding)
    return chosen


def probe(bindings: Iterable[BaseChunkStorage]) -> None:
    """Prove each binding answers before anything is listed; else one line naming it and what was tried."""
    for binding in bindings:
        try:
            binding.check()
        except StorageError as exc:
            raise Unavailable(f"cannot audit storage binding {binding.name!r} ({_tried(binding)}): {exc}; "
                              "nothing was audited") from exc


def _tried(binding: BaseChunkStorage) -> str:
    if isinstance(binding, FileSystemChunkStorage):
        return f"checked its root {binding.root}"
    if isinstance(binding, S3ChunkStorage):
        try:
            endpoint = binding.client.meta.endpoint_url
        except Exception:  # noqa: BLE001 - only the message needs it; the check has failed already
            endpoint = "the configured endpoint"
        return f"HeadBucket {binding.bucket!r} at {endpoint}"
    return "its check"


def audit(store: MetadataStore, bindings: Sequence[BaseChunkStorage],
          configured: Iterable[ChunkStorage] | None = None, *, grace_s: float = GRACE_S, limit: int = 20,
          clock: Callable[[], float] = time.time, hooks: AuditHooks = AuditHooks()) -> AuditReport:
    """Audit ``bindings`` against ``store``; a row naming a location that none of the ``configured``
    bindings (default: ``bindings``) holds is dangling. Raises :class:`~reclaim.exits.Unavailable` when a
    binding or the store fails on the way: an audit is reported whole or not at all."""
    probe(bindings)
    report = AuditReport(grace_s, [BindingAudit(b.name, limit) for b in bindings])
    for binding, result in zip(bindings, report.bindings, strict=True):
        with _failures(binding.name, "listing its objects"):
            _audit_objects(store, binding, result, clock, grace_s, hooks)
    known = {b.name: b for b in (bindings if configured is None else configured)}
    with _failures(None, "walking the chunk rows"):
        _audit_rows(store, known, dict(zip(bindings, report.bindings, strict=True)), report, clock, grace_s,
                    hooks)
    return report


def audit_binding(store: MetadataStore, bindings: StorageBindings, name: str, *, grace_s: float = 0.0,
                  limit: int = 20) -> BindingAudit:
    """Audit the one binding ``name``: its objects, and the rows naming it. No grace by default: for a
    caller that knows no write or deletion is in flight (a test, the demo once its work is done)."""
    return audit(store, auditable(bindings, [name]), bindings, grace_s=grace_s, limit=limit).bindings[0]


@contextmanager
def _failures(binding: str | None, doing: str) -> Iterator[None]:
    """A storage or metadata failure in the middle of an audit, as one Unavailable line."""
    try:
        yield
    except MetadataError as exc:
        raise Unavailable(f"the metadata store failed while {doing}: {exc}; the audit is incomplete") from exc
    except StorageError as exc:
        raise Unavailable(f"storage binding {binding or exc.binding or '?'!r} failed while {doing}: {exc}; "
                          "the audit is incomplete") from exc


def _audit_objects(store: MetadataStore, binding: BaseChunkStorage, result: BindingAudit,
                   clock: Callable[[], float], grace_s: float, hooks: AuditHooks) -> None:
    for page in binding.iter_object_pages():
        objects = [obj for obj in page if not obj.name.startswith(LAYOUT_PREFIX)]
        copies = {obj.name: offloaded_copy_of(obj.name) or (None, obj.name) for obj in objects}
        rows = store.get_chunks({chunk for _, chunk in copies.values()}) if objects else {}
        now = clock()
        candidates: list[StoredObject] = []
        for obj in objects:
            copy, chunk = copies[obj.name]
            state = object_state(rows.get(chunk), binding.name, obj.modified, now, grace_s, copy)
            if state is ObjectState.ORPHAN:
                candidates.append(obj)
            else:
                result.count(state, obj.name)
        held, candidates = held_by_offloads(store, binding.name, candidates, now)
        for obj in held:
            result.count(ObjectState.PENDING, obj.name)
        orphans = _still_there(binding, candidates)
        for obj in orphans:
            result.count(ObjectState.ORPHAN, obj.name)
        if orphans and hooks.orphans is not None:
            hooks.orphans(binding, orphans)
        if hooks.listed is not None:
            hooks.listed(binding.name, len(page))


def _still_there(binding: BaseChunkStorage, objects: list[StoredObject]) -> list[StoredObject]:
    """The ``objects`` that exist now: one deleted (with its row) since the listing was no orphan.

    A name no binding could have written (not a valid chunk name) is kept: it is an orphan as listed.
    """
    if not objects:
        return []
    present = binding.exists_many([obj.name for obj in objects])
    return [obj for obj in objects if obj.name in present or not _valid(binding, obj.name)]


def _valid(binding: BaseChunkStorage, name: str) -> bool:
    try:
        binding.location(name)
    except InvalidChunkNameError:
        return False
    return True


def _audit_rows(store: MetadataStore, known: dict[str, ChunkStorage],
                audited: dict[BaseChunkStorage, BindingAudit], report: AuditReport, clock: Callable[[], float],
                grace_s: float, hooks: AuditHooks) -> None:
    limit = report.bindings[0].limit if report.bindings else 20
    by_name = {binding.name: binding for binding in audited}
    after = ""
    while rows := store.chunks_after(after, PAGE):
        after = rows[-1].name
        claimed: dict[str, list[ChunkRecord]] = {name: [] for name in by_name}
        for row in rows:
            for location in row.locations:
                elsewhere = unreachable(location, known)
                if elsewhere is not None:
                    report.unconfigured.setdefault(elsewhere, Sample(limit)).add(row.name)
                elif location.binding in claimed:
                    claimed[location.binding].append(row)
        for name, mine in claimed.items():
            if mine:
                binding = by_name[name]
                _check_copies(store, binding, mine, audited[binding], clock, grace_s)
        if hooks.rows is not None:
            hooks.rows(len(rows))


def copy_on(row: ChunkRecord, binding: str) -> str:
    """The object name ``row``'s copy on ``binding`` has there (its first, should it list two)."""
    return next(object_name(row.name, loc) for loc in row.locations if loc.binding == binding)


def _check_copies(store: MetadataStore, binding: BaseChunkStorage, rows: list[ChunkRecord],
                  result: BindingAudit, clock: Callable[[], float], grace_s: float) -> None:
    """Classify the rows of one page whose copy on ``binding`` is gone, each read again first."""
    objects = {row.name: copy_on(row, binding.name) for row in rows}
    present = binding.exists_many(list(objects.values()))
    gone = [row.name for row in rows if objects[row.name] not in present]
    if not gone:
        return
    # Read again: a row that phase 1 retired and phase 2 cleaned up since the page was read is no finding.
    current = store.get_chunks(gone)
    still = [current[name] for name in gone
             if name in current and any(loc.binding == binding.name for loc in current[name].locations)]
    mark_ids = {row.mark_id for row in still if not row.active and row.mark_id}
    marks = store.get_marks(mark_ids) if mark_ids else {}
    now = clock()
    for row in still:
        result.count(gone_copy(row, marks.get(row.mark_id) if row.mark_id else None, now, grace_s), row.name)


def orphan_chunk(location: ChunkLocation, size: int, tags: ChunkTags | None,
                 written_as: WrittenAs | None = None) -> ChunkRecord | None:
    """The chunk record phase 1 builds an orphan's pending delete from: owner, segment and epoch from the
    object's own ownership tags, which phase 2 checks again (there is no row). None without reclaim tags,
    or when the object was not written as this chunk (or before bindings stamped it): phase 2 refuses those."""
    if tags is None or tags.application != APPLICATION:
        return None
    if written_as is None or written_as.mismatch(location.binding, location.bucket, location.key):
        return None
    return ChunkRecord(name=location.key, segment=tags.segment, start_offset=0, length=size, tags=tags,
                       locations=(location,))


@dataclass
class RepairReport:
    """What ``--repair`` did with the orphans: sent through phase 1, left (no readable reclaim ownership
    tags, tags that do not name the object, or a name no binding addresses), or not confirmed by the broker."""

    limit: int = 20
    sent: Sample = field(init=False)
    unattributed: Sample = field(init=False)
    failed: Sample = field(init=False)

    def __post_init__(self) -> None:
        self.sent, self.unattributed, self.failed = Sample(self.limit), Sample(self.limit), Sample(self.limit)

    def to_dict(self) -> dict[str, Any]:
        return {"sent": self.sent.to_dict(), "unattributed": self.unattributed.to_dict(),
                "failed": self.failed.to_dict()}


def unconfirmed(prepare: Callable[[Sequence[ChunkRecord]], PreparedMark], chunks: Sequence[ChunkRecord]) -> set[str]:
    """Phase 1's publish of ``chunks`` (``prepare``: their pending deletes under one new mark, nothing in the
    store changed); the names of those whose records the broker did not confirm."""
    try:
        prepare(chunks)
    except MarkError as exc:
        return set(exc.failed_chunks)
    return set()


class OrphanRepair:
    """Hands orphans to phase 1 (``prepare``: publish their pending deletes, one mark per page) and never
    deletes anything itself: the worker deletes them after its ownership checks against their tags."""

    def __init__(self, prepare: Callable[..., PreparedMark], limit: int = 20,
                 on_sent: Callable[[str, str], None] | None = None, store: MetadataStore | None = None) -> None:
        self._prepare = prepare
        self._on_sent = on_sent
        self._store = store
        self.report = RepairReport(limit)

    def __call__(self, binding: BaseChunkStorage, orphans: Sequence[StoredObject]) -> None:
        chunks: list[ChunkRecord] = []
        for obj in self._reaped(binding, orphans):
            try:
                info = binding.get_info(obj.name)
                chunk = orphan_chunk(binding.location(obj.name), obj.size, info.tags, info.written_as)
            except ChunkNotFoundError:
                continue  # deleted since it was listed
            except InvalidChunkNameError:
                chunk = None
            offloaded = offloaded_copy_of(obj.name)
            if chunk is not None and offloaded is not None:
                # An offloaded copy's pending delete names its chunk and carries its uuid (its offload context).
                place = replace(chunk.locations[0], copy=offloaded[0])
                chunk = replace(chunk, name=offloaded[1], locations=(place,))
            if chunk is None:
                self.report.unattributed.add(obj.name)
            else:
                chunks.append(chunk)
        if not chunks:
            return
        failed = unconfirmed(self._prepare, chunks)
        self._sent(binding, chunks, failed)

    def _reaped(self, binding: BaseChunkStorage, orphans: Sequence[StoredObject]) -> list[StoredObject]:
        """The orphans left once each copy of an expired offload is handed over as the reaper does (its
        offload abandoned under its own mark: phase 2 deletes only such a copy under that mark)."""
        if self._store is None:
            return list(orphans)
        parsed = {obj.name: offloaded_copy_of(obj.name) for obj in orphans}
        chunks = {found[1] for found in parsed.values() if found is not None}
        offloads = {o.copy: o for o in self._store.offloads_of(chunks)} if chunks else {}
        rest: list[StoredObject] = []
        for obj in orphans:
            found = parsed[obj.name]
            offload = offloads.get(found[0]) if found is not None else None
            if offload is None or offload.target.binding != binding.name:
                rest.append(obj)
                continue
            try:
                handed = abandon(self._store, self._prepare, offload)
            except (MarkError, MetadataError) as exc:
                handed = False
                log.warning("audit --repair: the copy %s of an expired offload was not handed over: %s",
                            obj.name, exc)
            (self.report.sent if handed else self.report.failed).add(offload.chunk)
        return rest

    def _sent(self, binding: BaseChunkStorage, chunks: list[ChunkRecord], failed: set[str]) -> None:
        for chunk in chunks:
            if chunk.name in failed:
                self.report.failed.add(chunk.name)
                continue
            self.report.sent.add(chunk.name)
            if self._on_sent is not None:
                self._on_sent(binding.name, chunk.name)
