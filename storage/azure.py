"""Azure Blob Storage chunk binding via azure-storage-blob: one block blob per chunk, tags as blob metadata.

Like S3, Azure has no append for block blobs, so ``supports_append`` is False: a chunk takes one write at
offset 0 (``create`` uploads an empty blob, ``write`` replaces it conditionally on its ETag) or is made in
one upload by ``create_with_content``. Creation is exclusive through ``If-None-Match: *``. A chunk's
version is its blob's ETag, and ``delete_many`` sends it as ``If-Match``: a blob written again since it
was checked is kept (``CHANGED``). Deletes go in blob batches of at most :data:`MAX_BATCH` sub-requests.

Ownership tags travel as ``x-ms-meta-reclaim_*`` metadata: names must be C# identifiers (``writer-epoch``
is stored as ``reclaim_writer_epoch``) and values ASCII (percent-encoded). Azure's limits (1024-character
names of at most 254 segments, 8 KB of metadata) are checked before any request, and so is a segment
ending in '.', which the service does not keep as sent.

The client library is the ``azure`` extra: this module imports it only when a binding is built.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from reclaim.storage.base import MAX_PAGE_SIZE, BaseChunkStorage, LevelPage, ObjectPage, StoredObject
from reclaim.storage.chunks import ChunkInfo, ChunkListPage, ChunkTags, DeleteOutcome, DeleteResult, Tier, WrittenAs
from reclaim.storage.errors import (
    AccessDeniedError,
    ChunkAlreadyExistsError,
    ChunkNotFoundError,
    ChunkTagsTooLargeError,
    InvalidChunkNameError,
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
    from azure.storage.blob import BlobProperties, ContainerClient

#: Azure refuses a blob batch of more sub-requests than this.
MAX_BATCH = 256
#: Azure stores at most 8 KB of metadata (names and values) with a blob.
MAX_METADATA_BYTES = 8192
#: Azure refuses blob names of more path segments than this.
MAX_SEGMENTS = 254
_META_PREFIX = "reclaim_"
_MISSING_EXTRA = "the azure-tier2 binding needs the azure extra: pip install 'reclaim[azure]'"
_NOT_FOUND = {"BlobNotFound", "ResourceNotFound"}
_MISCONFIGURED = {"ContainerNotFound", "ContainerBeingDeleted", "ContainerDisabled", "AccountIsDisabled",
                  "InvalidResourceName"}
_DENIED = {"AuthenticationFailed", "AuthorizationFailure", "AuthorizationPermissionMismatch",
           "AuthorizationResourceTypeMismatch", "AuthorizationSourceIPMismatch", "AuthorizationProtocolMismatch",
           "InsufficientAccountPermissions", "InvalidAuthenticationInfo", "KeyBasedAuthenticationNotPermitted"}
_BUSY = {"ServerBusy", "OperationTimedOut", "InternalError", "IngressOverAccountLimit", "EgressOverAccountLimit"}
#: The client logs each request and response (headers, redacted) at INFO: under reclaim's name, and quiet
#: unless this logger is set to INFO, since a delete pass makes thousands of them.
HTTP_LOGGER = logging.getLogger(f"{__name__}.http")
HTTP_LOGGER.setLevel(logging.WARNING)
_SAS_SIGNATURE = re.compile(r"(?i)(sig=)[^&\s'\"]+")


class CredentialKind(enum.Enum):
    """Which credential a binding signs its requests with, in the order they are picked."""

    CONNECTION_STRING = "the connection string"
    ACCOUNT_KEY = "the account key"
    SAS_TOKEN = "the SAS token"
    DEFAULT = "DefaultAzureCredential (environment, workload identity, managed identity, Azure CLI login)"


@dataclass(frozen=True)
class AzureSettings:
    """Plain settings of an Azure binding: where it answers, the credentials and the container.

    ``account_url`` is ``https://ACCOUNT.blob.core.windows.net``, or an emulator's
    ``http://127.0.0.1:10000/devstoreaccount1``; a connection string may name the endpoint instead. The
    credential is the first of: the connection string, the account key (with ``account_name``, or the
    account read from ``account_url``), the SAS token, else ``DefaultAzureCredential``.
    """

    container: str
    account_url: str | None = None
    connection_string: str | None = field(default=None, repr=False)
    account_name: str | None = None
    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)
    key_prefix: str = ""
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_attempts: int = 3


def account_of(account_url: str) -> str | None:
    """The account an account URL names: its host's first label, or for an emulator (an IP address or
    ``localhost``) its first path segment."""
    parts = urlsplit(account_url)
    host = parts.hostname or ""
    if host == "localhost" or host.replace(".", "").isdigit() or ":" in host:
        return parts.path.strip("/").split("/")[0] or None
    return host.split(".")[0] or None


def credential_kind(settings: AzureSettings) -> CredentialKind:
    """The credential ``settings`` select; StorageMisconfiguredError when they name no endpoint, or an
    account key whose account is unknown. No I/O."""
    if settings.connection_string:
        return CredentialKind.CONNECTION_STRING
    if not settings.account_url:
        raise StorageMisconfiguredError("an Azure binding needs account_url or connection_string")
    if settings.account_key:
        if not (settings.account_name or account_of(settings.account_url)):
            raise StorageMisconfiguredError(f"an Azure account key needs account_name: {settings.account_url!r} "
                                            "names no account")
        return CredentialKind.ACCOUNT_KEY
    if settings.sas_token:
        return CredentialKind.SAS_TOKEN
    return CredentialKind.DEFAULT


def credential_source(settings: AzureSettings) -> str:
    """Which credential a binding with ``settings`` signs in with, in words (for ``config show``)."""
    kind = credential_kind(settings)
    if kind is CredentialKind.ACCOUNT_KEY:
        return f"{kind.value} of account {settings.account_name or account_of(settings.account_url or '')!r}"
    return str(kind.value)


def metadata_name(tag: str) -> str:
    """The metadata name of tag ``tag``, a C# identifier as Azure requires: ``writer-epoch`` is
    ``reclaim_writer_epoch``."""
    return _META_PREFIX + tag.replace("-", "_")


def tag_name(name: str) -> str | None:
    """The tag a metadata name holds, or None when it is not one of reclaim's."""
    lowered = name.lower()
    return lowered[len(_META_PREFIX):].replace("_", "-") if lowered.startswith(_META_PREFIX) else None


