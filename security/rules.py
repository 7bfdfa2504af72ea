"""Who may sign which record (pure): the roles behind each record type that can lead to a deletion or a
truncation, and the stream's own policy behind a truncation."""

from __future__ import annotations

from reclaim.schemas.base import AvroRecord
from reclaim.schemas.ledger import PendingDeleteLedgerInfo
from reclaim.schemas.streams import (
    LimitType,
    RetentionPolicy,
    RetentionType,
    StreamConfig,
    StreamCutRecord,
    TruncationEvent,
    TruncationReason,
)
from reclaim.schemas.subscribers import SubscriberChange, SubscriberCut
from reclaim.schemas.topic_retention import TopicCut, TopicRetentionPolicy, TopicTruncation
from reclaim.schemas.topology import StreamTopology
from reclaim.security.signing import Rejection, Signer, Unauthenticated

SIGNERS: dict[type[AvroRecord], frozenset[str]] = {
    # Phase 1 runs in the controller's processes: the truncation applier, `streams`, the segment store.
    PendingDeleteLedgerInfo: frozenset({"controller"}),
    # The retention job decides TIME / SIZE / CONSUMPTION truncations; an admin decides MANUAL ones.
    TruncationEvent: frozenset({"retention-job", "admin"}),
    # Each subscriber signs its own cuts (its key names it); an admin may add or remove one too.
    SubscriberCut: frozenset({"subscriber"}),
    SubscriberChange: frozenset({"subscriber", "admin"}),
    StreamConfig: frozenset({"admin"}),
    # Plain Kafka topics: the admin sets a policy, the topic poller signs what it saw of the groups, the
    # retention job decides the DeleteRecords.
    TopicRetentionPolicy: frozenset({"admin"}),
    TopicCut: frozenset({"topic-retention"}),
    TopicTruncation: frozenset({"retention-job"}),
    StreamCutRecord: frozenset({"controller"}),
    StreamTopology: frozenset({"controller"}),
}
"""The roles whose keys may sign each record type."""


def signers_of(record_type: type[AvroRecord]) -> frozenset[str]:
    return SIGNERS[record_type]


def authorize_truncation(event: TruncationEvent, signer: Signer, policy: RetentionPolicy) -> Unauthenticated | None:
    """None when ``signer`` may truncate a stream whose stored policy is ``policy`` for ``event``'s reason.

    MANUAL needs an admin key. Any other reason needs the retention job's key and must be one the
    stream's policy gives: its own type, or under CONSUMPTION the fallback limit's type (PDP-47's
    min/max). A stream with no retention policy is only ever truncated by hand.
    """
    if event.reason is TruncationReason.MANUAL:
        if signer.role != "admin":
            return Unauthenticated(Rejection.WRONG_ROLE, f"a MANUAL truncation needs an admin key, signed by {signer}")
        return None
    if signer.role != "retention-job":
        return Unauthenticated(Rejection.WRONG_ROLE,
                               f"a {event.reason.name} truncation needs the retention job's key, signed by {signer}")
    if event.reason.name not in _reasons(policy):
        return Unauthenticated(Rejection.AGAINST_POLICY, f"a {event.reason.name} truncation does not match the "
                               f"stream's {policy.retention_type.name} retention policy")
    return None


def _reasons(policy: RetentionPolicy) -> frozenset[str]:
    if policy.retention_type is RetentionType.NONE:
        return frozenset()
    if policy.retention_type is RetentionType.CONSUMPTION:
        fallback = {policy.limit_type.name} if isinstance(policy.limit_type, LimitType) else set()
        return frozenset({"CONSUMPTION", *fallback})
    return frozenset({policy.retention_type.name})
