"""The Azure binding on Azurite: conditional deletes by ETag, deletes in batches of 256 with an answer per blob,
each kind of credential, a missing container, a wrong key, an endpoint down, and throttling."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from reclaim.localstack.azurite import AzuriteEndpoint
from reclaim.localstack.procs import free_port
from reclaim.storage.azure import AzureChunkStorage, AzureSettings
from reclaim.storage.chunks import ChunkTags, DeleteOutcome
from reclaim.storage.errors import AccessDeniedError, StorageMisconfiguredError, StorageUnavailableError
from tests.support.refusing_server import Refusal, refusing_server

pytestmark = pytest.mark.integration

TAGS = ChunkTags(component="c", stream="s", segment="s/0", writer_epoch=1)


def test_deletes_answer_per_blob_in_batches_of_256(azure_binding: AzureChunkStorage) -> None:
    names = [f"s/1/c{i:03d}" for i in range(300)]
    missing = set(names[::7])
    for name in names:
        if name not in missing:
            azure_binding.create_with_content(name, b"x", TAGS)
    versions = {name: azure_binding.get_info(name).version or "" for name in names[250:260] if name not in missing}
    results = azure_binding.delete_many(names, versions=versions)
    assert [r.name for r in results] == names
    assert {r.name for r in results if r.outcome is DeleteOutcome.ALREADY_GONE} == missing
    assert {r.name for r in results if r.outcome is DeleteOutcome.DELETED} == set(names) - missing
    assert list(azure_binding.iter_names("s/1/")) == []


def test_odd_names_and_a_key_prefix_address_one_blob_each(azure_binding_on: Callable[..., AzureChunkStorage]) -> None:
    binding = azure_binding_on(key_prefix="tenant/a/")
    binding.check()
    names = ["s/strëam ☃/0/c #1", "s/q?a=1&b=%20+", "s/x.y"]
    for name in names:
        binding.create_with_content(name, name.encode(), TAGS)
    assert sorted(binding.iter_names("s/")) == sorted(names)
    assert [binding.read(binding.open_read(n), 0, len(n.encode())) for n in names] == [n.encode() for n in names]
    [level] = list(binding.iter_level_pages(""))
    assert level.prefixes == ["s/"] and level.objects == []
    assert all(r.outcome is DeleteOutcome.DELETED for r in binding.delete_many(names))
    with pytest.raises(StorageMisconfiguredError, match="key prefix"):
        azure_binding_on(key_prefix="a//").check()


def test_a_connection_string_and_a_containers_sas_token_sign_in(azurite: AzuriteEndpoint,
                                                                  azure_container: str) -> None:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    sas = generate_container_sas(azurite.account_name, azure_container, account_key=azurite.account_key,
                                 permission=ContainerSasPermissions(read=True, write=True, create=True, delete=True,
                                                                    list=True),
                                 expiry=datetime.now(UTC) + timedelta(hours=1))
    for settings in (AzureSettings(azure_container, connection_string=azurite.connection_string),
                     AzureSettings(azure_container, account_url=azurite.account_url, sas_token=sas)):
        binding = AzureChunkStorage(settings)
        binding.check()
        binding.create_with_content("s/2/c0", b"x", TAGS)
        assert [r.outcome for r in binding.delete_many(["s/2/c0"])] == [DeleteOutcome.DELETED]
        binding.close()


def test_a_missing_container_is_a_misconfiguration_not_an_empty_container(azurite: AzuriteEndpoint) -> None:
    binding = AzureChunkStorage(azurite.binding_settings("no-such-container-here"))
    with pytest.raises(StorageMisconfiguredError, match="does not exist") as info:
        binding.check()
    assert "\n" not in str(info.value) and "no-such-container-here" in str(info.value)
    with pytest.raises(StorageMisconfiguredError):
        binding.exists("s/0/c0")
    with pytest.raises(StorageMisconfiguredError):
        list(binding.iter_names())
    [result] = binding.delete_many(["s/0/c0"])
    assert isinstance(result.error, StorageMisconfiguredError) and not result.error.retryable
    binding.close()


def test_a_wrong_account_key_is_access_denied(azurite: AzuriteEndpoint, azure_container: str) -> None:
    wrong = "A" * 8 + azurite.account_key[8:]
    binding = AzureChunkStorage(azurite.binding_settings(azure_container, account_key=wrong))
    with pytest.raises(AccessDeniedError) as info:
        binding.check()
    assert "\n" not in str(info.value) and wrong not in str(info.value) and not info.value.retryable
    [result] = binding.delete_many(["s/0/c0"])
    assert isinstance(result.error, AccessDeniedError)
    binding.close()


def test_an_endpoint_down_is_retryable(azurite: AzuriteEndpoint) -> None:
    down = f"http://127.0.0.1:{free_port()}/{azurite.account_name}"
    binding = AzureChunkStorage(AzureSettings("c1c", account_url=down, account_name=azurite.account_name,
                                              account_key=azurite.account_key, connect_timeout=1, max_attempts=1))
    with pytest.raises(StorageUnavailableError) as info:
        binding.check()
    assert info.value.retryable and "\n" not in str(info.value)
    with pytest.raises(StorageUnavailableError):
        binding.exists("s/0/c0")
    [result] = binding.delete_many(["s/0/c0"])
    assert result.outcome is DeleteOutcome.FAILED and result.error is not None and result.error.retryable
    binding.close()


@pytest.fixture
def busy() -> Iterator[Refusal]:
    """Answers every request 503 ServerBusy, as Azure does past an account's limits. A stand-in on purpose:
    Azurite cannot be made to throttle."""
    body = (b'<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
            b"<Message>Ingress is over the account limit.</Message></Error>")
    with refusing_server(Refusal(503, body, {"x-ms-error-code": "ServerBusy", "Content-Type": "application/xml"})
                         ) as refusal:
        yield refusal


def test_a_busy_server_is_retried_and_then_reported_retryable(busy: Refusal, azurite: AzuriteEndpoint) -> None:
    settings = AzureSettings("c1c", account_url=busy.url + "/devstoreaccount1", account_key=azurite.account_key,
                             max_attempts=2)
    binding = AzureChunkStorage(settings)
    with pytest.raises(StorageUnavailableError):
        binding.get_info("s/0/c0")
    assert busy.requests == 2, "the client backs off and asks again once before giving up"
    binding.close()
    binding = AzureChunkStorage(replace(settings, max_attempts=1))
    results = binding.delete_many(["s/0/c0", "s/0/c1"], versions={"s/0/c0": '"0x1"'})
    assert all(r.outcome is DeleteOutcome.FAILED and r.error is not None and r.error.retryable for r in results)
    binding.close()
