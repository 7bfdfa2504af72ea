"""fake-gcs-server for the tests and benchmarks: :mod:`reclaim.localstack.gcs_emulator` (the local stack's
``--tier2 gcs`` runs it too), under the name benchmarks import it by."""

from __future__ import annotations

from reclaim.localstack.gcs_emulator import FAKE_GCS, GcsEndpoint, answers, ensure_bucket, start_fake_gcs

__all__ = ["FAKE_GCS", "GcsEndpoint", "answers", "ensure_bucket", "start_fake_gcs"]
