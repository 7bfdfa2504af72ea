"""A long-running command's stop event: SIGTERM stops it with exit 0, Ctrl-C (SIGINT) with 130, as for every
command."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from reclaim.exits import ExitCode
from reclaim.localstack.procs import exit_status, stop_on_signals


@pytest.fixture(autouse=True)
def handlers_restored() -> Iterator[None]:
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, ExitCode.INTERRUPTED), (signal.SIGTERM, ExitCode.OK)])
def test_the_signal_that_stopped_a_command_decides_its_exit_status(signum: int, code: int) -> None:
    lines: list[str] = []
    stop = stop_on_signals("stopping", lines.append)
    signal.raise_signal(signum)
    assert stop.is_set() and stop.signum == signum
    assert exit_status(0, stop) == code
    assert lines == [f"signal {signal.Signals(signum).name}: stopping"]


def test_the_first_signal_counts_and_a_failure_keeps_its_own_status() -> None:
    stop = stop_on_signals("stopping")
    signal.raise_signal(signal.SIGINT)
    signal.raise_signal(signal.SIGTERM)  # a second Ctrl-C or a service manager's stop while it finishes
    assert exit_status(0, stop) == ExitCode.INTERRUPTED
    assert exit_status(ExitCode.FINDINGS, stop) == ExitCode.FINDINGS


def test_a_command_not_stopped_by_a_signal_keeps_its_status() -> None:
    assert exit_status(0, stop_on_signals("stopping")) == ExitCode.OK
    assert exit_status(0, threading.Event()) == ExitCode.OK
