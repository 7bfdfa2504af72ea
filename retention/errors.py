"""Typed errors of retention: cuts that do not fit a stream, cuts that go backwards, malformed policies."""

from __future__ import annotations

import enum

from reclaim.errors import ReclaimError


class RetentionError(ReclaimError):
    """A retention input was refused; ``str(error)`` is one line saying why."""


class CutProblem(enum.Enum):
    """Why a stream cut does not describe a position of its stream."""

    UNKNOWN_SEGMENT = "names a segment the stream never had"
    BAD_OFFSET = "has an offset below -1 or beyond its segment's length"
    OVERLAP = "has two reached segments whose key ranges overlap"
    UNREACHED_BEFORE_REACHED = "has an unreached (-1) segment that is older than a reached segment over its keys"
    GAP = "does not cover the whole key space [0, 1)"
    NOT_CAUSAL = "holds a segment together with one it descends from"


class InvalidCutError(RetentionError, ValueError):
    """A cut is not a valid position of its stream (PDP-19: a cut covers the whole key space)."""

    def __init__(self, problem: CutProblem, detail: str = "") -> None:
        self.problem = problem
        super().__init__(f"stream cut {problem.value}{': ' + detail if detail else ''}")


class CutBehindError(RetentionError, ValueError):
    """A cut is not at or after the one it must follow (a subscriber's previous cut, a stream's head)."""


class InvalidPolicyError(RetentionError, ValueError):
    """A retention policy whose type, limit type and limits do not fit together."""


class StaleGenerationError(RetentionError):
    """A subscriber change or cut carries an older generation than the subscriber's (PDP-47: a no-op)."""


class UnknownStreamError(RetentionError):
    """A cut for a stream the job knows no topology of: never created (or not yet published), or deleted."""


class UnknownSubscriberError(RetentionError):
    """A cut from a subscriber that is not subscribed: never added, or removed."""


class GenerationAheadError(RetentionError):
    """A cut at a generation newer than the subscriber's: the add of that generation was never seen."""


class WrongIncarnationError(RetentionError):
    """A record of another incarnation of its stream than the one the job knows (a stream deleted and created
    again under its name is another stream), or of none where one is required."""
