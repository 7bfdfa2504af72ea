"""The GCS binding's pure parts: what each answer to a delete means, credentials in words, a lazy import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reclaim.storage.chunks import DeleteOutcome
from reclaim.storage.errors import AccessDeniedError, InvalidOffsetError, StorageError, StorageUnavailableError
from reclaim.storage.gcs import GcsSettings, classify_status, credential_source, delete_outcome


@pytest.mark.parametrize(("status", "versioned", "outcome"), [
    (204, False, DeleteOutcome.DELETED),
    (200, True, DeleteOutcome.DELETED),
    (404, False, DeleteOutcome.ALREADY_GONE),
    # The generation checked is gone: deleted since, or the name written again. Either way nothing to delete,
    # and never "already gone" counted as this record's delete.
    (404, True, DeleteOutcome.CHANGED),
    (412, True, DeleteOutcome.CHANGED),
    (403, False, DeleteOutcome.FAILED),
    (429, False, DeleteOutcome.FAILED),
    (503, True, DeleteOutcome.FAILED),
])
def test_each_answer_to_a_delete_has_one_outcome(status: int, versioned: bool, outcome: DeleteOutcome) -> None:
    assert delete_outcome("c", status, versioned).outcome is outcome


@pytest.mark.parametrize(("status", "error", "retryable"), [
    (401, AccessDeniedError, False),
    (403, AccessDeniedError, False),
    (416, InvalidOffsetError, False),
    (408, StorageUnavailableError, True),
    (429, StorageUnavailableError, True),
    (500, StorageUnavailableError, True),
    (503, StorageUnavailableError, True),
    (400, StorageError, False),
])
def test_throttling_and_overload_are_retryable_and_refusals_are_not(status: int, error: type[StorageError],
                                                                     retryable: bool) -> None:
    classified = classify_status(status, "m", "c")
    assert type(classified) is error and classified.retryable is retryable
    failed = delete_outcome("c", status, False, "m")
    assert failed.error is not None and failed.error.retryable is retryable


def test_credentials_are_said_in_words(tmp_path: Path) -> None:
    key = tmp_path / "sa.json"
    assert credential_source(GcsSettings("b")) == "Application Default Credentials"
    assert credential_source(GcsSettings("b", credentials_file=key)) == f"service-account key file {key}"
    assert credential_source(GcsSettings("b", endpoint="http://127.0.0.1:4443")).startswith("anonymous")


def test_the_module_imports_without_the_google_client() -> None:
    """``reclaim.storage.gcs`` is imported by settings and ``config show`` without the gcs extra installed."""
    code = "import sys, reclaim.storage.gcs; print(any(m.startswith('google') for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_without_the_extra_the_binding_says_which_to_install() -> None:
    code = ("import sys; sys.modules['google.cloud.storage'] = None\n"
            "from reclaim.storage.gcs import GcsChunkStorage, GcsSettings\n"
            "from reclaim.storage.errors import StorageMisconfiguredError\n"
            "try:\n    GcsChunkStorage(GcsSettings('b')).check()\n"
            "except StorageMisconfiguredError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "the gcs-tier2 binding needs the gcs extra: pip install 'reclaim[gcs]'"


def test_the_environment_cannot_point_the_binding_at_an_emulator() -> None:
    """google-cloud-storage obeys STORAGE_EMULATOR_HOST (anonymously) and API_ENDPOINT_OVERRIDE when no endpoint
    is given: the binding names Google's own and signs in with Application Default Credentials, or refuses."""
    code = ("from reclaim.storage.gcs import GcsChunkStorage, GcsSettings\n"
            "from reclaim.storage.errors import AccessDeniedError\n"
            "binding = GcsChunkStorage(GcsSettings('b'))\n"
            "try:\n    binding.check()\n"
            "except AccessDeniedError as exc:\n    print('refused:', exc)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_"))}
    env.update(STORAGE_EMULATOR_HOST="http://127.0.0.1:9", API_ENDPOINT_OVERRIDE="http://127.0.0.1:9",
               NO_GCE_CHECK="True", CLOUDSDK_CONFIG="/nonexistent")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                          timeout=60)
    assert done.stdout.startswith("refused: no usable Google credentials"), done.stdout + done.stderr
