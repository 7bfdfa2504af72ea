"""The Azure binding's pure parts: tags as blob metadata, what each answer to a delete means, which credential
is picked, secrets kept out of text, names refused before any request, and a lazy import."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from reclaim.storage.azure import (
    MAX_METADATA_BYTES,
    AzureChunkStorage,
    AzureSettings,
    CredentialKind,
    account_of,
    classify_azure_error,
    credential_kind,
    credential_source,
    delete_outcome,
    encode_tags,
    map_azure_error,
    tag_name,
)
from reclaim.storage.chunks import ChunkTags, DeleteOutcome, WrittenAs
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
from reclaim.storage.object_keys import decode_metadata

TAGS = ChunkTags(component="segmentstore", stream="scope/strëam ☃", segment="scope/strëam ☃/0", writer_epoch=7)
WRITTEN = WrittenAs.of("azure-tier2", "container", "scope/strëam ☃/0/c0")
URL = "https://acct.blob.core.windows.net"
#: A C# identifier: what Azure takes as a metadata name.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def test_tags_round_trip_as_identifier_names_and_ascii_values() -> None:
    metadata = encode_tags(TAGS, WRITTEN, "c0")
    assert all(IDENTIFIER.fullmatch(key) for key in metadata), metadata
    assert all(value.isascii() for value in metadata.values())
    assert metadata["reclaim_writer_epoch"] == "7"
    assert decode_metadata(metadata, tag_name) == (TAGS, WRITTEN)
    # Azure's metadata names are case-insensitive: a server that hands them back in another case still reads.
    assert decode_metadata({key.upper(): value for key, value in metadata.items()}, tag_name) == (TAGS, WRITTEN)


def test_foreign_and_missing_metadata_read_as_no_tags() -> None:
    assert encode_tags(None, WRITTEN, "c0") == {}
    assert decode_metadata({"owner": "someone"}, tag_name) == (None, None)
    assert decode_metadata({}, tag_name) == (None, None)


def test_tags_over_eight_kilobytes_are_refused_before_any_request() -> None:
    fits = ChunkTags(component="c", stream="s" * 7000, segment="s", writer_epoch=1)
    assert sum(len(k) + len(v) for k, v in encode_tags(fits, WRITTEN, "c0").items()) <= MAX_METADATA_BYTES
    # Each non-ASCII character is percent-encoded (up to 12 bytes): counted as stored, not as characters.
    too_large = ChunkTags(component="c", stream="ë" * 1400, segment="s", writer_epoch=1)
    with pytest.raises(ChunkTagsTooLargeError, match="8192"):
        encode_tags(too_large, WRITTEN, "c0")


@pytest.mark.parametrize(("status", "code", "outcome", "error"), [
    (202, "", DeleteOutcome.DELETED, None),
    (200, "", DeleteOutcome.DELETED, None),
    (404, "BlobNotFound", DeleteOutcome.ALREADY_GONE, None),
    # The blob was written again since its ETag was read: kept.
    (412, "ConditionNotMet", DeleteOutcome.CHANGED, None),
    (404, "ContainerNotFound", DeleteOutcome.FAILED, StorageMisconfiguredError),
    (403, "AuthorizationPermissionMismatch", DeleteOutcome.FAILED, AccessDeniedError),
    (403, "AuthenticationFailed", DeleteOutcome.FAILED, AccessDeniedError),
    (429, "", DeleteOutcome.FAILED, StorageUnavailableError),
    (500, "OperationTimedOut", DeleteOutcome.FAILED, StorageUnavailableError),
    (503, "ServerBusy", DeleteOutcome.FAILED, StorageUnavailableError),
    (500, "InternalError", DeleteOutcome.FAILED, StorageUnavailableError),
    (409, "SnapshotsPresent", DeleteOutcome.FAILED, StorageError),
])
def test_each_sub_response_of_a_batch_has_one_outcome(status: int, code: str, outcome: DeleteOutcome,
                                                      error: type[StorageError] | None) -> None:
    result = delete_outcome("c", status, code)
    assert result.outcome is outcome and result.name == "c"
    assert (None if result.error is None else type(result.error)) is error
    if result.error is not None:
        assert result.error.retryable is (error is StorageUnavailableError)


@pytest.mark.parametrize(("status", "code", "error"), [
    (404, "BlobNotFound", ChunkNotFoundError),
    (404, "ContainerNotFound", StorageMisconfiguredError),
    (400, "InvalidResourceName", StorageMisconfiguredError),
    (409, "BlobAlreadyExists", ChunkAlreadyExistsError),
    (403, "AuthorizationFailure", AccessDeniedError),
    (416, "InvalidRange", InvalidOffsetError),
    (408, "", StorageUnavailableError),
    (503, "ServerBusy", StorageUnavailableError),
    (400, "InvalidHeaderValue", StorageError),
])
def test_errors_are_told_by_status_and_code(status: int, code: str, error: type[StorageError]) -> None:
    assert type(classify_azure_error(status, code, "m", "c")) is error


def test_library_exceptions_map_by_type_and_code_never_by_text() -> None:
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError
    from azure.storage.blob import StorageErrorCode

    busy = HttpResponseError(message="the text says nothing useful")
    busy.status_code = 503
    busy.error_code = StorageErrorCode.SERVER_BUSY  # type: ignore[attr-defined] # set by the library, its enum
    assert isinstance(map_azure_error(busy, "c"), StorageUnavailableError)
    assert isinstance(map_azure_error(ServiceRequestError("refused"), "c"), StorageUnavailableError)
    assert isinstance(map_azure_error(ClientAuthenticationError("no credential found"), "c"), AccessDeniedError)


def test_secrets_stay_out_of_error_text_and_repr() -> None:
    leaked = "HTTPConnectionPool: Max retries exceeded with url: /c/b?sv=2025&sig=S3cr3tSig%3D&se=x\nline two"
    from azure.core.exceptions import ServiceRequestError

    error = map_azure_error(ServiceRequestError(leaked), "c", ("the-account-key",))
    assert "S3cr3tSig" not in str(error) and "\n" not in str(error) and "sig=REDACTED" in str(error)
    keyed = map_azure_error(ServiceRequestError("bad key the-account-key"), "c", ("the-account-key",))
    assert "the-account-key" not in str(keyed)
    settings = AzureSettings("c", account_url=URL, connection_string="AccountKey=conn-secret",
                             account_key="key-secret", sas_token="sv=1&sig=sas-secret")
    assert not any(secret in repr(settings) for secret in ("conn-secret", "key-secret", "sas-secret"))


@pytest.mark.parametrize(("settings", "kind"), [
    (AzureSettings("c", connection_string="UseDevelopmentStorage=true", account_url=URL, account_key="k",
                   sas_token="s"), CredentialKind.CONNECTION_STRING),
    (AzureSettings("c", account_url=URL, account_key="k", sas_token="s"), CredentialKind.ACCOUNT_KEY),
    (AzureSettings("c", account_url=URL, sas_token="s"), CredentialKind.SAS_TOKEN),
    (AzureSettings("c", account_url=URL), CredentialKind.DEFAULT),
])
def test_credentials_are_picked_in_their_documented_order(settings: AzureSettings, kind: CredentialKind) -> None:
    assert credential_kind(settings) is kind


def test_credentials_are_said_in_words_and_an_incomplete_set_is_refused() -> None:
    assert credential_source(AzureSettings("c", account_url=URL, account_key="k")) == \
        "the account key of account 'acct'"
    emulator = "http://127.0.0.1:10000/devstoreaccount1"
    assert credential_source(AzureSettings("c", account_url=emulator, account_key="k")).endswith("'devstoreaccount1'")
    assert credential_source(AzureSettings("c", account_url=URL)).startswith("DefaultAzureCredential")
    with pytest.raises(StorageMisconfiguredError, match="account_url or connection_string"):
        credential_kind(AzureSettings("c", account_key="k"))
    with pytest.raises(StorageMisconfiguredError, match="account_name"):
        credential_kind(AzureSettings("c", account_url="http://127.0.0.1:10000", account_key="k"))


@pytest.mark.parametrize(("url", "account"), [
    ("https://acct.blob.core.windows.net", "acct"),
    ("https://acct.blob.core.windows.net/", "acct"),
    ("http://127.0.0.1:10000/devstoreaccount1", "devstoreaccount1"),
    ("http://localhost:10000/devstoreaccount1/", "devstoreaccount1"),
    ("http://127.0.0.1:10000", None),
])
def test_the_account_is_read_from_its_url(url: str, account: str | None) -> None:
    assert account_of(url) == account


@pytest.mark.parametrize("name", ["seg./c0", "seg/c0.", "a/" * 254 + "b"])
def test_names_azure_would_not_keep_as_sent_are_refused_before_any_request(name: str) -> None:
    # Port 1 answers nothing: a request would fail as unavailable, not as an invalid name.
    binding = AzureChunkStorage(AzureSettings("c", account_url="http://127.0.0.1:1/devstoreaccount1", account_key="k"))
    with pytest.raises(InvalidChunkNameError):
        binding.exists(name)
    prefixed = AzureChunkStorage(AzureSettings("c", account_url=URL, account_key="k", key_prefix="p" * 1000 + "/"))
    with pytest.raises(InvalidChunkNameError, match="1024"):
        prefixed.exists("x" * 30)


def test_the_module_imports_without_the_azure_client_and_the_binding_says_what_is_missing() -> None:
    """``reclaim.storage.azure`` is imported by settings and ``config show`` without the azure extra installed;
    building a binding then names the extra."""
    code = (
        "import sys\n"
        "sys.modules['azure'] = None  # as if azure-storage-blob were not installed\n"
        "import reclaim.storage.azure as azure\n"
        "from reclaim.storage.errors import StorageMisconfiguredError\n"
        "try:\n"
        "    azure.AzureChunkStorage(azure.AzureSettings('c', account_url='https://a.blob.core.windows.net'))\n"
        "except StorageMisconfiguredError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "the azure-tier2 binding needs the azure extra: pip install 'reclaim[azure]'"
    loaded = "import sys, reclaim.storage.azure; print(any(m.startswith('azure') for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", loaded], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
