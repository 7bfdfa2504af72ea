"""Phase 1 pauses the cyclic garbage collector while a mark's records exist, and puts it back as it was."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from reclaim.deletion.mark import LedgerDeletionService, _cyclic_gc_paused
from reclaim.schemas.ledger import PendingDeleteLedgerInfo
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.rows import live_chunks


class WatchingPublisher:
    """Confirms every record (or none), noting whether the collector was on while it published."""

    def __init__(self, confirm: bool = True) -> None:
        self.confirm = confirm
        self.collector_on: list[bool] = []

    def publish(self, records: Sequence[PendingDeleteLedgerInfo]) -> list[PendingDeleteLedgerInfo]:
        self.collector_on.append(gc.isenabled())
        return [] if self.confirm else list(records)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteMetadataStore]:
    meta = SQLiteMetadataStore(tmp_path / "metadata.db")
    yield meta
    meta.close()


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


@pytest.mark.usefixtures("collector_on")
@pytest.mark.parametrize("confirm", [True, False])
def test_the_collector_is_off_while_a_mark_publishes_and_on_again_after(store: SQLiteMetadataStore, tmp_path: Path,
                                                                        confirm: bool) -> None:
    publisher = WatchingPublisher(confirm)
    result = LedgerDeletionService(store, publisher).mark(live_chunks(store, tmp_path))
    assert publisher.collector_on == [False]
    assert gc.isenabled()
    assert bool(result.marked) is confirm


@pytest.mark.usefixtures("collector_on")
def test_the_collector_is_on_again_after_a_publish_that_raised(store: SQLiteMetadataStore, tmp_path: Path) -> None:
    class Failing:
        def publish(self, records: Sequence[PendingDeleteLedgerInfo]) -> list[PendingDeleteLedgerInfo]:
            raise RuntimeError("broker gone")

    with pytest.raises(RuntimeError):
        LedgerDeletionService(store, Failing()).prepare(live_chunks(store, tmp_path))
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        with _cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


@pytest.mark.usefixtures("collector_on")
def test_overlapping_pauses_of_two_threads_end_with_the_last() -> None:
    inside, release = threading.Event(), threading.Event()

    def other_mark() -> None:
        with _cyclic_gc_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other_mark)
    with _cyclic_gc_paused():
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread's mark still runs
    release.set()
    thread.join(10)
    assert gc.isenabled()
