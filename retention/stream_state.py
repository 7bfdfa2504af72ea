"""Everything the retention job keeps for one stream, and the one call that turns it into a truncation."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from reclaim.retention import cuts
from reclaim.retention.decision import decide
from reclaim.retention.errors import (
    CutBehindError,
    GenerationAheadError,
    InvalidCutError,
    InvalidPolicyError,
    RetentionError,
    StaleGenerationError,
    UnknownStreamError,
    UnknownSubscriberError,
    WrongIncarnationError,
)
from reclaim.retention.lower_bound import lower_bound
from reclaim.retention.policy import check_policy, limits_of
from reclaim.retention.registry import SubscriberRegistry
from reclaim.retention.retention_set import RetentionSet
from reclaim.retention.state_codec import dump_state, load_state
from reclaim.retention.topology import Topology
from reclaim.schemas.base import LONG_MAX
from reclaim.schemas.rejects import RejectKind
from reclaim.schemas.streams import (
    LimitType,
    StreamConfig,
    StreamCut,
    StreamCutRecord,
    TruncationEvent,
    TruncationReason,
)
from reclaim.schemas.subscribers import SubscriberChange, SubscriberChangeType, SubscriberCut
from reclaim.schemas.topology import StreamTopology, TopologyState

logger = logging.getLogger(__name__)

InputRecord = SubscriberChange | SubscriberCut | StreamConfig | StreamCutRecord | StreamTopology

_KINDS: dict[type[RetentionError], RejectKind] = {
    InvalidCutError: RejectKind.INVALID_CUT,
    CutBehindError: RejectKind.CUT_BEHIND,
    StaleGenerationError: RejectKind.STALE_GENERATION,
    UnknownSubscriberError: RejectKind.UNKNOWN_SUBSCRIBER,
    UnknownStreamError: RejectKind.UNKNOWN_STREAM,
    GenerationAheadError: RejectKind.GENERATION_AHEAD,
    InvalidPolicyError: RejectKind.INVALID_POLICY,
    WrongIncarnationError: RejectKind.WRONG_INCARNATION,
}


@dataclass(frozen=True)
class Rejection:
    """An input the state refused: which stream and subscriber, why (a kind and one line)."""

    stream: str
    subscriber: str | None
    kind: RejectKind
    reason: str


def topology_of(record: StreamTopology) -> Topology:
    """The retention view of a published topology."""
    epochs = [[(s.segment_id, s.key_start, s.key_end) for s in epoch.segments] for epoch in record.epochs]
    return Topology.of(epochs, {s.segment_id: s.length for s in record.sealed_lengths})


class StreamRetentionState:
    """One stream's retention state: topology, policy, subscribers and their cuts, retention set, last event.

    The job applies every input record of the stream in order with :meth:`apply`, then asks
    :meth:`decide`. Applying is idempotent: a re-delivered record is refused or changes nothing.
    """

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self._reset()

    def _reset(self) -> None:
        # Which incarnation of the stream this is (its topology says; None: not known yet, or a controller
        # of a version before incarnations). A stream created again under its name is another incarnation.
        self.incarnation: str | None = None
        self.topology: Topology | None = None
        self.topology_published_at = 0
        self.deleted = False
        self.config: StreamConfig | None = None
        self.registry = SubscriberRegistry()
        self.retention = RetentionSet()
        self.last_recorded: StreamCutRecord | None = None
        self.last_emitted: StreamCut | None = None
        # The last emitted cut was past a sealed segment's end, so the controller refused it: it is held
        # at that end now (last_emitted), and the held cut may be emitted although it equals it.
        self.last_emitted_refused = False

    def apply(self, record: InputRecord, now_ms: int, *, require_incarnation: bool = False,
              signed_by: str | None = None) -> Rejection | None:
        """Fold one input record into the state; a refused record changes nothing and says why.

        A record of another incarnation of the stream is refused (WRONG_INCARNATION); so is one that carries
        none (written before incarnations) once the state knows the stream's, with ``require_incarnation``
        (record authentication enforced), else it is taken as the current incarnation's. ``signed_by``: who
        signed the record, kept with a subscriber's cut so that a truncation at the bound names it.
        """
        subscriber = record.subscriber if isinstance(record, SubscriberChange | SubscriberCut) else None
        try:
            if not isinstance(record, StreamTopology):  # a topology says which incarnation is current
                self._check_incarnation(record, require_incarnation)
            self._apply(record, signed_by)
        except RetentionError as exc:
            kind = next(kind for error, kind in _KINDS.items() if isinstance(exc, error))
            return Rejection(self.stream, subscriber, kind, str(exc))
        return None

    def _apply(self, record: InputRecord, signed_by: str | None = None) -> None:
        if record.stream != self.stream:
            raise ValueError(f"record of stream {record.stream!r} applied to {self.stream!r}")
        if isinstance(record, StreamTopology):
            self._apply_topology(record)
        elif isinstance(record, StreamConfig):
            check_policy(record.policy)
            if self.config is None or record.updated_at >= self.config.updated_at:
                self.config = record
        elif isinstance(record, SubscriberChange):
            if record.change is SubscriberChangeType.ADD:
                self.registry.add(record.subscriber, record.generation)
            else:
                self.registry.remove(record.subscriber, record.generation)
        elif isinstance(record, SubscriberCut):
            self._apply_cut(record, signed_by)
        else:
            self._apply_recorded(record)

    def _check_incarnation(self, record: InputRecord, required: bool) -> None:
        """Refuse a record of another incarnation than the state's; learn the incarnation from the first
        record that names one while no topology has (its topology, when it comes, decides)."""
        if record.incarnation is None:
            if required and self.incarnation is not None:
                raise WrongIncarnationError(f"the record names no incarnation of stream {self.stream!r} (written "
                                            f"before incarnations); the stream is incarnation {self.incarnation}")
            return
        if self.incarnation is None:
            self.incarnation = record.incarnation
        elif record.incarnation != self.incarnation:
            raise WrongIncarnationError(f"the record is of incarnation {record.incarnation} of stream "
                                        f"{self.stream!r}, which is incarnation {self.incarnation} now")

    def _apply_topology(self, record: StreamTopology) -> None:
        another = record.incarnation is not None and self.incarnation not in (None, record.incarnation)
        # Published in the controller's order; an older one is a re-delivery of what is known already, or of
        # an incarnation that ended (replayed: refused, so that it cannot bring the old stream back).
        if record.published_at < self.topology_published_at:
            if another:
                raise WrongIncarnationError(f"topology of incarnation {record.incarnation} of stream {self.stream!r} "
                                            f"is older than incarnation {self.incarnation}'s")
            return
        if another or (self.deleted and record.state is not TopologyState.DELETED):
            self._reset()  # the stream was created again under the same name: nothing of the old one holds
        elif self.topology is not None and 0 < len(record.epochs) < len(self.topology.epochs):
            return  # a history only grows: a shorter one was read before a newer one was published
        if record.incarnation is not None:
            self.incarnation = record.incarnation
        self.topology_published_at = record.published_at
        self.deleted = record.state is TopologyState.DELETED
        if record.epochs:
            self.topology = topology_of(record)
            self._hold_to_sealed_lengths(self.topology)

    def _hold_to_sealed_lengths(self, topology: Topology) -> None:
        """Lower every kept cut's offsets past a sealed segment's end to that end.

        Only the controller knows an active segment's length, so a cut accepted while its segment was
        active may name an offset the segment never reaches once it seals. At the sealed end the cut
        says the same (the whole segment was read) and is a position of the stream again. Left past
        it, the job would decide a truncation the controller refuses, and the subscriber's every cut
        at the sealed end would be refused as CUT_BEHIND. A cut that arrives after the seal is
        checked against the sealed length instead (INVALID_CUT).
        """
        for subscriber in self.registry:
            held = None if subscriber.cut is None else cuts.held_to_sealed_lengths(topology, subscriber.cut)
            if held is not None and held != subscriber.cut:
                logger.info("subscriber cut held to sealed lengths stream=%s subscriber=%s cut=%s",
                            self.stream, subscriber.name, held.as_dict())
                self.registry.set_cut(subscriber.name, held)
        self.retention = RetentionSet(tuple(
            replace(record, cut=cuts.held_to_sealed_lengths(topology, record.cut))
            for record in self.retention.records))
        if self.last_recorded is not None:
            self.last_recorded = replace(self.last_recorded,
                                         cut=cuts.held_to_sealed_lengths(topology, self.last_recorded.cut))
        if self.last_emitted is not None:
            held = cuts.held_to_sealed_lengths(topology, self.last_emitted)
            if held != self.last_emitted:
                logger.info("last truncation was past a sealed end, held to it stream=%s cut=%s",
                            self.stream, held.as_dict())
                self.last_emitted, self.last_emitted_refused = held, True

    def _known_topology(self) -> Topology:
        """The stream's topology; a stream with none (never published, or deleted) is unknown."""
        if self.deleted:
            raise UnknownStreamError(f"stream {self.stream!r} was deleted")
        if self.topology is None:
            raise UnknownStreamError(f"stream {self.stream!r} is unknown: no topology of it was published")
        return self.topology

    def _apply_cut(self, record: SubscriberCut, signed_by: str | None) -> None:
        topology = self._known_topology()
        current = self.registry.subscribed(record.subscriber, record.generation)
        cuts.validate(topology, record.cut)
        cuts.check_advances(topology, record.cut, current.cut, "subscriber's previous cut")
        self.registry.set_cut(record.subscriber, record.cut, signed_by or "unsigned")

    def _apply_recorded(self, record: StreamCutRecord) -> None:
        """Append a recorded cut to the retention set. Recorded cuts only advance (PDP-19: each is the
        stream's tail when recorded): one behind the newest is refused; a replay changes nothing."""
        topology = self._known_topology()
        cuts.validate(topology, record.cut)
        previous = self.last_recorded
        if previous is not None and record.recording_time <= previous.recording_time:
            return  # a replay, or older than what was recorded since: the set only grows at its newest end
        if previous is not None:
            cuts.check_advances(topology, record.cut, previous.cut,
                                f"cut recorded before it (at {previous.recording_time})")
        self.last_recorded = record
        if self.last_emitted is not None and cuts.is_at_or_after(topology, self.last_emitted, record.cut):
            return  # at or before a truncation already decided: it would be dropped at once
        self.retention = self.retention.add(record)

    def lower_bound(self) -> StreamCut:
        """The subscribers' lower bound; empty while no subscribed subscriber has published a cut."""
        if self.topology is None:
            return StreamCut()
        return lower_bound(self.topology, self.registry.active_cuts())

    def decide(self, now_ms: int) -> TruncationEvent | None:
        """The truncation due now, only if its cut advances past the last one emitted (which it becomes)."""
        if self.topology is None or self.config is None or self.deleted:
            return None
        limits = limits_of(self.config.policy)
        if limits is None:
            return None
        bound = self.lower_bound() if limits.by_consumption else StreamCut()
        decision = decide(limits, self.retention, bound, now_ms, self.topology)
        cut = decision.cut
        if cut is None or (cut == self.last_emitted and not self.last_emitted_refused):
            return None
        if self.last_emitted is not None and not cuts.is_at_or_after(self.topology, cut, self.last_emitted):
            return None
        self.last_emitted, self.last_emitted_refused = cut, False
        self.retention = self.retention.drop_through(self.topology, cut)
        reason = TruncationReason.CONSUMPTION if decision.rule.at_bound else TruncationReason(limits.kind.value)
        logger.debug("truncation decided stream=%s rule=%s", self.stream, decision.rule.name)
        bound_by = tuple(f"{s.name} ({s.signed_by or 'unsigned'})" for s in self.registry.holding()) \
            if reason is TruncationReason.CONSUMPTION else ()
        return TruncationEvent(self.stream, cut, reason, now_ms, self.config.policy, self.incarnation, bound_by)

    def next_change_ms(self, now_ms: int) -> int | None:
        """The next instant after ``now_ms`` at which time alone may change the decision, or None.

        Only TIME limits depend on time: an entry's age crossing the min or the max limit. A
        stream whose decision cannot change without new input needs no timer.
        """
        if self.topology is None or self.config is None or self.deleted:
            return None
        limits = limits_of(self.config.policy)
        if limits is None or limits.kind is not LimitType.TIME:
            return None
        instants = [record.recording_time + keep for record in self.retention.records
                    for keep in (limits.min_keep, limits.max_keep, limits.max_keep + 1)
                    if keep < LONG_MAX and record.recording_time + keep > now_ms]
        return min(instants, default=None)

    def to_bytes(self) -> bytes:
        """The state as bytes, for the job's state store."""
        return dump_state(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> StreamRetentionState:
        return load_state(cls, data)
