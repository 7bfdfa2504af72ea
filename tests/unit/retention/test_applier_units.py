"""The applier's judgement of one record, without a broker: what is final, what is read again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from reclaim.consumers.truncation_applier import Applied, apply_event
from reclaim.schemas import build_codec
from reclaim.schemas.base import millis_now
from reclaim.schemas.errors import DecodeReason, RecordDecodeError
from reclaim.schemas.streams import RetentionPolicy, RetentionType, StreamCut, TruncationEvent, TruncationReason
from reclaim.segments.streams import StreamController
from tests.support.orders import SEGMENTS, STREAM, orders_stream

T = TypeVar("T")


class RegistryDown:
    """A codec whose schema registry does not answer."""

    def decode(self, value: bytes, topic: str, expected: type[T]) -> T:
        raise RecordDecodeError(DecodeReason.REGISTRY_UNAVAILABLE, "connection refused")


CONSUMPTION = RetentionPolicy(RetentionType.CONSUMPTION)


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[StreamController]:
    """The orders stream under a CONSUMPTION policy: the events below are consumption truncations."""
    with orders_stream(tmp_path) as controller:
        controller.set_policy(STREAM, CONSUMPTION)
        yield controller


def event(at: StreamCut, stream: str = STREAM, computed_at: int | None = None) -> bytes:
    decided = millis_now() if computed_at is None else computed_at
    return build_codec().encode(TruncationEvent(stream, at, TruncationReason.CONSUMPTION, decided, CONSUMPTION), "t")


def test_an_event_undecodable_only_while_the_registry_is_down_is_read_again(controller: StreamController) -> None:
    # It was INVALID, so its offset was stored and the truncation lost for good.
    value = event(StreamCut.from_mapping({0: 10, 1: 10}))
    assert apply_event(controller, RegistryDown(), value, "t", "t[0]@0") is Applied.RETRY  # type: ignore[arg-type]
    assert controller.head(STREAM) == StreamCut()
    assert apply_event(controller, build_codec(), b"not avro at all", "t", "t[0]@1") is Applied.INVALID


def test_a_cut_naming_a_negative_segment_is_invalid_not_a_crash(controller: StreamController) -> None:
    # The ValueError it raised stopped the applier before the offset was stored: it died on it at every restart.
    value = event(StreamCut.from_mapping({-1: 5}))
    assert apply_event(controller, build_codec(), value, "t", "t[0]@0") is Applied.INVALID
    assert controller.head(STREAM) == StreamCut()


@pytest.mark.parametrize("offsets", [{0: 41, 1: 5}, {0: 5, 1: 5, 7: 3}, {99: 1}])
def test_a_cut_that_does_not_fit_the_stream_is_invalid_and_truncates_nothing(controller: StreamController,
                                                                             offsets: dict[int, int]) -> None:
    value = event(StreamCut.from_mapping(offsets))
    assert apply_event(controller, build_codec(), value, "t", "t[0]@0") is Applied.INVALID
    assert controller.head(STREAM) == StreamCut()
    assert controller.read_all(f"{STREAM}/0.#epoch.0") == b"x" * 40


def test_the_same_event_twice_and_a_cut_behind_the_head_change_nothing(controller: StreamController) -> None:
    codec = build_codec()
    at = StreamCut.from_mapping({0: 10, 1: 12})
    assert apply_event(controller, codec, event(at), "t", "t[0]@0") is Applied.TRUNCATED
    assert apply_event(controller, codec, event(at), "t", "t[0]@1") is Applied.NO_OP
    assert apply_event(controller, codec, event(StreamCut.from_mapping({0: 3, 1: 3})), "t", "t[0]@2") is Applied.NO_OP
    assert controller.head(STREAM) == at
    assert controller.read_all(f"{STREAM}/0.#epoch.0") == b"x" * 30


def test_an_event_for_a_missing_or_deleted_stream_is_skipped(controller: StreamController) -> None:
    codec = build_codec()
    assert apply_event(controller, codec, event(StreamCut.from_mapping({0: 1}), "scope/missing"), "t",
                       "t[0]@0") is Applied.UNKNOWN_STREAM
    controller.seal_stream(STREAM)
    controller.delete_stream(STREAM)
    outcome = apply_event(controller, codec, event(StreamCut.from_mapping({0: 1, 1: 1})), "t", "t[0]@1")
    assert outcome is Applied.UNKNOWN_STREAM


def test_an_event_decided_before_the_stream_was_created_again_is_skipped(controller: StreamController) -> None:
    # An event for a deleted stream, delivered after a stream of the same name was created, truncated the new
    # stream: its segment ids start at 0 again, so the old cut fitted it.
    codec = build_codec()
    stale = event(StreamCut.from_mapping({0: 30, 1: 30}), computed_at=millis_now() - 1000)
    controller.seal_stream(STREAM)
    controller.delete_stream(STREAM)
    controller.create_stream("scope", "orders", 2)
    controller.set_policy(STREAM, CONSUMPTION)
    for segment in SEGMENTS:
        controller.append(segment, b"n" * 40)
    assert apply_event(controller, codec, stale, "t", "t[0]@0") is Applied.UNKNOWN_STREAM
    assert controller.head(STREAM) == StreamCut()
    assert controller.read_all(SEGMENTS[0]) == b"n" * 40
    assert apply_event(controller, codec, event(StreamCut.from_mapping({0: 30, 1: 30})), "t",
                       "t[0]@1") is Applied.TRUNCATED
