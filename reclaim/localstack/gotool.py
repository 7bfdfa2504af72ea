"""Go programs built from their modules into reclaim's cache: ``go install <package>@<version>``, stamped.

A tool is installed once with ``go install <package>@<version>`` into ``<cache>/bin`` and stamped with
its version in ``<cache>/bin/<name>.version``; a later call finds the stamp and builds nothing. ``go
install`` names a binary after its package's directory (Toxiproxy's ``cmd/server`` would be ``server``),
so each is built in a directory of its own and moved to ``<cache>/bin/<name>``. Builds
run under ``nice -n 19`` (they take minutes and the machine is shared) and one at a time per tool, so
two processes asking at once build it once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from reclaim.localstack.procs import StackError


@dataclass(frozen=True)
class GoTool:
    """A command of a Go module at a pinned version, installed as ``<cache>/bin/<name>``."""

    name: str
    package: str
    version: str
    tags: tuple[str, ...] = ()

    def binary(self, cache_dir: Path) -> Path:
        return cache_dir / "bin" / self.name

    def stamp(self, cache_dir: Path) -> Path:
        return cache_dir / "bin" / f"{self.name}.version"

    @property
    def build_id(self) -> str:
        """What the stamp records: the version, and the build tags when there are any."""
        return f"{self.version} tags={','.join(self.tags)}" if self.tags else self.version

    def installed(self, cache_dir: Path) -> bool:
        """True when the binary is there and its stamp names this version (and these tags)."""
        stamp = self.stamp(cache_dir)
        return (self.binary(cache_dir).is_file() and stamp.is_file()
                and stamp.read_text().strip() == self.build_id)


@dataclass(frozen=True)
class Built:
    """Where a tool is and how long getting it took (0 when it was installed already)."""

    path: Path
    seconds: float


def build(tool: GoTool, cache_dir: Path, timeout_s: float = 3600.0) -> Built:
    """The binary of ``tool``, installed with ``go install`` unless its stamp says it is there already.

    Raises :class:`~reclaim.localstack.procs.StackError` in one line when there is no ``go`` or the build fails.
    """
    if tool.installed(cache_dir):
        return Built(tool.binary(cache_dir), 0.0)
    go = shutil.which("go")
    if go is None:
        raise StackError(f"cannot build {tool.name}: no `go` on PATH (install Go, or put a {tool.name} "
                         f"{tool.version} binary at {tool.binary(cache_dir)} with its version in "
                         f"{tool.stamp(cache_dir)})")
    bin_dir = tool.binary(cache_dir).parent
    bin_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(bin_dir / f".{tool.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait, then use its build
        if not tool.installed(cache_dir):
            _go_install(go, tool, bin_dir, timeout_s)
            tool.stamp(cache_dir).write_text(tool.build_id + "\n")
    return Built(tool.binary(cache_dir), time.monotonic() - started)


def _go_install(go: str, tool: GoTool, bin_dir: Path, timeout_s: float) -> None:
    """``go install`` into a directory of the tool's own, then its one binary moved to ``<bin>/<name>``."""
    target = f"{tool.package}@{tool.version}"
    build_dir = bin_dir / f".{tool.name}.build"
    shutil.rmtree(build_dir, ignore_errors=True)
    build_dir.mkdir()
    env = {**os.environ, "GOBIN": str(build_dir), "CGO_ENABLED": "0"}
    try:
        tags = ["-tags", ",".join(tool.tags)] if tool.tags else []
        done = subprocess.run(["nice", "-n", "19", go, "install", *tags, target], env=env, capture_output=True,
                              text=True, check=False, timeout=timeout_s)
        if done.returncode != 0:
            last = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
            raise StackError(f"go install {target} failed (exit {done.returncode}): {last[0]}\n"
                             f"{done.stderr[-3000:]}")
        built = sorted(build_dir.iterdir())
        if len(built) != 1:
            raise StackError(f"go install {target} left {len(built)} files, not one binary: "
                             f"{', '.join(p.name for p in built) or '(none)'}")
        os.replace(built[0], tool.binary(bin_dir.parent))
    except subprocess.TimeoutExpired as exc:
        raise StackError(f"go install {target} did not finish within {timeout_s:g} s") from exc
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
