"""What the ``reclaim offloader`` service offloads, and which of its processes does it.

:func:`due` applies a stream's :class:`~reclaim.storage.metadata.OffloadPolicy` to its hot chunks as Pulsar
applies ``managedLedgerOffloadThresholdInBytes`` and ``…InSeconds``: walking from the newest chunk to the
oldest, a sealed chunk is due once the hot bytes walked so far (its own included) pass the byte threshold,
or once it is older than the age threshold. Every chunk older than a due one is due too.

:class:`StreamLeases` shares the streams among the service's processes through leases in the metadata store:
each live process heartbeats a member lease, and a stream goes to the member that rendezvous hashing ranks
first for it among the live members. Each member takes the streams it ranks first for and lets go of the
others, so a process that joins or dies moves only its share. A stream lease is a compare-and-set row with
an expiry: two processes never hold it at once, and one that stopped heartbeating loses it after
``ttl_s``. Safety never rests on the lease (every switch is a compare-and-set on the chunk's row); it keeps
two processes from uploading the same chunk twice.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from reclaim.storage.errors import MetadataConflictError
from reclaim.storage.metadata import LeaseRecord, MetadataStore, OffloadPolicy

logger = logging.getLogger(__name__)

MEMBER_PREFIX = "offloader/member/"
STREAM_PREFIX = "offloader/stream/"


@dataclass(frozen=True)
class HotChunk:
    """A chunk whose reads still go to its hot copy: its bytes, when it was last written, and whether it may be
    offloaded (sealed: not the last chunk of a segment that may still grow)."""

    name: str
    length: int
    modified_at: float
    sealed: bool


def due(policy: OffloadPolicy, hot: Sequence[HotChunk], now: float) -> list[str]:
    """The chunks of ``hot`` the policy offloads now, oldest first."""
    chosen: list[str] = []
    newer = 0
    for chunk in sorted(hot, key=lambda c: (c.modified_at, c.name), reverse=True):
        newer += chunk.length
        by_size = policy.after_bytes is not None and newer > policy.after_bytes
        by_age = policy.after_s is not None and now - chunk.modified_at >= policy.after_s
        if chunk.sealed and (by_size or by_age):
            chosen.append(chunk.name)
    return chosen[::-1]


def rank(member: str, stream: str) -> bytes:
    """Rendezvous hashing's weight of ``member`` for ``stream``: the member with the highest owns it."""
    return hashlib.sha256(f"{member}\0{stream}".encode("utf-8", errors="surrogatepass")).digest()


def owner_of(stream: str, members: Iterable[str]) -> str:
    """The member that rendezvous hashing gives ``stream`` (``members`` not empty)."""
    return max(members, key=lambda member: rank(member, stream))


def new_owner_id() -> str:
    """This process's name among the members: host, pid and a random part (a restarted pid is a new member)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class StreamLeases:
    """One process's leases on the streams it offloads (module docstring)."""

    def __init__(self, store: MetadataStore, owner: str, *, ttl_s: float = 60.0,
                 clock: Callable[[], float] = time.time) -> None:
        if not ttl_s > 0:
            raise ValueError(f"a lease lasts more than 0 s, got {ttl_s}")
        self.store = store
        self.owner = owner
        self.ttl_s = ttl_s
        self.clock = clock
        self.held: dict[str, LeaseRecord] = {}
        """Each stream this process holds, by stream, as last written."""
        self.member: LeaseRecord | None = None

    def members(self) -> list[str]:
        """Every member whose heartbeat has not expired, this one included once it has beaten."""
        now = self.clock()
        return [lease.owner for lease in self.store.leases(MEMBER_PREFIX) if lease.expires_at > now]

    def sweep(self, streams: Iterable[str]) -> int:
        """Remove the leases nobody will renew: members expired for a whole term (a process that died), and
        expired leases of streams not among ``streams`` (no policy and nothing to settle any more). How many."""
        now, work = self.clock(), set(streams)
        gone = [lease for lease in self.store.leases(MEMBER_PREFIX) if lease.expires_at + self.ttl_s <= now]
        gone += [lease for lease in self.store.leases(STREAM_PREFIX)
                 if lease.expires_at <= now and lease.name.removeprefix(STREAM_PREFIX) not in work]
        return sum(self._delete(lease) for lease in gone)

    def heartbeat(self) -> None:
        self.member = self._take(MEMBER_PREFIX + self.owner)

    def claim(self, streams: Iterable[str]) -> list[str]:
        """Heartbeat, then hold every stream of ``streams`` rendezvous hashing gives this member and let go of
        the rest. The streams held, in order."""
        streams = list(streams)
        self.heartbeat()
        self.sweep(streams)
        members = self.members() or [self.owner]
        if self.owner not in members:
            members.append(self.owner)
        wanted = {stream for stream in streams if owner_of(stream, members) == self.owner}
        for stream in sorted(set(self.held) - wanted):
            self.let_go(stream)
        for stream in sorted(wanted):
            lease = self._take(STREAM_PREFIX + stream)
            if lease is None:
                self.held.pop(stream, None)
            else:
                self.held[stream] = lease
        return sorted(self.held)

    def renew(self, stream: str) -> bool:
        """Extend the lease on ``stream``; False (and no longer held) when it was lost meanwhile."""
        lease = self._take(STREAM_PREFIX + stream, only_mine=True)
        if lease is None:
            self.held.pop(stream, None)
            logger.warning("offloader %s lost its lease on stream %s", self.owner, stream)
            return False
        self.held[stream] = lease
        return True

    def let_go(self, stream: str) -> None:
        lease = self.held.pop(stream, None)
        if lease is not None:
            self._delete(lease)

    def close(self) -> None:
        """Let go of every stream and the heartbeat, so the other members take them at once."""
        for stream in list(self.held):
            self.let_go(stream)
        if self.member is not None:
            self._delete(self.member)
            self.member = None

    def _take(self, name: str, *, only_mine: bool = False) -> LeaseRecord | None:
        """The lease ``name`` taken or renewed for ``ttl_s``: free, expired, or already this member's. None when
        another member holds it (or took it in a race)."""
        now = self.clock()
        try:
            with self.store.transaction() as txn:
                current = txn.get_lease(name)
                if current is None:
                    if only_mine:
                        return None
                    return txn.put_lease(LeaseRecord(name, self.owner, 1, now + self.ttl_s))
                if current.owner == self.owner:
                    return txn.put_lease(replace(current, expires_at=now + self.ttl_s))
                if only_mine or current.expires_at > now:
                    return None
                taken = txn.put_lease(replace(current, owner=self.owner, epoch=current.epoch + 1,
                                              expires_at=now + self.ttl_s))
            logger.info("offloader %s took lease %s from %s (expired)", self.owner, name, current.owner)
            return taken
        except MetadataConflictError:
            return None

    def _delete(self, lease: LeaseRecord) -> bool:
        """Remove ``lease`` if no one changed it since it was read."""
        try:
            with self.store.transaction() as txn:
                return txn.delete_lease(lease.name, expected_version=lease.version)
        except MetadataConflictError:
            return False