def encode_tags(tags: ChunkTags | None, written_as: WrittenAs, chunk: str) -> dict[str, str]:
    """The tags and what the object is written as, as blob metadata; ChunkTagsTooLargeError (before any
    request) over Azure's 8 KB."""
    if tags is None:
        return {}
    metadata = encode_metadata(tag_pairs(tags, written_as), metadata_name)
    size = sum(len(key) + len(value) for key, value in metadata.items())
    if size > MAX_METADATA_BYTES:
        raise ChunkTagsTooLargeError(f"ownership tags take {size} bytes of Azure blob metadata, over "
                                     f"{MAX_METADATA_BYTES}", chunk=chunk)
    return metadata


def classify_azure_error(status: int, code: str, message: str, name: str | None) -> StorageError:
    """The storage error for an HTTP status and Azure error code (also for a batch's sub-responses)."""
    if code in _MISCONFIGURED:
        return StorageMisconfiguredError(message, chunk=name)
    if code in _NOT_FOUND or status == 404:
        return ChunkNotFoundError(message, chunk=name)
    if code == "BlobAlreadyExists":
        return ChunkAlreadyExistsError(message, chunk=name)
    if code in _DENIED or status in (401, 403):
        return AccessDeniedError(message, chunk=name)
    if code == "InvalidRange" or status == 416:
        return InvalidOffsetError(message, chunk=name)
    if code in _BUSY or status in (408, 429) or status >= 500:
        return StorageUnavailableError(message, chunk=name)
    return StorageError(message, chunk=name)


