"""Dependency probes: the up gauge, bounded probes, one log line per change of state."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge

from reclaim.localstack.procs import free_port
from reclaim.services.health import BrokerProbe, HealthMonitor, Probe, Status, StoreProbe, state_change
from reclaim.storage.errors import MetadataError
from reclaim.storage.sql_store import SQLiteMetadataStore


@pytest.fixture
def gauge() -> Gauge:
    return Gauge("up_test", "test gauge", ["dependency"], registry=CollectorRegistry())


def up(gauge: Gauge, dependency: str) -> float:
    return float(gauge.labels(dependency)._value.get())


class Switch:
    """A dependency check that answers while ``alive`` and raises otherwise."""

    def __init__(self) -> None:
        self.alive = True
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if not self.alive:
            raise ConnectionRefusedError("connection refused\nsecond line")


@pytest.fixture
def hung() -> Iterator[tuple[Callable[[], None], threading.Event, list[int]]]:
    """A check that blocks until released, counting its starts (a dependency that accepts and never answers)."""
    release, started = threading.Event(), [0]

    def check() -> None:
        started[0] += 1
        release.wait(30)

    yield check, release, started
    release.set()


def test_state_change_logs_going_down_and_coming_back_only() -> None:
    down, ok = Status(False, "refused"), Status(True)
    assert state_change(None, ok) is None
    assert state_change(None, down) == "down: refused"
    assert state_change(ok, ok) is None
    assert state_change(ok, down) == "down: refused"
    assert state_change(down, Status(False, "timed out")) is None
    assert state_change(down, ok) == "up again"


def test_gauges_follow_the_checks(gauge: Gauge) -> None:
    broker, store = Switch(), Switch()
    monitor = HealthMonitor([Probe("broker", broker), Probe("metadata_store", store)], timeout_s=5, gauge=gauge)
    assert monitor.probe_once() == {"broker": Status(True), "metadata_store": Status(True)}
    assert (up(gauge, "broker"), up(gauge, "metadata_store")) == (1.0, 1.0)
    broker.alive = False
    statuses = monitor.probe_once()
    assert statuses["broker"] == Status(False, "ConnectionRefusedError: connection refused")
    assert (up(gauge, "broker"), up(gauge, "metadata_store")) == (0.0, 1.0)
    broker.alive = True
    assert monitor.probe_once()["broker"].up
    assert up(gauge, "broker") == 1.0


def test_a_dependency_down_for_many_probes_is_logged_once(gauge: Gauge, caplog: pytest.LogCaptureFixture) -> None:
    broker = Switch()
    monitor = HealthMonitor([Probe("broker", broker)], timeout_s=5, gauge=gauge)
    with caplog.at_level(logging.INFO, logger="reclaim.services.health"):
        monitor.probe_once()
        broker.alive = False
        for _ in range(5):
            monitor.probe_once()
        broker.alive = True
        monitor.probe_once()
        monitor.probe_once()
    assert [r.getMessage() for r in caplog.records] == [
        "dependency broker down: ConnectionRefusedError: connection refused", "dependency broker up again"]
    assert broker.calls == 8


def test_a_check_that_never_answers_is_down_and_not_piled_up(
        gauge: Gauge, hung: tuple[Callable[[], None], threading.Event, list[int]]) -> None:
    check, release, started = hung
    monitor = HealthMonitor([Probe("binding:s3", check), Probe("broker", Switch())], timeout_s=0.2, gauge=gauge)
    for _ in range(3):
        statuses = monitor.probe_once()
        assert statuses["binding:s3"] == Status(False, "no answer within 0.2 s")
        assert statuses["broker"].up
    assert started[0] == 1  # one stuck check, not one per round
    release.set()
    assert monitor.probe_once()["binding:s3"].up
    assert up(gauge, "binding:s3") == 1.0


def test_every_dependency_reads_0_until_its_first_probe(gauge: Gauge) -> None:
    HealthMonitor([Probe("broker", Switch())], gauge=gauge)
    assert up(gauge, "broker") == 0.0


def test_bad_monitor_settings_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="unique"):
        HealthMonitor([Probe("broker", Switch()), Probe("broker", Switch())])
    with pytest.raises(ValueError, match="must be > 0"):
        HealthMonitor([Probe("broker", Switch())], timeout_s=0)


def test_run_probes_until_stopped(gauge: Gauge) -> None:
    stop, broker = threading.Event(), Switch()
    thread = HealthMonitor([Probe("broker", broker)], interval_s=0.01, gauge=gauge).start(stop)
    while broker.calls < 3:
        thread.join(0.01)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    assert up(gauge, "broker") == 1.0


def test_store_probe_reads_the_store_and_is_down_when_it_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "meta.db"
    SQLiteMetadataStore(path).close()
    StoreProbe(lambda: SQLiteMetadataStore(path, create=False))()
    with pytest.raises(MetadataError):
        StoreProbe(lambda: SQLiteMetadataStore(tmp_path / "absent.db", create=False))()


@pytest.mark.integration
def test_broker_probe_answers_on_the_real_broker_and_fails_in_bounded_time(kafka_bootstrap: str) -> None:
    BrokerProbe(kafka_bootstrap)()
    probe = BrokerProbe(f"127.0.0.1:{free_port()}", timeout_s=1.0)
    with pytest.raises(Exception, match="Timed out|timed out|Transport|transport"):
        probe()
