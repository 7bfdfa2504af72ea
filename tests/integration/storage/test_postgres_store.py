"""What only the PostgreSQL store does: a pool over a server that can be away, serializable isolation,
versioned migrations shared by processes starting together, and the one-line errors of the CLI."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from devtools import pg_server
from reclaim.localstack.procs import free_port
from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.errors import MetadataConflictError, MetadataMissingError, MetadataUnavailableError
from reclaim.storage.metadata import ChunkRecord, SegmentRecord
from reclaim.storage.sql_base import SCHEMA_TABLE
from reclaim.storage.sql_store import MIGRATIONS, PostgresMetadataStore
from tests.support.servers import postgres_schema_url

pytestmark = pytest.mark.integration

TAGS = ChunkTags(component="c", stream="s", segment="s/0", writer_epoch=1)


def chunk(name: str) -> ChunkRecord:
    return ChunkRecord(name=name, segment="s/0", start_offset=0, length=1, tags=TAGS,
                       locations=(ChunkLocation("fs-tier2", Tier.TIER2, None, name),))


@pytest.fixture
def schema_url(postgres_url: str, unique_name: Callable[[str], str]) -> str:
    """A fresh, empty schema of the session's database."""
    return postgres_schema_url(postgres_url, unique_name("t").replace("-", "_"))


@pytest.fixture
def store(schema_url: str) -> Iterator[PostgresMetadataStore]:
    meta = PostgresMetadataStore(schema_url)
    yield meta
    meta.close()


def test_an_unreachable_server_is_one_line_naming_it_without_the_password() -> None:
    url = f"postgresql://reclaim:s3cret-pw@127.0.0.1:{free_port()}/reclaim"
    started = time.monotonic()
    with pytest.raises(MetadataUnavailableError) as info:
        PostgresMetadataStore(url)
    assert time.monotonic() - started < 30, "bounded by the connect timeout"
    message = str(info.value)
    assert "127.0.0.1" in message and "/reclaim" in message and "s3cret-pw" not in message
    assert "\n" not in message and info.value.retryable


def test_a_reader_never_creates_the_store(schema_url: str) -> None:
    with pytest.raises(MetadataMissingError, match="no metadata store in PostgreSQL"):
        PostgresMetadataStore(schema_url, create=False)
    with psycopg.connect(schema_url) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (SCHEMA_TABLE,)).fetchone() == (None,), "nothing was written"


def test_a_schema_newer_than_reclaim_knows_is_refused(store: PostgresMetadataStore, schema_url: str) -> None:
    newer = MIGRATIONS[-1].version + 1
    with psycopg.connect(schema_url, autocommit=True) as conn:
        conn.execute(f"UPDATE {SCHEMA_TABLE} SET version = %s WHERE store = 'metadata store'", (newer,))
    for create in (True, False):
        with pytest.raises(MetadataMissingError, match=f"version {newer}, newer than this reclaim knows"):
            PostgresMetadataStore(schema_url, create=create)


def _open_and_close(url: str) -> None:
    PostgresMetadataStore(url).close()


def test_processes_starting_together_migrate_once(schema_url: str) -> None:
    """Every process waits on the migration lock (held here until all of them do), then each in turn
    must see what the one before it committed: one migration, the others find it done."""
    ctx = multiprocessing.get_context("spawn")
    with psycopg.connect(schema_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext(%s))", (SCHEMA_TABLE,))
        procs = [ctx.Process(target=_open_and_close, args=(schema_url,)) for _ in range(4)]
        for proc in procs:
            proc.start()
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        deadline = time.monotonic() + 60
        while holder.execute(waiting).fetchone() != (len(procs),):
            assert time.monotonic() < deadline, "the processes never reached the migration lock"
            time.sleep(0.1)
        holder.execute("SELECT pg_advisory_unlock(hashtext(%s))", (SCHEMA_TABLE,))
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    with psycopg.connect(schema_url) as conn:
        rows = conn.execute(f"SELECT store, version FROM {SCHEMA_TABLE}").fetchall()
    assert rows == [("metadata store", MIGRATIONS[-1].version)]


def test_a_concurrent_update_is_a_retryable_conflict_and_changes_nothing(store: PostgresMetadataStore,
                                                                          schema_url: str) -> None:
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord("s/0"))
    read = store.get_segment("s/0")
    assert read is not None
    other_host = PostgresMetadataStore(schema_url)
    with pytest.raises(MetadataConflictError) as info, store.transaction() as txn:
        txn.get_segment("s/0")  # the transaction's snapshot is taken here
        # Another writer commits between this transaction's read and its write.
        with other_host.transaction() as other:
            other.put_segment(replace(read, length=5))
        txn.put_segment(replace(read, length=7))
    other_host.close()
    assert info.value.retryable
    final = store.get_segment("s/0")
    assert final is not None and final.length == 5 and final.version == read.version + 1


