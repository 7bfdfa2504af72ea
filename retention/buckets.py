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

_HEADER = struct.Struct(">4sI")
_ENTRY = struct.Struct(">HqI")
_MAGIC = b"RCB1"
NO_CHANGE = -1


def bucket_of(stream: str, buckets: int) -> int:
    """The bucket of ``stream``: stable across processes and runs (CRC-32 of the name)."""
    return zlib.crc32(stream.encode()) % buckets


@dataclass(frozen=True)
class BucketEntry:
    """One stream's state in a bucket: when time alone may next change its decision, and its state bytes."""

    next_change_ms: int | None
    state: bytes


def encode_bucket(entries: Mapping[str, BucketEntry]) -> bytes:
    """The bucket's entries as bytes: a header, then per stream its name, next change and state."""
    parts = [_HEADER.pack(_MAGIC, len(entries))]
    for stream in sorted(entries):
        entry, name = entries[stream], stream.encode()
        change = NO_CHANGE if entry.next_change_ms is None else entry.next_change_ms
        parts += [_ENTRY.pack(len(name), change, len(entry.state)), name, entry.state]
    return b"".join(parts)


def decode_bucket(data: bytes) -> dict[str, BucketEntry]:
    """The entries :func:`encode_bucket` wrote; a truncated or foreign blob is an error, never half read."""
    magic, count = _HEADER.unpack_from(data, 0)
    if magic != _MAGIC:
        raise ValueError(f"not a retention state bucket (magic {magic!r})")
    entries: dict[str, BucketEntry] = {}
    at = _HEADER.size
    for _ in range(count):
        name_length, change, state_length = _ENTRY.unpack_from(data, at)
        at += _ENTRY.size
        name, state = data[at:at + name_length], data[at + name_length:at + name_length + state_length]
        at += name_length + state_length
        if len(state) != state_length:
            raise ValueError("retention state bucket is truncated")
        entries[name.decode()] = BucketEntry(None if change == NO_CHANGE else change, bytes(state))
    if at != len(data):
        raise ValueError("retention state bucket has trailing bytes")
    return entries
