"""``reclaim offloader``: the offload protocol (:mod:`reclaim.segments.offload`) run as a service.

Every pass, each process of the service heartbeats its member lease and holds the streams rendezvous hashing
gives it (:class:`~reclaim.segments.offload_policy.StreamLeases`): the streams with an offload policy, and
those with an offload row still to settle (one offloaded by hand, say). For each stream it holds, in order:

1. reap: the copies of cancelled offloads, and of unswitched ones past their deadline, to phase 1;
2. release: the hot copies switched longer ago than the policy's release lag, to phase 1;
3. resume: the offloads a crash or a failure left between their intent and their switch;
4. offload: the sealed hot chunks the policy makes due (:func:`~reclaim.segments.offload_policy.due`),
   oldest first, the stream's lease renewed between chunks (a lost lease stops the stream's pass).

A separate service, not a part of the worker: it reads the hot tier and writes tier-2, where the worker only
deletes; its passes are long uploads, where the worker's are short batches; and it scales by its own
leases, where the worker scales by the deletion topic's partitions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge

from reclaim.errors import ReclaimError
from reclaim.segments.offload import MarkPublisher, Offloader, OffloadReport, every_offload
from reclaim.segments.offload_policy import HotChunk, StreamLeases, due
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkLocation
from reclaim.storage.errors import MetadataConflictError, StorageError
from reclaim.storage.metadata import OPEN_STATES, MetadataStore, OffloadPolicy, OffloadRecord

log = logging.getLogger(__name__)

STREAMS_HELD = Gauge("reclaim_offload_streams_held", "Streams this offloader process holds the lease of")
DUE_BYTES = Gauge("reclaim_offload_due_bytes",
                  "Bytes of chunks the offload policies made due that this process's last pass left on their hot "
                  "binding (refused, failed, or a lost lease)")
LAST_PROGRESS = Gauge("reclaim_offload_last_progress_timestamp_seconds",
                      "When this offloader process last ended a pass or started on a chunk (set at its start)")
PASS_FAILURES = Counter("reclaim_offload_pass_failures_total",
                        "Offloader passes (or a stream's part of one) stopped by a failure of the store or a binding")


@dataclass
class PassReport:
    """What one pass did, over every stream it held."""

    streams: list[str] = field(default_factory=list)
    switched: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    reaped: list[str] = field(default_factory=list)
    due_left: int = 0
    """Bytes of due chunks still on their hot binding after the pass."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(stream, why) of each stream whose pass stopped on a failure."""

    def add(self, report: OffloadReport) -> None:
        self.switched.extend(report.switched)
        self.cancelled.extend(report.cancelled)