def test_write_skew_is_refused_serializable(store: PostgresMetadataStore) -> None:
    """Each transaction reads the row the other writes and writes a row the other only reads: at any
    level below SERIALIZABLE both would commit; here one of them must fail, as a conflict."""
    with store.transaction() as txn:
        txn.put_chunk(chunk("a"))
        txn.put_chunk(chunk("b"))
    read_both = threading.Barrier(2)
    errors: list[BaseException] = []

    def retire(own: str, other: str) -> None:
        try:
            with store.transaction() as txn:
                assert txn.get_chunk(other) is not None and txn.get_chunk(own) is not None
                read_both.wait(timeout=10)
                current = txn.get_chunk(own)
                assert current is not None
                txn.put_chunk(replace(current, active=False, mark_id=f"m-{own}"))
        except MetadataConflictError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=retire, args=pair) for pair in (("a", "b"), ("b", "a"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # Two rows each written by one transaction only: no lost update, but SSI sees the read-write cycle.
    assert len(errors) == 1, errors
    retired = [c.name for c in store.get_chunks(["a", "b"]).values() if not c.active]
    assert len(retired) == 1


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[list[pg_server.PostgresServer]]:
    """A PostgreSQL server of the test's own, to stop and start again (the last one started is last)."""
    servers = [pg_server.start()]
    yield servers
    for server in servers:
        server.stop()
    servers[-1].stop(remove=True)


def test_a_server_that_goes_away_is_unavailable_then_the_pool_reconnects(
        own_server: list[pg_server.PostgresServer]) -> None:
    server = own_server[0]
    store = PostgresMetadataStore(server.url(), pool_timeout=3.0)
    try:
        with store.transaction() as txn:
            txn.put_segment(SegmentRecord("s/0"))
        server.stop()
        with pytest.raises(MetadataUnavailableError) as info, store.transaction() as txn:
            txn.put_segment(SegmentRecord("s/1"))
        assert info.value.retryable
        own_server.append(pg_server.restart(server))
        deadline = time.monotonic() + 30
        while True:
            try:
                with store.transaction() as txn:
                    txn.put_segment(SegmentRecord("s/1"))
                break
            except MetadataUnavailableError:
                assert time.monotonic() < deadline, "the pool never reconnected"
                time.sleep(0.5)
        assert store.segment_names() == ["s/0", "s/1"], "what committed before the outage is there"
    finally:
        store.close()


def _reclaim(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reclaim", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, check=False)


def test_the_cli_names_a_missing_store_or_server_in_one_line(schema_url: str, tmp_path: Path) -> None:
    missing = _reclaim("audit", "--state-dir", str(tmp_path), "--metadata-url", schema_url)
    assert missing.returncode == 2, missing.stderr
    assert "no metadata store in PostgreSQL" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    down = _reclaim("audit", "--state-dir", str(tmp_path),
                    env={"RECLAIM_METADATA_URL": f"postgresql://u:pw@127.0.0.1:{free_port()}/db"})
    assert down.returncode == 2 and "cannot reach PostgreSQL at 127.0.0.1" in down.stderr, down.stderr
    assert ":pw@" not in down.stderr
    bad = _reclaim("audit", "--metadata-url", "mysql://x/y")
    assert bad.returncode == 64 and "postgresql://" in bad.stderr, bad.stderr


def test_connections_time_out_on_a_silent_server_unless_the_url_says_otherwise() -> None:
    from reclaim.storage.postgres_base import SOCKET_OPTIONS, _socket_options

    assert _socket_options("postgresql://u:p@db.example:5432/reclaim") == SOCKET_OPTIONS
    assert SOCKET_OPTIONS["tcp_user_timeout"] <= 30_000 and SOCKET_OPTIONS["keepalives"] == 1
    chosen = _socket_options("postgresql://u:p@db.example/reclaim?tcp_user_timeout=5000&keepalives_idle=60")
    assert "tcp_user_timeout" not in chosen and "keepalives_idle" not in chosen
    assert chosen["keepalives_count"] == SOCKET_OPTIONS["keepalives_count"]


def test_the_password_from_a_passfile_and_never_in_the_url(schema_url: str, tmp_path: Path) -> None:
    """The URL without its password and libpq's ``passfile`` (a mounted secret in pgpass format): every pooled
    connection logs in with it; a wrong one is refused in one line that names neither password."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(schema_url)
    assert parts.password and parts.hostname and parts.port
    bare = parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}")

    def with_passfile(password: str, name: str) -> str:
        passfile = tmp_path / name
        passfile.write_text(f"{parts.hostname}:{parts.port}:*:{parts.username}:{password}\n")
        passfile.chmod(0o600)  # libpq ignores a pgpass file others can read
        return urlunsplit(bare._replace(query=f"{parts.query}&passfile={passfile}"))

    store = PostgresMetadataStore(with_passfile(parts.password, "pgpass"))
    try:
        with store.transaction() as txn:
            txn.put_segment(SegmentRecord("s/0"))
        assert store.get_segment("s/0") is not None
    finally:
        store.close()
    with pytest.raises(MetadataUnavailableError, match="password authentication failed") as refused:
        PostgresMetadataStore(with_passfile("not-the-password", "wrong"))
    assert parts.password not in str(refused.value) and "not-the-password" not in str(refused.value)
