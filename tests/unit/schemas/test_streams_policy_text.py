"""A retention policy as ``streams set-policy`` prints it: words and units, not a dict."""

from __future__ import annotations

import pytest

from reclaim.schemas.base import LONG_MAX
from reclaim.schemas.streams import LimitType, RetentionPolicy, RetentionType


@pytest.mark.parametrize(("policy", "text"), [
    (RetentionPolicy(RetentionType.NONE), "none: nothing is truncated by retention"),
    (RetentionPolicy(RetentionType.TIME, LimitType.TIME, 3_600_000, 7 * 86_400_000),
     "time: keep at least 1h, at most 1w"),
    (RetentionPolicy(RetentionType.SIZE, LimitType.SIZE, 0, LONG_MAX), "size: keep at least 0 bytes, no maximum"),
    (RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 90_000, 86_400_000),
     "consumption (fallback time): keep at least 90s, at most 1d"),
    (RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 512, 4096),
     "consumption (fallback size): keep at least 512 bytes, at most 4096 bytes"),
])
def test_a_policy_reads_as_words(policy: RetentionPolicy, text: str) -> None:
    assert policy.describe() == text
