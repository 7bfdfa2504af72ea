"""How a test reports a server it could not start (skip, or fail under CI), and which S3 servers run."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


#: An S3 endpoint named here replaces the local servers, as ``RECLAIM_KAFKA_BOOTSTRAP`` does the broker
#: (with ``RECLAIM_TEST_S3_ACCESS_KEY``, ``RECLAIM_TEST_S3_SECRET_KEY`` and ``RECLAIM_TEST_S3_REGION``).
EXTERNAL_S3 = os.environ.get("RECLAIM_TEST_S3_ENDPOINT", "")


#: The S3 servers the S3 tests run on, by id; the server of id ``x`` is the session fixture ``x_s3``.
S3_SERVERS: tuple[str, ...] = ("external",) if EXTERNAL_S3 else ("moto", "minio")


def server_unavailable(what: str, exc: BaseException) -> None:
    """Fail (in CI) or skip (elsewhere) because ``what`` could not be started."""
    message = f"{what} unavailable: {exc}"
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def started(what: str, start: Callable[[], T]) -> T:
    """What ``start()`` returns (a server of a test's own), or :func:`server_unavailable` when it raises:
    any failure to start is reported the same way."""
    try:
        return start()
    except Exception as exc:  # noqa: BLE001 - see the docstring
        server_unavailable(what, exc)
        raise AssertionError("unreachable") from exc


def postgres_schema_url(url: str, schema: str) -> str:
    """``url`` with its tables in ``schema`` (made now): a test's own namespace in the session's database."""
    from urllib.parse import quote

    from devtools.pg_server import create_schema

    create_schema(url, schema)
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}')}"
