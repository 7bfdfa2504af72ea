"""``reclaim streams`` refuses bad input before it opens anything, and a cut it accepts truncates exactly
there: the empty cut (the very start) deletes nothing, an offset is never rounded, a limit is within its bound."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim.cli.streams import parse_cut
from reclaim.exits import ExitCode, UsageError
from reclaim.schemas.streams import StreamCut
from reclaim.security.errors import SigningError
from reclaim.segments.streams import StreamController
from reclaim.services.controller import _NoPhaseOne
from reclaim.storage.metadata import ChunkRecord
from tests.support.cli import NOBODY, clean_env, one_line_error, run_reclaim
from tests.support.orders import SEGMENTS, STREAM, orders_stream


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[StreamController]:
    with orders_stream(tmp_path) as controller:
        yield controller


def test_truncating_at_the_empty_cut_deletes_nothing(controller: StreamController) -> None:
    """``--cut '{}'`` deleted every segment of the stream (and ``streams cut`` then failed on it)."""
    assert controller.truncate(STREAM, StreamCut()) is False
    assert all(controller.segments.exists(segment) for segment in SEGMENTS)
    assert controller.tail_cut(STREAM) == (StreamCut.from_mapping({0: 40, 1: 40}), 80)
    # Nor once the stream has a head: the empty cut is behind every head.
    assert controller.truncate(STREAM, StreamCut.from_mapping({0: 8, 1: 8})) is True
    assert controller.truncate(STREAM, StreamCut()) is False
    assert controller.head(STREAM) == StreamCut.from_mapping({0: 8, 1: 8})
    assert all(controller.segments.exists(segment) for segment in SEGMENTS)


@pytest.mark.parametrize(("text", "message"), [
    ('{"0": 1.5}', "offset 1.5 is not a whole number"),  # was truncated at 1
    ('{"0": true}', "offset true is not a whole number"),  # was truncated at 1
    ('{"0": "8"}', 'offset "8" is not a whole number'),
    ("[1]", "not a JSON object"),
])
def test_a_cut_offset_is_never_rounded(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cut(text)


def test_a_cut_reads_whole_offsets() -> None:
    assert parse_cut('{"0": 128, "1": -1}') == StreamCut.from_mapping({0: 128, 1: -1})


def test_a_missing_cut_is_named() -> None:
    with pytest.raises(UsageError, match="streams truncate needs --cut"):
        parse_cut(None)


@pytest.mark.parametrize(("args", "message"), [
    (["create", "/"], "scope name '' must match"),
    (["create", "scope/a b"], "stream name 'a b' must match"),
    (["cut", "scope/x/y"], "stream name 'x/y' must match"),
    (["create", "scope/s", "--segments", "0"], "--segments must be between 1 and 10000, got 0"),
    (["create", "scope/s", "--segments", "-3"], "--segments must be between 1 and 10000, got -3"),
    (["create", "scope/s", "--segments", "100000000"], "--segments must be between 1 and 10000, got 100000000"),
    # A limit above a long was stored, then could not be published or read back: every later command
    # on the stream (and `streams record` on all of them) failed until the row was mended by hand.
    (["set-policy", "scope/s", "--type", "size", "--max", str(2**64)],
     f"max limit {2**64} is above the largest SIZE limit, {2**62} bytes (2^62)"),
    # A limit a long holds but the job's arithmetic did not: it passed, then every stream of its state
    # bucket stopped when the job could not save the bucket.
    (["set-policy", "scope/s", "--type", "time", "--max", str(2**63 - 2)],
     f"max limit {2**63 - 2} is above the largest TIME limit, 3155760000000 ms (100 years)"),
    (["set-policy", "scope/s", "--type", "consumption", "--min", str(3_155_760_000_001)],
     "min limit 3155760000001 is above the largest TIME limit"),
    (["set-policy", "scope/s", "--type", "consumption", "--limit-type", "size", "--max", str(2**62 + 1)],
     "is above the largest SIZE limit"),
    (["set-policy", "scope/s", "--type", "size", "--min", "-1"], "limits must not be negative"),
    (["set-policy", "scope/s", "--type", "time", "--min", "5", "--max", "3"], "min limit 5 is above max limit 3"),
    (["truncate", "scope/s"], "streams truncate needs --cut"),
    (["truncate", "scope/s", "--cut", '{"0": 1.5}'], "offset 1.5 is not a whole number"),
])
def test_bad_streams_input_is_refused_before_anything_is_opened(tmp_path: Path, args: list[str],
                                                                message: str) -> None:
    env = clean_env(tmp_path, RECLAIM_ADMIN_PRINCIPALS="ops", RECLAIM_PRINCIPAL="ops")
    result = run_reclaim("streams", *args, "--bootstrap", NOBODY, env=env, timeout=60)
    assert message in one_line_error(result, ExitCode.USAGE)
    assert not (tmp_path / "state").exists()  # neither the broker nor the store was touched


def test_a_controller_opened_without_the_controller_key_refuses_phase_1_before_the_layout_changes(
        controller: StreamController) -> None:
    """``streams set-policy``, ``cut`` and ``history`` open their controller without the controller's key (an
    admin's keyring has only the admin's): were it to truncate, its pending deletes would go unsigned."""
    def chunks() -> list[ChunkRecord]:
        return [c for segment in SEGMENTS for c in controller.segments.store.list_chunks(segment, active_only=False)]

    before = chunks()
    controller.segments.garbage = _NoPhaseOne()
    with pytest.raises(SigningError, match="without the controller's key"):
        controller.truncate(STREAM, StreamCut.from_mapping({0: 16, 1: 16}))
    assert controller.head(STREAM) == StreamCut()
    assert chunks() == before and all(chunk.active for chunk in before)
