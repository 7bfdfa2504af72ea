"""Azurite, Microsoft's Azure Storage emulator, from npm's registry: ``reclaim local up --tier2 azure`` runs it,
and the Azure binding is tested on it.

Azurite :data:`AZURITE_VERSION` is installed once with ``npm install`` into ``<cache>/azurite-<version>`` and
stamped there; a later call finds the stamp and installs nothing. Installs run under ``nice -n 19`` and one at
a time, so two processes asking at once install it once. Only the blob service is started, with the
emulator's well-known account. ``--skipApiVersionCheck`` lets azure-storage-blob 12.31 in: it sends an API
version Azurite 3.37 does not know. Azurite still refuses a header it does not implement (it runs without
``--loose``), so a condition the binding sends is honoured or refused, never ignored.

What Azurite 3.37 does differently from Azure, and how the tests deal with it:

- Azure drops the trailing dots of a name's path segments (``a./b`` is the blob ``a/b``); Azurite keeps them.
  The binding refuses such names before any request, which the unit tests check.
- Azure refuses more than 8 KB of metadata on a blob; Azurite stores it. The binding refuses it before any
  request, which the unit tests check.
- Azure answers 503 ``ServerBusy`` past an account's limits; Azurite never throttles. The integration tests
  use a stand-in server for that.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from reclaim.localstack.procs import StackError, free_port, spawn, stop_pid, wait_until

if TYPE_CHECKING:
    from reclaim.storage.azure import AzureSettings

AZURITE_VERSION = "3.37.0"
#: The emulator's one account and its key, both public: Microsoft documents them for Azurite.
ACCOUNT_NAME = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass(frozen=True)
class AzuriteEndpoint:
    """Where an Azurite blob service answers: its account URL (``http://HOST:PORT/devstoreaccount1``) and
    the account's name and key."""

    account_url: str
    account_name: str = ACCOUNT_NAME
    account_key: str = field(default=ACCOUNT_KEY, repr=False)

    @property
    def connection_string(self) -> str:
        """The connection string of the account, as ``az storage`` and the SDKs take it."""
        return (f"DefaultEndpointsProtocol=http;AccountName={self.account_name};"
                f"AccountKey={self.account_key};BlobEndpoint={self.account_url};")

    def binding_settings(self, container: str, **overrides: object) -> AzureSettings:
        """Settings of an Azure binding on ``container`` of this endpoint, with the account key."""
        from reclaim.storage.azure import AzureSettings

        settings: dict[str, object] = {"container": container, "account_url": self.account_url,
                                       "account_name": self.account_name, "account_key": self.account_key}
        return AzureSettings(**(settings | overrides))  # type: ignore[arg-type]


def install_dir(cache_dir: Path) -> Path:
    return cache_dir / f"azurite-{AZURITE_VERSION}"


def _binary(cache_dir: Path) -> Path:
    return install_dir(cache_dir) / "node_modules" / ".bin" / "azurite-blob"


def _stamp(cache_dir: Path) -> Path:
    return install_dir(cache_dir) / "azurite.version"


def installed(cache_dir: Path) -> bool:
    """True when the server is there and its stamp names :data:`AZURITE_VERSION`."""
    stamp = _stamp(cache_dir)
    return _binary(cache_dir).is_file() and stamp.is_file() and stamp.read_text().strip() == AZURITE_VERSION


def install(cache_dir: Path, timeout_s: float = 900.0) -> Path:
    """The ``azurite-blob`` command, installed from npm's registry unless its stamp says it is there already.

    Raises :class:`~reclaim.localstack.procs.StackError` in one line when there is no ``npm`` or the install fails.
    """
    if installed(cache_dir):
        return _binary(cache_dir)
    npm = shutil.which("npm")
    target = install_dir(cache_dir)
    if npm is None:
        raise StackError(f"cannot install Azurite {AZURITE_VERSION}: no `npm` on PATH (install Node.js and npm, "
                         f"or run `npm install --prefix {target} azurite@{AZURITE_VERSION}` elsewhere and copy it "
                         f"here with {AZURITE_VERSION} in {_stamp(cache_dir)})")
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be installing it: wait, then use its install
        if not installed(cache_dir):
            _npm_install(npm, target, timeout_s)
            _stamp(cache_dir).write_text(AZURITE_VERSION + "\n")
    return _binary(cache_dir)


def _npm_install(npm: str, target: Path, timeout_s: float) -> None:
    package = f"azurite@{AZURITE_VERSION}"
    try:
        done = subprocess.run(["nice", "-n", "19", npm, "install", "--no-audit", "--no-fund", "--prefix",
                               str(target), package], capture_output=True, text=True, check=False,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise StackError(f"npm install {package} did not finish within {timeout_s:g} s") from exc
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise StackError(f"npm install {package} failed (exit {done.returncode}): {last[0]}\n{done.stderr[-3000:]}")


def answers(url: str) -> bool:
    """True once the blob service answers HTTP at all (an anonymous request is refused, which is an answer)."""
    try:
        with urllib.request.urlopen(url + "?comp=list", timeout=1):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def start_azurite(work: Path, cache_dir: Path, timeout: float = 60.0) -> tuple[int, AzuriteEndpoint]:
    """Start Azurite's blob service on a free loopback port with its data and log under ``work``; return its
    pid and endpoint.

    It is installed first when the cache does not hold it (about a minute, once). Raises
    :class:`~reclaim.localstack.procs.StackError` when it cannot be installed or does not get ready within
    ``timeout``.
    """
    binary = install(cache_dir)
    port = free_port()
    log = work / "azurite.log"
    data = work / "azurite-data"
    data.mkdir(parents=True, exist_ok=True)
    proc = spawn([str(binary), "--silent", "--location", str(data), "--blobHost", "127.0.0.1",
                  "--blobPort", str(port), "--skipApiVersionCheck", "--disableTelemetry"], log)
    endpoint = AzuriteEndpoint(f"http://127.0.0.1:{port}/{ACCOUNT_NAME}")
    try:
        wait_until(lambda: answers(endpoint.account_url), timeout, "Azurite", proc, log)
    except StackError:
        stop_pid(proc.pid)
        raise
    return proc.pid, endpoint


def ensure_container(endpoint: AzuriteEndpoint, name: str) -> None:
    """Create container ``name`` (3-63 lowercase letters, digits and '-') unless it exists."""
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    with BlobServiceClient.from_connection_string(endpoint.connection_string) as service:
        try:
            service.create_container(name)
        except ResourceExistsError:
            pass
