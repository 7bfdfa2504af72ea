"""GCS chunk binding on Google's own client (``google-cloud-storage``, the ``gcs`` extra): one object per chunk,
tags as custom metadata, deletes conditional on the generation that was checked.

Like S3, GCS has no append (``supports_append`` False): ``create`` writes an empty object, ``write`` replaces
it once, conditional on its generation, or ``create_with_content`` writes it whole. Creation is exclusive
(``ifGenerationMatch=0``). Every object write makes a new *generation*; ``get_info`` reports it as the
chunk's ``version``, and ``delete_many(..., versions=)`` deletes that generation only (``generation=N`` with
``ifGenerationMatch=N``): an object written again under the name since is kept (``CHANGED``).

Deletes go in batch requests of at most 100 (GCS's limit), each object's answer mapped on its own. An
endpoint that does not answer batches part by part (fake-gcs-server answers the client's batch with no parts)
is sent one request per object instead, in parallel, from then on; it is said once in the log.

Credentials come from Google's chain: a service-account key file when one is set, else Application
Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's login, the metadata server of GCE, GKE and
Cloud Run). An emulator endpoint is used only when set, with anonymous credentials unless a key file is set.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reclaim.storage.base import MAX_PAGE_SIZE, BaseChunkStorage, LevelPage, ObjectPage, StoredObject
from reclaim.storage.chunks import ChunkInfo, ChunkListPage, ChunkTags, DeleteOutcome, DeleteResult, Tier
from reclaim.storage.errors import (
    AccessDeniedError,
    ChunkAlreadyExistsError,
    ChunkNotFoundError,
    ChunkTagsTooLargeError,
    InvalidOffsetError,
    StorageError,
    StorageMisconfiguredError,
    StorageUnavailableError,
)
from reclaim.storage.object_keys import (
    LazyClient,
    check_key_prefix,
    check_object_key,
    decode_metadata,
    encode_metadata,
    tag_pairs,
)

if TYPE_CHECKING:
    from google.cloud.storage import Bucket, Client

logger = logging.getLogger(__name__)

#: GCS answers at most 100 calls in one batch request.
MAX_BATCH = 100
#: GCS keeps at most 8 KiB of custom metadata with an object.
MAX_METADATA_BYTES = 8192
#: Per-object deletes in flight at once, where the endpoint takes no batches.
DELETE_PARALLELISM = 16
#: How long a bucket found to exist is trusted before a missing object makes the binding ask again.
BUCKET_CHECK_TTL_S = 10.0
#: Google's own endpoint, where no other is set.
GCS_ENDPOINT = "https://storage.googleapis.com"
_EXTRA = "the gcs-tier2 binding needs the gcs extra: pip install 'reclaim[gcs]'"


@dataclass(frozen=True)
class GcsSettings:
    """Plain settings of a GCS binding: the bucket, and how to reach and sign in to it.

    No ``credentials_file`` is Application Default Credentials. ``endpoint`` is for an emulator or a private
    endpoint only (``http://127.0.0.1:4443``); without it the client talks to Google's own.
    """

    bucket: str
    project: str | None = None
    credentials_file: Path | None = None
    endpoint: str | None = None
    key_prefix: str = ""
    timeout: float = 30.0
    retry_deadline: float = 30.0
    """How long the client retries a request that was throttled (429), refused by an overloaded server (5xx)
    or cut off, with exponential backoff, before the binding reports it unavailable (to be retried later)."""


def credential_source(settings: GcsSettings) -> str:
    """Which credentials a binding with ``settings`` signs in with, in words (for ``config show``)."""
    if settings.credentials_file is not None:
        return f"service-account key file {settings.credentials_file}"
    if settings.endpoint is not None:
        return "anonymous (an emulator endpoint)"
    return "Application Default Credentials"


def delete_outcome(name: str, status: int, versioned: bool, message: str = "") -> DeleteResult:
    """What one object's answer to a delete means: 2xx deleted; 404 already gone (for a versioned delete:
    that generation is gone, the name may hold a newer one: ``CHANGED``); 412 ``CHANGED``; the rest failed,
    retryable when the server was throttled, overloaded or timed out."""
    if 200 <= status < 300:
        return DeleteResult(name, DeleteOutcome.DELETED)
    if status == 404:
        return DeleteResult(name, DeleteOutcome.CHANGED if versioned else DeleteOutcome.ALREADY_GONE)
    if status == 412:
        return DeleteResult(name, DeleteOutcome.CHANGED)
    return DeleteResult(name, DeleteOutcome.FAILED, classify_status(status, f"GCS {status}: {message}", name))


def classify_status(status: int, message: str, name: str | None) -> StorageError:
    """The storage error for an HTTP status of the GCS JSON API."""
    if status == 404:
        return ChunkNotFoundError(message, chunk=name)
    if status in (401, 403):
        return AccessDeniedError(message, chunk=name)
    if status == 416:
        return InvalidOffsetError(message, chunk=name)
    if status in (408, 429) or status >= 500:
        return StorageUnavailableError(message, chunk=name)
    return StorageError(message, chunk=name)


def map_gcs_error(exc: Exception, name: str | None) -> StorageError:
    """Translate what Google's client raises into the storage error hierarchy (by type and status)."""
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    if isinstance(exc, api.GoogleAPICallError) and exc.code is not None:
        return classify_status(int(exc.code), f"GCS {int(exc.code)}: {exc.message}", name)
    if isinstance(exc, api.RetryError):
        return StorageUnavailableError(f"GCS endpoint still failing after retries: {exc.cause or exc}", chunk=name)
    if isinstance(exc, auth.DefaultCredentialsError | auth.RefreshError):
        return AccessDeniedError(f"no usable Google credentials: {exc}", chunk=name)
    if isinstance(exc, auth.TransportError | ConnectionError | TimeoutError | OSError):
        return StorageUnavailableError(f"GCS endpoint unreachable: {exc}", chunk=name)
    if type(exc).__module__.startswith(("requests", "urllib3")):
        return StorageUnavailableError(f"GCS endpoint unreachable: {exc}", chunk=name)
    return StorageError(f"GCS client error: {exc}", chunk=name)


