"""Running the ``reclaim`` command line as a user does: a separate process, its own environment."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping


def run_reclaim(*args: str, env: Mapping[str, str], timeout: float = 300, check: bool = False
                ) -> subprocess.CompletedProcess[str]:
    """``reclaim <args>`` with exactly ``env``; with ``check``, a non-zero exit fails with its output."""
    result = subprocess.run([sys.executable, "-m", "reclaim", *args], capture_output=True, text=True,
                            env=dict(env), timeout=timeout, check=False)
    if check:
        assert result.returncode == 0, f"reclaim {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result
