"""The retention recorder and ``reclaim streams record`` without a broker: one broken stream stops no other."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reclaim.cli import streams as streams_cli
from reclaim.cli.main import build_parser, main, settings_from
from reclaim.exits import ExitCode, Unavailable
from reclaim.producers.publisher import PublishError
from reclaim.schemas.base import AvroRecord
from reclaim.schemas.streams import RetentionPolicy, RetentionType
from reclaim.segments.streams import StreamController
from reclaim.services.recorder import RetentionRecorder
from tests.support.orders import SEGMENTS, STREAM, orders_stream

POLICY = RetentionPolicy(RetentionType.CONSUMPTION)


class Published:
    def __init__(self) -> None:
        self.records: list[AvroRecord] = []

    def publish(self, topic: str, record: AvroRecord, key: str) -> None:
        self.records.append(record)


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[StreamController]:
    with orders_stream(tmp_path) as controller:
        yield controller


def broken(controller: StreamController) -> None:
    """scope/orders loses a segment's metadata; scope/other, listed after it, is sound."""
    controller.create_stream("scope", "other", 1)
    for stream in (STREAM, "scope/other"):
        controller.set_policy(stream, POLICY)
    controller.segments.delete(SEGMENTS[1])


def test_a_stream_whose_cut_cannot_be_read_does_not_stop_the_others(controller: StreamController) -> None:
    # Its SegmentNotFoundError escaped tick(): `streams record` recorded nothing after it, and the truncation
    # applier (which ticks after every poll) died, and died again at the first tick after each restart.
    broken(controller)
    published = Published()
    recorder = RetentionRecorder(controller, published, "cuts", 0)  # type: ignore[arg-type]
    assert [record.stream for record in recorder.tick(force=True)] == ["scope/other"]
    assert list(recorder.skipped) == [STREAM] and "no such segment" in recorder.skipped[STREAM]
    assert [record.stream for record in published.records] == ["scope/other"]  # type: ignore[attr-defined]


class Refused(Published):
    """A broker that refuses the record of one stream (e.g. a cut of many segments above max.message.bytes)."""

    def publish(self, topic: str, record: AvroRecord, key: str) -> None:
        if key == STREAM:
            raise PublishError("StreamCutRecord", topic, "Broker: Message size too large")
        super().publish(topic, record, key)


def test_a_stream_whose_record_the_broker_refuses_does_not_stop_the_others(controller: StreamController) -> None:
    # The PublishError escaped tick() and stopped the truncation applier, again after every restart.
    controller.create_stream("scope", "other", 1)
    for stream in (STREAM, "scope/other"):
        controller.set_policy(stream, POLICY)
    refused = Refused()
    recorder = RetentionRecorder(controller, refused, "cuts", 60_000)  # type: ignore[arg-type]
    assert [record.stream for record in recorder.tick()] == ["scope/other"]
    assert "Message size too large" in recorder.skipped[STREAM]
    assert STREAM not in recorder.latest  # so the next tick tries it again
    assert [record.stream for record in recorder.tick()] == []
    assert list(recorder.skipped) == [STREAM]


def record(tmp_path: Path, controller: StreamController, capsys: pytest.CaptureFixture[str],
           monkeypatch: pytest.MonkeyPatch) -> str:
    @contextmanager
    def fake(settings: object, max_rolling_length: int | None = None, *, controller_key: bool
             ) -> Iterator[tuple[StreamController, Published]]:
        assert controller_key, "recorded cuts are signed with the controller's key"
        yield controller, Published()

    monkeypatch.setattr(streams_cli, "stream_controller", fake)
    args = build_parser().parse_args(["streams", "record", "--state-dir", str(tmp_path / "state")])
    assert streams_cli.cmd_streams(args, settings_from(args)) == 0
    return capsys.readouterr().out


def test_streams_record_with_a_broken_stream_records_the_rest_and_fails(
        tmp_path: Path, controller: StreamController, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    broken(controller)
    with pytest.raises(Unavailable, match=f"1 stream\\(s\\) not recorded, e.g. {STREAM}: no such segment"):
        record(tmp_path, controller, capsys, monkeypatch)
    assert capsys.readouterr().out.startswith("recorded scope/other size=0")


def test_streams_record_with_nothing_to_record_says_so(tmp_path: Path, controller: StreamController,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # It printed nothing at all, as if it had not run (scope/orders has no retention policy).
    out = record(tmp_path, controller, capsys, monkeypatch)
    assert out == "no stream with a retention policy: nothing recorded\n"


def test_streams_record_naming_a_stream_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It recorded every stream with a policy, not the one named.
    with pytest.raises(SystemExit) as exited:
        main(["streams", "record", STREAM, "--state-dir", str(tmp_path / "state")])
    assert exited.value.code == ExitCode.USAGE
    assert capsys.readouterr().err == ("reclaim: error: streams record: unrecognized arguments: scope/orders "
                                       "(see reclaim streams record --help)\n")
    assert not (tmp_path / "state").exists()
