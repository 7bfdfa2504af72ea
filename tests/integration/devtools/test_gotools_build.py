"""A Go build that Go itself refuses is one clear error (needs Go on PATH)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import gotools
from devtools.gotools import GoTool
from reclaim.localstack.procs import StackError


def test_a_failed_build_says_what_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Go itself refuses: module lookups are off, and the module is under the reserved .invalid domain."""
    monkeypatch.setenv("GOPROXY", "off")
    tool = GoTool("nothing", "reclaim.invalid/nothing", "v0.0.1")
    with pytest.raises(StackError, match=r"go install reclaim\.invalid/nothing@v0\.0\.1 failed"):
        gotools.build(tool, tmp_path, timeout_s=120)
    assert not tool.installed(tmp_path)
