"""Outcomes of one pending delete (phase 2) and the route each takes: ack, retry tier or DLQ."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Outcome(enum.Enum):
    """What phase 2 concluded about one ``PendingDeleteLedgerInfo``."""

    DELETED = "deleted"
    ALREADY_GONE = "already-gone"
    IN_USE = "in-use"
    MARK_PENDING = "mark-pending"
    OWNERSHIP_MISMATCH = "ownership-mismatch"
    INVALID = "invalid"
    RETRYABLE = "retryable-error"
    FATAL = "fatal"
    UNDECODABLE = "undecodable"


class Route(enum.Enum):
    """Where a record goes once its outcome is known."""

    ACK = "ack"
    RETRY = "retry"
    DLQ = "dlq"


#: PIP-186's "treat as success" list (in use, mismatch, gone, invalid) is acked; only what may
#: succeed later is retried; what never will, but must not be forgotten, is dead-lettered.
ROUTES: dict[Outcome, Route] = {
    Outcome.DELETED: Route.ACK,
    Outcome.ALREADY_GONE: Route.ACK,
    Outcome.IN_USE: Route.ACK,
    Outcome.OWNERSHIP_MISMATCH: Route.ACK,
    Outcome.INVALID: Route.ACK,
    Outcome.MARK_PENDING: Route.RETRY,
    Outcome.RETRYABLE: Route.RETRY,
    Outcome.FATAL: Route.DLQ,
    Outcome.UNDECODABLE: Route.DLQ,
}


@dataclass(frozen=True)
class Verdict:
    """An outcome with the reason a log line, a counter label or a DLQ header can carry."""

    outcome: Outcome
    reason: str = ""
    error_class: str = ""

    @property
    def route(self) -> Route:
        return ROUTES[self.outcome]

