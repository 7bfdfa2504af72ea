"""``reclaim worker --processes N``: N worker processes of one consumer group under one supervisor.

The supervisor runs no consumer. It starts each child as a fresh interpreter (``python -m
reclaim.services.worker_child``: fork and exec at once, so no copy of a process with librdkafka's threads
ever runs Python), hands it its settings over its stdin and keeps that pipe open as the child's lifeline:
when the supervisor dies, even by SIGKILL, the child reads end-of-file and stops as it would on SIGTERM
(batch finished, offsets committed). A child that dies is restarted, at once after a life that lasted,
with exponential backoff after short ones; a child that keeps failing at start makes the supervisor give
up. SIGTERM or SIGINT to the supervisor is passed on to every child, each gets :data:`STOP_GRACE_S` to
finish its batch and commit, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from reclaim.settings import Settings

log = logging.getLogger(__name__)

STOP_GRACE_S = 30.0
"""How long a stopping child may take to finish its batch and commit before it is SIGKILLed."""
POLL_S = 0.2
"""How often the supervisor looks at its children."""
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


@dataclass(frozen=True)
class Backoff:
    """When a dead child is started again, and when the supervisor gives up.

    A life of ``stable_s`` or more was a good one: the child is restarted at once and its count of short
    lives starts again. After the n-th short life in a row the restart waits ``base_s * 2**(n-1)`` seconds,
    at most ``max_s``. When ``give_up_after`` short lives in a row each ended with the child's own nonzero
    exit (it could not start: a setting, a server it needs), the supervisor stops every child and exits 1.
    A child killed by a signal is never given up on: something outside killed it, and the backoff alone
    keeps a kill loop from spinning.
    """

    base_s: float = 1.0
    max_s: float = 30.0
    stable_s: float = 30.0
    give_up_after: int = 5

    def delay(self, short_lives: int) -> float:
        """Seconds to wait before the next start after ``short_lives`` short lives in a row (0 after a good one)."""
        if short_lives <= 0:
            return 0.0
        return min(self.max_s, self.base_s * 2.0 ** min(short_lives - 1, 32))


@dataclass(frozen=True)
class Verdict:
    """What follows a child's death: its counts of short lives (all, and those ended by its own failure),
    and the wait before its restart, or ``give_up``."""

    short_lives: int
    failed_starts: int
    delay_s: float
    give_up: bool


def after_death(backoff: Backoff, short_lives: int, failed_starts: int, lived_s: float, returncode: int) -> Verdict:
    """The verdict on a child that lived ``lived_s`` seconds and ended with ``returncode`` (negative: a signal),
    given the counts its slot had."""
    if lived_s >= backoff.stable_s:
        short_lives, failed_starts = 0, 0
    else:
        short_lives += 1
        failed_starts = failed_starts + 1 if returncode > 0 else 0
    give_up = failed_starts >= backoff.give_up_after
    return Verdict(short_lives, failed_starts, backoff.delay(short_lives), give_up)


def exit_description(returncode: int) -> str:
    """``exit code 1`` or ``signal SIGKILL``, as a stop line says it."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def _clean(returncode: int) -> bool:
    """A stop asked for by SIGTERM went well: exit 0, or death by that SIGTERM itself, which only a child that
    had not yet installed its handler dies of: one that had not joined the group, with nothing in flight."""
    return returncode in (0, -signal.SIGTERM)


