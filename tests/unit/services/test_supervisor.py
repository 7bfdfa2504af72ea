"""The supervisor of ``reclaim worker --processes N`` without a server: the backoff schedule, when it gives up,
the default process count, the settings each child gets, and its loop over stand-in children."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reclaim.cli.main import main
from reclaim.exits import ExitCode
from reclaim.services.supervisor import (
    Backoff,
    Supervisor,
    after_death,
    cgroup_cpu_limit,
    child_settings,
    default_processes,
    exit_description,
    host_cores,
    usable_cores,
)
from reclaim.settings import Settings


def test_the_backoff_doubles_from_its_base_up_to_its_cap() -> None:
    backoff = Backoff(base_s=1, max_s=30)
    assert [backoff.delay(n) for n in range(8)] == [0, 1, 2, 4, 8, 16, 30, 30]
    assert backoff.delay(10_000) == 30  # no overflow after a very long kill loop


def test_a_life_that_lasted_restarts_at_once_and_starts_the_count_again() -> None:
    backoff = Backoff(stable_s=30)
    verdict = after_death(backoff, short_lives=4, failed_starts=4, lived_s=31, returncode=1)
    assert (verdict.short_lives, verdict.failed_starts, verdict.delay_s, verdict.give_up) == (0, 0, 0, False)


def test_short_lives_in_a_row_back_off_further_each_time() -> None:
    backoff = Backoff(base_s=1, max_s=30, stable_s=30, give_up_after=5)
    short, failed, delays = 0, 0, []
    for _ in range(4):
        verdict = after_death(backoff, short, failed, lived_s=0.5, returncode=2)
        short, failed = verdict.short_lives, verdict.failed_starts
        delays.append(verdict.delay_s)
        assert not verdict.give_up
    assert delays == [1, 2, 4, 8]


def test_a_child_failing_at_start_over_and_over_is_given_up_on() -> None:
    backoff = Backoff(give_up_after=3)
    verdicts = []
    short = failed = 0
    for _ in range(3):
        verdict = after_death(backoff, short, failed, lived_s=1, returncode=2)
        short, failed = verdict.short_lives, verdict.failed_starts
        verdicts.append(verdict.give_up)
    assert verdicts == [False, False, True]


def test_a_child_killed_by_a_signal_is_never_given_up_on_but_backs_off() -> None:
    backoff = Backoff(give_up_after=3, max_s=30)
    short = failed = 0
    for _ in range(20):
        verdict = after_death(backoff, short, failed, lived_s=0.1, returncode=-signal.SIGKILL)
        short, failed = verdict.short_lives, verdict.failed_starts
        assert not verdict.give_up
    assert verdict.delay_s == 30
    # A signal between failed starts breaks their run: only failures in a row count.
    assert after_death(backoff, 5, 2, lived_s=0.1, returncode=-signal.SIGKILL).failed_starts == 0


@pytest.mark.parametrize(("returncode", "said"), [(0, "exit code 0"), (2, "exit code 2"),
                                                  (-signal.SIGKILL, "signal SIGKILL"),
                                                  (-signal.SIGTERM, "signal SIGTERM")])
def test_an_exit_is_said_as_code_or_signal(returncode: int, said: str) -> None:
    assert exit_description(returncode) == said


@pytest.mark.parametrize(("cores", "partitions", "consumers", "expected"), [
    (2, 4, 1, 2),    # one per core
    (16, 4, 1, 4),   # no more members than partitions
    (16, 12, 2, 6),  # two consumers a process: half as many processes
    (8, 1, 1, 1),    # one partition: one process, no supervisor
    (4, 2, 4, 1),    # more consumer threads than partitions: still one process
    (1, 64, 1, 1),
])
def test_the_default_is_the_usable_cores_capped_by_the_partitions(cores: int, partitions: int, consumers: int,
                                                                    expected: int) -> None:
    assert default_processes(cores, partitions, consumers) == expected


@pytest.mark.parametrize(("cpu_max", "cores"), [("max 100000\n", None), ("200000 100000\n", 2),
                                                ("150000 100000", 2), ("50000 100000", 1), ("", None),
                                                (None, None), ("garbage", None)])
def test_a_containers_cpu_quota_is_read_in_whole_cores(cpu_max: str | None, cores: int | None) -> None:
    assert cgroup_cpu_limit(cpu_max) == cores


def test_usable_cores_are_the_affinity_unless_the_quota_is_lower() -> None:
    assert usable_cores(8, None) == 8
    assert usable_cores(8, 2) == 2
    assert usable_cores(2, 16) == 2


def test_each_child_gets_one_process_and_a_static_id_of_its_own() -> None:
    settings = Settings(instance_id="host-a", processes=3, consumers=2)
    children = [child_settings(settings, index, 3) for index in range(3)]
    assert [child.instance_id for child in children] == ["host-a-0", "host-a-1", "host-a-2"]
    assert {child.processes for child in children} == {1}
    assert {child.consumers for child in children} == {2}
    assert child_settings(Settings(processes=2), 1, 2).instance_id is None


def test_processes_are_read_from_the_environment() -> None:
    assert Settings.from_env({"RECLAIM_PROCESSES": "3"}).processes == 3
    assert Settings.from_env({}).processes is None  # the host decides


@pytest.mark.parametrize("value", ["0", "-2"])
def test_a_process_count_below_one_is_a_one_line_usage_error(value: str, capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    assert main(["worker", "--processes", value, "--state-dir", str(tmp_path)]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert err == f"reclaim: error: --processes must be at least 1, got {value}"


@dataclass
class FakeChild:
    """A stand-in for a child process: it dies when told to, and on SIGTERM unless ``stubborn``."""

    pid: int
    returncode: int | None = None
    stubborn: bool = False
    signals: list[int] = field(default_factory=list)
    stdin: Any = None

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)
        if signum == signal.SIGKILL:
            self.returncode = -signal.SIGKILL
        elif not self.stubborn:
            self.returncode = 0

    def wait(self) -> int | None:
        return self.returncode


class Children:
    def __init__(self, stubborn: bool = False, exit_at_start: int | None = None) -> None:
        self.started: list[tuple[int, FakeChild]] = []
        self.stubborn, self.exit_at_start = stubborn, exit_at_start

    def launch(self, index: int) -> Any:
        child = FakeChild(pid=1000 + len(self.started), stubborn=self.stubborn, returncode=self.exit_at_start)
        self.started.append((index, child))
        return child


def run_in_thread(supervisor: Supervisor) -> tuple[threading.Thread, list[int]]:
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(supervisor.run()), daemon=True)
    thread.start()
    return thread, result


def wait_for(check: Any, timeout: float = 5.0) -> None:
    deadline = threading.Event()
    timer = threading.Timer(timeout, deadline.set)
    timer.start()
    try:
        while not check():
            assert not deadline.wait(0.01), "timed out"
    finally:
        timer.cancel()


def test_a_dead_child_is_restarted_and_a_stop_reaches_every_child(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    children, stop, exited = Children(), threading.Event(), []
    supervisor = Supervisor(2, stop, children.launch, backoff=Backoff(base_s=0.01), on_exit=exited.append)
    thread, result = run_in_thread(supervisor)
    wait_for(lambda: len(children.started) == 2)
    children.started[0][1].returncode = -signal.SIGKILL
    wait_for(lambda: len(children.started) == 3)
    assert children.started[2][0] == 0  # slot 0 started again
    stop.set()
    thread.join(5)
    assert result == [0]
    assert [child.signals for _, child in children.started] == [[], [signal.SIGTERM], [signal.SIGTERM]]
    assert sorted(exited) == [1000, 1001, 1002]
    lines = [r.getMessage() for r in caplog.records if r.name == "reclaim.services.supervisor"]
    assert "worker child 0 started (pid 1000)" in lines
    assert "worker child 0 stopped (pid 1000): signal SIGKILL; restarting in 0.0 s" in lines
    assert "worker child 0 started (pid 1002)" in lines
    assert "worker child 1 stopped (pid 1001): exit code 0" in lines


def test_a_child_that_outlives_the_grace_time_is_killed_and_the_exit_is_nonzero() -> None:
    children, stop = Children(stubborn=True), threading.Event()
    supervisor = Supervisor(1, stop, children.launch, grace_s=0.1)
    thread, result = run_in_thread(supervisor)
    wait_for(lambda: len(children.started) == 1)
    stop.set()
    thread.join(5)
    assert result == [1]
    assert children.started[0][1].signals == [signal.SIGTERM, signal.SIGKILL]


def test_children_failing_at_start_make_the_supervisor_give_up(caplog: pytest.LogCaptureFixture) -> None:
    children, stop = Children(exit_at_start=2), threading.Event()
    supervisor = Supervisor(2, stop, children.launch, backoff=Backoff(base_s=0.01, max_s=0.02, give_up_after=3))
    thread, result = run_in_thread(supervisor)
    thread.join(10)
    assert result == [1] and supervisor.gave_up
    assert any("giving up, stopping the others" in r.getMessage() for r in caplog.records)


def test_a_stop_before_the_children_start_starts_none() -> None:
    children, stop = Children(), threading.Event()
    stop.set()
    assert Supervisor(2, stop, children.launch).run() == 0
    assert children.started == []


def test_this_hosts_cores_are_at_least_one_and_at_most_the_machines() -> None:
    assert 1 <= host_cores() <= (os.cpu_count() or 1)