def delete_outcome(name: str, status: int, code: str) -> DeleteResult:
    """What one sub-response of a batched delete says about chunk ``name``."""
    if 200 <= status < 300:
        return DeleteResult(name, DeleteOutcome.DELETED)
    if status == 412 or code == "ConditionNotMet":
        return DeleteResult(name, DeleteOutcome.CHANGED)
    if status == 404 and code not in _MISCONFIGURED:
        return DeleteResult(name, DeleteOutcome.ALREADY_GONE)
    error = classify_azure_error(status, code, f"Azure delete: {status} {code or '(no error code)'}", name)
    return DeleteResult(name, DeleteOutcome.FAILED, error)


def error_code(code: object) -> str:
    """An error code as Azure sends it: the library hands some back as ``StorageErrorCode`` members."""
    return str(getattr(code, "value", code) or "")


def secrets_of(settings: AzureSettings) -> tuple[str, ...]:
    """What must never appear in text: the key, the SAS token, the connection string and its secret parts."""
    parts = dict(part.split("=", 1) for part in (settings.connection_string or "").split(";") if "=" in part)
    found = (settings.account_key, settings.sas_token, settings.connection_string,
             parts.get("AccountKey"), parts.get("SharedAccessSignature"))
    return tuple(secret for secret in found if secret)


def scrub(text: str, secrets: Sequence[str | None] = ()) -> str:
    """``text``'s first line with SAS signatures and ``secrets`` taken out: fit for a log line."""
    line = _SAS_SIGNATURE.sub(r"\1REDACTED", text.strip().splitlines()[0] if text.strip() else "")
    for secret in secrets:
        if secret:
            line = line.replace(secret, "REDACTED")
    return line


