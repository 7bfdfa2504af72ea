"""Dead letters as values, no server: parsing a record's parts, ages, filters, duplicates, order and stats."""

from __future__ import annotations

import pytest

from reclaim.cli.dlq import matching
from reclaim.consumers import retry
from reclaim.deletion.outcomes import Outcome, Verdict
from reclaim.tools.dlq.records import UNDECODABLE_STREAM, dead_letter, iso
from reclaim.tools.dlq.render import print_show
from reclaim.tools.dlq.selection import (
    Brief,
    Filters,
    age_bucket,
    count,
    dedupe,
    parse_age,
    parse_coordinates,
    select,
    stats,
)
from tests.support.dead_letters import CODEC, HOUR, NOW, letter


def test_a_dead_letter_reads_every_header_the_worker_writes() -> None:
    dead = letter(7, attempt=3, verdict=Verdict(Outcome.RETRYABLE, "slow", "StorageUnavailableError"))
    assert (dead.outcome, dead.error_class, dead.error, dead.attempt) == (
        "retryable-error", "StorageUnavailableError", "slow", 3)
    assert str(dead.origin) == "t.ledger-deletion[0]@7"
    assert (dead.original_timestamp_ms, dead.group, dead.coordinates) == (NOW - 3 * HOUR, "g1", "0:7")
    assert dead.stream == "scope/stream" and dead.chunk.endswith("E-1-O-7.a")
    assert dead.detail()["record"]["mark_id"] == "mark-1"
    assert {h["key"] for h in dead.detail()["headers"]} >= {retry.H_OUTCOME, retry.H_GROUP, retry.H_TIMESTAMP}


def test_undecodable_bytes_are_a_dead_letter_with_the_decode_error() -> None:
    dead = dead_letter("dlq", 0, 3, -1, None, b"not avro", [(retry.H_OUTCOME, b"undecodable")], CODEC)
    assert dead.info is None and dead.stream == UNDECODABLE_STREAM
    assert dead.decode_error.startswith("wrong marker bytes")
    assert dead.timestamp_ms is None and dead.origin is None and dead.attempt is None
    assert dead.detail()["decode_error"] == dead.decode_error and dead.detail()["record"] is None


@pytest.mark.parametrize(("text", "millis"), [("90s", 90_000), ("10m", 600_000), ("2h", 7_200_000),
                                              ("3d", 259_200_000), ("1W", 604_800_000), (" 5m ", 300_000),
                                              ("3600", 3_600_000), ("1.5h", 5_400_000), ("10 m", 600_000)])
def test_ages(text: str, millis: int) -> None:
    assert parse_age(text) == millis


@pytest.mark.parametrize("text", ["", "m", "2y", "1h30m"])
def test_bad_ages_are_refused_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match="as a duration, e.g. 90, 90s, 15m, 1h, 7d or 1w"):
        parse_age(text)


@pytest.mark.parametrize("text", ["-5m", "0h", "0", "nan", "inf"])
def test_an_age_must_be_above_zero(text: str) -> None:
    with pytest.raises(ValueError, match=f"must be a duration above 0, .*; got '{text}'"):
        parse_age(text)


def test_coordinates() -> None:
    assert parse_coordinates("0:42") == (0, 42)
    for bad in ("0", "0:", ":4", "a:1", "0:-1", "0:1:2"):
        with pytest.raises(ValueError, match="PARTITION:OFFSET"):
            parse_coordinates(bad)


@pytest.mark.parametrize(("age", "bucket"), [(0, "<1h"), (HOUR - 1, "<1h"), (HOUR, "<1d"), (24 * HOUR, "<7d"),
                                             (7 * 24 * HOUR, "older"), (None, "unknown")])
def test_age_buckets(age: int | None, bucket: str) -> None:
    assert age_bucket(age) == bucket


def test_each_filter_chooses_what_it_says() -> None:
    fatal = letter(0, age_ms=3 * HOUR, attempt=1)
    slow = letter(1, age_ms=10 * 60_000, attempt=4,
                  verdict=Verdict(Outcome.RETRYABLE, "injected: endpoint unavailable", "StorageUnavailableError"))
    other = letter(2, stream="scope/other", partition=1)
    all_three = [fatal, slow, other]

    def chosen(**given: object) -> list[str]:
        found = [d for d in all_three if Filters(**given).matches(d, NOW)]  # type: ignore[arg-type]
        return [d.coordinates for d in found]

    assert chosen() == ["0:0", "0:1", "1:2"] and not Filters().active
    assert chosen(stream="scope/other") == ["1:2"]
    assert chosen(reason="RETRYABLE") == ["0:1"]  # the outcome, any case
    assert chosen(reason="endpoint unavail") == ["0:1"]  # the error message
    assert chosen(error_class="StorageAccessDeniedError") == ["0:0", "1:2"]
    assert chosen(older_than_ms=parse_age("2h")) == ["0:0"]
    assert chosen(newer_than_ms=parse_age("1h")) == ["0:1", "1:2"]
    assert chosen(min_attempt=2) == ["0:1"]
    assert chosen(partition=1) == ["1:2"]
    assert chosen(from_offset=1, to_offset=1) == ["0:1"]
    assert chosen(stream="scope/stream", min_attempt=2, newer_than_ms=HOUR) == ["0:1"]
    assert Filters(min_attempt=2).mismatch(fatal, NOW) == "attempt 1 is below 2"


def test_a_record_without_a_timestamp_matches_no_age_filter() -> None:
    undated = dead_letter("dlq", 0, 0, None, None, b"x", [], CODEC)
    assert not Filters(older_than_ms=1).matches(undated, NOW)
    assert not Filters(newer_than_ms=10 * HOUR).matches(undated, NOW)


