"""Fixtures of the chaos suite: servers of a test's own, to kill and start again."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from ops import pg_server
from ops.procs import pid_alive, wait_until
from tests.conftest import server_unavailable
from tests.deletion.conftest import pipeline  # noqa: F401 - the real-broker deletion pipeline


class RestartablePostgres:
    """A PostgreSQL server of the test's own: ``kill()`` it (SIGKILL, as a crash) and ``restart()`` it from
    its data directory on the same port."""

    def __init__(self, server: pg_server.PostgresServer) -> None:
        self.server = server

    def url(self) -> str:
        return self.server.url()

    def kill(self) -> None:
        """SIGKILL the server and its backends at once, as a crashed database host would lose them."""
        os.killpg(self.server.pid, signal.SIGKILL)
        wait_until(lambda: not pid_alive(self.server.pid), 30, "killed PostgreSQL")

    def restart(self) -> None:
        self.server = pg_server.restart(self.server)


@pytest.fixture
def own_postgres() -> Iterator[RestartablePostgres]:
    try:
        server = pg_server.start()
    except Exception as exc:  # noqa: BLE001 - any failure to start is reported the same way
        server_unavailable("PostgreSQL", exc)
        raise AssertionError("unreachable") from exc
    own = RestartablePostgres(server)
    yield own
    own.server.stop(remove=True)