def map_azure_error(exc: Exception, name: str | None, secrets: Sequence[str | None] = ()) -> StorageError:
    """Translate an azure-core exception into the storage error hierarchy, by type, status and error code."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        IncompleteReadError,
        ServiceRequestError,
        ServiceResponseError,
    )

    detail = scrub(str(getattr(exc, "message", None) or exc), secrets)
    if isinstance(exc, ServiceRequestError | ServiceResponseError | IncompleteReadError):
        return StorageUnavailableError(f"Azure endpoint unreachable ({type(exc).__name__}): {detail}", chunk=name)
    if isinstance(exc, ClientAuthenticationError) and exc.status_code is None:
        return AccessDeniedError(f"no Azure credential: {detail}", chunk=name)
    if isinstance(exc, HttpResponseError):
        status, code = int(exc.status_code or 0), error_code(getattr(exc, "error_code", None))
        return classify_azure_error(status, code, f"Azure {code or status}: {detail}", name)
    return StorageError(f"Azure client error ({type(exc).__name__}): {detail}", chunk=name)


def _status(exc: Exception) -> int:
    return int(getattr(exc, "status_code", None) or 0)


def _require_blob_client(binding: str) -> None:
    try:
        import azure.storage.blob  # noqa: F401 - only whether it imports
    except ImportError as exc:
        raise StorageMisconfiguredError(_MISSING_EXTRA, binding=binding) from exc


class AzureChunkStorage(BaseChunkStorage):
    """Chunks as block blobs in one container; no append, concat, truncate or read-only."""

    def __init__(self, settings: AzureSettings, *, name: str = "azure-tier2", tier: Tier = Tier.TIER2,
                 client: ContainerClient | None = None) -> None:
        super().__init__(name, tier)
        if client is None:
            _require_blob_client(name)
            try:
                credential_kind(settings)
            except StorageMisconfiguredError as exc:
                raise StorageMisconfiguredError(f"storage binding {name!r}: {exc}", binding=name) from None
        self._settings = settings
        self._clients: LazyClient[ContainerClient] = LazyClient(self._build_client, client)
        self._credential: Any = None
        self._secrets = secrets_of(settings)

    @property
    def bucket(self) -> str | None:
        return self._settings.container

    @property
    def settings(self) -> AzureSettings:
        """What the binding was built with (its credentials among them: never for a log line)."""
        return self._settings

    @property
    def supports_conditional_delete(self) -> bool:
        return True

    @property
    def client(self) -> ContainerClient:
        """The container's client, built on first use (Azure's clients are thread-safe)."""
        return self._clients.get()

    def _build_client(self) -> ContainerClient:
        from azure.storage.blob import ContainerClient, ExponentialRetry

        s = self._settings
        # The library's default waits 15 s before its first retry; a delete pass retries a failed chunk
        # itself, so the client's own retries stay short.
        options: dict[str, Any] = {
            "retry_policy": ExponentialRetry(initial_backoff=1, increment_base=2, random_jitter_range=1,
                                             retry_total=max(0, s.max_attempts - 1)),
            "connection_timeout": s.connect_timeout, "read_timeout": s.read_timeout, "logger": HTTP_LOGGER}
        kind = credential_kind(s)
        if kind is CredentialKind.CONNECTION_STRING:
            return ContainerClient.from_connection_string(s.connection_string or "", s.container, **options)
        credential: Any
        if kind is CredentialKind.ACCOUNT_KEY:
            credential = {"account_name": s.account_name or account_of(s.account_url or ""),
                          "account_key": s.account_key}
        elif kind is CredentialKind.SAS_TOKEN:
            credential = s.sas_token
        else:
            try:
                from azure.identity import DefaultAzureCredential
            except ImportError as exc:
                raise StorageMisconfiguredError(_MISSING_EXTRA, binding=self.name) from exc
            credential = self._credential = DefaultAzureCredential()
        return ContainerClient(s.account_url or "", s.container, credential=credential, **options)

    def object_key(self, name: str) -> str:
        """The blob name of chunk ``name``: the configured key prefix followed by the name."""
        return self._settings.key_prefix + name

    def _check_address(self, name: str) -> None:
        check_object_key("Azure", self._settings.key_prefix, name)
        key = self.object_key(name)
        if key.count("/") >= MAX_SEGMENTS:
            raise InvalidChunkNameError(f"Azure blob name has over {MAX_SEGMENTS} path segments", chunk=name[:64])
        if key.endswith(".") or "./" in key:
            # The service drops a segment's trailing dots from the URL: "a./b" would be the blob "a/b".
            raise InvalidChunkNameError("Azure blob name has a path segment ending in '.'", chunk=name[:64])

    def _error(self, exc: Exception, name: str | None) -> StorageError:
        return map_azure_error(exc, name, self._secrets)

    def _container_error(self, error: StorageError) -> StorageError:
        """``error`` with a message naming the binding and container, for a one-line report at start."""
        return type(error)(f"storage binding {self.name!r}, Azure container {self._settings.container!r}: {error}",
                           binding=self.name)

    def _do_check(self) -> None:
        """The key prefix, then a listing of one blob: a missing or refused container is a misconfiguration;
        denied or unreachable keep their class. A listing is what a container's SAS token may do, where Get
        Container Properties needs the account's key or a role."""
        from azure.core.exceptions import AzureError

        check_key_prefix("Azure", self._settings.key_prefix, self.name)
        try:
            next(iter(self.client.list_blobs(results_per_page=1).by_page()), None)
        except AzureError as exc:
            raise self._check_error(exc) from exc
        except StorageError as exc:  # no credential could be built
            raise self._container_error(exc) from exc

    def _check_error(self, exc: Exception) -> StorageError:
        """What a failed check means, in one line naming the binding and container."""
        error = self._error(exc, None)
        where = f"Azure container {self._settings.container!r} of storage binding {self.name!r}"
        if isinstance(error, ChunkNotFoundError | StorageMisconfiguredError) and _status(exc) == 404:
            return StorageMisconfiguredError(f"{where} does not exist", binding=self.name)
        if _status(exc) == 400 or isinstance(error, StorageMisconfiguredError):
            # A container name the service does not accept is the common cause: Azure holds names to
            # 3-63 lower-case letters, digits and '-'.
            return StorageMisconfiguredError(f"{where} is refused by the server ({error}): check the container "
                                             "name", binding=self.name)
        if isinstance(error, AccessDeniedError):
            return AccessDeniedError(f"storage binding {self.name!r}, Azure container {self._settings.container!r}: "
                                     f"access denied ({error}): check the account key, SAS token or role "
                                     "assignment", binding=self.name)
        return self._container_error(error)

    def _properties(self, name: str) -> BlobProperties:
        """The blob's properties; a missing container raises as a misconfiguration, not a missing chunk."""
        from azure.core.exceptions import AzureError

        try:
            return self.client.get_blob_client(self.object_key(name)).get_blob_properties()
        except AzureError as exc:
            raise self._error(exc, name) from exc

    def _do_exists(self, name: str) -> bool:
        try:
            self._properties(name)
        except ChunkNotFoundError:
            return False
        return True

    def _do_create(self, name: str, data: bytes, tags: ChunkTags | None) -> None:
        from azure.core.exceptions import AzureError, ResourceExistsError, ResourceModifiedError

        metadata = encode_tags(tags, self.written_as(name), name)
        try:
            self.client.get_blob_client(self.object_key(name)).upload_blob(data, metadata=metadata, overwrite=False)
        except (ResourceExistsError, ResourceModifiedError) as exc:
            raise ChunkAlreadyExistsError("chunk exists already", chunk=name) from exc
        except AzureError as exc:
            raise self._error(exc, name) from exc

    def _do_delete(self, name: str) -> None:
        from azure.core.exceptions import AzureError

        try:
            self.client.get_blob_client(self.object_key(name)).delete_blob(delete_snapshots="include")
        except AzureError as exc:
            raise self._error(exc, name) from exc

    def _do_delete_many(self, names: Sequence[str], versions: Mapping[str, str]) -> list[DeleteResult]:
        results: list[DeleteResult] = []
        for start in range(0, len(names), MAX_BATCH):
            results.extend(self._delete_batch(names[start:start + MAX_BATCH], versions))
        return results

    def _delete_batch(self, names: Sequence[str], versions: Mapping[str, str]) -> list[DeleteResult]:
        """One blob batch; each name's sub-response gives its outcome. A batch the server does not take
        fails every name with the batch's error."""
        from azure.core import MatchConditions
        from azure.core.exceptions import AzureError

        blobs: list[dict[str, Any]] = []
        for name in names:
            blob: dict[str, Any] = {"name": self.object_key(name), "delete_snapshots": "include"}
            if name in versions:
                blob |= {"etag": versions[name], "match_condition": MatchConditions.IfNotModified}
            blobs.append(blob)
        try:
            parts = list(self.client.delete_blobs(*blobs, raise_on_any_failure=False))
        except AzureError as exc:
            error = self._error(exc, None)
            return [DeleteResult(name, DeleteOutcome.FAILED, error) for name in names]
        results = [delete_outcome(name, part.status_code, error_code(part.headers.get("x-ms-error-code")))
                   for name, part in zip(names, parts, strict=False)]
        unanswered = StorageUnavailableError(f"Azure blob batch answered {len(parts)} of {len(names)} deletes")
        return results + [DeleteResult(name, DeleteOutcome.FAILED, unanswered) for name in names[len(parts):]]

    def _pages(self, prefix: str, page_size: int, continuation: str | None) -> Iterator[tuple[list[Any], str | None]]:
        """List pages of blobs whose chunk names start with ``prefix``, each with the next page's token."""
        from azure.core.exceptions import AzureError

        try:
            pager = self.client.list_blobs(name_starts_with=self.object_key(prefix),
                                           results_per_page=page_size).by_page(continuation_token=continuation)
            for page in pager:
                yield list(page), pager.continuation_token or None  # type: ignore[attr-defined]
        except AzureError as exc:
            raise self._error(exc, prefix or None) from exc

    def _do_list(self, prefix: str, page_size: int, continuation: str | None) -> ChunkListPage:
        cut = len(self._settings.key_prefix)
        blobs, token = next(self._pages(prefix, page_size, continuation), ([], None))
        return ChunkListPage(tuple(blob.name[cut:] for blob in blobs), token)

    def _do_object_pages(self, prefix: str, page_size: int) -> Iterator[ObjectPage]:
        """List Blobs pages, in name order, with each blob's size and last modification time."""
        cut = len(self._settings.key_prefix)
        for blobs, _ in self._pages(prefix, page_size, None):
            page = [StoredObject(blob.name[cut:], int(blob.size), blob.last_modified.timestamp()) for blob in blobs]
            if page:
                yield page

    def _do_level_pages(self, prefix: str) -> Iterator[LevelPage]:
        """List Blobs pages with delimiter '/': the blobs directly under the prefix, and its child prefixes."""
        from azure.core.exceptions import AzureError
        from azure.storage.blob import BlobPrefix

        cut = len(self._settings.key_prefix)
        try:
            pager = self.client.walk_blobs(name_starts_with=self.object_key(prefix), delimiter="/",
                                           results_per_page=MAX_PAGE_SIZE).by_page()
            for items in pager:
                objects: list[StoredObject] = []
                children: list[str] = []
                for item in items:
                    if isinstance(item, BlobPrefix):
                        children.append(item.name[cut:])
                    else:
                        objects.append(StoredObject(item.name[cut:], int(item.size), item.last_modified.timestamp()))
                if objects or children:
                    yield LevelPage(objects, children)
        except AzureError as exc:
            raise self._error(exc, prefix or None) from exc

    def _do_get_info(self, name: str) -> ChunkInfo:
        props = self._properties(name)
        tags, written_as = decode_metadata(props.metadata, tag_name)
        return ChunkInfo(name, int(props.size), tags, written_as=written_as,
                         modified_at=props.last_modified.timestamp() if props.last_modified else None,
                         version=props.etag)

    def _do_read(self, name: str, from_offset: int, length: int) -> bytes:
        from azure.core.exceptions import AzureError

        if length == 0:
            size = self._do_get_info(name).length
            if from_offset > size:
                raise InvalidOffsetError(f"read offset {from_offset} beyond chunk length {size}", chunk=name)
            return b""
        try:
            data = self.client.get_blob_client(self.object_key(name)).download_blob(
                offset=from_offset, length=length, max_concurrency=1).readall()
        except AzureError as exc:
            raise self._error(exc, name) from exc
        if len(data) != length:
            raise InvalidOffsetError(f"read {from_offset}+{length} beyond chunk end", chunk=name)
        return data

    def _do_write(self, name: str, offset: int, data: bytes) -> int:
        from azure.core import MatchConditions
        from azure.core.exceptions import AzureError, ResourceModifiedError

        props = self._properties(name)
        size = int(props.size)
        if offset != size:
            raise InvalidOffsetError(f"write offset {offset} is not chunk length {size}", chunk=name)
        if size:
            raise InvalidOffsetError("Azure chunks take a single write at offset 0 (no append)", chunk=name)
        if not data:
            return 0
        # If-Match makes the single write conditional on the blob still being the empty one we saw.
        try:
            self.client.get_blob_client(self.object_key(name)).upload_blob(
                data, overwrite=True, metadata=dict(props.metadata or {}), etag=props.etag,
                match_condition=MatchConditions.IfNotModified)
        except ResourceModifiedError as exc:
            raise InvalidOffsetError("chunk changed during the write", chunk=name) from exc
        except AzureError as exc:
            raise self._error(exc, name) from exc
        return len(data)

    def close(self) -> None:
        client = self._clients.take()
        if client is not None:
            client.close()
        credential, self._credential = self._credential, None
        if credential is not None:
            credential.close()