class OffloaderService:
    """One process of the offloader service over one metadata store (module docstring)."""

    def __init__(self, store: MetadataStore, bindings: StorageBindings, deletions: MarkPublisher,
                 leases: StreamLeases, *, default_release_after_s: float, clock: Callable[[], float] = time.time,
                 offloader: Callable[..., Offloader] = Offloader) -> None:
        self.store = store
        self.bindings = bindings
        self.deletions = deletions
        self.leases = leases
        self.default_release_after_s = default_release_after_s
        self.clock = clock
        self._make = offloader
        self._offloaders: dict[str, Offloader] = {}
        self._stop = threading.Event()
        """Set by :meth:`run`'s stop: a pass ends after the chunk in hand."""
        self._written: dict[str, float] = {}
        """When each sealed hot chunk was last written: a sealed chunk does not change, so it is looked up once."""

    def offloader(self, target: str) -> Offloader:
        """The offloader to ``target`` (a configured binding), made once."""
        if target not in self._offloaders:
            self._offloaders[target] = self._make(self.store, self.bindings, self.bindings.get(target),
                                                  self.deletions, clock=self.clock)
        return self._offloaders[target]

    def run(self, stop: threading.Event, every_s: float) -> None:
        """Passes every ``every_s`` until ``stop`` is set (a pass ends after its chunk in hand); then let go of
        every lease."""
        self._stop = stop
        LAST_PROGRESS.set(self.clock())
        try:
            while not stop.is_set():
                try:
                    self.tick()
                except (ReclaimError, StorageError, MetadataConflictError) as exc:
                    PASS_FAILURES.inc()
                    log.warning("offloader pass stopped, tried again in %g s: %s", every_s, exc)
                stop.wait(every_s)
        finally:
            self.leases.close()
            STREAMS_HELD.set(0)

    def tick(self) -> PassReport:
        """One pass over the streams this process holds."""
        policies = {policy.stream: policy for policy in self.store.offload_policies()}
        by_stream: dict[str, list[OffloadRecord]] = defaultdict(list)
        for offload in every_offload(self.store):
            by_stream[offload.tags.stream].append(offload)
        report = PassReport(streams=self.leases.claim(set(policies) | set(by_stream)))
        STREAMS_HELD.set(len(report.streams))
        for stream in report.streams:
            try:
                self._stream(stream, policies.get(stream), by_stream.get(stream, []), report)
            except (ReclaimError, StorageError, MetadataConflictError) as exc:
                PASS_FAILURES.inc()
                report.failed.append((stream, str(exc)))
                log.warning("offloader: stream %s's pass stopped, tried again next pass: %s", stream, exc)
        DUE_BYTES.set(report.due_left)
        LAST_PROGRESS.set(self.clock())
        if report.switched or report.released or report.reaped or report.cancelled:
            log.info("offloader pass: %d streams held, %d chunks switched, %d offloads cancelled, %d hot copies "
                     "released, %d copies reaped, %d due bytes left", len(report.streams), len(report.switched),
                     len(report.cancelled), len(report.released), len(report.reaped), report.due_left)
        return report

    def _stream(self, stream: str, policy: OffloadPolicy | None, offloads: Sequence[OffloadRecord],
                report: PassReport) -> None:
        if not self.leases.renew(stream):
            return
        any_offloader = self.offloader(policy.target) if policy is not None and policy.target in self.bindings \
            else self._settling_offloader(offloads)
        if any_offloader is not None:
            report.reaped.extend(any_offloader.reap(offloads))
            lag = self.default_release_after_s if policy is None else policy.release_after_s
            report.released.extend(any_offloader.release_due(offloads, release_after_s=lag))
        for target, open_ones in _open_by_target(offloads).items():
            if target in self.bindings:
                report.add(self.offloader(target).resume(open_ones))
        if policy is None:
            return
        if policy.target not in self.bindings:
            log.warning("offloader: stream %s's policy offloads to %r, a binding not configured here", stream,
                        policy.target)
            return
        hot = self.hot_chunks(stream, policy.target)
        chosen = due(policy, hot, self.clock())
        if not chosen:
            return
        offloaded = self.offloader(policy.target).offload_chunks(self._while_held(stream, chosen))
        report.add(offloaded)
        lengths = {chunk.name: chunk.length for chunk in hot}
        moved = set(offloaded.switched) | set(offloaded.cancelled)
        report.due_left += sum(lengths[name] for name in chosen if name not in moved)

    def _settling_offloader(self, offloads: Sequence[OffloadRecord]) -> Offloader | None:
        """An offloader to reap and release a stream with no usable policy: the one to its offloads' target."""
        for offload in offloads:
            if offload.target.binding in self.bindings:
                return self.offloader(offload.target.binding)
        return None

    def _while_held(self, stream: str, chunks: Iterable[str]) -> Iterator[str]:
        """``chunks``, the stream's lease renewed before each once a third of its term has passed; ends when the
        lease is lost, or the service is stopping."""
        renewed = self.clock()
        for chunk in chunks:
            if self._stop.is_set():
                return
            if self.clock() - renewed >= self.leases.ttl_s / 3:
                if not self.leases.renew(stream):
                    return
                renewed = self.clock()
            LAST_PROGRESS.set(self.clock())
            yield chunk

    def hot_chunks(self, stream: str, target: str) -> list[HotChunk]:
        """Every live chunk of ``stream`` that reads from one copy, not on ``target``; the last chunk of an
        unsealed segment counts as written now."""
        now = self.clock()
        hot: list[HotChunk] = []
        seen: set[str] = set()
        for name in self.store.segment_names(f"{stream}/"):
            segment = self.store.get_segment(name)
            if segment is None or segment.deleted:
                continue
            for chunk in self.store.list_chunks(name):
                if len(chunk.locations) != 1 or chunk.locations[0].binding == target:
                    continue
                sealed = segment.sealed or segment.last_chunk != chunk.name
                written = self._written_at(chunk.name, chunk.locations[0]) if sealed else now
                if written is None:
                    continue
                seen.add(chunk.name)
                hot.append(HotChunk(chunk.name, chunk.length, written, sealed))
        for gone in [name for name in self._written if name.startswith(f"{stream}/") and name not in seen]:
            del self._written[gone]
        return hot

    def _written_at(self, chunk: str, location: ChunkLocation) -> float | None:
        if chunk not in self._written:
            try:
                info = self.bindings.for_location(location).get_info(location.key)
            except (StorageError, KeyError) as exc:
                log.warning("offloader: chunk %s's hot copy not looked at: %s", chunk, exc)
                return None
            self._written[chunk] = self.clock() if info.modified_at is None else info.modified_at
        return self._written[chunk]


def _open_by_target(offloads: Sequence[OffloadRecord]) -> dict[str, list[OffloadRecord]]:
    found: dict[str, list[OffloadRecord]] = defaultdict(list)
    for offload in offloads:
        if offload.state in OPEN_STATES:
            found[offload.target.binding].append(offload)
    return found
