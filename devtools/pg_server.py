"""A PostgreSQL server for reclaim's tests and benchmarks, from Debian's package, started on loopback.

``python -m devtools.pg_server install`` installs Debian's ``postgresql`` package when no server is found
(as root, with apt-get; `make test` runs it, so a fresh machine gets one); ``python -m devtools.pg_server
start`` runs a server on a free port with a temporary data directory, prints the
``RECLAIM_METADATA_URL`` that points reclaim at it and runs until SIGTERM or SIGINT.

Debian's package is used rather than a wheel that ships a server: it is the build operators run,
kept patched by Debian, and the machines reclaim is tested on reach Debian's packages. PostgreSQL
refuses to run as root, so as root the server runs as the package's ``postgres`` user. Given a ``host``,
:func:`start` listens on that address instead of loopback and takes password logins from every subnet
the host is on (a host of :mod:`devtools.netns`, with reclaim processes on other hosts). With ``tls`` (``start
--tls``) it serves TLS (``ssl=on``) with a certificate of a throwaway CA (:mod:`reclaim.localstack.certs`) made in its
directory, and its URLs verify it: ``sslmode=verify-full&sslrootcert=<its CA>``.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from devtools.debian import apt_install
from reclaim.localstack.procs import StackError, free_port, pid_alive, spawn, stop_on_signals, stop_pid, wait_until

#: The superuser the tests' server is made with, and its database.
USER = "reclaim"
DATABASE = "reclaim"
#: The account a server started by root runs as (Debian's package makes it).
SERVICE_USER = "postgres"


def bin_dir() -> Path | None:
    """The directory of the newest installed PostgreSQL server's programs (initdb, postgres), or None."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.parent.name)], reverse=True)
    if versions:
        return versions[0].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def install() -> Path:
    """The server's program directory, installing Debian's ``postgresql`` package first when there is none."""
    found = bin_dir()
    if found is not None:
        return found
    apt_install("postgresql", "no PostgreSQL server found: install one (Debian: `apt-get install postgresql`) or "
                "set RECLAIM_TEST_METADATA_URL to a PostgreSQL database the tests may use")
    found = bin_dir()
    if found is None:
        raise StackError("apt-get installed postgresql but no initdb was found under /usr/lib/postgresql")
    return found


@dataclass(frozen=True)
class PostgresServer:
    """A running server: its process, data directory and the URL of its ``reclaim`` database.

    ``ca_path`` is the certificate of the CA that signed the server's own when it serves TLS, else None.
    """

    pid: int
    data_dir: Path
    port: int
    password: str
    host: str = "127.0.0.1"
    ca_path: Path | None = None

    def url(self, database: str = DATABASE, *, schema: str | None = None) -> str:
        """A ``postgresql://`` URL of ``database``; with ``schema``, one whose tables live in that schema.
        A server that serves TLS gets URLs that require it and verify its certificate and host name."""
        query = [f"options=-csearch_path%3D{schema}"] if schema else []
        if self.ca_path is not None:
            query += ["sslmode=verify-full", f"sslrootcert={quote(str(self.ca_path), safe='/')}"]
        tail = f"?{'&'.join(query)}" if query else ""
        return f"postgresql://{USER}:{self.password}@{self.host}:{self.port}/{database}{tail}"

    def stop(self, *, remove: bool = False) -> None:
        """Stop the server (a fast shutdown: clients are disconnected, not waited for); with ``remove``,
        delete its cluster too."""
        stop_pid(self.pid, sig=signal.SIGINT)
        if remove:
            shutil.rmtree(self.data_dir.parent, ignore_errors=True)


def _runs_as() -> str | None:
    return SERVICE_USER if os.geteuid() == 0 else None


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, user=_runs_as())
    if done.returncode != 0:
        raise StackError(f"{what} failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-800:]}")


def _owned(path: Path) -> None:
    """Give ``path`` to the account the server runs as (when that is not the current one)."""
    user = _runs_as()
    if user is not None:
        shutil.chown(path, user, user)


