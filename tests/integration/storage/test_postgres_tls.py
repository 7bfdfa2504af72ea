"""The PostgreSQL metadata store over TLS, set by the URL alone, against a server with a certificate.

``RECLAIM_METADATA_URL=postgresql://u:p@host:port/db?sslmode=verify-full&sslrootcert=/path/ca.pem`` is
handed to psycopg as it is: the probe connection and every pooled one verify the server's certificate
and host name against that CA. A server this module starts (``devtools.pg_server.start(tls=True)``) serves
TLS with a certificate of a CA of its own; another CA is refused in one line that names the TLS
settings and never the password.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from devtools import pg_server
from reclaim.localstack.certs import make_ca
from reclaim.localstack.procs import StackError
from reclaim.storage.errors import MetadataUnavailableError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import SegmentRecord
from reclaim.storage.postgres_base import describe
from reclaim.storage.sql_store import PostgresMetadataStore
from tests.support.servers import postgres_schema_url, server_unavailable

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_server() -> Iterator[pg_server.PostgresServer]:
    """A PostgreSQL server of its own (the session's may be one ``RECLAIM_TEST_METADATA_URL`` names), with
    ``ssl=on`` and a certificate for 127.0.0.1 and localhost."""
    try:
        server = pg_server.start(tls=True)
    except (StackError, OSError) as exc:
        server_unavailable("PostgreSQL with TLS", exc)
        raise AssertionError("unreachable") from exc
    yield server
    server.stop(remove=True)


def fresh_schema_url(server: pg_server.PostgresServer, **params: str) -> str:
    """The server's URL (``sslmode=verify-full`` with its CA) with ``params`` added, on a new schema."""
    url = server.url() + "".join(f"&{name}={quote(value, safe='/')}" for name, value in params.items())
    return postgres_schema_url(url, f"tls_{uuid.uuid4().hex[:12]}")


def with_ca(url: str, server: pg_server.PostgresServer, ca: Path) -> str:
    assert server.ca_path is not None
    return url.replace(quote(str(server.ca_path), safe="/"), quote(str(ca), safe="/"))


def test_the_server_serves_tls_with_a_key_only_its_account_reads(tls_server: pg_server.PostgresServer) -> None:
    assert tls_server.ca_path is not None and tls_server.ca_path.is_file()
    url = tls_server.url()
    assert "sslmode=verify-full" in url and f"sslrootcert={tls_server.ca_path}" in url
    key = tls_server.ca_path.parent / "postgres.key"
    info = key.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600
    if os.geteuid() == 0:
        import pwd

        assert info.st_uid == pwd.getpwnam(pg_server.SERVICE_USER).pw_uid, "the server's account owns its key"
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone() == (True,)


def test_the_store_verifies_the_server_on_every_pooled_connection(tls_server: pg_server.PostgresServer) -> None:
    app = f"reclaim-tls-{uuid.uuid4().hex[:8]}"
    url = fresh_schema_url(tls_server, application_name=app)
    store = PostgresMetadataStore(url)
    try:
        with store.transaction() as txn:
            txn.put_segment(SegmentRecord(name="s/0", stream="s"))
        assert store.get_segment("s/0") is not None
        # The pool was given the URL's query parameters intact: what its connections were opened with.
        with store._db.session() as conn:  # type: ignore[attr-defined]
            params = conn.raw.info.get_parameters()
        assert params["sslmode"] == "verify-full" and params["sslrootcert"] == str(tls_server.ca_path)
        assert params["application_name"] == app and params["options"].startswith("-csearch_path=tls_")
        # And the server saw each of them arrive over TLS.
        with psycopg.connect(tls_server.url()) as watcher:
            rows = watcher.execute("SELECT s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
                                   "WHERE a.application_name = %s", (app,)).fetchall()
        assert rows and all(row == (True,) for row in rows), rows
    finally:
        store.close()


def test_another_ca_is_one_clear_error_without_the_password(tls_server: pg_server.PostgresServer, tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    other = make_ca(tmp_path / "other-ca", name="not the server's CA")
    url = with_ca(fresh_schema_url(tls_server), tls_server, other.cert_path)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(MetadataUnavailableError) as info:
        PostgresMetadataStore(url)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"cannot reach PostgreSQL at {describe(url)} over TLS "
                              f"(sslmode=verify-full, sslrootcert={other.cert_path}): ")
    assert "certificate verify failed" in message
    assert tls_server.password not in message + caplog.text


def test_a_missing_ca_file_says_so(tls_server: pg_server.PostgresServer, tmp_path: Path) -> None:
    url = with_ca(tls_server.url(), tls_server, tmp_path / "nowhere" / "ca.pem")
    with pytest.raises(MetadataUnavailableError, match=r"over TLS \(sslmode=verify-full, sslrootcert=.*nowhere.*"
                                                       r"does not exist"):
        PostgresMetadataStore(url)


def test_the_cli_takes_the_tls_url_and_refuses_another_ca_in_one_line(tls_server: pg_server.PostgresServer,
                                                                      tmp_path: Path) -> None:
    url = fresh_schema_url(tls_server)
    PostgresMetadataStore(url).close()  # a writer made the store; the audit only reads it
    FileSystemChunkStorage(tmp_path / "tier2")  # its writer made the root
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")},
           "RECLAIM_STATE_DIR": str(tmp_path / "state"), "RECLAIM_FS_ROOT": str(tmp_path / "tier2")}

    def audit(metadata_url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "reclaim", "audit", "--json"], capture_output=True, text=True,
                              env={**env, "RECLAIM_METADATA_URL": metadata_url}, timeout=300, check=False)

    good = audit(url)
    assert tls_server.password not in good.stdout + good.stderr
    assert good.returncode == 0, good.stderr
    other = make_ca(tmp_path / "other-ca")
    bad = audit(with_ca(url, tls_server, other.cert_path))
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert bad.returncode == 2 and len(lines) == 1, bad.stderr
    assert "over TLS (sslmode=verify-full" in lines[0] and "certificate verify failed" in lines[0]
    assert tls_server.password not in bad.stdout + bad.stderr


def test_a_restarted_server_still_serves_tls() -> None:
    server = pg_server.start(tls=True)
    try:
        server.stop()
        server = pg_server.restart(server)
        assert server.ca_path is not None
        with psycopg.connect(server.url()) as conn:
            assert conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone() == (True,)
    finally:
        server.stop(remove=True)
