"""Running the ``reclaim`` command line as a user does: a separate process, its own environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def run_reclaim(*args: str, env: Mapping[str, str], timeout: float = 300, check: bool = False
                ) -> subprocess.CompletedProcess[str]:
    """``reclaim <args>`` with exactly ``env``; with ``check``, a non-zero exit fails with its output."""
    result = subprocess.run([sys.executable, "-m", "reclaim", *args], capture_output=True, text=True,
                            env=dict(env), timeout=timeout, check=False)
    if check:
        assert result.returncode == 0, f"reclaim {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


NOBODY = "127.0.0.1:1"  # no broker or endpoint ever answers on port 1


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    return {**env, "RECLAIM_STATE_DIR": str(tmp_path / "state"), **extra}


def one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The single ``reclaim: error:`` line of a failed run, after checking its exit status."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("reclaim: error: ")
    return lines[0]
