"""A phase-2 drain watched from outside its workers: their counters read, the group's commits polled, CPU read.

Nothing here runs inside a worker or changes one. The workers' counters are read every few milliseconds
from prometheus-client's multiprocess files, which they write anyway in that mode (a supervisor's
children always), so reading them costs the workers nothing; their metrics endpoints are read once at the
end. The group's committed offsets are read with ``Consumer.committed()`` by a consumer of the same group
id that never subscribes (it asks the coordinator, it does not join); CPU time comes from ``/proc``.

Every timestamp is this process's ``time.perf_counter()`` at the end of the first sweep (one read of
every file) or poll that showed the change, and comes with how early the change may have happened: back
to the start of the sweep or poll before it (:class:`Seen`).
"""

from __future__ import annotations

import http.client
import os
import struct
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from prometheus_client.mmap_dict import MmapedDict

from reclaim.producers.config import kafka_config

__all__ = ["ACKED", "DELETED", "OUTCOMES", "RECEIVED", "STORAGE_OPERATIONS", "CommitWatch", "MetricsWatch", "Seen",
           "Sweep", "counter_sums", "cpu_seconds", "machine_busy_s", "stopped", "wait_stopped"]

#: Records the consumers polled (phase 2's first step, counted as each poll returns).
RECEIVED = "reclaim_deletion_messages_received_total"
#: Chunk copies deleted: counted once a batch's deletes were answered and its rows dropped.
DELETED = "reclaim_ledgers_deleted_total"
#: Records whose offset was stored as final (committed at the next commit interval).
ACKED = "reclaim_deletion_messages_acked_total"
#: How long the batched storage deletes took, in all and how many there were.
DELETE_SECONDS = "reclaim_deletion_batch_delete_seconds_sum"
DELETES = "reclaim_deletion_batch_delete_seconds_count"
#: Phase 2's verdicts, by ``outcome``; storage operations, by ``operation`` (read once, at the end).
OUTCOMES = "reclaim_deletion_outcomes_total"
STORAGE_OPERATIONS = "reclaim_storage_operations_total"
#: What every sweep reads.
FAST = (RECEIVED, DELETED, ACKED)
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Seen:
    """When a change was first seen: ``at`` the end of the first sweep or poll that showed it; it happened
    at most ``within`` seconds before (since the start of the sweep or poll before); ``value`` as read."""

    at: float
    within: float
    value: float


@dataclass(frozen=True)
class Sweep:
    """One scrape of every endpoint: when it began and ended, and each counter summed over the endpoints."""

    began: float
    ended: float
    counters: Mapping[str, float]


def counter_sums(text: str, names: Iterable[str]) -> dict[str, float]:
    """Each of ``names`` summed over its label sets in a Prometheus text page; a name absent stays absent."""
    wanted = set(names)
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in wanted:
            sums[name] = sums.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return sums


def counter_files(directory: Path) -> list[str]:
    """Every counter file of prometheus-client's multiprocess mode under ``directory`` (one per process)."""
    return sorted(str(path) for path in directory.glob("**/counter_*.db"))


def multiprocess_counters(files: Sequence[str]) -> dict[str, float]:
    """The fast counters summed over counter ``files``, every entry of each file parsed."""
    totals: dict[str, float] = {}
    for path in files:
        for key, value, _, _ in MmapedDict.read_all_values_from_file(path):  # type: ignore[no-untyped-call]
            name = _fast_name(key)
            if name is not None:
                totals[name] = totals.get(name, 0.0) + value
    return totals


def _fast_name(key: str) -> str | None:
    """The fast counter an entry's key (``[family, sample, labels, help]`` as JSON) is a series of, if any."""
    return next((name for name in FAST if f'"{name}"' in key), None)


