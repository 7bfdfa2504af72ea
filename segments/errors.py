"""Typed errors of segment operations (ChunkedSegmentStorage), under ``ReclaimError``."""

from __future__ import annotations

from reclaim.errors import ReclaimError


class SegmentError(ReclaimError):
    """A segment operation was refused; ``segment`` names the segment concerned."""

    retryable: bool = False

    def __init__(self, message: str, *, segment: str) -> None:
        super().__init__(f"{message} (segment {segment!r})")
        self.segment = segment


class InvalidSegmentNameError(SegmentError):
    """The segment name cannot prefix chunk names (empty, traversal, control characters, too long)."""


class SegmentNotFoundError(SegmentError):
    """No such segment, or it has been deleted."""


class SegmentExistsError(SegmentError):
    """A live segment with this name exists already."""


class SegmentSealedError(SegmentError):
    """The segment is sealed: no writes, and it cannot be a concat target."""


class SegmentNotSealedError(SegmentError):
    """A concat source must be sealed first."""


class FencedError(SegmentError):
    """The caller's writer epoch is stale: a higher epoch has opened the segment since."""

    def __init__(self, message: str, *, segment: str, epoch: int, owner_epoch: int) -> None:
        super().__init__(message, segment=segment)
        self.epoch = epoch
        self.owner_epoch = owner_epoch


class BadOffsetError(SegmentError):
    """An offset outside what the operation allows (write not at the end, read outside the segment, ...)."""


class LayoutImportError(SegmentError):
    """An exported layout cannot be imported: malformed, chunks missing, or rows that exist already."""
