"""The offloader's steps on a SQLite store and two filesystem bindings (tier-1 and a tier-2 stand-in), phase 1
recorded rather than published: what it refuses, what it keeps from an earlier try, its deadline and its
release lag. The whole protocol with phase 2, S3 and the broker is tests/integration/segments/test_offload.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim.segments.offload import Offloader, OffloadRefused
from reclaim.storage.chunks import ChunkHandle, offload_object_name
from reclaim.storage.metadata import OffloadState
from tests.support.offload_tiers import Tiers, open_tiers

SEGMENT = "scope/stream/0.#epoch.0"
DATA = bytes(range(250))  # chunks of 100, 100 and 50


class Crash(Exception):
    pass


class Setup(Tiers):
    def offloader(self, crash_at: str | None = None, **options: float) -> Offloader:
        def crash(step: str) -> None:
            if step == crash_at:
                raise Crash(step)

        return Offloader(self.store, self.segments.bindings, self.cold, self.sink, clock=lambda: self.now[0],
                         crash_hook=crash, **options)  # type: ignore[arg-type]

    def chunks(self) -> list[str]:
        return [c.name for c in self.segments.layout(SEGMENT)]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    tiers = open_tiers(tmp_path, 1_000_000.0)
    tiers.write(SEGMENT, "scope/stream", DATA)
    yield Setup(**vars(tiers))
    tiers.store.close()


def test_what_an_offload_refuses(setup: Setup) -> None:
    first, _, last = setup.chunks()
    offloader = setup.offloader()
    with pytest.raises(OffloadRefused, match="may still grow"):
        offloader.offload(last)
    with pytest.raises(OffloadRefused, match="not in a live layout"):
        offloader.offload("no/such/chunk")
    offloader.offload(first)
    with pytest.raises(OffloadRefused, match="two bindings"):
        offloader.offload(first)  # switched: both copies listed
    setup.segments.seal(SEGMENT)
    assert offloader.offload(last).state is OffloadState.SWITCHED  # sealed: it will not grow any more
    setup.segments.truncate(SEGMENT, 100)
    with pytest.raises(OffloadRefused, match="not in a live layout"):
        offloader.offload(first)
    assert setup.segments.read(SEGMENT, 100, 150) == DATA[100:]


def test_a_whole_copy_from_an_earlier_try_is_kept_and_a_partial_one_written_again(setup: Setup) -> None:
    first, second, _ = setup.chunks()
    with pytest.raises(Crash):
        setup.offloader(crash_at="uploaded").offload(first)
    (intent,) = setup.store.offloads_of([first])
    name = offload_object_name(intent.copy, first)
    before = setup.cold.data_path(name).stat().st_mtime_ns
    assert setup.offloader().resume().switched == (first,)
    assert setup.cold.data_path(name).stat().st_mtime_ns == before  # kept, not written again

    with pytest.raises(Crash):
        setup.offloader(crash_at="uploaded").offload(second)
    (intent,) = setup.store.offloads_of([second])
    name = offload_object_name(intent.copy, second)
    setup.cold.delete(ChunkHandle(name, read_only=False))
    setup.cold.create_with_content(name, DATA[100:150], intent.tags)  # a copy cut short
    assert setup.offloader().resume().switched == (second,)
    assert setup.cold.read(ChunkHandle(name, read_only=True), 0, 100) == DATA[100:200]
    assert setup.segments.read(SEGMENT, 0, 250) == DATA


def test_past_its_deadline_an_offload_never_switches_and_is_reaped_after_the_margin(setup: Setup) -> None:
    first = setup.chunks()[0]
    with pytest.raises(Crash):
        setup.offloader(crash_at="uploaded", upload_within_s=10).offload(first)
    setup.now[0] += 10
    offloader = setup.offloader(reap_margin_s=5)
    assert offloader.resume().cancelled == (first,)
    row = setup.store.get_chunk(first)
    assert row is not None and [loc.binding for loc in row.locations] == ["fs-tier1"]
    (cancelled,) = setup.store.offloads_of([first])
    assert offloader.reap() == [cancelled.copy]  # a cancelled offload is reaped at once
    (abandoned,) = setup.store.offloads_of([first])
    assert abandoned.state is OffloadState.ABANDONED and setup.store.get_mark(abandoned.mark_id or "") is not None
    assert setup.sink.prepared == 1  # its copy's pending delete, published once


def test_the_hot_copy_is_released_after_the_lag_under_the_mark_chosen_before_its_publish(setup: Setup) -> None:
    first = setup.chunks()[0]
    offloader = setup.offloader(release_after_s=60)
    offloader.offload(first)
    assert offloader.release_due() == []
    setup.now[0] += 60
    with pytest.raises(Crash):
        setup.offloader(crash_at="release-published", release_after_s=60).release_due()
    (chosen,) = setup.store.offloads_of([first])
    assert chosen.state is OffloadState.SWITCHED and chosen.mark_id is not None
    assert offloader.release_due() == [first]
    (released,) = setup.store.offloads_of([first])
    assert (released.state, released.mark_id) == (OffloadState.RELEASED, chosen.mark_id)  # the same mark again
    row = setup.store.get_chunk(first)
    assert row is not None and [loc.binding for loc in row.locations] == ["fs-cold"]
    assert setup.segments.read(SEGMENT, 0, 250) == DATA
