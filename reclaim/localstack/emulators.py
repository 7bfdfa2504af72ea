"""The tier-2 emulators ``reclaim local up --tier2`` runs next to the S3 endpoint: fake-gcs-server and Azurite.

Each is described once here (how it is built or installed, started, asked whether it answers and recognised by
its command line; the bucket or container it gets; the settings that point reclaim at it), so that the stack
starts, checks, stops and reports either the same way.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from reclaim.localstack import azurite, gcs_emulator, gotool
from reclaim.localstack.procs import StackError, pid_runs

#: ``--tier2``'s choices: the S3 endpoint always runs; ``gcs`` and ``azure`` add their emulator.
TIER2_CHOICES = ("s3", "gcs", "azure")
#: The bucket or container an emulator gets when the settings name none.
DEFAULT_STORE = "reclaim-tier2"


@dataclass(frozen=True)
class Emulator:
    """One tier-2 emulator of the local stack, as the stack handles it."""

    name: str
    """``gcs`` or ``azure``: the ``--tier2`` choice, the part of ``local status`` and the state's prefix."""
    server: str
    """What messages call it."""
    extra: str
    """The extra of the binding's client, which ``up`` needs to make the bucket or container."""
    client_module: str
    store_setting: str
    """The setting naming its bucket or container: ``gcs_bucket``, ``azure_container``."""
    command_mark: str
    """What its command line holds, besides its port and data directory (see :meth:`runs`)."""
    get_server: Callable[[Path], object]
    """Build or install it into the cache (nothing when it is there): a missing ``go`` or ``npm`` is one line."""
    start: Callable[[Path, Path], tuple[int, str]]
    """Start it with its data under a directory, from the cache: its pid and URL."""
    answers: Callable[[str], bool]
    ensure_store: Callable[[str, str], None]
    """Make the bucket or container at the URL unless it is there."""
    settings_of: Callable[[str, str], dict[str, str]]
    """The settings of reclaim's binding on the URL's bucket or container, as ``local.toml`` holds them."""

    def work_dir(self, state_dir: Path) -> Path:
        """Its data and log: ``<state-dir>/fake-gcs``, ``<state-dir>/azurite``."""
        return state_dir / ("fake-gcs" if self.name == "gcs" else "azurite")

    def runs(self, pid: int, url: str, state_dir: Path) -> bool:
        """``pid`` still runs this emulator on the URL's port with its data in ``state_dir`` (a pid in a stale
        state file may belong to another process by now, which reclaim must never signal)."""
        port = str(urlsplit(url).port)
        work = self.work_dir(state_dir)
        return any(pid_runs(pid, self.command_mark, port, path) for path in {str(work), str(work.resolve())})

    def require_client(self) -> None:
        """Raise a one-line :class:`StackError` unless the binding's client library is installed."""
        try:
            found = importlib.util.find_spec(self.client_module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise StackError(f"`reclaim local up --tier2 {self.name}` needs the {self.extra} extra "
                             f"({self.client_module} is not installed): pip install 'reclaim[{self.extra}]'")


def _start_gcs(work: Path, cache_dir: Path) -> tuple[int, str]:
    pid, endpoint = gcs_emulator.start_fake_gcs(work, cache_dir)
    return pid, endpoint.url


def _start_azurite(work: Path, cache_dir: Path) -> tuple[int, str]:
    pid, endpoint = azurite.start_azurite(work, cache_dir)
    return pid, endpoint.account_url


def _gcs_settings(url: str, bucket: str) -> dict[str, str]:
    return {"gcs_bucket": bucket, "gcs_endpoint": url}


def _azure_settings(url: str, container: str) -> dict[str, str]:
    # Azurite's one account and key are public (Microsoft documents them): no secret of the user's.
    return {"azure_container": container, "azure_account_url": url, "azure_account_key": azurite.ACCOUNT_KEY}


GCS = Emulator(
    name="gcs", server="fake-gcs-server", extra="gcs", client_module="google.cloud.storage",
    store_setting="gcs_bucket", command_mark="fake-gcs-server",
    get_server=lambda cache_dir: gotool.build(gcs_emulator.FAKE_GCS, cache_dir),
    start=_start_gcs, answers=gcs_emulator.answers,
    ensure_store=lambda url, bucket: gcs_emulator.ensure_bucket(gcs_emulator.GcsEndpoint(url), bucket),
    settings_of=_gcs_settings)
AZURE = Emulator(
    name="azure", server="Azurite", extra="azure", client_module="azure.storage.blob",
    store_setting="azure_container", command_mark="azurite",
    get_server=azurite.install, start=_start_azurite, answers=azurite.answers,
    ensure_store=lambda url, container: azurite.ensure_container(azurite.AzuriteEndpoint(url), container),
    settings_of=_azure_settings)
EMULATORS = {emulator.name: emulator for emulator in (GCS, AZURE)}
