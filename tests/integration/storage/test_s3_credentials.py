"""The S3 binding's credentials and addressing from reclaim's settings: boto3's credential chain when no
access key is configured (a profile file, environment session tokens), the configured keys and token
otherwise, the local stack's keys for the local stack only; AWS S3 itself without an endpoint URL.

moto accepts any keys, so each test reads the identity a request was signed with from the real client's
``Authorization`` header (``Credential=<access key>/...``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reclaim import config_file
from reclaim.localstack.s3_server import LOCAL_ACCESS_KEY, S3Endpoint
from reclaim.localstack.stack import StackState, local_config_text
from reclaim.services import runtime
from reclaim.settings import Settings
from reclaim.storage.errors import AccessDeniedError
from reclaim.storage.s3 import S3ChunkStorage

pytestmark = pytest.mark.s3_servers("moto")  # only moto takes keys it never issued

_AWS_VARIABLES = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                  "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
                  "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                  "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
_CREDENTIAL = re.compile(r"Credential=([^/]+)/")


@pytest.fixture(autouse=True)
def no_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing from the machine's own AWS setup: no variables, no ~/.aws files, no instance metadata."""
    for name in _AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@dataclass
class Signed:
    """What each request a binding's client sent was signed with."""

    access_keys: list[str] = field(default_factory=list)
    tokens: list[str | None] = field(default_factory=list)

    def __call__(self, request: Any, **_: Any) -> None:
        match = _CREDENTIAL.search(_text(request.headers.get("Authorization")) or "")
        self.access_keys.append(match.group(1) if match else "")
        self.tokens.append(_text(request.headers.get("X-Amz-Security-Token")))


def _text(header: str | bytes | None) -> str | None:
    return header.decode() if isinstance(header, bytes) else header


@pytest.fixture
def binding_from() -> Iterator[Any]:
    """A factory: the S3 binding ``runtime`` builds for some settings, with a recorder of its signatures."""
    made: list[S3ChunkStorage] = []

    def make(settings: Settings) -> tuple[S3ChunkStorage, Signed]:
        binding = runtime.s3_binding(settings)
        assert binding is not None
        signed = Signed()
        binding.client.meta.events.register("before-send.s3", signed)
        made.append(binding)
        return binding, signed

    yield make
    for binding in made:
        binding.close()


def on_endpoint(endpoint: S3Endpoint, bucket: str, **variables: str) -> Settings:
    """Settings naming ``endpoint`` and ``bucket`` and nothing about credentials unless given."""
    return Settings.from_env({"RECLAIM_S3_ENDPOINT": endpoint.url, "RECLAIM_S3_BUCKET": bucket, **variables})


def test_no_access_key_configured_means_no_local_stack_keys() -> None:
    settings = Settings.from_env({})
    assert settings.s3_access_key is None and settings.s3_secret_key is None and settings.s3_session_token is None


def test_credentials_from_a_profile_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, s3_endpoint: S3Endpoint,
                                         s3_bucket: str, binding_from: Any) -> None:
    (tmp_path / "credentials").write_text("[default]\naws_access_key_id = AKIADEFAULTPROFILE\n"
                                          "aws_secret_access_key = default-secret\n"
                                          "[tier2-writer]\naws_access_key_id = AKIAFROMPROFILE\n"
                                          "aws_secret_access_key = profile-secret\n")
    (tmp_path / "config").write_text("[profile tier2-writer]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "tier2-writer")
    binding, signed = binding_from(on_endpoint(s3_endpoint, s3_bucket))
    binding.create_with_content("profile-chunk", b"data")
    assert binding.exists("profile-chunk")
    assert signed.access_keys and set(signed.access_keys) == {"AKIAFROMPROFILE"}
    assert set(signed.tokens) == {None}


def test_credentials_from_environment_session_tokens(monkeypatch: pytest.MonkeyPatch, s3_endpoint: S3Endpoint,
                                                     s3_bucket: str, binding_from: Any) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ASIAFROMENVIRONMENT")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "env-session-token")
    binding, signed = binding_from(on_endpoint(s3_endpoint, s3_bucket))
    binding.create_with_content("env-chunk", b"data")
    assert [result.name for result in binding.delete_many(["env-chunk"])] == ["env-chunk"]
    assert signed.access_keys and set(signed.access_keys) == {"ASIAFROMENVIRONMENT"}
    assert set(signed.tokens) == {"env-session-token"}


def test_configured_keys_and_session_token_win_over_the_chain(monkeypatch: pytest.MonkeyPatch,
                                                              s3_endpoint: S3Endpoint, s3_bucket: str,
                                                              binding_from: Any) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ASIAFROMENVIRONMENT")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    settings = on_endpoint(s3_endpoint, s3_bucket, RECLAIM_S3_ACCESS_KEY="ASIACONFIGURED",
                           RECLAIM_S3_SECRET_KEY="configured-secret", RECLAIM_S3_SESSION_TOKEN="configured-token")
    binding, signed = binding_from(settings)
    assert not binding.exists("nothing-here")
    assert set(signed.access_keys) == {"ASIACONFIGURED"} and set(signed.tokens) == {"configured-token"}