def test_copies_of_one_record_dead_lettered_by_two_groups_count_once() -> None:
    first = letter(0, origin_offset=5, group="group-a", age_ms=2000)
    again = letter(1, origin_offset=5, group="group-b", age_ms=1000)
    alone = letter(2, origin_offset=6)
    unique, copies = dedupe([again, alone, first])
    assert [d.coordinates for d in unique] == ["0:0", "0:2"] and copies == 1
    assert first.group == "group-a"


def test_select_orders_limits_and_counts() -> None:
    letters = [letter(i, age_ms=(10 - i) * 1000) for i in range(6)] + [letter(6, origin_offset=0)]
    newest = select(letters, Filters(), NOW, limit=2)
    assert [d.offset for d in newest.records] == [5, 4]
    assert newest.counts() == {"total": 7, "matching": 7, "unique": 6, "duplicates": 1, "shown": 2}
    oldest = select(letters, Filters(from_offset=3), NOW, newest_first=False)
    assert [d.offset for d in oldest.records] == [3, 4, 5, 6]  # offset 6's first copy is not chosen
    assert (oldest.matching, oldest.duplicates) == (4, 0)


def test_stats_count_each_record_once_by_outcome_class_stream_and_age() -> None:
    letters = [
        letter(0, age_ms=10 * 24 * HOUR), letter(1, age_ms=2 * HOUR), letter(2, age_ms=60_000),
        letter(3, origin_offset=2, age_ms=30_000),  # a second copy of offset 2's record
        letter(4, verdict=Verdict(Outcome.RETRYABLE, "slow", "StorageUnavailableError"), stream="scope/b"),
        dead_letter("dlq", 0, 5, NOW - 3 * 24 * HOUR, None, b"junk", [(retry.H_OUTCOME, b"undecodable")], CODEC),
    ]
    counted = stats(letters, Filters(), NOW).as_json()
    assert (counted["total"], counted["unique"], counted["duplicates"]) == (6, 5, 1)
    assert counted["by_outcome"] == {"fatal": 3, "retryable-error": 1, "undecodable": 1}
    assert counted["by_error_class"] == {"StorageAccessDeniedError": 3, "(none)": 1, "StorageUnavailableError": 1}
    assert counted["by_stream"] == {"scope/stream": 3, "(undecodable)": 1, "scope/b": 1}
    assert counted["by_age"] == {"<1h": 2, "<1d": 1, "<7d": 1, "older": 1}
    assert stats(letters, Filters(reason="slow"), NOW).as_json()["by_outcome"] == {"retryable-error": 1}


def test_stats_hold_a_brief_of_each_matching_record_and_count_the_first_copy() -> None:
    first = letter(2, age_ms=60_000, verdict=Verdict(Outcome.RETRYABLE, "slow", "StorageUnavailableError"))
    later_copy = letter(3, origin_offset=2, age_ms=30_000)  # dead-lettered again later, as fatal
    letters = [later_copy, letter(1, age_ms=2 * HOUR), first]
    briefs = [Brief.of(dead) for dead in letters]
    # What `dlq stats` holds of a record: where it sits, which record it is, and what is counted; no record.
    assert briefs[2] == Brief(0, 2, first.timestamp_ms, first.identity, "retryable-error", "StorageUnavailableError",
                              "scope/stream")
    assert not hasattr(briefs[2], "__dict__") and not hasattr(briefs[2], "info")
    assert briefs[0].stream is briefs[1].stream  # the same names shared, not held once a record
    counted = count(briefs, NOW, total=10).as_json()
    assert counted == {**stats(letters, Filters(), NOW).as_json(), "total": 10}
    assert (counted["matching"], counted["unique"], counted["duplicates"]) == (3, 2, 1)
    # Offset 2's record counts once, as its first copy in DLQ order says (not as the copy read first).
    assert counted["by_outcome"] == {"fatal": 1, "retryable-error": 1}


def test_a_timestamp_header_no_date_can_state_is_shown_as_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    headers = [(retry.H_OUTCOME, b"fatal"), (retry.H_TIMESTAMP, b"99999999999999999")]
    dead = dead_letter("dlq", 0, 12, NOW, None, b"x", headers, CODEC)
    assert dead.original_timestamp_ms == 99999999999999999 and iso(dead.original_timestamp_ms) is None
    print_show(dead)  # was "year 3170843 is out of range", exit 64, for a record that is there
    assert "not a date (99999999999999999)" in capsys.readouterr().out
    assert dead.detail()["original_timestamp_ms"] == 99999999999999999


def test_a_listing_holds_what_it_shows_of_a_matching_record_and_nothing_of_the_rest() -> None:
    """What ``list`` keeps of each record as it is read: its summary, without the value, the headers and the
    decoded record (most of its size); ``replay`` keeps the whole record, which it sends."""
    chosen = Filters(stream="scope/stream")
    kept, other = letter(3), letter(4, stream="other/stream")
    held = matching(chosen, NOW)(kept)
    assert held is not None and held.summary() == kept.summary()
    assert (held.value, held.headers, held.stack, held.info) == (None, (), "", None)
    assert (held.stream, held.chunk) == ("scope/stream", kept.chunk) and kept.chunk.endswith("E-1-O-3.a")
    assert matching(chosen, NOW)(other) is None
    assert matching(chosen, NOW, to_send=True)(kept) is kept
    assert matching(chosen, NOW, to_send=True)(other) is None
