"""Outcomes of one pending delete (phase 2) and the route each takes: ack, retry tier or DLQ."""

from __future__ import annotations

import enum
import traceback
from dataclasses import dataclass, field
from pathlib import PurePath


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
    UNAUTHENTICATED = "unauthenticated"

    # Members are singletons compared by identity: hashed by it too, in C, instead of Enum's hash of
    # the name in Python (every record's outcome is counted, once per batch, in a dict).
    __hash__ = object.__hash__


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
    # Not signed by the controller's key: never obeyed, kept for the operator to see who sent it.
    Outcome.UNAUTHENTICATED: Route.DLQ,
}


STACK_FRAMES = 4
"""Frames of a stack summary: the innermost ones, nearest where the error was raised."""
MAX_STACK_CHARS = 600


@dataclass(frozen=True)
class Verdict:
    """An outcome with the reason a log line, a counter label or a DLQ header can carry.

    ``stack`` is a short summary of where the exception behind the verdict was raised (see
    :func:`stack_summary`), empty when no exception was; verdicts compare without it.
    """

    outcome: Outcome
    reason: str = ""
    error_class: str = ""
    stack: str = field(default="", compare=False)

    @property
    def route(self) -> Route:
        return ROUTES[self.outcome]


def stack_summary(exc: BaseException, frames: int = STACK_FRAMES, limit: int = MAX_STACK_CHARS) -> str:
    """Where ``exc`` was raised, innermost frame first, then its cause's; empty when it was never raised.

    One line of at most ``limit`` characters, e.g.
    ``InvalidChunkNameError at storage/chunks.py:149 validate_chunk_name < storage/base.py:92 _valid``.
    """
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.__traceback__ is not None:
            # No source lines are read: the file, line and function say where.
            stack = traceback.StackSummary.extract(traceback.walk_tb(current.__traceback__), lookup_lines=False)
            where = [f"{_short(f.filename)}:{f.lineno} {f.name}" for f in reversed(stack[-frames:])]
            parts.append(f"{type(current).__name__} at {' < '.join(where)}")
        current = current.__cause__ or current.__context__
    summary = "; caused by ".join(parts)
    return summary if len(summary) <= limit else summary[: limit - 3] + "..."


def _short(filename: str) -> str:
    """The last two parts of a source path: enough to find the file, without the machine's layout."""
    return "/".join(PurePath(filename).parts[-2:])
