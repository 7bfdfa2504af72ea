"""Settings read from RECLAIM_* variables: booleans, and one-line errors for what cannot be read."""

from __future__ import annotations

import pytest

from ops.settings import Settings


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("1", True), ("ON", True), ("false", False),
                                               ("0", False), (" no ", False)])
def test_booleans_read_the_usual_words(raw: str, expected: bool) -> None:
    assert Settings.from_env({"RECLAIM_S3_COUNT_MISSING": raw}).s3_count_missing is expected


def test_counting_missing_keys_is_the_default() -> None:
    assert Settings.from_env({}).s3_count_missing is True


def test_a_word_that_is_no_boolean_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match="RECLAIM_S3_COUNT_MISSING: cannot read 'maybe' as bool"):
        Settings.from_env({"RECLAIM_S3_COUNT_MISSING": "maybe"})
