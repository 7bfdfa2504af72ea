"""Azurite for the tests and benchmarks: :mod:`reclaim.localstack.azurite` (the local stack's ``--tier2 azure``
runs it too), under the name benchmarks import it by, and ``python -m devtools.azurite_server install``,
which installs it into the cache before the tests (``make servers``)."""

from __future__ import annotations

import argparse
import time

from reclaim.localstack.azurite import (
    ACCOUNT_KEY,
    ACCOUNT_NAME,
    AZURITE_VERSION,
    AzuriteEndpoint,
    answers,
    ensure_container,
    install,
    install_dir,
    installed,
    start_azurite,
)

__all__ = ["ACCOUNT_KEY", "ACCOUNT_NAME", "AZURITE_VERSION", "AzuriteEndpoint", "answers", "ensure_container",
           "install", "install_dir", "installed", "main", "start_azurite"]


def main(argv: list[str] | None = None) -> int:
    """``python -m devtools.azurite_server install``: install Azurite now (``make servers`` does, before the tests)."""
    from reclaim.settings import Settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("command", choices=["install"])
    parser.parse_args(argv)
    started = time.monotonic()
    path = install(Settings.from_env().cache_dir)
    print(f"azurite {AZURITE_VERSION}: {path} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
