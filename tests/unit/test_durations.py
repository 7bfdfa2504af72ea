"""One reader for every duration a user types: a flag, a ``RECLAIM_*`` variable or a config key."""

from __future__ import annotations

import math

import pytest

from reclaim.durations import human, parse_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("15m", 900), ("1h", 3600), ("7d", 604800), ("1w", 604800), ("1.5h", 5400),
    (" 2H ", 7200), ("10 m", 600), ("0", 0), ("0.25", 0.25), (".5s", 0.5), ("1e3", 1000), ("-5m", -300),
    ("+1h", 3600),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_bare_number_that_is_no_duration_is_left_to_the_range_check() -> None:
    assert math.isnan(parse_duration("nan")) and parse_duration("inf") == math.inf


@pytest.mark.parametrize("text", ["", "h", "1h30m", "2y", "banana", "1 hour", "--5m"])
def test_what_is_no_duration_is_refused_with_examples(text: str) -> None:
    with pytest.raises(ValueError, match=f"cannot read {text!r} as a duration, e.g. 90, 90s, 15m, 1h, 7d or 1w"):
        parse_duration(text)


def test_durations_are_shown_in_their_largest_exact_unit() -> None:
    assert [human(s) for s in (604800, 3600, 90, 900, 86400, 0, 5400, 1.5)] == [
        "1w", "1h", "90s", "15m", "1d", "0s", "90m", "1.5s"]
