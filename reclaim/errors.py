"""The root of reclaim's exception hierarchy: every error reclaim raises on purpose is a :class:`ReclaimError`."""

from __future__ import annotations


class ReclaimError(Exception):
    """Root of every error reclaim raises on purpose.

    Other packages subclass it. The retry router reads ``retryable`` (never the message) to choose
    between a retry tier and the dead-letter topic.

    Attributes
    ----------
    retryable : bool
        True when the same operation may succeed later (a server was unreachable); False when
        retrying cannot help (the input itself is wrong).
    """

    retryable: bool = False