def default_processes(cores: int, partitions: int, consumers: int) -> int:
    """Worker processes for a host with ``cores`` usable cores whose group reads a deletion topic of
    ``partitions`` partitions with ``consumers`` consumer threads per process: one per core, and no more
    consumers in all than partitions (a member past that count is assigned nothing of the main topic)."""
    return max(1, min(cores, partitions // max(consumers, 1)))


def cgroup_cpu_limit(cpu_max: str | None) -> int | None:
    """Whole cores a cgroup v2 ``cpu.max`` line allows (``"200000 100000"`` is 2), None when unlimited."""
    if not cpu_max:
        return None
    parts = cpu_max.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None


def usable_cores(affinity: int, cgroup_limit: int | None) -> int:
    """The cores this process may run on (its CPU affinity), fewer when its container's CPU quota says so."""
    return max(1, min(affinity, cgroup_limit) if cgroup_limit is not None else affinity)


def host_cores() -> int:
    """:func:`usable_cores` of this process: its affinity mask and its cgroup's ``cpu.max``."""
    counted = getattr(os, "process_cpu_count", None)  # Python 3.13: the affinity where there is one
    if counted is not None:
        affinity = counted() or 1
    elif hasattr(os, "sched_getaffinity"):
        affinity = len(os.sched_getaffinity(0))
    else:
        affinity = os.cpu_count() or 1
    try:
        cpu_max: str | None = CGROUP_CPU_MAX.read_text()
    except OSError:
        cpu_max = None
    return usable_cores(affinity, cgroup_cpu_limit(cpu_max))


def child_settings(settings: Settings, index: int, processes: int) -> Settings:
    """The settings of child ``index``: one process; a static membership id of its own (``<id>-<index>``)."""
    instance_id = f"{settings.instance_id}-{index}" if settings.instance_id and processes > 1 else settings.instance_id
    return replace(settings, processes=1, instance_id=instance_id)


@dataclass(frozen=True)
class ChildSpec:
    """What a child reads from its stdin before it starts: its settings and how to log."""

    settings: Settings
    index: int
    log_level: int
    json_lines: bool


def launch_child(spec: ChildSpec, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``python -m reclaim.services.worker_child`` with ``spec`` on its stdin, which stays open."""
    child = subprocess.Popen([sys.executable, "-m", "reclaim.services.worker_child", str(spec.index)],
                             stdin=subprocess.PIPE, env=env)
    stdin: IO[bytes] | None = child.stdin
    assert stdin is not None
    try:
        stdin.write(pickle.dumps(spec))  # a few hundred bytes: the pipe's buffer takes them without blocking
        stdin.flush()
    except BrokenPipeError:
        pass  # it died before reading: its exit is seen and handled like any other
    return child


@dataclass
class Slot:
    """Child ``index``: its current process (None while it waits for a restart) and its history."""

    index: int
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    short_lives: int = 0
    failed_starts: int = 0
    restart_at: float = 0.0
    last_returncode: int = 0


class Supervisor:
    """Keeps ``processes`` children running until ``stop`` is set, then stops them."""

    def __init__(self, processes: int, stop: threading.Event, launch: Callable[[int], subprocess.Popen[bytes]],
                 *, backoff: Backoff = Backoff(), grace_s: float = STOP_GRACE_S,
                 on_exit: Callable[[int], None] = lambda pid: None, on_restart: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = [Slot(index) for index in range(processes)]
        self._stop, self._launch, self._backoff, self._grace_s = stop, launch, backoff, grace_s
        self._on_exit, self._on_restart, self._clock = on_exit, on_restart, clock
        self.gave_up = False

    def alive(self) -> int:
        return sum(slot.process is not None for slot in self.slots)

    def run(self) -> int:
        """Supervise until stopped; 0 when every child stopped cleanly, else 1."""
        for slot in self.slots:
            if not self._stop.is_set():  # a signal during the start checks: nothing to start
                self._start(slot)
        while not self._stop.is_set():
            self._reap(stopping=False)
            if self.gave_up:
                break
            self._restart_due()
            self._stop.wait(POLL_S)
        return self._shutdown()

    def _start(self, slot: Slot) -> None:
        slot.process, slot.started_at = self._launch(slot.index), self._clock()
        log.info("worker child %d started (pid %d)", slot.index, slot.process.pid)

    def _restart_due(self) -> None:
        for slot in self.slots:
            if slot.process is None and self._clock() >= slot.restart_at and not self._stop.is_set():
                self._on_restart()
                self._start(slot)

    def _reap(self, stopping: bool) -> None:
        for slot in self.slots:
            process = slot.process
            if process is None or process.poll() is None:
                continue
            slot.process, slot.last_returncode = None, process.returncode
            if process.stdin is not None:
                with contextlib.suppress(OSError):  # what a child that never read it left unsent
                    process.stdin.close()
            self._on_exit(process.pid)
            how = exit_description(process.returncode)
            if stopping:
                log.info("worker child %d stopped (pid %d): %s", slot.index, process.pid, how)
                continue
            verdict = after_death(self._backoff, slot.short_lives, slot.failed_starts,
                                  self._clock() - slot.started_at, process.returncode)
            slot.short_lives, slot.failed_starts = verdict.short_lives, verdict.failed_starts
            slot.restart_at = self._clock() + verdict.delay_s
            if verdict.give_up:
                log.error("worker child %d stopped (pid %d): %s; it failed %d times in a row within %g s of its "
                          "start: giving up, stopping the others", slot.index, process.pid, how,
                          verdict.failed_starts, self._backoff.stable_s)
                self.gave_up = True
            else:
                log.warning("worker child %d stopped (pid %d): %s; restarting in %.1f s", slot.index, process.pid,
                            how, verdict.delay_s)

    def _shutdown(self) -> int:
        """SIGTERM every child, wait ``grace_s`` for them to finish their batches, SIGKILL what is left."""
        running = [slot for slot in self.slots if slot.process is not None]
        if running:
            log.info("stopping %d worker children: each finishes its batch in flight and commits", len(running))
        for slot in running:
            self._signal(slot, signal.SIGTERM)
        deadline = self._clock() + self._grace_s
        while self.alive() and self._clock() < deadline:
            self._reap(stopping=True)
            if self.alive():
                time.sleep(0.05)
        killed = [slot for slot in self.slots if slot.process is not None]
        for slot in killed:
            log.error("worker child %d (pid %d) still running %g s after SIGTERM: SIGKILL", slot.index,
                      slot.process.pid if slot.process else -1, self._grace_s)
            self._signal(slot, signal.SIGKILL)
        for slot in killed:
            if slot.process is not None:
                slot.process.wait()
        self._reap(stopping=True)
        failed = self.gave_up or bool(killed) or not all(_clean(slot.last_returncode) for slot in running)
        return 1 if failed else 0

    @staticmethod
    def _signal(slot: Slot, signum: int) -> None:
        if slot.process is not None:
            try:
                slot.process.send_signal(signum)
            except ProcessLookupError:
                pass
