"""Streams grouped into state buckets: which bucket a stream falls in, and a bucket's states as bytes.

Spark's stateful step costs about as much per group as reclaim's own work per stream, so the job
keeps its per-stream states in a fixed number of buckets: one group (and one state-store entry)
holds the states of many streams, each still kept, applied and decided on its own.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from reclaim.schemas.base import LONG_MAX, LONG_MIN

_HEADER = struct.Struct(">4sI")
#: Per stream: its name's length, whether it has a next change, the next change, its state's length.
_ENTRY = struct.Struct(">IBqI")
_MAGIC = b"RCB2"
#: The layout before RCB2 (still read: a job checkpointed by an earlier version resumes from it). Its
#: name length of 16 bits and its -1 for "no next change" could not hold every name and long.
_ENTRY_V1 = struct.Struct(">HqI")
_MAGIC_V1 = b"RCB1"
NO_CHANGE_V1 = -1
_UINT32_MAX = 2**32 - 1


def bucket_of(stream: str, buckets: int) -> int:
    """The bucket of ``stream``: stable across processes and runs (CRC-32 of the name)."""
    return zlib.crc32(stream.encode()) % buckets


@dataclass(frozen=True)
class BucketEntry:
    """One stream's state in a bucket: when time alone may next change its decision, and its state bytes."""

    next_change_ms: int | None
    state: bytes


def encode_bucket(entries: Mapping[str, BucketEntry]) -> bytes:
    """The bucket's entries as bytes: a header, then per stream its name, next change and state.

    Every next change a signed 64-bit long holds is kept as it is; None is kept apart from all of them.

    Raises
    ------
    ValueError
        For a next change beyond a long, or a name or state longer than 4 GiB (a bug of the caller's:
        the step keeps next changes within a long, and Spark no state that large).
    """
    parts = [_HEADER.pack(_MAGIC, len(entries))]
    for stream in sorted(entries):
        entry, name = entries[stream], stream.encode()
        change = entry.next_change_ms
        if change is not None and not LONG_MIN <= change <= LONG_MAX:
            raise ValueError(f"stream {stream!r}: next change {change} does not fit a long")
        if max(len(name), len(entry.state)) > _UINT32_MAX:
            raise ValueError(f"stream {stream[:64]!r}: name or state longer than {_UINT32_MAX} bytes")
        has_change = change is not None
        parts += [_ENTRY.pack(len(name), has_change, change if has_change else 0, len(entry.state)), name,
                  entry.state]
    return b"".join(parts)


def decode_bucket(data: bytes) -> dict[str, BucketEntry]:
    """The entries :func:`encode_bucket` wrote (or the RCB1 layout before it); a truncated or foreign blob is an
    error, never half read."""
    magic, count = _HEADER.unpack_from(data, 0)
    if magic not in (_MAGIC, _MAGIC_V1):
        raise ValueError(f"not a retention state bucket (magic {magic!r})")
    entries: dict[str, BucketEntry] = {}
    at = _HEADER.size
    for _ in range(count):
        if magic == _MAGIC:
            name_length, has_change, change, state_length = _ENTRY.unpack_from(data, at)
            if has_change not in (0, 1) or (not has_change and change):
                raise ValueError(f"retention state bucket entry at byte {at} is damaged")
            at += _ENTRY.size
            next_change = change if has_change else None
        else:
            name_length, change, state_length = _ENTRY_V1.unpack_from(data, at)
            at += _ENTRY_V1.size
            next_change = None if change == NO_CHANGE_V1 else change
        name, state = data[at:at + name_length], data[at + name_length:at + name_length + state_length]
        at += name_length + state_length
        if len(state) != state_length:
            raise ValueError("retention state bucket is truncated")
        entries[name.decode()] = BucketEntry(next_change, bytes(state))
    if at != len(data):
        raise ValueError("retention state bucket has trailing bytes")
    return entries
