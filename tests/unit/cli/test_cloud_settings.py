"""The GCS and Azure settings: what registers their bindings, what is refused in one line, and secrets masked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reclaim.services import runtime
from reclaim.settings import Settings
from tests.support.cli import run_reclaim

ACCOUNT_URL = "https://acct.blob.core.windows.net"


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    return {**env, "RECLAIM_STATE_DIR": str(tmp_path / "state"), **extra}


def test_a_bucket_or_a_container_registers_its_binding(tmp_path: Path) -> None:
    settings = Settings.from_env({"RECLAIM_GCS_BUCKET": "chunks", "RECLAIM_AZURE_CONTAINER": "chunks",
                                  "RECLAIM_AZURE_ACCOUNT_URL": ACCOUNT_URL, "RECLAIM_STATE_DIR": str(tmp_path)})
    assert runtime.binding_names(settings) == ["fs-tier2", "gcs-tier2", "azure-tier2"]
    bindings = runtime.storage_bindings(settings, writer=True)
    assert bindings.names() == ["fs-tier2", "gcs-tier2", "azure-tier2"]
    assert bindings.get("gcs-tier2").bucket == bindings.get("azure-tier2").bucket == "chunks"
    bindings.close()  # built lazily: no client was made, nothing reached
    assert runtime.binding_names(Settings.from_env({})) == ["fs-tier2"]


@pytest.mark.parametrize(("env", "message"), [
    ({"RECLAIM_GCS_ENDPOINT": "http://127.0.0.1:4443"}, "need gcs_bucket"),
    ({"RECLAIM_GCS_BUCKET": "b", "RECLAIM_GCS_ENDPOINT": "localhost:4443"}, "gcs_endpoint must be an http"),
    ({"RECLAIM_AZURE_CONTAINER": "c"}, "azure_container needs azure_account_url"),
    ({"RECLAIM_AZURE_ACCOUNT_URL": ACCOUNT_URL}, "need azure_container"),
    ({"RECLAIM_AZURE_CONTAINER": "c", "RECLAIM_AZURE_ACCOUNT_URL": "acct.blob.core.windows.net"},
     "azure_account_url must be an http"),
    ({"RECLAIM_AZURE_CONTAINER": "c", "RECLAIM_AZURE_CONNECTION_STRING": "AccountName=a;AccountKey=k",
      "RECLAIM_AZURE_ACCOUNT_KEY": "k"}, "carries its own credentials"),
    ({"RECLAIM_AZURE_CONTAINER": "c", "RECLAIM_AZURE_ACCOUNT_URL": ACCOUNT_URL, "RECLAIM_AZURE_ACCOUNT_KEY": "k",
      "RECLAIM_AZURE_SAS_TOKEN": "sv=1"}, "keep one"),
])
def test_cloud_settings_that_cannot_work_are_refused_in_one_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=f"(?i){message}") as refused:
        Settings.from_env(env)
    assert "\n" not in str(refused.value)


def test_azure_secrets_are_read_from_files_and_never_shown(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("azure-account-key\n")
    env = clean_env(tmp_path, RECLAIM_AZURE_CONTAINER="chunks",
                    RECLAIM_AZURE_ACCOUNT_URL=ACCOUNT_URL + "/?sv=2024&sig=sas-in-the-url",
                    RECLAIM_AZURE_ACCOUNT_KEY_FILE=str(tmp_path / "key"), RECLAIM_GCS_BUCKET="chunks",
                    RECLAIM_GCS_CREDENTIALS_FILE=str(tmp_path / "sa.json"))
    shown = run_reclaim("config", "show", "--json", env=env, timeout=60, check=True)
    values = json.loads(shown.stdout)
    assert values["azure_account_key"] == "********"
    assert values["azure_account_key_file"] == str(tmp_path / "key")
    assert values["azure_account_url"] == ACCOUNT_URL + "/?********"
    assert values["gcs_bucket"] == "chunks" and values["gcs_credentials_file"] == str(tmp_path / "sa.json")
    output = shown.stdout + shown.stderr
    assert "azure-account-key" not in output and "sas-in-the-url" not in output
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("RECLAIM_AZURE_")})
    assert settings.azure_account_key == "azure-account-key"


@pytest.mark.parametrize(("env", "conditional"), [
    ({"RECLAIM_S3_ENDPOINT": "aws"}, True),
    ({"RECLAIM_S3_ENDPOINT": "http://127.0.0.1:9000"}, False),
    ({"RECLAIM_S3_ENDPOINT": "http://127.0.0.1:9000", "RECLAIM_S3_CONDITIONAL_DELETES": "true"}, True),
    ({"RECLAIM_S3_ENDPOINT": "aws", "RECLAIM_S3_CONDITIONAL_DELETES": "false"}, False),
])
def test_s3_deletes_are_conditional_on_aws_and_where_the_operator_says_so(env: dict[str, str],
                                                                          conditional: bool) -> None:
    settings = runtime.s3_settings(Settings.from_env(env))
    assert settings is not None and settings.conditional_deletes is conditional