class CounterFiles:
    """The fast counters of a fixed set of counter files, each read with one ``pread`` of 8 bytes per series.

    An entry never moves in its file (the library only appends, and grows the file in place), so the
    places found once are read again and again; a series created later is not seen, which
    :meth:`check_complete` catches at the end.
    """

    def __init__(self, paths: Sequence[str]) -> None:
        self._paths = list(paths)
        self._places: list[tuple[int, list[tuple[str, int]]]] = []
        for path in paths:
            places = [(name, pos) for key, _, _, pos in MmapedDict.read_all_values_from_file(path)  # type: ignore[no-untyped-call]
                      if (name := _fast_name(key)) is not None]
            self._places.append((os.open(path, os.O_RDONLY), places))

    def read(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for fd, places in self._places:
            for name, pos in places:
                totals[name] = totals.get(name, 0.0) + struct.unpack("d", os.pread(fd, 8, pos))[0]
        return totals

    def check_complete(self, last: Mapping[str, float]) -> None:
        """Every entry parsed now sums to ``last`` (the last read): no series was created after the places were
        found."""
        now = multiprocess_counters(self._paths)
        assert dict(now) == dict(last), f"the counter files hold series created during the drain: {now} != {last}"

    def close(self) -> None:
        for fd, _ in self._places:
            os.close(fd)


class MetricsWatch:
    """Reads the workers' counters every ``interval_s`` in a thread of its own, keeping every sweep.

    A sweep reads the multiprocess files under ``files`` (the workers run prometheus-client's multiprocess
    mode: a supervisor's children always, an unsupervised worker when told where by
    ``PROMETHEUS_MULTIPROC_DIR``). Scraping the metrics endpoints instead would cost the workers CPU on every
    sweep (a supervisor's endpoint sums every child's files again: several ms each); they are read once, at
    the end (:meth:`page`), for what is not counted in the sweeps.
    """

    def __init__(self, files: Path, ports: Sequence[int], interval_s: float, host: str = "127.0.0.1") -> None:
        self._files = files
        self._ports = list(ports)
        self._host = host
        self._interval_s = interval_s
        self._origin = 0.0
        self.counters = CounterFiles([])
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.sweeps: list[Sweep] = []

    def check(self, processes: int) -> Sweep:
        """One sweep now, before the watch starts: it finds the files of ``processes`` processes (the workers
        started by then: a child started again later would be missed, and the drain would stall) and every
        counter in them."""
        paths = counter_files(self._files)
        assert len(paths) == processes, f"{len(paths)} counter files under {self._files}, not {processes}"
        self.counters = CounterFiles(paths)
        sweep = self.sweep()
        missing = sorted(set(FAST) - set(sweep.counters))
        assert not missing, f"the workers' multiprocess files under {self._files} lack {missing}"
        return sweep

    def sweep(self) -> Sweep:
        began = time.perf_counter()
        return Sweep(began, time.perf_counter(), self.counters.read())

    def _get(self, port: int) -> str:
        connection = http.client.HTTPConnection(self._host, port, timeout=10)
        try:
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            body = response.read().decode()
        finally:
            connection.close()
        assert response.status == 200, f"metrics on port {port} answered {response.status}"
        return body

    def page(self) -> str:
        """The endpoints' whole pages, one after the other."""
        return "\n".join(self._get(port) for port in self._ports)

    def by_label(self, sample: str, label: str, page: str | None = None) -> dict[str, float]:
        """One sample summed by one of its labels over the endpoints' whole pages (``page``, or read now);
        the non-zero sums."""
        found: dict[str, float] = {}
        marker = f'{label}="'
        for line in (page or self.page()).splitlines():
            if line.startswith(sample + "{") and marker in line:
                value = line.split(marker, 1)[1].split('"', 1)[0]
                found[value] = found.get(value, 0.0) + float(line.rsplit(" ", 1)[1])
        return {value: total for value, total in found.items() if total}

    def start(self, origin: float) -> None:
        """Sweep from now on; ``origin``: when what is watched began (the first sweep's lower bound)."""
        self._origin = origin
        self._thread = threading.Thread(target=self._run, name="metrics-watch", daemon=True)
        self._thread.start()

    def stop(self, check: bool = True) -> None:
        """Stop sweeping; with ``check``, the series read must have been all there are (checked)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        try:
            if check and self.sweeps and self.error is None:
                self.counters.check_complete(self.sweeps[-1].counters)
        finally:
            self.counters.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                sweep = self.sweep()
                self.sweeps.append(sweep)
                self._stop.wait(max(0.0, self._interval_s - (sweep.ended - sweep.began)))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, which raises it
            self.error = exc

    def latest(self, name: str) -> float:
        if self.error is not None:
            raise AssertionError(f"scraping the workers' metrics failed: {self.error}") from self.error
        return self.sweeps[-1].counters.get(name, 0.0) if self.sweeps else 0.0

    def first(self, name: str, at_least: float) -> Seen | None:
        """The first sweep whose ``name`` was at least ``at_least``."""
        floor = self._origin
        for sweep in list(self.sweeps):
            value = sweep.counters.get(name, 0.0)
            if value >= at_least:
                return Seen(sweep.ended, sweep.ended - floor, value)
            floor = sweep.began
        return None

    def periods(self) -> list[float]:
        """Seconds between the ends of consecutive sweeps."""
        ends = [sweep.ended for sweep in self.sweeps]
        return [b - a for a, b in zip(ends, ends[1:], strict=False)]


class CommitWatch:
    """The committed offsets of ``group`` on ``topic``, read by a consumer of that group id that never joins."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self._consumer = Consumer(kafka_config(bootstrap, "consumer", {"group.id": group, "enable.auto.commit": False}))
        partitions = self._consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self._partitions = [TopicPartition(topic, p) for p in sorted(partitions)]

    def ends(self) -> dict[int, int]:
        """Each partition's end offset (high watermark), asked of the broker."""
        return {tp.partition: self._consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                for tp in self._partitions}

    def committed(self) -> dict[int, int]:
        """Each partition's committed offset (negative: none yet)."""
        answer = self._consumer.committed(self._partitions, timeout=10)
        failed = [tp for tp in answer if tp.error is not None]
        assert not failed, f"reading committed offsets failed: {failed[0].error}"
        return {tp.partition: tp.offset for tp in answer}

    def reached(self, ends: Mapping[int, int], since: float, interval_s: float, give_up: float) -> Seen:
        """Poll every ``interval_s`` until every partition's committed offset reaches its end in ``ends``;
        ``since``: a time before which the commit cannot have happened (the first poll's lower bound);
        fails at ``give_up`` (a ``perf_counter`` time)."""
        floor = since
        while True:
            began = time.perf_counter()
            committed = self.committed()
            ended = time.perf_counter()
            behind = sum(max(0, end - committed.get(p, 0)) for p, end in ends.items())
            if not behind:
                return Seen(ended, ended - floor, 0.0)
            assert ended < give_up, f"offsets still {behind} records behind the end of the topic"
            floor = began
            time.sleep(max(0.0, interval_s - (ended - began)))

    def close(self) -> None:
        self._consumer.close()


# --- CPU time from /proc ---------------------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3 on), or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _tree(roots: Iterable[int]) -> set[int]:
    """``roots`` and every process descended from them."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def cpu_seconds(roots: Iterable[int], descendants: bool = True) -> float:
    """User + system CPU seconds of ``roots`` and (unless told not to) their descendants, every thread, as the
    kernel counts them (in clock ticks, 1/``SC_CLK_TCK`` s)."""
    total = 0
    for pid in _tree(roots) if descendants else set(roots):
        fields = _stat(pid)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])
    return total / TICKS


def stopped(roots: Iterable[int]) -> bool:
    """Whether every process of ``roots``' trees is stopped (state T)."""
    states = [_stat(pid) for pid in _tree(roots)]
    return all(fields is None or fields[0] == "T" for fields in states)


def wait_stopped(roots: Sequence[int], timeout_s: float = 10.0) -> None:
    """Until every process of ``roots``' trees is stopped, after a SIGSTOP sent to them."""
    deadline = time.monotonic() + timeout_s
    while not stopped(roots):
        assert time.monotonic() < deadline, "the workers did not stop on SIGSTOP"
        time.sleep(0.005)


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (not idle, not waiting on I/O) since boot, all cores."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / TICKS
