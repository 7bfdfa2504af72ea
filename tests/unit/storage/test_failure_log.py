"""A storage endpoint that stays down is one warning per interval, not one per request."""

from __future__ import annotations

import logging

import pytest

from reclaim.localstack.s3_server import S3Endpoint
from reclaim.storage.s3 import S3ChunkStorage


def test_an_unreachable_endpoint_is_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    """Port 1 never answers: every delete fails the same retryable way."""
    settings = S3Endpoint(url="http://127.0.0.1:1").binding_settings("reclaim-tier2")
    binding = S3ChunkStorage(settings, name="s3-down-for-test")
    names = ["scope/stream/0.E-1-O-0.c0"]
    with caplog.at_level(logging.INFO, logger="reclaim.storage.base"):
        for _ in range(3):
            results = binding.delete_many(names)
            assert not results[0].ok and results[0].error is not None and results[0].error.retryable
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and "s3-down-for-test" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "delete_many: 1 of 1 chunks failed, will be retried" in warnings[0]
    assert "S3 endpoint unreachable" in warnings[0]
    binding.close()