def test_configured_keys_and_session_token_from_files(tmp_path: Path, s3_endpoint: S3Endpoint, s3_bucket: str,
                                                      binding_from: Any) -> None:
    """A mounted secret's file (its trailing newline is not part of it) signs as the variable would."""
    for name, text in (("access", "ASIAFROMFILE\n"), ("secret", "file-secret\n"), ("token", "file-token\n")):
        (tmp_path / name).write_text(text)
    settings = on_endpoint(s3_endpoint, s3_bucket, RECLAIM_S3_ACCESS_KEY_FILE=str(tmp_path / "access"),
                           RECLAIM_S3_SECRET_KEY_FILE=str(tmp_path / "secret"),
                           RECLAIM_S3_SESSION_TOKEN_FILE=str(tmp_path / "token"))
    binding, signed = binding_from(settings)
    binding.create_with_content("file-keys-chunk", b"data")
    assert binding.exists("file-keys-chunk")
    assert signed.access_keys and set(signed.access_keys) == {"ASIAFROMFILE"}
    assert set(signed.tokens) == {"file-token"}


def test_no_credentials_anywhere_is_access_denied_not_the_local_stack_keys(s3_endpoint: S3Endpoint, s3_bucket: str,
                                                                           binding_from: Any) -> None:
    binding, signed = binding_from(on_endpoint(s3_endpoint, s3_bucket))
    with pytest.raises(AccessDeniedError, match="no S3 credentials"):
        binding.exists("anything")
    assert LOCAL_ACCESS_KEY not in signed.access_keys


def test_the_local_stack_keys_are_for_the_local_stack_endpoint_only(tmp_path: Path, s3_endpoint: S3Endpoint,
                                                                    s3_bucket: str, binding_from: Any) -> None:
    """The local stack's endpoint and keys come from its settings file (what `local up` writes), and from nothing
    else: its state file alone configures no S3 binding."""
    state_dir = tmp_path / "state"
    state = StackState(kafka_client_port=1, kafka_controller_port=2, s3_url=s3_endpoint.url, s3_bucket=s3_bucket)
    state.save(state_dir)
    assert runtime.s3_binding(Settings.from_env({"RECLAIM_STATE_DIR": str(state_dir)})) is None
    config = state_dir / "local.toml"
    config.write_text(local_config_text(Settings(state_dir=state_dir, s3_bucket=s3_bucket), state))
    environ: dict[str, str] = {}
    config_file.apply(config, environ)
    binding, signed = binding_from(Settings.from_env(environ))
    assert not binding.exists("nothing-here")
    assert set(signed.access_keys) == {LOCAL_ACCESS_KEY}


def test_aws_s3_itself_is_virtual_hosted_in_the_configured_region() -> None:
    settings = Settings.from_env({"RECLAIM_S3_ENDPOINT": "aws", "RECLAIM_S3_REGION": "eu-west-1",
                                  "RECLAIM_S3_BUCKET": "tier2"})
    binding_settings = runtime.s3_settings(settings)
    assert binding_settings is not None and binding_settings.endpoint_url is None
    binding = S3ChunkStorage(binding_settings)
    assert binding.client.meta.region_name == "eu-west-1"
    assert binding.client.meta.endpoint_url == "https://s3.eu-west-1.amazonaws.com"
    assert binding.client.meta.config.s3["addressing_style"] == "virtual"
    forced = runtime.s3_settings(Settings.from_env({"RECLAIM_S3_ENDPOINT": "aws", "RECLAIM_S3_PATH_STYLE": "true"}))
    assert forced is not None and S3ChunkStorage(forced).client.meta.config.s3["addressing_style"] == "path"


def test_a_custom_endpoint_is_path_style_unless_told(s3_endpoint: S3Endpoint, s3_bucket: str) -> None:
    path = S3ChunkStorage(runtime.s3_settings(on_endpoint(s3_endpoint, s3_bucket)))  # type: ignore[arg-type]
    assert path.client.meta.config.s3["addressing_style"] == "path"
    virtual = runtime.s3_settings(on_endpoint(s3_endpoint, s3_bucket, RECLAIM_S3_PATH_STYLE="false"))
    assert virtual is not None and S3ChunkStorage(virtual).client.meta.config.s3["addressing_style"] == "virtual"


@pytest.mark.parametrize(("variables", "message"), [
    ({"RECLAIM_S3_ACCESS_KEY": "AKIA"}, "RECLAIM_S3_ACCESS_KEY and s3_secret_key go together"),
    ({"RECLAIM_S3_SECRET_KEY": "secret"}, "s3_access_key and RECLAIM_S3_SECRET_KEY go together"),
    ({"RECLAIM_S3_SESSION_TOKEN": "token"}, "RECLAIM_S3_SESSION_TOKEN needs s3_access_key"),
    ({"RECLAIM_S3_ENDPOINT": "s3.amazonaws.com"}, "or 'aws' for AWS S3"),
])
def test_credential_settings_that_cannot_work_are_one_line(variables: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings.from_env(variables)
