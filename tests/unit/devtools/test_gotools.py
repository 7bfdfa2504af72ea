"""Go tools in the cache: a stamped binary is used as it is; a missing one without Go is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import gotools
from devtools.gotools import GoTool
from reclaim.localstack.procs import StackError

TOOL = GoTool("hello", "example.com/hello/cmd/hello", "v1.2.3", ("remove_all_sd",))


def install(cache: Path, stamp: str) -> Path:
    binary = TOOL.binary(cache)
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    TOOL.stamp(cache).write_text(stamp + "\n")
    return binary


def test_the_stamp_names_version_and_tags() -> None:
    assert TOOL.build_id == "v1.2.3 tags=remove_all_sd"
    assert GoTool("minio", "github.com/minio/minio", "v0.0.0-1").build_id == "v0.0.0-1"


def test_a_stamped_binary_is_used_without_building(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = install(tmp_path, TOOL.build_id)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no go: a build would fail
    assert gotools.build(TOOL, tmp_path) == gotools.Built(binary, 0.0)


def test_a_binary_of_another_version_is_rebuilt_and_without_go_that_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path, "v1.2.2 tags=remove_all_sd")
    assert not TOOL.installed(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(StackError, match=r"cannot build hello: no `go` on PATH") as info:
        gotools.build(TOOL, tmp_path)
    assert "\n" not in str(info.value)
