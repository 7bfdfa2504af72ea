"""Prometheus for the deploy tests: its Go tools built on first use and a running server's HTTP API."""

from __future__ import annotations

import json
import logging
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools import gotools
from reclaim.localstack.procs import StackError
from reclaim.settings import Settings
from tests.support.paths import REPO
from tests.support.servers import server_unavailable

DEPLOY = REPO / "deploy"

log = logging.getLogger(__name__)


def built(tool: gotools.GoTool) -> Path:
    """The tool's binary, built on first use; a build that fails fails the run under CI, else skips."""
    try:
        result = gotools.build(tool, Settings.from_env().cache_dir)
    except StackError as exc:
        server_unavailable(f"{tool.name} {tool.version}", exc)
        raise AssertionError("unreachable") from exc
    if result.seconds:
        log.warning("built %s %s in %.0f s", tool.name, tool.version, result.seconds)
    return result.path


@dataclass
class PrometheusServer:
    """A running Prometheus and its HTTP API."""

    url: str
    pid: int
    log: Path

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>``; the decoded body, whether Prometheus answered success or error."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:  # 400/422: a query Prometheus refused, with its reason
            return json.load(exc)

    def query(self, expr: str) -> Any:
        return self.api("query", query=expr)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


StartPrometheus = Callable[[dict[str, list[str]]], PrometheusServer]


def run_promtool(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 90.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` and the last answer."""
    deadline = time.monotonic() + timeout_s
    last = check()
    while not last:
        assert time.monotonic() < deadline, f"{what}: still {last!r} after {timeout_s:g} s"
        time.sleep(0.5)
        last = check()
    return last
