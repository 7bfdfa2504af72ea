"""The log limiter: one line per condition per interval, with the count of the lines held back."""

from __future__ import annotations

import pytest

from reclaim.logs import LogLimiter


def test_one_line_per_interval_with_the_count_held_back() -> None:
    now = [0.0]
    limiter = LogLimiter(30.0, clock=lambda: now[0])
    assert limiter.admit("s3 down") == 0  # the first line is written, nothing held before it
    assert limiter.admit("s3 down") is None
    now[0] = 10.0
    assert limiter.admit("s3 down") is None
    assert limiter.admit("broker down") == 0  # another condition has its own interval
    now[0] = 30.0
    held = limiter.admit("s3 down")
    assert held == 2
    assert limiter.suffix(held) == " (2 more like it in the last 30s)"
    assert limiter.suffix(0) == ""


def test_a_negative_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="interval_s must not be negative"):
        LogLimiter(-1.0)
