"""Typed errors of streams, scaling and transactions (the controller layer), under ``ReclaimError``."""

from __future__ import annotations

from reclaim.errors import ReclaimError


class StreamError(ReclaimError):
    """A stream, scale or transaction request was refused."""


class MalformedNameError(StreamError, ValueError):
    """A segment name, segment id, transaction id, scope or stream name is not in its canonical form."""


class StreamNotFoundError(StreamError):
    """No such stream (or it has been deleted)."""


class IncarnationMismatchError(StreamNotFoundError):
    """The stream of that name is another incarnation than the one named: the one named was deleted (and its
    name used again), so nothing done for it may touch this one."""


class StreamExistsError(StreamError):
    """A live stream with this name exists already."""


class StreamSealedError(StreamError):
    """The stream is sealed (or being sealed or deleted): no scale, no new or committed transactions."""


class StreamNotSealedError(StreamError):
    """A stream must be sealed before it is deleted."""


class InvalidScaleError(StreamError):
    """The scale request is malformed: unknown or inactive segments, or new ranges that do not cover them."""


class StreamBusyError(StreamError):
    """Another scale, commit, seal or delete of this stream is in progress (operations are linearised).

    Retryable: the pending operation finishes (or a restarted controller recovers it), then the
    request can be sent again. ``pending`` describes the operation in the way.
    """

    retryable = True

    def __init__(self, stream: str, pending: str) -> None:
        super().__init__(f"stream {stream!r} is busy with {pending}; retry later")
        self.stream = stream
        self.pending = pending


class TxnNotFoundError(StreamError):
    """No such transaction in the stream."""


class TxnStateError(StreamError):
    """The transaction is in a state that forbids the request (commit an aborted one, abort a committed one)."""
