"""The worker's main thread while its consumer threads run and finish: it waits, it does not spin."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from reclaim.services import worker


class _FinishesSlowly:
    """A consumer stand-in (no broker needed for what is tested: the main thread's waiting) that, once
    told to stop, takes a while to finish its batch, as a real one completing its deletes does."""

    def __init__(self, finish_s: float) -> None:
        self.finish_s = finish_s

    def run(self, stop: threading.Event) -> None:
        stop.wait()
        time.sleep(self.finish_s)


def test_the_main_thread_waits_for_finishing_consumers_without_spinning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker.runtime, "deletion_worker", lambda *_args, **_kwargs: _FinishesSlowly(1.5))
    settings: Any = type("S", (), {"consumers": 2})()
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    cpu = time.thread_time()
    assert worker._run_consumers(settings, None, None, stop) == 0  # type: ignore[arg-type]
    # Waiting costs next to nothing; the loop this replaced returned from stop.wait at once once stop
    # was set and spun this thread for the whole 1.5 s the consumers took.
    assert time.thread_time() - cpu < 0.3
