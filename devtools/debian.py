"""Debian packages a test server needs, installed as root with apt-get when the machine lacks them."""

from __future__ import annotations

import os
import shutil
import subprocess

from reclaim.localstack.procs import StackError


def apt_install(package: str, missing: str) -> None:
    """``apt-get install`` ``package`` (after ``apt-get update``); ``missing`` is the one-line error when
    this process cannot install it (no apt-get, or not root)."""
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise StackError(missing)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in ([apt, "update", "-q"], [apt, "install", "-y", "-q", "--no-install-recommends", package]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StackError(f"{' '.join(argv[:2])} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
