"""What the object-store bindings (S3, GCS, Azure) share: a chunk's object key under a key prefix, checked
before any request, and ownership tags as object metadata."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar
from urllib.parse import quote, unquote

from reclaim.storage.chunks import MAX_CHUNK_NAME_BYTES, ChunkTags, WrittenAs, validate_chunk_name
from reclaim.storage.errors import InvalidChunkNameError, StorageMisconfiguredError

ClientT = TypeVar("ClientT")

#: Every metadata key reclaim writes starts with it (``x-amz-meta-reclaim-*`` on S3).
META_PREFIX = "reclaim-"


def check_object_key(store: str, key_prefix: str, name: str) -> None:
    """Refuse (InvalidChunkNameError) a key ``key_prefix + name`` over the stores' 1024 bytes, or one whose
    prefix breaks the chunk-name rules where it joins the name; no I/O. ``store`` names the store ("S3")."""
    key = key_prefix + name
    size = len(key) if key.isascii() else len(key.encode("utf-8", errors="surrogatepass"))
    if size > MAX_CHUNK_NAME_BYTES:
        raise InvalidChunkNameError(f"{store} key (key prefix + chunk name) is {size} bytes, over "
                                    f"{MAX_CHUNK_NAME_BYTES}", chunk=name[:64])
    if key_prefix:
        # A prefix joins the name's first component, or brings components of its own: a server that stores
        # keys as paths (MinIO) refuses a component over 255 bytes, an empty one ('//') or '.'/'..'.
        try:
            validate_chunk_name(key)
        except InvalidChunkNameError as exc:
            raise InvalidChunkNameError(f"{store} key (key prefix {key_prefix!r} + chunk name) breaks the key "
                                        f"rules: {exc}", chunk=name[:64]) from exc


def check_key_prefix(store: str, key_prefix: str, binding: str) -> None:
    """A key prefix that no key can follow (an empty, '.' or '..' component) is a misconfiguration."""
    if not key_prefix:
        return
    try:
        validate_chunk_name(key_prefix + "x")
    except InvalidChunkNameError as exc:
        raise StorageMisconfiguredError(f"{store} key prefix {key_prefix!r} of storage binding {binding!r} makes "
                                        f"no valid key: {exc}", binding=binding) from exc


def tag_pairs(tags: ChunkTags, written_as: WrittenAs) -> dict[str, str]:
    """The ownership tags and what the object is written as, as one mapping of plain strings."""
    return tags.to_dict() | written_as.to_dict()


def encode_metadata(pairs: Mapping[str, str], key: Callable[[str], str] = lambda k: META_PREFIX + k
                    ) -> dict[str, str]:
    """``pairs`` as object metadata: each key through ``key``, each value percent-encoded (metadata values
    travel as HTTP headers, which hold ASCII only)."""
    return {key(name): quote(value, safe="") for name, value in pairs.items()}


def decode_metadata(metadata: Mapping[str, str] | None, key: Callable[[str], str | None] | None = None
                    ) -> tuple[ChunkTags | None, WrittenAs | None]:
    """The tags :func:`encode_metadata` wrote, read back; ``key`` maps a metadata key to a tag's name (None:
    not one of reclaim's). Missing or malformed tags are None."""
    if not metadata:
        return None, None
    raw: dict[str, str] = {}
    for name, value in metadata.items():
        tag = (name[len(META_PREFIX):] if name.startswith(META_PREFIX) else None) if key is None else key(name)
        if tag is not None:
            raw[tag] = unquote(value)
    return (ChunkTags.from_dict(raw), WrittenAs.from_dict(raw)) if raw else (None, None)


class LazyClient(Generic[ClientT]):
    """A store's client, built on first use and once only, though several threads ask at once (a batch's
    HEADs run on other threads than its deletes); the clients themselves are thread-safe."""

    def __init__(self, build: Callable[[], ClientT], client: ClientT | None = None) -> None:
        self._build = build
        self._client = client
        self._lock = threading.Lock()

    def get(self) -> ClientT:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._build()
                client = self._client
        return client

    def take(self) -> ClientT | None:
        """The client built so far, if any, forgotten: for its binding to close it."""
        with self._lock:
            client, self._client = self._client, None
        return client
