"""S3 chunk binding via boto3 for any S3-compatible endpoint: one object per chunk, tags as user metadata.

S3 has no append, so ``supports_append`` is False: a chunk takes one write at offset 0 (``create`` puts
an empty object, ``write`` replaces it conditionally on its ETag) or is made in one PUT by
``create_with_content``. Creation is exclusive through ``If-None-Match: *``. Ownership tags travel as
``x-amz-meta-reclaim-*`` headers with percent-encoded values (S3 metadata must be ASCII). AWS S3's limits
(1024-byte keys, 2 KB of user metadata) are checked before any request, and so are the key rules of
servers that store keys as paths (MinIO): with a key prefix, the whole key keeps the chunk-name rules.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, NoCredentialsError
from botocore.exceptions import ConnectionError as BotoConnectionError

from reclaim.storage import s3_delete
from reclaim.storage.base import MAX_PAGE_SIZE, BaseChunkStorage, LevelPage, ObjectPage, StoredObject
from reclaim.storage.chunks import (
    ChunkInfo,
    ChunkListPage,
    ChunkTags,
    DeleteOutcome,
    DeleteResult,
    Tier,
)
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
from reclaim.storage.s3_listing import present_keys

_HEADER_PREFIX = "x-amz-meta-"
#: AWS S3 stores at most 2 KB of user metadata with an object.
MAX_METADATA_BYTES = 2048
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_DENIED = {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled",
           "ExpiredToken", "InvalidToken", "AccountProblem", "InvalidSecurity"}
_THROTTLED = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed",
              "ServiceUnavailable", "InternalError", "503", "500", "RequestLimitExceeded"}
_NO_SUCH_BUCKET = "NoSuchBucket"
_MISCONFIGURED = {"NoSuchBucket", "InvalidBucketName", "PermanentRedirect", "AuthorizationHeaderMalformed"}
#: A key the server will never store: too long (AWS), or a path its disks cannot hold (MinIO).
_INVALID_KEY = {"KeyTooLongError", "XMinioInvalidObjectName", "XMinioInvalidResourceName"}


@dataclass(frozen=True)
class S3Settings:
    """Plain settings of an S3 binding: where it answers, the credentials and the bucket.

    No ``endpoint_url`` is AWS S3 in ``region``. No ``access_key`` is boto3's credential chain
    (``AWS_PROFILE`` and the shared files, ``AWS_ACCESS_KEY_ID`` with ``AWS_SESSION_TOKEN``, web
    identity, container and instance roles), resolved when the client is built.
    """

    bucket: str
    endpoint_url: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    region: str = "us-east-1"
    key_prefix: str = ""
    path_style: bool | None = None
    """None: path-style addressing for an ``endpoint_url`` (local and S3-compatible servers), virtual-hosted on AWS."""
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_attempts: int = 3
    conditional_deletes: bool = False
    """Delete a copy judged by its object only while its ETag is the one checked (``If-Match``): AWS S3 and Ceph
    honour it; MinIO ignores it and deletes, so it stays off for an endpoint unless the operator turns it on."""


def classify_s3_code(code: str, status: int, message: str, name: str | None) -> StorageError:
    """The storage error for an S3 error code and HTTP status (also for DeleteObjects' per-key errors)."""
    if code in _NOT_FOUND:
        return ChunkNotFoundError(message, chunk=name)
    if code in _DENIED:
        return AccessDeniedError(message, chunk=name)
    if code in _MISCONFIGURED:
        return StorageMisconfiguredError(message, chunk=name)
    if code in _INVALID_KEY:
        return InvalidChunkNameError(message, chunk=name)
    if code == "InvalidRange":
        return InvalidOffsetError(message, chunk=name)
    if code in _THROTTLED or status >= 500 or status == 429:
        return StorageUnavailableError(message, chunk=name)
    return StorageError(message, chunk=name)


def map_s3_error(exc: Exception, name: str | None) -> StorageError:
    """Translate a boto3/botocore exception into the storage error hierarchy (never by message text)."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        code = str(error.get("Code", ""))
        return classify_s3_code(code, status, f"S3 {code}: {error.get('Message', '')}", name)
    if isinstance(exc, NoCredentialsError):
        return AccessDeniedError(f"no S3 credentials: {exc}", chunk=name)
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return StorageUnavailableError(f"S3 endpoint unreachable: {exc}", chunk=name)
    return StorageError(f"S3 client error: {exc}", chunk=name)


class S3ChunkStorage(BaseChunkStorage):
    """Chunks as objects in one bucket; no append, concat, truncate or read-only."""

    def __init__(self, settings: S3Settings, *, name: str = "s3-tier2", tier: Tier = Tier.TIER2,
                 client: Any | None = None) -> None:
        super().__init__(name, tier)
        self._settings = settings
        self._clients: LazyClient[Any] = LazyClient(self._build_client, client)
        self._own_delete_body = False  # set when the client built here carries s3_delete's hooks

    @property
    def bucket(self) -> str | None:
        return self._settings.bucket

    @property
    def settings(self) -> S3Settings:
        """What the binding was built with (its credentials among them: never for a log line)."""
        return self._settings

    @property
    def supports_conditional_delete(self) -> bool:
        return self._settings.conditional_deletes

    @property
    def client(self) -> Any:
        """The boto3 S3 client, built on first use (boto3 clients are thread-safe)."""
        return self._clients.get()

    def _build_client(self) -> Any:
        s = self._settings
        path_style = s.endpoint_url is not None if s.path_style is None else s.path_style
        keys = {} if s.access_key is None else {
            "aws_access_key_id": s.access_key, "aws_secret_access_key": s.secret_key,
            "aws_session_token": s.session_token}
        # boto3's default session resolves the credential chain once per process: a session of its
        # own reads the environment (AWS_PROFILE, a refreshed token file) as it is now.
        client = boto3.client if keys else boto3.Session().client
        built = client(
            "s3", endpoint_url=s.endpoint_url, region_name=s.region, **keys,
            config=Config(
                s3={"addressing_style": "path" if path_style else "virtual"},
                connect_timeout=s.connect_timeout, read_timeout=s.read_timeout,
                retries={"mode": "standard", "max_attempts": s.max_attempts},
                # Every key and tag is checked against S3's limits before a request; botocore's own
                # walk over a 1000-key DeleteObjects was a fifth of its CPU for the call.
                parameter_validation=False,
            ),
        )
        self._own_delete_body = s3_delete.install(built)
        return built

    def object_key(self, name: str) -> str:
        """The S3 key of chunk ``name``: the configured key prefix followed by the name."""
        return self._settings.key_prefix + name

    def _check_address(self, name: str) -> None:
        check_object_key("S3", self._settings.key_prefix, name)

    def _call(self, name: str | None, method: str, *, on_precondition: StorageError | None = None,
              **kwargs: Any) -> Any:
        try:
            return getattr(self.client, method)(Bucket=self._settings.bucket, **kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if on_precondition is not None and code == "PreconditionFailed":
                raise on_precondition from exc
            raise map_s3_error(exc, name) from exc
        except BotoCoreError as exc:
            raise map_s3_error(exc, name) from exc

    def _metadata(self, tags: ChunkTags | None, name: str) -> dict[str, str]:
        """The tags and what the object is written as, as user metadata; refused before any request when
        over S3's 2 KB limit."""
        if tags is None:
            return {}
        metadata = encode_metadata(tag_pairs(tags, self.written_as(name)))
        # Counted as full ASCII header names plus values: the strictest reading of AWS's 2 KB rule.
        size = sum(len(_HEADER_PREFIX) + len(key) + len(value) for key, value in metadata.items())
        if size > MAX_METADATA_BYTES:
            raise ChunkTagsTooLargeError(f"ownership tags take {size} bytes of S3 user metadata, over "
                                         f"{MAX_METADATA_BYTES}", chunk=name)
        return metadata

    def _missing_bucket(self) -> StorageMisconfiguredError:
        return StorageMisconfiguredError(
            f"S3 bucket {self._settings.bucket!r} of storage binding {self.name!r} does not exist",
            binding=self.name)

    def _do_check(self) -> None:
        """The key prefix, then HeadBucket: a missing or refused bucket is a misconfiguration; denied or
        unreachable keep their class."""
        check_key_prefix("S3", self._settings.key_prefix, self.name)
        try:
            self.client.head_bucket(Bucket=self._settings.bucket)
        except ClientError as exc:
            raise self._head_bucket_error(exc) from exc
        except BotoCoreError as exc:
            raise self._bucket_error(map_s3_error(exc, None)) from exc

    def _head_bucket_error(self, exc: ClientError) -> StorageError:
        """What a failed HeadBucket means; its answer has no body, so the status says it."""
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if status == 404 or exc.response.get("Error", {}).get("Code") == _NO_SUCH_BUCKET:
            return self._missing_bucket()
        if status == 400:
            # A bucket name the server does not accept is the common cause (MinIO, like AWS, holds
            # names to 3-63 lower-case letters, digits, '.' and '-'); moto takes any name.
            return StorageMisconfiguredError(
                f"S3 bucket {self._settings.bucket!r} of storage binding {self.name!r} is refused by the "
                "server (HeadBucket: 400 Bad Request): check the bucket name", binding=self.name)
        if status == 403:
            return AccessDeniedError(
                f"storage binding {self.name!r}, S3 bucket {self._settings.bucket!r}: access denied "
                "(HeadBucket: 403 Forbidden): check the access key, the secret key and the bucket's policy",
                binding=self.name)
        return self._bucket_error(map_s3_error(exc, None))

    def _bucket_error(self, error: StorageError) -> StorageError:
        """``error`` with a message naming the binding and bucket, for a one-line report at start."""
        return type(error)(f"storage binding {self.name!r}, S3 bucket {self._settings.bucket!r}: {error}",
                           binding=self.name)

    def _head(self, name: str) -> dict[str, Any]:
        """HeadObject; its bare 404 is told apart into a missing chunk or a missing bucket."""
        try:
            result: dict[str, Any] = self.client.head_object(Bucket=self._settings.bucket,
                                                             Key=self.object_key(name))
        except ClientError as exc:
            raise self._head_error(exc, name) from exc
        except BotoCoreError as exc:
            raise map_s3_error(exc, name) from exc
        return result

    def _head_error(self, exc: ClientError, name: str) -> StorageError:
        # A HEAD answer has no body, so a 404 says neither NoSuchKey nor NoSuchBucket; MinIO names the code
        # in a header, other servers do not, and then only HeadBucket can tell the two apart.
        headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        code = str(headers.get("x-minio-error-code") or exc.response.get("Error", {}).get("Code", ""))
        if code == _NO_SUCH_BUCKET:
            return self._missing_bucket()
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        error = classify_s3_code(code, status, f"S3 {code}: {exc.response.get('Error', {}).get('Message', '')}",
                                 name)
        if (isinstance(error, ChunkNotFoundError) and code != "NoSuchKey") or (status == 400 and code == "400"):
            self._do_check()  # a bare 404 or 400 may be the bucket's: raises if so
        return error

    def _do_exists(self, name: str) -> bool:
        try:
            self._head(name)
        except ChunkNotFoundError:
            return False
        return True

    def _do_create(self, name: str, data: bytes, tags: ChunkTags | None) -> None:
        exists = ChunkAlreadyExistsError("chunk exists already", chunk=name)
        self._call(name, "put_object", Key=self.object_key(name), Body=data, Metadata=self._metadata(tags, name),
                   IfNoneMatch="*", on_precondition=exists)

    def _do_delete(self, name: str) -> None:
        self._head(name)
        self._call(name, "delete_object", Key=self.object_key(name))

    def _delete_batch(self, names: Sequence[str]) -> list[DeleteResult]:
        by_key = {self.object_key(name): name for name in names}
        try:
            response = self._delete_objects(list(by_key))
        except StorageError as exc:
            return [DeleteResult(name, DeleteOutcome.FAILED, exc) for name in names]
        results: dict[str, DeleteResult] = {}
        for item in response.get("Errors", []):
            name = by_key.get(item.get("Key", ""))
            if name is None:
                continue
            if item.get("Code") in _NOT_FOUND:
                results[name] = DeleteResult(name, DeleteOutcome.ALREADY_GONE)
                continue
            code = str(item.get("Code", ""))
            error = classify_s3_code(code, 0, f"S3 {code}: {item.get('Message', '')}", name)
            results[name] = DeleteResult(name, DeleteOutcome.FAILED, error)
        return [results.get(name, DeleteResult(name, DeleteOutcome.DELETED)) for name in names]

    def _delete_objects(self, keys: list[str]) -> Any:
        """One ``DeleteObjects`` in Quiet mode: the response lists only the keys that failed, which keeps a
        1000-key reply small. A client built here gets its body from :mod:`reclaim.storage.s3_delete`."""
        client = self.client  # built first: whether it carries the hooks is known from then on
        if not self._own_delete_body:
            return self._call(None, "delete_objects", Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True})
        try:
            return s3_delete.delete_objects(client, self._settings.bucket, keys)
        except (ClientError, BotoCoreError) as exc:
            raise map_s3_error(exc, None) from exc

    def _do_delete_many(self, names: Sequence[str], versions: Mapping[str, str]) -> list[DeleteResult]:
        """``DeleteObjects`` of 1000 keys; with conditional deletes on, a name with a version is deleted on its own
        with ``If-Match`` (the copies judged by their object: few, where a batch has them at all)."""
        conditional = versions if self._settings.conditional_deletes else {}
        batched = [name for name in names if name not in conditional]
        results = {name: self._delete_if_match(name, conditional[name]) for name in names if name in conditional}
        for start in range(0, len(batched), MAX_PAGE_SIZE):
            for result in self._delete_batch(batched[start:start + MAX_PAGE_SIZE]):
                results[result.name] = result
        return [results[name] for name in names]

    def _delete_if_match(self, name: str, etag: str) -> DeleteResult:
        """``DeleteObject`` with ``If-Match``: 412 (written since) and 404 (gone since) are ``CHANGED``."""
        try:
            self.client.delete_object(Bucket=self._settings.bucket, Key=self.object_key(name), IfMatch=etag)
        except ClientError as exc:
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if status in (404, 412) or code == "PreconditionFailed" or code in _NOT_FOUND:
                return DeleteResult(name, DeleteOutcome.CHANGED)
            return DeleteResult(name, DeleteOutcome.FAILED, map_s3_error(exc, name))
        except BotoCoreError as exc:
            return DeleteResult(name, DeleteOutcome.FAILED, map_s3_error(exc, name))
        return DeleteResult(name, DeleteOutcome.DELETED)

    def _do_exists_many(self, names: Sequence[str]) -> set[str]:
        """ListObjectsV2 over the names' parent prefixes, each from its group's first key; where a listing
        stopped at its budget before reaching some names, a HEAD each, so every name is answered from the
        server."""
        by_key = {self.object_key(name): name for name in names}
        reached: dict[str, str] = {}

        def list_page(prefix: str, start_after: str, continuation: str | None) -> tuple[list[str], str | None]:
            keys, token = self._list_page(prefix, start_after, continuation)
            if keys:
                reached[prefix] = max(reached.get(prefix, ""), keys[-1])
            return keys, token

        claimed = present_keys(by_key, list_page)
        unlisted = [key for key in claimed if key > reached.get(key[:key.rfind("/") + 1], "")]
        found = {by_key[key] for key in claimed.difference(unlisted)}
        return found | {by_key[key] for key in unlisted if self._do_exists(by_key[key])}

    def _do_object_pages(self, prefix: str, page_size: int) -> Iterator[ObjectPage]:
        """ListObjectsV2 pages, in name order, with each object's ``Size`` and ``LastModified``."""
        cut = len(self._settings.key_prefix)
        token: str | None = None
        while True:
            contents, token = self._list_objects(prefix or None, self.object_key(prefix), page_size, token)
            page = [StoredObject(item["Key"][cut:], int(item.get("Size", 0)), item["LastModified"].timestamp())
                    for item in contents]
            if page:
                yield page
            if token is None:
                return

    def _do_level_pages(self, prefix: str) -> Iterator[LevelPage]:
        """ListObjectsV2 pages with ``Delimiter='/'``: the objects directly under the prefix, and its
        ``CommonPrefixes``."""
        cut = len(self._settings.key_prefix)
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Prefix": self.object_key(prefix), "Delimiter": "/", "MaxKeys": MAX_PAGE_SIZE}
            if token:
                kwargs["ContinuationToken"] = token
            response = self._call(prefix or None, "list_objects_v2", **kwargs)
            objects = [StoredObject(item["Key"][cut:], int(item.get("Size", 0)), item["LastModified"].timestamp())
                       for item in response.get("Contents", [])]
            children = [item["Prefix"][cut:] for item in response.get("CommonPrefixes", [])]
            if objects or children:
                yield LevelPage(objects, children)
            token = response.get("NextContinuationToken") if response.get("IsTruncated") else None
            if token is None:
                return

    def _list_page(self, prefix: str, start_after: str, continuation: str | None) -> tuple[list[str], str | None]:
        contents, token = self._list_objects(None, prefix, MAX_PAGE_SIZE, continuation, start_after)
        return [item["Key"] for item in contents], token

    def _list_objects(self, name: str | None, key_prefix: str, page_size: int, continuation: str | None,
                      start_after: str = "") -> tuple[list[dict[str, Any]], str | None]:
        """One ListObjectsV2 page under ``key_prefix``: its entries, and the token of the next page (None
        at the end). ``start_after`` applies to a first page only, as S3 has it."""
        kwargs: dict[str, Any] = {"Prefix": key_prefix, "MaxKeys": page_size}
        if continuation:
            kwargs["ContinuationToken"] = continuation
        elif start_after:
            kwargs["StartAfter"] = start_after
        response = self._call(name, "list_objects_v2", **kwargs)
        token = response.get("NextContinuationToken") if response.get("IsTruncated") else None
        return list(response.get("Contents", [])), token

    def _do_get_info(self, name: str) -> ChunkInfo:
        head = self._head(name)
        tags, written_as = decode_metadata(head.get("Metadata"))
        modified = head.get("LastModified")
        return ChunkInfo(name, int(head.get("ContentLength", 0)), tags, written_as=written_as,
                         modified_at=modified.timestamp() if modified is not None else None,
                         version=head.get("ETag") if self._settings.conditional_deletes else None)

    def _do_read(self, name: str, from_offset: int, length: int) -> bytes:
        if length == 0:
            size = self._do_get_info(name).length
            if from_offset > size:
                raise InvalidOffsetError(f"read offset {from_offset} beyond chunk length {size}", chunk=name)
            return b""
        end = from_offset + length - 1
        response = self._call(name, "get_object", Key=self.object_key(name),
                              Range=f"bytes={from_offset}-{end}")
        try:
            data: bytes = response["Body"].read()
        except (BotoCoreError, OSError) as exc:
            raise StorageUnavailableError(f"S3 read interrupted: {exc}", chunk=name) from exc
        if len(data) != length:
            raise InvalidOffsetError(f"read {from_offset}+{length} beyond chunk end", chunk=name)
        return data

    def _do_write(self, name: str, offset: int, data: bytes) -> int:
        head = self._head(name)
        size = int(head.get("ContentLength", 0))
        if offset != size:
            raise InvalidOffsetError(f"write offset {offset} is not chunk length {size}", chunk=name)
        if size:
            raise InvalidOffsetError("S3 chunks take a single write at offset 0 (no append)", chunk=name)
        if not data:
            return 0
        # IfMatch makes the single write conditional on the object still being the empty one we saw.
        changed = InvalidOffsetError("chunk changed during the write", chunk=name)
        self._call(name, "put_object", Key=self.object_key(name), Body=data,
                   Metadata=head.get("Metadata", {}), IfMatch=head["ETag"], on_precondition=changed)
        return len(data)

    def _do_list(self, prefix: str, page_size: int, continuation: str | None) -> ChunkListPage:
        contents, token = self._list_objects(prefix, self.object_key(prefix), page_size, continuation)
        cut = len(self._settings.key_prefix)
        return ChunkListPage(tuple(item["Key"][cut:] for item in contents), token)

    def close(self) -> None:
        client = self._clients.take()
        if client is not None:
            client.close()
