"""``reclaim retention-job`` run as a process, with no broker answering where it is told to look."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.cli import run_reclaim

NOBODY = "127.0.0.1:1"  # no broker ever answers on port 1: a value that got past the checks would end there


def job(tmp_path: Path, *flags: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    result = run_reclaim("retention-job", "--bootstrap", NOBODY, *flags,
                         env={**env, "RECLAIM_STATE_DIR": str(tmp_path / "state"), "RECLAIM_RECORD_AUTH": "off"})
    return result.returncode, result.stderr.strip().splitlines()[-1]
