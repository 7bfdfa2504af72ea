"""The one I/O step before a batch is judged: everything :func:`~reclaim.deletion.verify.judge` needs, fetched
in as few queries and requests as the stores allow.

One query for the batch's marks, then one for the chunk rows, and HEADs (in parallel) only for copies
that have no row. A record read again (a retry, a record an earlier owner may have handled) costs what a
first reading does: whether its copy was deleted before is told by its row, not by the object store
(:meth:`~reclaim.deletion.executor.DeletionExecutor.finish`). The result is a frozen
:class:`~reclaim.deletion.facts.Facts`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from reclaim.deletion.facts import CopyKey, Facts, Pending, lists_copy
from reclaim.deletion.retrying import RetryPolicy
from reclaim.stage_clock import stage
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkInfo, ChunkLocation, object_name
from reclaim.storage.errors import StorageError, StorageMisconfiguredError
from reclaim.storage.metadata import MetadataStore, OffloadRecord, OffloadState

#: HEAD requests one batch may have in flight at once.
LOOKUP_PARALLELISM = 8


class Prefetcher:
    """Gathers the :class:`Facts` of a batch from the metadata store and the storage bindings."""

    def __init__(self, store: MetadataStore, bindings: StorageBindings, retry: RetryPolicy) -> None:
        self._store = store
        self._bindings = bindings
        self._retry = retry
        self._lookups = ThreadPoolExecutor(LOOKUP_PARALLELISM, thread_name_prefix="reclaim-lookup")

    def gather(self, batch: Sequence[Pending], now_ms: int) -> Facts:
        with stage("facts"):
            return self._gather(batch, now_ms)

    def _gather(self, batch: Sequence[Pending], now_ms: int) -> Facts:
        places = self._places(batch)
        # Marks before rows: the two reads are not one snapshot, and phase 1 commits a mark and retires
        # its rows together. Read in this order, a mark seen committed has its rows seen retired; read
        # the other way, a commit between the reads shows a committed mark beside a row still active,
        # which judges a marked chunk "in use" and leaks it.
        mark_ids = {p.info.mark_id for p in batch if p.info.mark_id}
        marks = self._store.get_marks(mark_ids) if mark_ids else {}
        rows = self._store.get_chunks({p.info.chunk_name for p in batch})
        unlisted = [p for p in batch if not lists_copy(rows.get(p.info.chunk_name), p.info)]
        offloads = self._offloads(unlisted)
        # Of the copies a binding can place, those no row lists and no offload holds: their objects are looked
        # up (a chunk's with no row, an offloaded copy nothing names, a copy its row no longer lists).
        by_object = [p.copy for p in unlisted
                     if p.copy not in offloads and isinstance(places.get(p.copy), ChunkLocation)]
        return Facts(now_ms=now_ms, rows=rows, marks=marks, places=places, objects=self._objects(by_object),
                     offloads=offloads)

    def _offloads(self, unlisted: Sequence[Pending]) -> dict[CopyKey, OffloadRecord]:
        """The offloads behind copies their row does not list (one query, for those only): a copy an offload
        released or abandoned is deleted by its offload's mark, not its row's."""
        if not unlisted:
            return {}
        found: dict[CopyKey, OffloadRecord] = {}
        for offload in self._store.offloads_of({p.info.chunk_name for p in unlisted}):
            copy = offload.source if offload.state is OffloadState.RELEASED else offload.target
            found[(copy.binding, object_name(offload.chunk, copy))] = offload
        return found

    def _places(self, batch: Sequence[Pending]) -> dict[CopyKey, ChunkLocation | StorageError]:
        places: dict[CopyKey, ChunkLocation | StorageError] = {}
        locators: dict[str, Callable[[str], ChunkLocation] | None] = {}  # per binding name, looked up once
        for pending in batch:
            copy = pending.copy
            if copy in places:
                continue
            binding_name, chunk_name = copy
            if binding_name in locators:
                locate = locators[binding_name]
            else:
                locate = locators[binding_name] = (self._bindings.get(binding_name).location
                                                   if binding_name in self._bindings else None)
            if locate is None:
                places[copy] = StorageMisconfiguredError(f"no storage binding named {binding_name!r}",
                                                         binding=binding_name)
                continue
            try:
                places[copy] = locate(chunk_name)
            except StorageError as exc:
                places[copy] = exc
        return places

    def _objects(self, copies: Sequence[CopyKey]) -> dict[CopyKey, ChunkInfo | StorageError]:
        """What a HEAD says of each copy that has no row: its tags, or why there are none."""
        unique = list(dict.fromkeys(copies))
        return dict(zip(unique, self._lookups.map(self._head, unique), strict=True))

    def _head(self, copy: CopyKey) -> ChunkInfo | StorageError:
        binding = self._bindings.get(copy[0])
        try:
            info: ChunkInfo = self._retry.retrying(StorageError)(binding.get_info, copy[1])
        except StorageError as exc:
            return exc
        return info

    def close(self) -> None:
        self._lookups.shutdown()

