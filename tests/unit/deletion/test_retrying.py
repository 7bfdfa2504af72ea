"""In-process retries stop at their attempt count or their time budget, whichever comes first."""

from __future__ import annotations

import time

import pytest

from reclaim.deletion.retrying import RetryPolicy
from reclaim.storage.errors import StorageUnavailableError


def test_retries_stop_at_the_attempt_limit() -> None:
    calls = []

    def failing() -> None:
        calls.append(time.monotonic())
        raise StorageUnavailableError("endpoint down")

    with pytest.raises(StorageUnavailableError):
        RetryPolicy(attempts=3, initial_wait=0.001, max_wait=0.002).retrying(StorageUnavailableError)(failing)
    assert len(calls) == 3


def test_no_retry_begins_after_the_time_budget_even_with_attempts_left() -> None:
    calls = []

    def slow_failure() -> None:  # a request that hangs until its own timeout, then fails
        calls.append(time.monotonic())
        time.sleep(0.2)
        raise StorageUnavailableError("read timeout")

    policy = RetryPolicy(attempts=100, initial_wait=0.001, max_wait=0.002, max_elapsed=0.5)
    with pytest.raises(StorageUnavailableError):
        policy.retrying(StorageUnavailableError)(slow_failure)
    assert 2 <= len(calls) <= 4
    assert calls[-1] - calls[0] < 0.5


def test_an_error_that_is_not_retryable_is_raised_at_once() -> None:
    calls = []

    def refused() -> None:
        calls.append(1)
        raise ValueError("bad input")

    with pytest.raises(ValueError):
        RetryPolicy(attempts=5).retrying(StorageUnavailableError)(refused)
    assert calls == [1]