def start(work: Path | None = None, *, port: int | None = None, timeout: float = 60.0,
          host: str = "127.0.0.1", tls: bool = False) -> PostgresServer:
    """Make a cluster in a fresh directory (under ``work``, else the system's temporary one), start it
    on ``host``:``port`` (a free port when None; loopback only unless ``host`` says otherwise), and make
    the ``reclaim`` database.

    The cluster is the tests' own: password authentication for ``reclaim`` over TCP (from loopback, and
    from the subnets of ``host`` when that is not loopback), no Unix socket, and ``fsync`` off (a killed
    server's writes are in the page cache all the same; only a machine that loses power would lose them,
    which no test does). With ``tls`` it serves TLS too (clients choose: its URLs require it), with a
    certificate for ``host`` issued by a CA made in the cluster's directory (see :func:`_enable_tls`).
    """
    programs = install()
    base = Path(tempfile.mkdtemp(prefix="reclaim-pg-", dir=work))
    _owned(base)
    data_dir = base / "data"
    password = secrets.token_hex(12)
    pwfile = base / "pw"
    pwfile.write_text(password + "\n")
    _owned(pwfile)
    _run([str(programs / "initdb"), "-D", str(data_dir), "-U", USER, f"--pwfile={pwfile}", "-A", "scram-sha-256",
          "-E", "UTF8", "--locale=C", "--no-sync"], "initdb")
    pwfile.unlink()
    if not ipaddress.ip_address(host).is_loopback:
        with open(data_dir / "pg_hba.conf", "a") as hba:
            hba.write("host all all samenet scram-sha-256\n")
    ca_path = _enable_tls(base, data_dir, host) if tls else None
    (base / "postgres.log").touch()
    _owned(base / "postgres.log")
    server = _launch(programs, data_dir, port or free_port(host), password, timeout, host, ca_path)
    try:
        _create_database(server)
    except BaseException:
        server.stop()
        raise
    return server


def restart(server: PostgresServer, *, timeout: float = 60.0) -> PostgresServer:
    """Start ``server``'s cluster again (after a stop or a kill) on the same port; the new process."""
    return _launch(install(), server.data_dir, server.port, server.password, timeout, server.host,
                   server.ca_path)


def _enable_tls(base: Path, data_dir: Path, host: str) -> Path:
    """Make a CA in ``base/tls``, issue the server a certificate for ``host`` (and loopback's names), and
    turn ``ssl`` on in the cluster's ``postgresql.conf`` (so a restart keeps it); the CA's certificate.

    PostgreSQL refuses a private key that others may read or that it does not own (root's may be 0640):
    the key is the server account's, mode 0600.
    """
    from reclaim.localstack.certs import make_ca

    ca = make_ca(base / "tls", name="reclaim test PostgreSQL CA")
    issued = ca.issue("postgres", hosts=tuple(dict.fromkeys((host, "127.0.0.1", "localhost"))), client=False)
    for path in (issued.cert_path, issued.key_path):
        _owned(path)
    settings = {"ssl": "on", "ssl_cert_file": str(issued.cert_path), "ssl_key_file": str(issued.key_path)}
    with open(data_dir / "postgresql.conf", "a") as conf:
        conf.writelines(f"{name} = {_quoted(value)}\n" for name, value in settings.items())
    return ca.cert_path


def _quoted(value: str) -> str:
    """A ``postgresql.conf`` string value."""
    return "'" + value.replace("'", "''") + "'"


def _launch(programs: Path, data_dir: Path, port: int, password: str, timeout: float,
            host: str = "127.0.0.1", ca_path: Path | None = None) -> PostgresServer:
    log = data_dir.parent / "postgres.log"
    proc = spawn([str(programs / "postgres"), "-D", str(data_dir), "-p", str(port), "-h", host, "-k", "",
                  "-c", "fsync=off", "-c", "max_connections=300", "-c", "shared_buffers=64MB"],
                 log, user=_runs_as())
    server = PostgresServer(proc.pid, data_dir, port, password, host, ca_path)
    try:
        wait_until(lambda: _accepts(server), timeout, "PostgreSQL", proc, log)
    except StackError:
        stop_pid(proc.pid)
        raise
    return server


def _accepts(server: PostgresServer) -> bool:
    import psycopg

    try:
        with psycopg.connect(server.url("postgres"), connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def _create_database(server: PostgresServer) -> None:
    import psycopg

    with psycopg.connect(server.url("postgres"), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
            conn.execute(f"CREATE DATABASE {DATABASE}")


def create_schema(url: str, schema: str) -> None:
    """Make ``schema`` in the database of ``url`` (a test's own namespace for reclaim's tables)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("command", choices=["install", "start"])
    parser.add_argument("--tls", action="store_true",
                        help="serve TLS with a certificate of a CA made for it (the printed URL verifies it)")
    args = parser.parse_args()
    if args.command == "install":
        print(install())
        return
    server = start(tls=args.tls)
    print(f"export RECLAIM_METADATA_URL={shlex.quote(server.url())}", flush=True)
    stop = stop_on_signals("stopping PostgreSQL")
    try:
        while pid_alive(server.pid) and not stop.wait(1.0):
            pass
    finally:
        server.stop(remove=True)


if __name__ == "__main__":
    main()