class GcsChunkStorage(BaseChunkStorage):
    """Chunks as objects in one GCS bucket; no append, concat, truncate or read-only."""

    def __init__(self, settings: GcsSettings, *, name: str = "gcs-tier2", tier: Tier = Tier.TIER2,
                 client: Client | None = None) -> None:
        super().__init__(name, tier)
        self._settings = settings
        self._clients: LazyClient[Client] = LazyClient(self._build_client, client)
        self._pool_lock = threading.Lock()
        self._batches = True  # until the endpoint answers a batch with no parts
        self._bucket_seen = 0.0
        self._pool: ThreadPoolExecutor | None = None

    @property
    def bucket(self) -> str | None:
        return self._settings.bucket

    @property
    def settings(self) -> GcsSettings:
        """What the binding was built with."""
        return self._settings

    @property
    def supports_conditional_delete(self) -> bool:
        return True

    @property
    def client(self) -> Client:
        """Google's storage client, built on first use (it is thread-safe)."""
        return self._clients.get()

    def _build_client(self) -> Client:
        try:
            from google.cloud import storage
        except ImportError as exc:
            raise StorageMisconfiguredError(_EXTRA, binding=self.name) from exc
        s = self._settings
        # Always named, so that neither STORAGE_EMULATOR_HOST nor API_ENDPOINT_OVERRIDE in the environment can
        # send the binding elsewhere (the client obeys both when no endpoint is given, the first one anonymously).
        options = {"api_endpoint": s.endpoint or GCS_ENDPOINT}
        try:
            if s.credentials_file is not None:
                from google.oauth2 import service_account

                try:
                    credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
                        str(s.credentials_file), scopes=storage.Client.SCOPE)
                except (OSError, ValueError) as exc:
                    raise StorageMisconfiguredError(f"storage binding {self.name!r}: cannot read the GCS "
                                                    f"service-account key file {s.credentials_file}: {exc}",
                                                    binding=self.name) from exc
                return storage.Client(project=s.project or credentials.project_id, credentials=credentials,
                                      client_options=options)
            if s.endpoint:
                from google.auth.credentials import AnonymousCredentials

                anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
                return storage.Client(project=s.project or "reclaim", credentials=anonymous, client_options=options)
            import google.auth

            found, project = google.auth.default(scopes=storage.Client.SCOPE)
            return storage.Client(project=s.project or project, credentials=found, client_options=options)
        except StorageError:
            raise
        except Exception as exc:
            raise map_gcs_error(exc, None) from exc

    @functools.cached_property
    def _bucket(self) -> Bucket:
        """The bucket's handle (no request): made once, as every delete of a batch goes through it."""
        return self.client.bucket(self._settings.bucket)

    @functools.cached_property
    def _retry(self) -> Any:
        from google.cloud.storage.retry import DEFAULT_RETRY

        return DEFAULT_RETRY.with_timeout(self._settings.retry_deadline)

    def object_key(self, name: str) -> str:
        """The GCS object name of chunk ``name``: the configured key prefix followed by the name."""
        return self._settings.key_prefix + name

    def _check_address(self, name: str) -> None:
        check_object_key("GCS", self._settings.key_prefix, name)

    def _call(self, name: str | None, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except StorageError:
            raise
        except Exception as exc:
            raise map_gcs_error(exc, name) from exc

    def _metadata(self, tags: ChunkTags | None, name: str) -> dict[str, str] | None:
        if tags is None:
            return None
        metadata = encode_metadata(tag_pairs(tags, self.written_as(name)))
        size = sum(len(key) + len(value) for key, value in metadata.items())
        if size > MAX_METADATA_BYTES:
            raise ChunkTagsTooLargeError(f"ownership tags take {size} bytes of GCS metadata, over "
                                         f"{MAX_METADATA_BYTES}", chunk=name)
        return metadata

    def _do_check(self) -> None:
        """The key prefix, then the bucket: missing is a misconfiguration, one line naming it."""
        check_key_prefix("GCS", self._settings.key_prefix, self.name)
        where = f"storage binding {self.name!r}, GCS bucket {self._settings.bucket!r}"
        client = self.client  # a missing extra or an unreadable key file says so itself, in one line
        try:
            client.get_bucket(self._settings.bucket, timeout=self._settings.timeout, retry=self._retry)
        except StorageError as exc:
            raise type(exc)(f"{where}: {exc}", binding=self.name) from exc
        except Exception as exc:
            error = map_gcs_error(exc, None)
            if isinstance(error, ChunkNotFoundError):
                raise StorageMisconfiguredError(f"GCS bucket {self._settings.bucket!r} of storage binding "
                                                f"{self.name!r} does not exist", binding=self.name) from exc
            raise type(error)(f"{where}: {error}", binding=self.name) from exc
        self._bucket_seen = time.monotonic()

    def _missing(self, name: str) -> ChunkNotFoundError:
        """A missing object's error, once the bucket is known to exist (a missing bucket raises instead)."""
        if time.monotonic() - self._bucket_seen > BUCKET_CHECK_TTL_S:
            self._do_check()
        return ChunkNotFoundError("no such object", chunk=name)

    def _blob(self, name: str) -> Any:
        """The object's current metadata (size, generation, custom metadata)."""
        blob = self._call(name, self._bucket.get_blob, self.object_key(name), timeout=self._settings.timeout,
                          retry=self._retry)
        if blob is None:
            raise self._missing(name)
        return blob

    def _do_exists(self, name: str) -> bool:
        try:
            self._blob(name)
        except ChunkNotFoundError:
            return False
        return True

    def _upload(self, name: str, data: bytes, metadata: dict[str, str] | None, generation: int,
                on_precondition: StorageError) -> None:
        from google.api_core.exceptions import PreconditionFailed

        blob = self._bucket.blob(self.object_key(name))
        blob.metadata = metadata
        try:
            blob.upload_from_string(data, content_type="application/octet-stream", if_generation_match=generation,
                                    timeout=self._settings.timeout, retry=self._retry)
        except PreconditionFailed as exc:
            raise on_precondition from exc
        except Exception as exc:
            raise map_gcs_error(exc, name) from exc

    def _do_create(self, name: str, data: bytes, tags: ChunkTags | None) -> None:
        self._upload(name, data, self._metadata(tags, name), 0,
                     ChunkAlreadyExistsError("chunk exists already", chunk=name))

    def _do_delete(self, name: str) -> None:
        from google.api_core.exceptions import NotFound

        try:
            self._bucket.delete_blob(self.object_key(name), timeout=self._settings.timeout, retry=self._retry)
        except NotFound as exc:
            raise self._missing(name) from exc
        except Exception as exc:
            raise map_gcs_error(exc, name) from exc

    def _do_delete_many(self, names: Sequence[str], versions: Mapping[str, str]) -> list[DeleteResult]:
        results: list[DeleteResult] = []
        for start in range(0, len(names), MAX_BATCH):
            part = names[start:start + MAX_BATCH]
            batched = self._delete_batch(part, versions) if self._batches else None
            results.extend(batched if batched is not None else self._delete_each(part, versions))
        return results

    def _delete_kwargs(self, name: str, versions: Mapping[str, str]) -> dict[str, Any]:
        version = versions.get(name)
        kwargs: dict[str, Any] = {"timeout": self._settings.timeout}
        if version is not None:
            kwargs["generation"] = kwargs["if_generation_match"] = int(version)
        return kwargs

    def _delete_batch(self, names: Sequence[str], versions: Mapping[str, str]) -> list[DeleteResult] | None:
        """One batch request deleting ``names``, one result each; None when the endpoint answered the batch
        without a part per object (it takes no batches: the caller deletes one by one)."""
        bucket = self._bucket
        try:
            batch = self.client.batch(raise_exception=False)
            with batch:
                for name in names:
                    bucket.delete_blob(self.object_key(name), **self._delete_kwargs(name, versions))
        except ValueError as exc:  # the answer was not a multipart one with a part per call
            self._batches = False
            logger.warning("storage %s: the GCS endpoint does not answer batch requests part by part (%s); "
                           "deleting one object per request from now on", self.name, exc)
            return None
        except Exception as exc:
            error = map_gcs_error(exc, None)
            return [DeleteResult(name, DeleteOutcome.FAILED, error) for name in names]
        return [delete_outcome(name, int(response.status_code), name in versions, _reason(response))
                for name, response in zip(names, batch._responses, strict=True)]

    def _delete_each(self, names: Sequence[str], versions: Mapping[str, str]) -> list[DeleteResult]:
        if self._pool is None:
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(DELETE_PARALLELISM, thread_name_prefix="reclaim-gcs-delete")
        return list(self._pool.map(lambda name: self._delete_one(name, versions), names))

    def _delete_one(self, name: str, versions: Mapping[str, str]) -> DeleteResult:
        from google.api_core.exceptions import GoogleAPICallError

        try:
            self._bucket.delete_blob(self.object_key(name), retry=self._retry, **self._delete_kwargs(name, versions))
        except GoogleAPICallError as exc:
            if exc.code is not None:
                return delete_outcome(name, int(exc.code), name in versions, str(exc.message))
            return DeleteResult(name, DeleteOutcome.FAILED, map_gcs_error(exc, name))
        except Exception as exc:
            return DeleteResult(name, DeleteOutcome.FAILED, map_gcs_error(exc, name))
        return DeleteResult(name, DeleteOutcome.DELETED)

    def _pages(self, key_prefix: str, page_size: int, token: str | None, delimiter: str | None = None
               ) -> Iterator[tuple[list[Any], list[str], str | None]]:
        """ListObjects pages under ``key_prefix`` from ``token``: (objects, child prefixes, next token)."""
        while True:
            iterator = self._call(None, self.client.list_blobs, self._settings.bucket, prefix=key_prefix,
                                  page_size=page_size, page_token=token, delimiter=delimiter,
                                  timeout=self._settings.timeout, retry=self._retry)
            try:
                page = self._call(None, next, iterator.pages, None)
            except ChunkNotFoundError:
                self._do_check()  # a listing's 404 is its bucket's: raises that it is missing
                raise
            if page is None:
                return
            blobs = list(page)
            token = iterator.next_page_token
            yield blobs, sorted(page.prefixes), token
            if token is None:
                return

    def _stored(self, blob: Any) -> StoredObject:
        updated = blob.updated
        return StoredObject(blob.name[len(self._settings.key_prefix):], int(blob.size or 0),
                            updated.timestamp() if updated is not None else 0.0)

    def _do_list(self, prefix: str, page_size: int, continuation: str | None) -> ChunkListPage:
        for blobs, _, token in self._pages(self.object_key(prefix), page_size, continuation):
            return ChunkListPage(tuple(self._stored(blob).name for blob in blobs), token)
        return ChunkListPage((), None)

    def _do_object_pages(self, prefix: str, page_size: int) -> Iterator[ObjectPage]:
        for blobs, _, _ in self._pages(self.object_key(prefix), page_size, None):
            if blobs:
                yield [self._stored(blob) for blob in blobs]

    def _do_level_pages(self, prefix: str) -> Iterator[LevelPage]:
        cut = len(self._settings.key_prefix)
        for blobs, prefixes, _ in self._pages(self.object_key(prefix), MAX_PAGE_SIZE, None, delimiter="/"):
            objects = [self._stored(blob) for blob in blobs]
            children = [child[cut:] for child in prefixes]
            if objects or children:
                yield LevelPage(objects, children)

    def _do_get_info(self, name: str) -> ChunkInfo:
        blob = self._blob(name)
        tags, written_as = decode_metadata(blob.metadata)
        updated = blob.updated
        return ChunkInfo(name, int(blob.size or 0), tags, written_as=written_as,
                         modified_at=updated.timestamp() if updated is not None else None,
                         version=str(blob.generation) if blob.generation is not None else None)

    def _do_read(self, name: str, from_offset: int, length: int) -> bytes:
        if length == 0:
            size = self._do_get_info(name).length
            if from_offset > size:
                raise InvalidOffsetError(f"read offset {from_offset} beyond chunk length {size}", chunk=name)
            return b""
        from google.api_core.exceptions import NotFound

        blob = self._bucket.blob(self.object_key(name))
        try:
            data: bytes = blob.download_as_bytes(start=from_offset, end=from_offset + length - 1,
                                                 timeout=self._settings.timeout, retry=self._retry)
        except NotFound as exc:
            raise self._missing(name) from exc
        except Exception as exc:
            raise map_gcs_error(exc, name) from exc
        if len(data) != length:
            raise InvalidOffsetError(f"read {from_offset}+{length} beyond chunk end", chunk=name)
        return data

    def _do_write(self, name: str, offset: int, data: bytes) -> int:
        blob = self._blob(name)
        size = int(blob.size or 0)
        if offset != size:
            raise InvalidOffsetError(f"write offset {offset} is not chunk length {size}", chunk=name)
        if size:
            raise InvalidOffsetError("GCS chunks take a single write at offset 0 (no append)", chunk=name)
        if not data:
            return 0
        # Conditional on the generation seen: the write replaces the empty object it checked, or nothing.
        self._upload(name, data, blob.metadata, int(blob.generation),
                     InvalidOffsetError("chunk changed during the write", chunk=name))
        return len(data)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self.__dict__.pop("_bucket", None)  # made from the client closed here
        client = self._clients.take()
        if client is not None:
            client.close()


def _reason(response: Any) -> str:
    """The error message of one part of a batch answer, where it carries one."""
    try:
        body = response.json()
    except (ValueError, AttributeError):
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("message", "")) if isinstance(error, dict) else ""


__all__ = ["GcsChunkStorage", "GcsSettings", "credential_source", "delete_outcome"]
